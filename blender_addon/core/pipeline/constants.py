"""The solve's constants: joints, heights, tolerances, step counts (each with its why;
the measurements behind them: docs/design/engine.md)."""

from __future__ import annotations

import math

import numpy as np

from .. import exact_reach, fabrik, skeleton

COMBINE_MODES = ("average", "sequence")
SOLVERS = ("universal", "chained", "classic")
CHAIN_ORDER = ("hands", "feet", "head")  # the 2021 paper's order for chained solvers
MAX_REFINE_STEPS = 10
DEFAULT_REFINE_STEPS = 3
METRIC_STEPS = 8  # at least this many steps when metrics are requested (slider sweep)
# An effector-only drag update (``solve(drag=True)``) takes at most this many chord steps;
# the drag's pause solves again with the option's count: the default's, so the pose a drag
# shows is the one its pause keeps. With 2 steps, drags from rest poses (60 T- and A-poses,
# one hand dragged 10-25 cm, hands, feet and head effectors) jumped when they paused, the
# straight limbs' bends turning with the third step: by over 5 mm in 32 of 60 drags (median
# 7.6 mm), 20 with 3 (median 0); on CMU test poses, median 0.6 mm, now 0. A step is a decoder
# call: a drag update took 1.05x the time (this 2-core machine, interleaved, 1,800 updates).
DRAG_REFINE_STEPS = DEFAULT_REFINE_STEPS
# How much of the body joins the drag of a limb by default; a request that moves most of the
# end joints, or the trunk, gets the learned body's whole answer whatever the option says.
# Chosen on the drag and pair benchmarks (300 test poses, one hand dragged 10-25 cm; 1000
# pairs of random 1-6 effectors), the other joints' mean displacement over classic
# FABRIK's, CMU set on Bandai Namco poses: 1.59x at 1, 1.42x at 0.5, 1.37x at 0.3 (CMU
# poses 1.46x / 1.24x; out-of-range angles 15 % / 18 %, FABRIK 21 %). With the trunk held
# back too, dragged pelvises fell short by 10 cm (median) instead of 3, and the pairs'
# non-effector error rose 5.79 -> 6.06 cm on Bandai Namco poses (FABRIK 6.13); a moved
# trunk following fully, 4.38 -> 4.49 cm on CMU poses.
DEFAULT_BODY_FOLLOW = 0.5
# Body follow trusts the learned body only for a body upright enough for the mocap to show
# it: fully while the line from between the ankles to the neck leans up to
# FAMILIAR_TILT_DEG from vertical, not at all from UNFAMILIAR_TILT_DEG (lying down, upside
# down; see :func:`familiarity`). CMU test frames: median 5 degrees, 99 % below 21, 0.15 %
# above 50 (lying, acrobatics); Bandai Namco: at most 30. (The spine alone leans 60-90
# degrees in a deep forward bend, 1.8 % of CMU's frames; the autoencoder's read-back
# distance told lying CMU poses apart too, but not a skeleton from another studio:
# standing Bandai Namco poses read back 2.8 cm off, lying CMU ones 2.2.) One hand dragged
# 10-25 cm from 60 CMU test poses laid on their back, on their side and upside down, the
# other joints' mean displacement over classic FABRIK's: 1.35x -> 1.15x, 1.64x -> 1.41x,
# 1.68x -> 1.38x; standing poses as before.
FAMILIAR_TILT_DEG = 45.0
UNFAMILIAR_TILT_DEG = 65.0
# A foot touches the floor when its toe or ankle is this low (model space, canonical metres;
# the training actor's toe rests at 4.3 cm and ankle at 11.7 cm).
PLANTED_TOE_HEIGHT = 0.08
PLANTED_ANKLE_HEIGHT = 0.15
# A hand or knee touches the floor when its joint is this low (model space, canonical
# metres; a wrist over a palm on the floor, a knee joint over a kneecap): it holds like a
# planted foot (issue 47). One hand dragged 10-25 cm from CMU poses kneeling, crawling,
# sitting or lying (benchmark --suite families): the contacts slid 4-8 mm (p90) before.
CONTACT_HEIGHT = 0.12
_CONTACTS = skeleton.joint_indices(["l_hand", "r_hand", "l_shin", "r_shin"])
# The joints whose effector frees each contact: the hand itself; a knee's leg below it (a
# foot the user moves takes its knee along).
_CONTACT_FREED_BY = (skeleton.joint_indices(["l_hand"]), skeleton.joint_indices(["r_hand"]),
                     skeleton.joint_indices(["l_shin", "l_foot", "l_toe"]),
                     skeleton.joint_indices(["r_shin", "r_foot", "r_toe"]))
