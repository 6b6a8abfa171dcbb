"""Pose data for training: BVH clips to a model-space ``.npz`` (prepare, load), synthetic rest
poses, and the (x, x') pairs every network and benchmark draws."""
