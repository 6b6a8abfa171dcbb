"""Operators (``bpy.ops.npe.*``), one module per family; each calls plain functions."""

from . import effectors, grab, mapping, metrics, mirror, propagate, solve

CLASSES = (
    *mapping.CLASSES,
    *effectors.CLASSES,
    *solve.CLASSES,
    *mirror.CLASSES,
    *metrics.CLASSES,
    *propagate.CLASSES,
    *grab.CLASSES,
)
