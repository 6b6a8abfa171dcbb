"""Joint positions -> local bone rotations of a real rig, pure numpy: the public face.

The networks move the 21 canonical joints; a Blender rig has more bones (a root above the
hips, extra spine and neck bones, twist bones, fingers...). :func:`positions_to_rotations`
turns new joint positions into the rig's local pose rotations (and the pelvis location)
so the bpy layer only copies numbers into pose bones. The work lives in one module per
idea; import from here:

- :mod:`.quaternions`: quaternion / rotation-matrix algebra, swings and fits (batched);
- :mod:`.rig`: :class:`Rig` (hierarchy and rest pose) and :func:`forward_kinematics`;
- :mod:`.solve_plan`: the solve's index tables, from the hierarchy alone;
- :mod:`.solver`: :class:`RotationSolver` and :func:`positions_to_rotations`, fast;
- :mod:`.solver_reference`: the same solve bone by bone, the readable specification
  the fast one is tested against (not used at run time).

The bpy layer imports the solve from here; new code takes quaternion helpers from
:mod:`.quaternions` (the three re-exported here keep existing imports working).

Glossary (fixed once for these modules):

- ``q``: quaternion ``(..., 4)`` in **w, x, y, z** order (Blender's), unit length;
  ``q`` and ``-q`` are the same rotation.
- ``R``: rotation matrix ``(..., 3, 3)`` acting on column vectors (``v' = R @ v``).
- ``p``, ``t``: position / translation ``(..., 3)``; ``l``: a pose bone's ``location``.
- ``rad``: angles in radians.
- *rest frame*: a bone's frame in the rest pose; *local* rotation / location: a pose
  bone's ``rotation_quaternion`` / ``location`` (Blender's ``matrix_basis``).
- *world*: the rig's armature space (whatever axes the rig's rest matrices use: Blender's
  Z up when they come from ``bone.matrix_local``); targets must be in the same space.
- ``T``: frames (any leading batch axes are accepted); ``B``: bones; ``N``: vectors.

Euler angles are :mod:`.conversions`' (Blender's conventions).
"""

from __future__ import annotations

from .quaternions import quat_make_continuous, quat_normalize, quat_to_matrix
from .rig import Rig, forward_kinematics
from .solver import RotationSolver, positions_to_rotations

__all__ = [
    "Rig",
    "RotationSolver",
    "forward_kinematics",
    "positions_to_rotations",
    "quat_make_continuous",
    "quat_normalize",
    "quat_to_matrix",
]
