"""Best-so-far curves of a results document: one PNG per (target, device), drawn by
``compare.plot_curves`` (a panel per workload, a median line and min..max band per agent)."""
from __future__ import annotations

import re
from collections import defaultdict
from pathlib import Path

from . import compare
from .results import ResultsDoc
from .tables import device_name


def plot_curves(doc: ResultsDoc, out_dir: "str | Path") -> list[Path]:
    groups: dict[tuple[str, str], dict[str, dict[str, list[list[float]]]]] = \
        defaultdict(lambda: defaultdict(lambda: defaultdict(list)))
    for run, e in doc.entries():
        groups[(e.target, device_name(run))][e.label or e.workload][e.agent].append(e.curve())
    paths = []
    for (target, device), tasks in sorted(groups.items()):
        slug = re.sub(r"[^A-Za-z0-9._-]+", "_", f"{target}-{device}")[:80]
        panels = {w: dict(sorted(agents.items())) for w, agents in sorted(tasks.items())}
        paths.append(compare.plot_curves(panels,
                                         Path(out_dir) / f"curves-{slug}.png",
                                         f"{target} - {device}"))
    return paths
