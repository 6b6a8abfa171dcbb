"""The dev-venv half of the Blender commands: start a :mod:`training.blender_side` script in the
bpy venv, then read, tabulate and plot what it wrote (benchmark-blender, render-walkthrough)."""
