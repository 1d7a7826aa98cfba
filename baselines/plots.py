"""Best-so-far curves per task with a band over seeds (min..max, median line), as PNG."""
from __future__ import annotations

import math
import re
from collections import defaultdict
from pathlib import Path

import numpy as np

from .results import ResultsDoc
from .tables import device_name


def _padded(curves: list[list[float]]) -> np.ndarray:
    n = max(len(c) for c in curves)
    return np.array([c + [c[-1] if c else 0.0] * (n - len(c)) for c in curves])


def plot_curves(doc: ResultsDoc, out_dir: "str | Path") -> list[Path]:
    """One PNG per (target, device): a panel per workload, a line + band per agent."""
    import matplotlib

    matplotlib.use("Agg")  # no display on servers; must precede pyplot
    import matplotlib.pyplot as plt

    groups: dict[tuple[str, str], dict[str, dict[str, list[list[float]]]]] = \
        defaultdict(lambda: defaultdict(lambda: defaultdict(list)))
    for run, e in doc.entries():
        groups[(e.target, device_name(run))][e.label or e.workload][e.agent].append(e.curve())
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for (target, device), tasks in sorted(groups.items()):
        cols = min(3, len(tasks))
        rows = math.ceil(len(tasks) / cols)
        fig, axes = plt.subplots(rows, cols, figsize=(5 * cols, 3.6 * rows), squeeze=False)
        for ax, (workload, agents) in zip(axes.flat, sorted(tasks.items())):
            for agent, curves in sorted(agents.items()):
                arr = _padded([c for c in curves if c])
                if arr.size == 0:
                    continue
                x = np.arange(1, arr.shape[1] + 1)
                line, = ax.plot(x, np.median(arr, axis=0), label=f"{agent} ({len(arr)} seeds)")
                ax.fill_between(x, arr.min(axis=0), arr.max(axis=0), alpha=0.2,
                                color=line.get_color())
            ax.set_title(workload, fontsize=9)
            ax.set_xlabel("trials")
            ax.set_ylabel("best GFLOP/s")
            ax.grid(alpha=0.3)
            ax.legend(fontsize=7)
        for ax in list(axes.flat)[len(tasks):]:
            ax.axis("off")
        fig.suptitle(f"{target} - {device}", fontsize=10)
        fig.tight_layout()
        slug = re.sub(r"[^A-Za-z0-9._-]+", "_", f"{target}-{device}")[:80]
        path = out_dir / f"curves-{slug}.png"
        fig.savefig(path, dpi=110)
        plt.close(fig)
        paths.append(path)
    return paths
