"""The task scheduler's two rules on one model: the estimated end-to-end latency against trials
spent, for round-robin and gradient, and how many trials gradient needs to reach round-robin's
final latency (issue 35's Aim: half of them).

    python benchmarks/bench_scheduler.py resnet18 --trials 2000 --out sched/   # tunes both
    python benchmarks/bench_scheduler.py resnet18 --from rr.json gradient.json  # earlier tunes

Each tune starts from an empty records database of its own, so neither sees the other's
measurements; they run one after the other (each takes minutes), alternating which goes first
with ``--gradient-first``. ``--from`` reads two ``tensorgym tune-model --json`` outputs instead.
Writes ``OUT/curves.png`` where matplotlib is installed.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path


def tune(model: str, scheduler: str, trials: int, db: Path, threads: int) -> dict:
    cmd = [sys.executable, "-m", "tensorgym", "tune-model", model, "--trials", str(trials),
           "--db", str(db), "--scheduler", scheduler, "--json", "--no-progress"]
    if threads:
        cmd += ["--threads", str(threads)]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def trials_to_reach(curve: list, latency: float) -> "int | None":
    """The first trial count at which ``curve`` ((trials, latency) pairs) is at most ``latency``."""
    return next((int(t) for t, lat in curve if lat <= latency), None)


def compare(rr: dict, gradient: dict) -> dict:
    target = rr["latency"]
    reach = trials_to_reach(gradient["curve"], target)
    return {"round_robin_ms": 1e3 * rr["latency"], "gradient_ms": 1e3 * gradient["latency"],
            "round_robin_trials": rr["trials_now"], "gradient_trials": gradient["trials_now"],
            "round_robin_wall_s": rr.get("wall_time"), "gradient_wall_s": gradient.get("wall_time"),
            "gradient_trials_to_round_robin_final": reach,
            "share_of_round_robin_trials": reach / rr["trials_now"] if reach else None}


def plot(rr: dict, gradient: dict, path: Path) -> "Path | None":
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    fig, ax = plt.subplots(figsize=(6, 4))
    for name, doc in (("round-robin", rr), ("gradient", gradient)):
        t, lat = zip(*doc["curve"])
        ax.plot(t, [1e3 * x for x in lat], label=name)
    ax.set_xlabel("trials")
    ax.set_ylabel("estimated latency of the tuned tasks (ms)")
    ax.set_title(f"{rr['model']}: task scheduler")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("model")
    p.add_argument("--trials", type=int, default=2000)
    p.add_argument("--threads", type=int, default=0)
    p.add_argument("--out", default=None, help="folder for the JSON outputs and the plot")
    p.add_argument("--gradient-first", action="store_true")
    p.add_argument("--from", dest="files", nargs=2, metavar=("RR_JSON", "GRADIENT_JSON"))
    args = p.parse_args()
    out = Path(args.out or tempfile.mkdtemp(prefix="sched-"))
    out.mkdir(parents=True, exist_ok=True)
    if args.files:
        rr, gradient = (json.loads(Path(f).read_text()) for f in args.files)
    else:
        order = ["gradient", "round-robin"] if args.gradient_first else ["round-robin", "gradient"]
        docs = {}
        for s in order:
            docs[s] = tune(args.model, s, args.trials, out / f"{s}.db", args.threads)
            (out / f"{s}.json").write_text(json.dumps(docs[s]))
            print(f"{s}: {1e3 * docs[s]['latency']:.3f} ms after {docs[s]['trials_now']} trials "
                  f"({docs[s]['wall_time']:.0f} s)", flush=True)
        rr, gradient = docs["round-robin"], docs["gradient"]
    result = compare(rr, gradient)
    print(json.dumps(result, indent=1))
    if (path := plot(rr, gradient, out / "curves.png")) is not None:
        print(f"plot: {path}")


if __name__ == "__main__":
    main()
