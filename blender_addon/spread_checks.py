"""What Spread Edit refuses before it reads or writes anything: an action the rig does not
show as its keys hold it, and F-curves the chosen mode must not or cannot write. Each is an
EditError naming the cause and what to do; nothing has changed."""

from __future__ import annotations

from collections.abc import Sequence

import bpy
import numpy as np

from . import key_edit, rig_keys, spread_layer
from .errors import EditError
from .rig_io import RigInfo


def check_action(obj: bpy.types.Object) -> None:
    """An action to spread over, shown as its keys hold it, or NLA tracks to layer over."""
    if rig_keys.channelbag(obj) is None and not rig_keys.layers_under(obj, -np.inf, np.inf):
        raise EditError(f"{obj.name} has no action to edit: key its animation first")
    rig_keys.refuse_tweak_mode(obj, "spread an edit over the shot (it goes into a layer "
                                 "over the strips)")
    rig_keys.refuse_hidden_action(obj)


def check_mode(obj: bpy.types.Object, info: RigInfo, frames: np.ndarray, mode: str,
               bones: Sequence[int], located: Sequence[int], layers: list[str]) -> None:
    """The channels ``mode`` writes (rotations of ``bones``, locations of ``located``) can
    take the edit in frames ``frames``, over the NLA ``layers`` that change them there.
    A muted F-curve is not shown (its keys written, the hand stayed 95 mm off its target);
    Keys and Every Frame do not write into a linked action, a locked F-curve (an animator's
    guard: they had rewritten it) or one a modifier changes; a layer leaves those as they
    are."""
    if layers:
        spread_layer.check_stackable(obj, layers, frames, mode)
    paths = key_edit.channel_paths(obj, info, bones, located)
    if muted := rig_keys.flagged_curves(obj, paths, "mute"):
        raise EditError(f"{len(muted)} F-curve(s) of {obj.name} are muted, e.g. {muted[0]}, "
                        "so the rig does not show their keys: unmute them (Graph Editor) to "
                        "spread an edit")
    if mode == "LAYER":
        spread_layer.check_layerable(obj, info, bones)
        return
    rig_keys.refuse_linked_action(obj, "spread an edit into its keys", "pick Layer, which "
                                  "keeps the edit in a local layer, or ")
    if locked := rig_keys.flagged_curves(obj, paths, "lock"):
        raise EditError(f"{len(locked)} F-curve(s) of {obj.name} are locked, e.g. {locked[0]}: "
                        "unlock them (Graph Editor: Channel > Toggle Channel Locking) to key "
                        "them, or pick Layer, which leaves them as they are")
    if modified := rig_keys.modified_curves(obj, paths):
        raise EditError(f"{len(modified)} F-curve(s) of {obj.name} carry modifiers, e.g. "
                        f"{modified[0]}: keys written under them would not be the pose "
                        "shown (keys past a cycle's change every cycle). Use Layer mode, "
                        "which leaves them as they are")
