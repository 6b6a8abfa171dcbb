"""Operators (``bpy.ops.npe.*``), one module per family; each calls plain functions."""

from . import effectors, grab, mapping, metrics, propagate, solve

CLASSES = (
    *mapping.CLASSES,
    *effectors.CLASSES,
    *solve.CLASSES,
    *metrics.CLASSES,
    *propagate.CLASSES,
    *grab.CLASSES,
)
