"""Neural Pose Editor: Blender extension entry point (register/unregister only).

Nothing is imported at module level: ``blender_addon.core`` and the training code import
this package outside Blender, where there is no ``bpy``.
"""


def _classes() -> tuple:
    from . import panels, preferences
    from .operators import CLASSES as OPERATOR_CLASSES

    return (*preferences.CLASSES, *OPERATOR_CLASSES, *panels.CLASSES)


def _modules() -> tuple:
    """The modules with handlers, keymaps or menus of their own, in the order they are
    registered (the effectors' carry handler before Live's: the empties carried first)."""
    from . import empties, keymaps, live, menus, pins, slider_edits, spread_overlay, timeline

    return (empties, live, slider_edits, timeline, keymaps, menus, pins, spread_overlay)


def register() -> None:
    import bpy

    from . import properties

    properties.register()
    for cls in _classes():
        bpy.utils.register_class(cls)
    for module in _modules():
        module.register()


def unregister() -> None:
    """Remove exactly what :func:`register` added (our own handlers only)."""
    import bpy

    from . import properties

    for module in reversed(_modules()):
        module.unregister()
    for cls in reversed(_classes()):
        bpy.utils.unregister_class(cls)
    properties.unregister()
