"""What a trial costs, before and after: the same tunes run by an earlier commit (checked out in
a temporary worktree) and by this tree, side by side in one run, then every run's best re-measured
interleaved with PyTorch.

    python benchmarks/bench_trial_cost.py --base 0cb37bc --seeds 0 1 2
    python benchmarks/bench_trial_cost.py --quick        # 32 trials of a small layer, 1 seed

For each (workload, seed) the two versions run one after the other, in an order that alternates
with the seed (this machine drifts), each with a new records database and a cold compile cache.
Printed per version: wall seconds per trial, the best it reported, that best re-measured right
after its tune and again at the end beside every other run's best (median of ``--rounds``
interleaved rounds with PyTorch each time), the ratios reported / re-measured, and the ratio of
the re-measured best to PyTorch measured in the same rounds. The machine drifts (up to 40% in
half an hour), so "right after" is what says whether a reported best is true. Where the version
has ``tune --compare``, the tune also times PyTorch at its end: "PyTorch end/after" is that over
PyTorch right after (how much the machine's speed moved between the two moments, as this
operator feels it), and "vs PyTorch" the ratio reported / right after, each taken relative to
PyTorch at its own moment. "search s" is the
tune's seconds spent featurizing, fitting and predicting with the cost model and annealing
(``--json``'s featurize + model + search), "search %" their share of its wall time (which moves
with the build time, so with the machine's speed); "sets" the sets of end-of-tune rounds the
reported best took (``best_sets``: more than 1 where the first disagreed with the tune's figure;
"-" for a version without it). Also featurizing configs/s on one core, in
one call of 2048 configs and in calls of 128 (as the annealer makes them).
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from tensorgym.leaderboard import compare

REPO = Path(__file__).resolve().parent.parent
TUNE = "import sys; from tensorgym.cli import main; sys.exit(main(sys.argv[1:]))"
FEATURIZE = """
import sys, time, numpy as np
from tensorgym.features import featurize
from tensorgym.templates import space_for
from tensorgym.workloads import get_workload
w = get_workload(sys.argv[1])
configs = space_for(w, "cpu").sample(np.random.default_rng(0), int(sys.argv[2]))
size = int(sys.argv[3])  # configs per call
t0 = time.process_time()
for i in range(0, len(configs), size):
    featurize(w, configs[i:i + size], "relation")
print(len(configs) / (time.process_time() - t0))
"""


def package_of(rev: str, into: Path) -> Path:
    """A tree importable as ``tensorgym`` (agents and baselines inside, as installed) at ``rev``."""
    src = into / "src"
    subprocess.run(["git", "-C", str(REPO), "worktree", "add", "--detach", str(src), rev],
                   check=True, capture_output=True)
    return importable(src, into / "pkg")


def importable(src: Path, pkg: Path) -> Path:
    """``src``'s package copied to ``pkg`` as installed: later edits of ``src`` do not reach a
    benchmark that is running."""
    ignore = shutil.ignore_patterns("__pycache__")
    shutil.copytree(src / "tensorgym", pkg / "tensorgym", ignore=ignore)
    for sub in ("agents", "baselines"):
        shutil.copytree(src / sub, pkg / "tensorgym" / sub, ignore=ignore)
    return pkg


def run(version: str, pythonpath: "Path | None", code: str, args: list[str], cache: Path) -> str:
    env = dict(os.environ, XDG_CACHE_HOME=str(cache))
    if pythonpath is not None:
        env["PYTHONPATH"] = str(pythonpath)
    out = subprocess.run([sys.executable, "-c", code, *args], env=env, capture_output=True,
                         text=True, cwd=tempfile.gettempdir())
    if out.returncode != 0:
        raise SystemExit(f"{version} failed:\n{out.stderr[-3000:]}")
    return out.stdout


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--base", default="0cb37bc", help="the commit to compare with (before)")
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--tunes", nargs="+", default=["conv2d-C6:256", "matmul-1024:128"],
                   help="WORKLOAD:TRIALS")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--rounds", type=int, default=3, help="interleaved re-measurement rounds")
    p.add_argument("--quick", action="store_true", help="32 trials of conv2d-C9, seed 0")
    args = p.parse_args()
    if args.quick:
        args.seeds, args.tunes = [0], ["conv2d-C9:32"]
    tmp = Path(tempfile.mkdtemp(prefix="bench_trial_cost_"))
    try:
        versions = {"before": package_of(args.base, tmp),
                    "after": importable(REPO, tmp / "this-tree")}
        compares = {v: "--compare" in run(v, path, TUNE, ["tune", "--help"], tmp / "help")
                    for v, path in versions.items()}
        rows = []
        for spec in args.tunes:
            name, trials = spec.rsplit(":", 1)
            for seed in args.seeds:
                order = list(versions) if seed % 2 == 0 else list(versions)[::-1]
                for version in order:
                    work = tmp / f"{version}-{name}-{seed}"
                    work.mkdir()
                    out = run(version, versions[version], TUNE,
                              ["tune", name, "--trials", trials, "--agent", "xgb", "--seed",
                               str(seed), "--threads", str(args.threads), "--db",
                               str(work / "records.db"), "--json",
                               *(["--compare"] if compares[version] else [])], work / "cache")
                    doc = json.loads(out[out.index("{"):])
                    row = {"version": version, "workload": name, "seed": seed, **doc}
                    row["right_after"], row["torch_after"] = right_after(row, args.threads,
                                                                         args.rounds)
                    rows.append(row)
                    print(f"{version:6} {name} seed {seed}: {doc['wall_time'] / max(1, doc['trials']):.3f}"
                          f" s/trial, reported best {doc['best_gflops']:.1f} GFLOP/s, "
                          f"{row['right_after']:.1f} re-measured right after", flush=True)
        remeasure(rows, args.threads, args.rounds)
        feats = {(v, size): float(run(v, versions[v], FEATURIZE, ["conv2d-C6", "2048", size],
                                      tmp / "fc"))
                 for size in ("2048", "128") for v in versions}
        report(rows, feats)
    finally:
        subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force",
                        str(tmp / "src")], capture_output=True)
        shutil.rmtree(tmp, ignore_errors=True)


def right_after(row: dict, threads: int, rounds: int) -> tuple[float, float]:
    """The run's best re-measured as soon as the tune ends, and PyTorch in the same rounds
    (0 where it was not timed): the machine drifts by up to 40% within half an hour, so a
    reported best is compared with a re-measurement taken close to it, not with the joint one
    at the end."""
    if not row["best_config"]:
        return 0.0, 0.0
    c = compare.remeasure(row["workload"], "cpu", [row["best_config"]], rounds, threads=threads)
    return c.gflops("0"), c.gflops(compare.VENDOR)


def vs_torch(row: dict) -> "tuple[float, float] | None":
    """PyTorch at the tune's end over PyTorch right after, and reported / right after with
    each figure taken relative to PyTorch at its moment (None without ``tune --compare``)."""
    end = (row.get("compare") or {}).get("vendor_gflops")
    now, torch = row.get("right_after", 0.0), row.get("torch_after", 0.0)
    if not (end and now and torch):
        return None
    return end / torch, (row["best_gflops"] / end) / (now / torch)


def remeasure(rows: list[dict], threads: int, rounds: int) -> None:
    """Each run's best and PyTorch, interleaved, per workload."""
    for name in dict.fromkeys(r["workload"] for r in rows):
        mine = [r for r in rows if r["workload"] == name and r["best_config"]]
        c = compare.remeasure(name, "cpu", [r["best_config"] for r in mine], rounds,
                              threads=threads)
        for i, r in enumerate(mine):
            r["remeasured"] = c.gflops(str(i))
            r["torch"] = c.gflops(compare.VENDOR) or float("nan")


