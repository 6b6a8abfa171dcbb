"""Neural Pose Editor engine: numpy + onnxruntime only, importable without Blender."""
