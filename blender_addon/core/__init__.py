"""Neural Pose Editor engine: numpy + onnxruntime (and the optional compiled kernels of
:mod:`.native`), importable without Blender."""
