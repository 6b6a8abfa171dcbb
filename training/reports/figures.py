"""The benchmarks' PNG figures: matplotlib without a screen, saved one way."""

from __future__ import annotations

from pathlib import Path
from typing import Any

FIGURE_DPI = 90


def pyplot() -> Any:
    """``matplotlib.pyplot`` on the Agg backend (benchmarks run headless, in CI too)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save(fig: Any, path: str | Path, **savefig: Any) -> None:
    """Write ``fig`` to ``path`` (its folder made) and free it. Without ``savefig``
    options the layout is tightened first."""
    if not savefig:
        fig.tight_layout()
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=FIGURE_DPI, **savefig)
    pyplot().close(fig)
