"""Headless training, export, evaluation and benchmarks (torch lives only here)."""
