"""Neural Pose Editor: Blender extension entry point (register/unregister only).

Nothing is imported at module level: ``blender_addon.core`` and the training code import
this package outside Blender, where there is no ``bpy``.
"""


def _classes() -> tuple:
    from . import panels, preferences
    from .operators import CLASSES as OPERATOR_CLASSES

    return (*preferences.CLASSES, *OPERATOR_CLASSES, *panels.CLASSES)


def register() -> None:
    import bpy

    from . import (
        empties,
        keymaps,
        live,
        menus,
        pins,
        properties,
        slider_edits,
        spread_overlay,
        timeline,
    )

    properties.register()
    for cls in _classes():
        bpy.utils.register_class(cls)
    empties.register()  # (before Live's handler: the empties carried first)
    live.register()
    slider_edits.register()
    timeline.register()
    keymaps.register()
    menus.register()
    pins.register()
    spread_overlay.register()


def unregister() -> None:
    """Remove exactly what :func:`register` added (our own handlers only)."""
    import bpy

    from . import (
        empties,
        keymaps,
        live,
        menus,
        pins,
        properties,
        slider_edits,
        spread_overlay,
        timeline,
    )

    spread_overlay.unregister()
    timeline.unregister()
    pins.unregister()
    menus.unregister()
    keymaps.unregister()
    slider_edits.unregister()
    live.unregister()
    empties.unregister()
    for cls in reversed(_classes()):
        bpy.utils.unregister_class(cls)
    properties.unregister()
