"""One drawn world for every seed, or a world per seed? From replay sides of
``bench_sim_to_real.py --on-miss draw`` run against one live side (``--live-from``), each in one
fixed world (``--world-seed W``), this prints the mean Kendall tau and the median ratio of:

- each fixed world alone (every seed searched world W: what ``--world-seed W`` reports);
- every assignment of the seeds to distinct worlds (seed s searched world p(s)): what
  ``--world-seed seed`` reports for the identity, from the same entries (an entry depends only on
  its agent, seed and world, so the files hold every such run already).

    python benchmarks/sim_to_real_worlds.py W0.json W1.json W2.json

Each file must hold the same tasks, agents and seeds, and say which world it ran in
(``settings.world_seed``; a file without one ran in world 0).
"""
from __future__ import annotations

import argparse
import itertools
import json
import statistics
from typing import Any, Sequence

from bench_sim_to_real import TARGET_RATIO_TOLERANCE, TARGET_TAU, kendall_tau


def world_of(doc: dict[str, Any]) -> int:
    return int(doc["settings"].get("world_seed", 0))


def figures(docs: dict[int, dict], worlds: Sequence[int]) -> tuple[float, float]:
    """(mean tau, median ratio) when seed i (in the files' seed order) searched ``worlds[i]``."""
    first = next(iter(docs.values()))
    seeds = [str(s) for s in first["settings"]["seeds"]]
    agents = first["settings"]["agents"]
    by_task = {w: {t["workload"]: t for t in d["tasks"]} for w, d in docs.items()}
    taus, ratios = [], []
    for task in first["tasks"]:
        key = task["workload"]
        predicted, live = [], []
        for a in agents:
            p = statistics.fmean(by_task[w][key]["agents"][a]["seeds"]["replay_predicted"][s]
                                 for s, w in zip(seeds, worlds))
            m = statistics.fmean(task["agents"][a]["seeds"]["live"].values())
            predicted.append(p)
            live.append(m)
            if m > 0:
                ratios.append(p / m)
        tau = kendall_tau(predicted, live)
        if tau is not None:
            taus.append(tau)
    return statistics.fmean(taus), statistics.median(ratios)


def main(argv: "Sequence[str] | None" = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("files", nargs="+", help="replay sides, one fixed world each")
    args = p.parse_args(argv)
    docs: dict[int, dict] = {}
    for path in args.files:
        doc = json.load(open(path))
        if doc["settings"].get("world_seed") == "seed":
            raise SystemExit(f"{path} gave each seed its own world; give fixed-world files")
        docs[world_of(doc)] = doc
    keys = [{t["workload"] for t in d["tasks"]} for d in docs.values()]
    if any(k != keys[0] for k in keys):
        raise SystemExit("the files hold different tasks: run each over the same ones")
    seeds = next(iter(docs.values()))["settings"]["seeds"]
    print(f"{len(keys[0])} tasks, seeds {seeds}, worlds {sorted(docs)}")
    print("| seeds' worlds | mean tau | median ratio |\n|---|---:|---:|")
    fixed, spread = [], []
    for w in sorted(docs):
        tau, ratio = figures(docs, [w] * len(seeds))
        fixed.append((tau, ratio))
        print(f"| all in world {w} | {tau:.3f} | {ratio:.3f} |")
    for worlds in itertools.permutations(sorted(docs), len(seeds)):
        tau, ratio = figures(docs, list(worlds))
        spread.append((tau, ratio))
        print(f"| {', '.join(map(str, worlds))} | {tau:.3f} | {ratio:.3f} |")
    for name, rows in (("fixed worlds", fixed), ("a world per seed", spread)):
        if rows:
            taus = [r[0] for r in rows]
            both = sum(t >= TARGET_TAU and abs(r - 1) <= TARGET_RATIO_TOLERANCE for t, r in rows)
            print(f"{name}: median tau {statistics.median(taus):.3f} (mean "
                  f"{statistics.fmean(taus):.3f}, {min(taus):.3f}-{max(taus):.3f}), median ratio "
                  f"{statistics.median(r[1] for r in rows):.3f}; {both} of {len(rows)} meet both "
                  f"targets (tau >= {TARGET_TAU}, ratio within {TARGET_RATIO_TOLERANCE:.0%} of 1)")


if __name__ == "__main__":
    main()
