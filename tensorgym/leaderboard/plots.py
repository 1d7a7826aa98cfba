"""Best-so-far curves as PNGs: ``plot_curves`` draws one figure (a panel per workload, a line
and min..max band per method), for the benchmarks' studies and for ``plot_results``, which
draws a results document: one PNG per (target, device), a median line per agent."""
from __future__ import annotations

import math
import re
from collections import defaultdict
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np

from .results import ResultsDoc
from .tables import device_name

Curves = Mapping[str, Mapping[str, Sequence[Sequence[float]]]]  # panel -> line -> one per seed


def plot_curves(curves: Curves, path: "str | Path", title: str, center: str = "median",
                ylabel: str = "best GFLOP/s so far") -> Path:
    """One PNG: a panel per key of ``curves`` (up to 3 a row), a line per method, the ``center``
    ("median" or "mean") over seeds with a min..max band; shorter curves keep their last value."""
    import matplotlib

    matplotlib.use("Agg")  # no display on servers; must precede pyplot
    import matplotlib.pyplot as plt

    stat = {"median": np.median, "mean": np.mean}[center]
    cols = min(3, max(1, len(curves)))
    rows = math.ceil(len(curves) / cols) or 1
    fig, axes = plt.subplots(rows, cols, figsize=(4.6 * cols, 3.5 * rows), squeeze=False)
    for ax, (panel, lines) in zip(axes.flat, curves.items()):
        for name, runs in lines.items():
            runs = [list(c) for c in runs if len(c)]
            if not runs:
                continue
            n = max(len(c) for c in runs)
            arr = np.array([c + [c[-1]] * (n - len(c)) for c in runs])
            x = np.arange(1, n + 1)
            line, = ax.plot(x, stat(arr, axis=0), label=f"{name} ({len(runs)} seeds)")
            if len(runs) > 1:
                ax.fill_between(x, arr.min(axis=0), arr.max(axis=0), alpha=0.2,
                                color=line.get_color())
        ax.set_title(panel, fontsize=9)
        ax.set_xlabel("trials")
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    for ax in list(axes.flat)[len(curves):]:
        ax.axis("off")
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_results(doc: ResultsDoc, out_dir: "str | Path") -> list[Path]:
    groups: dict[tuple[str, str], dict[str, dict[str, list[list[float]]]]] = \
        defaultdict(lambda: defaultdict(lambda: defaultdict(list)))
    for run, e in doc.entries():
        groups[(e.target, device_name(run))][e.label or e.workload][e.agent].append(e.curve())
    paths = []
    for (target, device), tasks in sorted(groups.items()):
        slug = re.sub(r"[^A-Za-z0-9._-]+", "_", f"{target}-{device}")[:80]
        panels = {w: dict(sorted(agents.items())) for w, agents in sorted(tasks.items())}
        paths.append(plot_curves(panels, Path(out_dir) / f"curves-{slug}.png",
                                 f"{target} - {device}"))
    return paths


__all__ = ["Curves", "plot_curves", "plot_results"]
