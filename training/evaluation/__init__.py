"""Evaluation and benchmarks run from the dev venv: the exported set on the test split, the
engine against classic FABRIK, drags, sliders, propagation, latency, and quick checks."""