def report(rows: list[dict], feats: dict) -> None:
    print("\n| workload | version | seed | s/trial | wall s | search s | search % | reported | "
          "sets | right after | reported/right after | PyTorch end/after | vs PyTorch | "
          "re-measured at the end | reported/end | end/PyTorch |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in sorted(rows, key=lambda r: (r["workload"], r["version"] != "before", r["seed"])):
        rem, now = r.get("remeasured", 0.0), r.get("right_after", 0.0)
        torch_cells = " | ".join(f"{x:.2f}" for x in vs_torch(r) or ()) or "- | -"
        print(f"| {r['workload']} | {r['version']} | {r['seed']} | "
              f"{r['wall_time'] / max(1, r['trials']):.3f} | {r['wall_time']:.0f} | "
              f"{search_seconds(r)} | {search_share(r)} | {r['best_gflops']:.1f} | "
              f"{r.get('best_sets', '-')} | {now:.1f} | {r['best_gflops'] / now if now else 0:.2f} | "
              f"{torch_cells} | {rem:.1f} | {r['best_gflops'] / rem if rem else 0:.2f} | "
              f"{rem / r.get('torch', float('nan')):.2f} |")
    for name in dict.fromkeys(r["workload"] for r in rows):
        per = {v: [r for r in rows if r["workload"] == name and r["version"] == v]
               for v in ("before", "after")}
        spt = {v: statistics.median(r["wall_time"] / max(1, r["trials"]) for r in rs)
               for v, rs in per.items()}
        best = {v: statistics.mean(r.get("remeasured", 0.0) for r in rs) for v, rs in per.items()}
        print(f"{name}: median s/trial {spt['before']:.3f} -> {spt['after']:.3f} "
              f"({spt['before'] / spt['after']:.2f}x cheaper); mean re-measured best "
              f"{best['before']:.1f} -> {best['after']:.1f} GFLOP/s")
    for v in ("before", "after"):
        mine = [r for r in rows if r["version"] == v and r.get("right_after")]
        raw = sum(abs(r["best_gflops"] / r["right_after"] - 1) <= 0.05 for r in mine)
        line = f"{v}: reported within 5% of right after in {raw} of {len(mine)} runs"
        rel = [both[1] for r in mine if (both := vs_torch(r))]
        if rel:
            line += (f"; relative to PyTorch at each moment in "
                     f"{sum(abs(x - 1) <= 0.05 for x in rel)} of {len(rel)}")
        print(line)
    for size in ("2048", "128"):
        before, after = feats["before", size], feats["after", size]
        print(f"featurize conv2d-C6 relation, one core, calls of {size}: {before:.0f} -> "
              f"{after:.0f} configs/s ({after / before:.2f}x)")


def search_seconds(row: dict) -> str:
    """Featurizing, the cost model and annealing, in seconds: the share below moves with the
    build time (the machine's speed) even where these seconds do not."""
    t = row.get("time") or {}
    return f"{sum(t.get(k, 0.0) for k in ('featurize', 'model', 'search')):.2f}" if t else "-"


def search_share(row: dict) -> str:
    """Featurizing, the cost model and annealing, in % of the tune's wall time."""
    t = row.get("time") or {}
    if not t.get("wall"):
        return "-"
    return f"{100 * sum(t.get(k, 0.0) for k in ('featurize', 'model', 'search')) / t['wall']:.1f}"


if __name__ == "__main__":
    main()
