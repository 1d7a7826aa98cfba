"""Issue 32's speed targets: tuned kernels of the new operators against PyTorch's, interleaved.

    python benchmarks/bench_operators.py --trials 128 --threads 2 --out ops_speed

Each group is a leaderboard run (``xgb``, one seed) whose bests are re-measured side by side
with PyTorch's eager op (oneDNN / MKL, the same threads; the epilogue's other ops as a model
calls them: ``leaderboard/vendor.py``), and checked against its target:

- ``depthwise``: MobileNetV2's depthwise convolutions (+bias+relu6), geomean >= 1.2x;
- ``dense``: the BERT-base layer's linear layers, geomean >= 0.9x;
- ``bmm``: its attention's batch_matmuls, geomean >= 1.0x;
- ``resnet``: ResNet-18's C1-C12 with +bias+relu against conv2d then relu, every layer > 1.0x.

Each group's results go to ``OUT-GROUP.json`` as it finishes (a rerun skips groups whose file
exists), then the table is printed. The model tasks come from ``tensorgym.nn`` (torch needed).
"""
from __future__ import annotations

import argparse
import json
import math
import os
import warnings
from pathlib import Path

from tensorgym.leaderboard.results import ResultsDoc
from tensorgym.leaderboard.run import RunOptions, run_suite
from tensorgym.leaderboard.suites import Suite
from tensorgym.leaderboard.tables import task_rows

TARGETS = {"depthwise": ("geomean", 1.2), "dense": ("geomean", 0.9), "bmm": ("geomean", 1.0),
           "resnet": ("every", 1.0)}


def group_tasks(group: str) -> list[str]:
    if group == "resnet":
        return [f"conv2d-C{i}+bias+relu" for i in range(1, 13)]
    from tensorgym.nn import model_tasks

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torchvision's missing compiled ops: not used here
        table = model_tasks("mobilenet_v2" if group == "depthwise" else "bert_layer")
    op = {"depthwise": "conv2d", "dense": "dense", "bmm": "batch_matmul"}[group]
    return [t.key for t in table.tasks if t.op == op and (group != "depthwise" or t.groups > 1)]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--groups", default=",".join(TARGETS))
    p.add_argument("--trials", type=int, default=128)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--remeasure", type=int, default=3)
    p.add_argument("--out", default="ops_speed", help="prefix of the per-group JSON files")
    args = p.parse_args()
    print(f"{os.cpu_count()} CPUs; load average {os.getloadavg()[0]:.2f}")
    summary = []
    for group in args.groups.split(","):
        if group not in TARGETS:
            raise SystemExit(f"unknown group {group!r}; choose from {', '.join(TARGETS)}")
        path = Path(f"{args.out}-{group}.json")
        if path.exists():
            doc = ResultsDoc.from_json(json.loads(path.read_text()))
        else:
            suite = Suite(f"operators-{group}-cpu", tuple((k, "cpu") for k in group_tasks(group)),
                          args.trials, (args.seed,), f"issue 32's {group} speed target")
            doc = run_suite(suite, ["xgb"], RunOptions(threads=args.threads,
                                                       remeasure=args.remeasure), progress=print)
            path.write_text(json.dumps(doc.to_json(), indent=1))
        rows = task_rows(doc)
        print(f"\n## {group} (device {rows[0].device if rows else '?'})\n")
        print("| task | tuned GFLOP/s | PyTorch GFLOP/s | ratio |\n|---|---:|---:|---:|")
        ratios = []
        for r in rows:
            ratio = r.speedup_vs_vendor
            ratios.append(ratio)
            print(f"| `{r.task}` | {r.best_gflops:.2f} | {r.vendor_gflops:.2f} | "
                  + (f"{ratio:.2f} |" if ratio else "- |"))
        kind, goal = TARGETS[group]
        valid = [x for x in ratios if x]
        value = (math.exp(sum(map(math.log, valid)) / len(valid)) if kind == "geomean"
                 else min(valid)) if valid else float("nan")
        met = value >= goal if kind == "geomean" else value > goal
        summary.append((group, kind, value, goal, met, len(valid)))
    print("\n| group | statistic | value | target | met |\n|---|---|---:|---:|---|")
    for group, kind, value, goal, met, n in summary:
        stat = "geomean" if kind == "geomean" else "minimum"
        print(f"| {group} ({n} tasks) | {stat} | {value:.2f}x | {'>=' if kind == 'geomean' else '>'}"
              f" {goal}x | {'yes' if met else 'no'} |")


if __name__ == "__main__":
    main()
