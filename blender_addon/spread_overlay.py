"""Spread Edit's preview in the Timeline and Dope Sheet: a bar at each frame that will
change, as tall as its weight W(t), drawn along the bottom of the editor while the
panel's *Show in Timeline* is on (off by default: it reads the action on every redraw).
Drawing only; the frames come from :func:`.propagation.preview`."""

from __future__ import annotations

import numpy as np

BAR_HEIGHT_PX = 40.0  # W = 1
BAR_WIDTH_PX = 3.0
COLOR = (1.0, 0.55, 0.1, 0.6)  # the effectors' orange, see-through

_handles: list = []


def bars(xs: np.ndarray, weights: np.ndarray, bottom: float = 0.0) -> np.ndarray:
    """(6 N, 2) triangle vertices (pixels): a bar centred on each x, W(t) tall."""
    xs = np.asarray(xs, dtype=np.float64)
    h = bottom + BAR_HEIGHT_PX * np.asarray(weights, dtype=np.float64)
    left, right = xs - BAR_WIDTH_PX / 2.0, xs + BAR_WIDTH_PX / 2.0
    b = np.full_like(xs, bottom)
    quads = np.stack([np.stack([left, b], -1), np.stack([right, b], -1),
                      np.stack([right, h], -1), np.stack([left, b], -1),
                      np.stack([right, h], -1), np.stack([left, h], -1)], axis=1)
    return quads.reshape(-1, 2)


def _draw() -> None:
    import bpy
    import gpu
    from gpu_extras.batch import batch_for_shader

    from . import propagation
    from .errors import EditError
    from .mapped_rig import armature_from_context

    context = bpy.context
    scene = context.scene
    if scene is None or not scene.npe.propagation.show_overlay:
        return
    try:
        obj = armature_from_context(context)
    except EditError:
        return
    _mode, shown = propagation.preview(scene, None, obj)
    if not shown:
        return
    view = context.region.view2d
    xs = np.array([view.view_to_region(f, 0.0, clip=False)[0] for f, _w in shown])
    verts = bars(xs, np.array([w for _f, w in shown]))
    shader = gpu.shader.from_builtin("UNIFORM_COLOR")
    batch = batch_for_shader(shader, "TRIS", {"pos": verts.astype(np.float32).tolist()})
    gpu.state.blend_set("ALPHA")
    shader.uniform_float("color", COLOR)
    batch.draw(shader)
    gpu.state.blend_set("NONE")


def register() -> None:
    import bpy

    _handles.append(bpy.types.SpaceDopeSheetEditor.draw_handler_add(
        _draw, (), "WINDOW", "POST_PIXEL"))


def unregister() -> None:
    import bpy

    while _handles:
        bpy.types.SpaceDopeSheetEditor.draw_handler_remove(_handles.pop(), "WINDOW")
