"""The add-on's keymap entries, in Pose Mode: Neural Grab and the pin toggle.

Registered in the add-on key configuration (``keyconfigs.addon``), so users rebind them
in Preferences › Keymap or in the add-on's preferences (:func:`draw`, Blender's own
``rna_keymap_ui`` rows). The default keys are free in Blender's default keymaps for Pose
Mode (the "Pose", "3D View" and "Object Non-modal" keymaps of 4.2, 4.5 and 5.0; a test
checks): Ctrl+Shift+G grabs, Ctrl+Shift+P pins or unpins.
"""

from __future__ import annotations

import bpy

KEYMAP = "Pose"  # Blender's Pose Mode keymap (space "EMPTY", region "WINDOW")
# (operator, key, modifiers): the defaults
ENTRIES: tuple[tuple[str, str, dict[str, bool]], ...] = (
    ("npe.neural_grab", "G", {"ctrl": True, "shift": True}),
    ("npe.toggle_pin", "P", {"ctrl": True, "shift": True}),
)
_ADDED: list[tuple[bpy.types.KeyMap, bpy.types.KeyMapItem]] = []


def register() -> None:
    """Add the entries to the add-on keyconfig (none exists in background Blender)."""
    keyconfig = bpy.context.window_manager.keyconfigs.addon
    if keyconfig is None:
        return
    km = keyconfig.keymaps.new(name=KEYMAP, space_type="EMPTY")
    for idname, key, mods in ENTRIES:
        _ADDED.append((km, km.keymap_items.new(idname, key, "PRESS", **mods)))


def unregister() -> None:
    """Remove exactly the entries :func:`register` added."""
    for km, kmi in _ADDED:
        try:
            km.keymap_items.remove(kmi)
        except (ReferenceError, RuntimeError):  # already gone with its keyconfig
            pass
    _ADDED.clear()


def draw(context: bpy.types.Context, layout: bpy.types.UILayout) -> None:
    """The entries as rows of Blender's keymap editor (user keyconfig: rebinding there
    is what Blender keeps)."""
    import rna_keymap_ui

    keyconfig = context.window_manager.keyconfigs.user
    km = keyconfig.keymaps.get(KEYMAP) if keyconfig is not None else None
    col = layout.column()
    col.label(text="Keymap (Pose Mode)")
    if km is None:
        col.label(text="No user keyconfig")
        return
    wanted = {idname for idname, _key, _mods in ENTRIES}
    for kmi in km.keymap_items:
        if kmi.idname in wanted:
            col.context_pointer_set("keymap", km)
            rna_keymap_ui.draw_kmi([], keyconfig, km, kmi, col, 0)