# A pose the mocap hardly holds (lying, upside down, kneeling, crouching, sitting on the
# floor, hands on the floor): a hand or knee on the floor, the pelvis this low (model space,
# canonical metres; standing 0.93, a squat 0.3-0.5), or the trunk past horizontal. There a
# refined drag takes the least change (rig IK from the start pose, the contacts and planted
# feet held; the networks' path where it leaves a goal over MISS_NOTE_M off) instead of
# the networks' idea of how the body follows, which the mocap never taught them for such
# poses (issue 47). One hand dragged 10-25 cm, 100 CMU poses per family (benchmark --suite
# families), the other joints' mean displacement over classic FABRIK's, networks refined
# -> least change: lying on the back 1.21x -> 1.21x, side 1.11x -> 0.97x, front 0.97x ->
# 0.91x, upside down 1.22x -> 1.02x, kneeling 1.15x -> 0.94x, crouching 1.42x -> 0.99x,
# sitting on the floor 1.21x -> 0.93x, hands on the floor 1.13x -> 0.80x (contacts held in
# both; 1.18x -> 0.97x on average). At 0.55 m the pelvis also took a few deep bends of the
# CMU test poses: one hand dragged 10-25 cm, 13.0 % of the CMU + Bandai set's answers out
# of range against 12.3 % before (12.7 % at 0.45 m; crouching 0.99x -> 1.05x FABRIK's).
LOW_PELVIS_HEIGHT = 0.45
# ... or the trunk tilted this far from vertical (ankles -> neck, as :func:`familiarity`
# measures it): past horizontal. From 45 degrees, where body follow starts holding back, the
# least change put 0.3 % more of one-hand drags' answers out of the training data's angle
# ranges on CMU's BVH skeleton (8.3 against 8.1 %) and changed no family's figure.
LEAST_CHANGE_TILT_DEG = 90.0
ROOT = skeleton.ROOT
FOOT_JOINTS = {side: skeleton.joint_indices([f"{side}_foot", f"{side}_toe"])
               for side in ("l", "r")}
_ANKLES = np.array([FOOT_JOINTS[side][0] for side in ("l", "r")])
_TOES = np.array([FOOT_JOINTS[side][1] for side in ("l", "r")])
_NECK = skeleton.JOINT_INDEX["neck"]
# What PoseEditor._ordinary reads: the contacts (hands, then knees), the pelvis, the neck,
# the ankles, the hips; and the canonical leg (thigh and shin bones, normalize.leg_scale's).
_ORDINARY_ROWS = np.r_[_CONTACTS, ROOT, _NECK, _ANKLES,
                       skeleton.joint_indices(["l_thigh", "r_thigh"])]
_CANONICAL_LEG = float(skeleton.BONE_LENGTHS[skeleton.joint_indices(
    ["l_shin", "l_foot", "r_shin", "r_foot"])].sum()) / 2.0
