"""The choices of Spread Edit, shared by the operator's properties (F9) and the scene's
defaults the panel shows: one list of items, so the two cannot drift apart."""

from __future__ import annotations

MODES = (
    ("KEYS", "Keys", "Edit only the frames that already hold keys in the range: no key is "
     "added, each keeps its type, interpolation, easing and handle types"),
    ("EVERY_FRAME", "Every Frame", "Key every frame of the range (baked motion, mocap)"),
    ("LAYER", "Layer", "Put the edit in its own NLA track over the action, in Combine mode: "
     "the action is untouched, the track's influence can be keyed, muted or deleted"),
)
# The scene's default: Layer over earlier layers, Keys on an action with sparse keys, else
# Every Frame.
AUTO_MODE = ("AUTO", "Auto", "Layer over earlier layers; else Keys where the action's keys "
             "are sparse, else Every Frame")
RANGES = (
    ("RADIUS", "Radius", "Frames within a radius of the current frame"),
    ("START_END", "Start/End", "An explicit frame range around the current frame (the "
     "scene's preview range when one is set)"),
    ("TO_KEYS", "To Keys", "From the key before the current frame to the key after it, "
     "those keys kept (as Pose > Propagate to the next keyframe)"),
)
CURVES = (
    ("SMOOTH", "Smooth", "Cosine falloff"),
    ("HAT", "Linear", "Linear falloff"),
    ("CONSTANT", "Constant", "Full edit on every frame of the range"),
    ("CUSTOM", "Custom", "A curve drawn in the panel"),
)
METRIC_MODES = (
    ("DELTA", "Change", "Each frame changes its metric by the change requested here"),
    ("ABSOLUTE", "Value", "Each frame takes the requested value"),
)
DEFAULT_RADIUS = 10  # frames
# Keys are sparse where the mapped bones' keyed frames in the range are at most this share
# of its frames (keys every other frame or fewer: hand-keyed, not baked).
SPARSE_SHARE = 0.5
