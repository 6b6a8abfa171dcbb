"""Neural Pose Editor: Blender extension entry point (register/unregister only)."""


def register() -> None:
    """Nothing to register yet: operators and panels arrive with the add-on issue."""


def unregister() -> None:
    """Mirror of :func:`register`."""
