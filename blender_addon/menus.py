"""The Pose menu's entries for Neural Grab and Toggle Pin (where Blender's own pose tools
are listed, with their shortcuts shown), appended at register and removed at unregister."""

from __future__ import annotations

import bpy

MENU = "VIEW3D_MT_pose"
OPERATORS = ("npe.neural_grab", "npe.toggle_pin")


def draw(self: bpy.types.Menu, _context: bpy.types.Context) -> None:
    layout = self.layout
    layout.separator()
    for idname in OPERATORS:
        layout.operator(idname)


def register() -> None:
    getattr(bpy.types, MENU).append(draw)


def unregister() -> None:
    getattr(bpy.types, MENU).remove(draw)
