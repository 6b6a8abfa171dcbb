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
# A drag update's refinement steps: the default's, so a drag's pause keeps the pose it showed.
DRAG_REFINE_STEPS = DEFAULT_REFINE_STEPS
# How much of the body joins the drag of a limb by default (a full-body or trunk request: all).
DEFAULT_BODY_FOLLOW = 0.5
# Body follow trusts the learned body fully up to this lean (ankles -> neck), not at all from
# UNFAMILIAR_TILT_DEG: the mocap shows no body lying down.
FAMILIAR_TILT_DEG = 45.0
UNFAMILIAR_TILT_DEG = 65.0
# A foot touches the floor when its toe or ankle is this low (model space, canonical metres;
# the training actor's toe rests at 4.3 cm and ankle at 11.7 cm).
PLANTED_TOE_HEIGHT = 0.08
PLANTED_ANKLE_HEIGHT = 0.15
# A hand or knee this low (model metres) touches the floor and holds like a planted foot.
CONTACT_HEIGHT = 0.12
_CONTACTS = skeleton.joint_indices(["l_hand", "r_hand", "l_shin", "r_shin"])
# The joints whose effector frees each contact: the hand itself; a knee's leg below it (a
# foot the user moves takes its knee along).
_CONTACT_FREED_BY = (skeleton.joint_indices(["l_hand"]), skeleton.joint_indices(["r_hand"]),
                     skeleton.joint_indices(["l_shin", "l_foot", "l_toe"]),
                     skeleton.joint_indices(["r_shin", "r_foot", "r_toe"]))
# A pelvis this low (model metres; standing 0.93), a contact or a trunk past horizontal: a
# pose the mocap hardly holds, solved by the least change (rig IK from the start pose).
LOW_PELVIS_HEIGHT = 0.45
# ... or the trunk tilted this far from vertical: past horizontal.
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
# Model metres: a target this far off its joint asks for a move (above float32 rounding).
MOVED_M = 1e-5
REACH_TOLERANCE = 1e-4  # m on the models' body: 0.1 mm on a 1.7 m rig, 0.01 units in cm
CLASSIC_TOLERANCE = fabrik.DEFAULT_TOLERANCE / REACH_TOLERANCE  # its own, in reach tolerances
# A single solve leaving an effector further than this (m) off its target says why.
MISS_NOTE_M = 1e-3
# Rig IK's steps for a re-aimed pose left short within reach (all on their goals after 40).
LEAST_CHANGE_STEPS = 40
# The least change's hold on the other joints shrinks by this a step; the stance is held
# STANCE_HOLD times harder.
LEAST_CHANGE_STAY_DECAY = 0.8
STANCE_HOLD = 3.0
SHORT_MARK = "short of its target"  # every note of a missed effector the bound did not name
_FREE_FEET = "turn Keep Planted Feet off"  # what frees the planted feet, in the panel's words
_XYZ_SUM = np.ones(3)  # (..., 3) @ _XYZ_SUM sums the coordinates
# Refinement off, a re-aimed limb keeps at least a 10 degree bend (real knees).
NETWORK_LEAST_BEND_DEG = 10.0
NETWORK_STRAIGHTEST = math.cos(math.radians(NETWORK_LEAST_BEND_DEG) / 2)
# A hand goal's arm keeps its elbow bent at least this much (the data's 0.1 percentile)
# before straightening further for a far goal; a held hand's arm need not bend more than
# it is (finish.limbs_straightest).
ELBOW_MIN_BEND_DEG = 18.0
_ARM_STRAIGHTEST = math.cos(math.radians(ELBOW_MIN_BEND_DEG) / 2)
# A least bend (this one, or refinement off NETWORK_LEAST_BEND_DEG) is asked of a dragged
# limb straighter than it in full once its target lies this far (model metres) from where
# its end was, in step nearer: a straight arm or leg bends on from its own bend as the
# drag goes, not 18 (10) degrees at its first step.
LEAST_BEND_DRAG_M = 0.05
# A dragged hand's arm never locks straight: a target past its reach leaves the elbow this
# bend (the hand 0.4 mm short of the arm's full length), so a spread edit's path has no
# corner; reached in full this share of the arm's length past it (none at the length).
FULL_REACH_BEND_DEG = 5.0
PAST_REACH_SPAN = 0.02
_ARM_FULL_REACH = math.cos(math.radians(FULL_REACH_BEND_DEG) / 2)
# Per goal joint: how straight the refinement-off re-aim may pull its limb.
_NETWORK_STRAIGHTEST = np.where(_HAND_GOALS, _ARM_STRAIGHTEST, NETWORK_STRAIGHTEST)
# ... and the refined re-aim's bent pass (the hands' arms alone).
_REFINED_STRAIGHTEST = np.where(_HAND_GOALS, _ARM_STRAIGHTEST, 1.0)
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