_TRUNK = skeleton.joint_indices(["pelvis", "spine", "chest", "neck", "head"])
_HAND_GOALS = np.isin(np.arange(skeleton.NUM_JOINTS), skeleton.joint_indices(["l_hand", "r_hand"]))
# Model metres: a target this far off its joint asks for a move. Above float32 rounding
# (Blender keeps an empty's matrix in float32: at a rig 0.5 m up, an empty left on its joint
# read 1e-7 m off it, counted as moved, and a null head effector turned body follow full
# on: a hand drag moved the other joints 2.80 cm there against 2.50 at the origin).
MOVED_M = 1e-5
REACH_TOLERANCE = 1e-4  # m on the models' body: 0.1 mm on a 1.7 m rig, 0.01 units in cm
CLASSIC_TOLERANCE = fabrik.DEFAULT_TOLERANCE / REACH_TOLERANCE  # its own, in reach tolerances
# A single solve leaving an effector further than this (m) off its target says which
# targets no pose of the rig can reach, if any (:mod:`.reach_bounds`), and what held every
# other effector left that far off (:func:`_reach_notes`).
MISS_NOTE_M = 1e-3
# Rig IK's steps for a re-aimed pose left short within reach, in a Live drag update and in
# the solve at its pause alike (a propagation's settling takes all rig_ik.ITERATIONS). With
# the body held as long as LEAST_CHANGE_STAY_DECAY holds it, the least changes of one-hand
# drags (10-25 cm, 300 test poses) are all on their goals after 40 steps but for targets
# beyond reach (after 30: 53 % on Bandai Namco poses, 63 % on CMU's, 91 % / 99 % within
# 1 mm; after 20: 11 % / 4 %, 61 % / 70 %); at 20 and 30, far targets from a T-pose kept the
# straightened re-aim (the elbow at 10.1-11.8 and 17.4-17.6 degrees instead of 18). Goals no
# rig pose reaches (other held ends pulling against them) run all of them, about 0.7 ms
# each.
LEAST_CHANGE_STEPS = 40
# The least change holds the other joints where its steps start with rig_ik.STAY_WEIGHT,
# shrinking by LEAST_CHANGE_STAY_DECAY a step (longer than rig IK's own STAY_DECAY: while the
# goals come near), and the stance, pelvis and legs, STANCE_HOLD times harder at the start
# pose the user had (the hips and legs need not join a reach; classic FABRIK never moves the
# pelvis for a hand), but for a moved goal's own limb. One hand dragged 10-25 cm (300 test
# poses, the default set; ad hoc .dev/others.py), the other joints' mean displacement over
# classic FABRIK's: Bandai Namco 1.56x -> 1.48x, CMU 1.32x -> 1.27x; the CMU + Bandai set
# on Bandai Namco poses 1.52x -> 1.46x; 1,000 poses of the BVH skeletons 1.52x -> 1.45x
# (Bandai Namco's) and 1.44x -> 1.39x (CMU's). Held where the steps start, stance too:
# 1.52x (Bandai Namco). The whole body held at the start pose: 1.48x, but the pair
# benchmark's random effector sets moved further from the real motion (CMU + Bandai set on
# Bandai Namco poses: 5.50 -> 5.70 cm; 5.64 as built), and with the dragged arm held there
# too, a hand dragged out past its reach with the other ends held swung its elbow back, the
# shown pose jumping by up to 36x the hand's step between two drag updates (5.7x as built).
LEAST_CHANGE_STAY_DECAY = 0.8
STANCE_HOLD = 3.0
SHORT_MARK = "short of its target"  # every note of a missed effector the bound did not name
_FREE_FEET = "turn Keep Planted Feet off"  # what frees the planted feet, in the panel's words
_XYZ_SUM = np.ones(3)  # (..., 3) @ _XYZ_SUM sums the coordinates
# Refinement off, a limb re-aimed at the networks' answer keeps at least a 10 degree bend
# (real knees: an answer beyond reach would otherwise lock the leg straight), an arm the
# bend of ELBOW_MIN_BEND_DEG below.
NETWORK_STRAIGHTEST = math.cos(math.radians(10.0) / 2)
# A hand goal's arm is first re-aimed keeping its elbow bent by at least this much (its
# clavicle turning towards a far goal first), and straightened further only where the
# goal lies beyond that: straightened fully, the elbow read as locked in a fifth of
# one-hand drags. The bend is the largest 0.1 percentile of an elbow's bend among the
# data we measure, so an arm kept at it reads as real on each: CMU's right elbow on CMU's
# own skeleton (BVH files) bends at least 17.6 degrees, 10.2 in the training poses;
# Bandai Namco's reach 0. Poses with a joint angle out of the data's range, 300 test
# poses, a hand (both hands) dragged 10-25 cm, classic FABRIK in brackets (ad hoc,
# .dev/elbowsweep.sh): CMU's own skeleton 28.7 % (29.0 %) at a 12 degree bend, 8.0 %
# (13.3 %) at 18 (FABRIK 17.0 % (18.3 %)); CMU training poses 9.3 % (19.3 %) -> 9.3 %
# (14.7 %) (FABRIK 24.7 % (30.7 %)); Bandai Namco 45.0 % (66.7 %) -> 45.7 % (67.7 %)
# (FABRIK 55.0 % (82.3 %)); the other joints move 0.03-0.07 cm more. Refinement off, the
# networks' answers re-aimed with an arm kept at 10 degrees were out of range in 38.0 %
# of the one-hand drags on CMU's skeleton (FABRIK 17.0 %), 6.7 % at this bend.
ELBOW_MIN_BEND_DEG = 18.0
_ARM_STRAIGHTEST = math.cos(math.radians(ELBOW_MIN_BEND_DEG) / 2)
# Per goal joint: how straight the refinement-off re-aim may pull its limb.
_NETWORK_STRAIGHTEST = np.where(_HAND_GOALS, _ARM_STRAIGHTEST, NETWORK_STRAIGHTEST)
# (21, 21): a hand goal's row marks its arm's two bones (shoulder -> elbow -> wrist).
_HAND_ARM_BONES = np.zeros((skeleton.NUM_JOINTS, skeleton.NUM_JOINTS))
for _side in "lr":
    _HAND_ARM_BONES[skeleton.JOINT_INDEX[f"{_side}_hand"],
                    skeleton.joint_indices([f"{_side}_forearm", f"{_side}_hand"])] = 1.0
# (end joint, joint): the two bones of each limb an end joint closes (a hand's upper arm and
# forearm, an ankle's thigh and shin, the head's chest and neck), by their joints.
_MOVED_LIMBS = np.zeros((skeleton.NUM_JOINTS, skeleton.NUM_JOINTS))
_MOVED_LIMBS[exact_reach._END, exact_reach._MID] = 1.0
_MOVED_LIMBS[exact_reach._END, exact_reach._START] = 1.0
# The stance: the joints the least change holds at the start pose, STANCE_HOLD times harder.
_STANCE = np.isin(np.arange(skeleton.NUM_JOINTS), skeleton.joint_indices(
    ["pelvis", *(f"{side}_{j}" for side in "lr" for j in ("thigh", "shin", "foot", "toe"))]))
_LEAST_CHANGE_HOLD = np.where(_STANCE, STANCE_HOLD, 1.0)  # each joint's, over STAY_WEIGHT
# Start poses whose preparation (:class:`_Start`) a single-pose solve keeps: a drag solves
# the same start pose on every update, a few of them while the user switches characters.
START_CACHE_SIZE = 4
