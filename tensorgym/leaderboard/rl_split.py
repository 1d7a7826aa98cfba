"""The RL train/evaluate split: train a policy on some workloads, then evaluate it on held-out
workloads with a fixed trial budget of live measurements, next to the same agent learning from
scratch there and random search with the same budget.

    # train on recorded measurements (replay: no hardware), evaluate live
    python -m tensorgym.leaderboard.rl_split --agent maskable-ppo --replay data/reference.parquet \\
        --train conv2d-C1 conv2d-C2 conv2d-C3 --train-steps 100000 \\
        --eval conv2d-C6 --eval-trials 32 --threads 2 --out rl.json

    # train on live measurements
    python -m tensorgym.leaderboard.rl_split --agent maskable-ppo --target cpu \\
        --train matmul:64,64,64 conv2d:1,16,28,28,16,3,1,1 \\
        --eval matmul:128,128,128 --train-trials 64 --eval-trials 32 --out rl.json

``--replay`` trains for ``--train-steps`` env steps on every training workload at once
(``rl.train_on_replay``, reached through the registered agent; misses answered as
``--on-miss`` says); without it, ``train_policy`` runs ``--train-trials`` live trials on each
workload in turn. The output is a results document
(``tensorgym leaderboard show rl.json``, a live-track run: every evaluation trial is measured
here) with entries ``<agent>:pretrained`` (the trained policy acting, not learning),
``<agent>:scratch`` (online learning from a fresh policy) and ``random``; the run's ``suite``
records how the policy was trained (for replay: steps, wall seconds, where they went, how many
answers were recorded or surrogate, the dataset's digest).
"""
from __future__ import annotations

import argparse
import dataclasses
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any, Sequence

from tensorgym import registry
from tensorgym.envs import make_env
from tensorgym.errors import TensorGymError
from tensorgym.measure.result import MeasureResult
from tensorgym.search import tune
from tensorgym.workloads import get_workload

from .harness import device_info, software_versions
from .run import RunOptions, remeasure_bests, run_entry
from .results import ResultsDoc, Run, utc_now


def train_policy(agent_name: str, workloads: list[str], target: str, trials_per_workload: int,
                 seed: int, path: str, env_options: "dict | None" = None,
                 **agent_opts: Any) -> list[list[MeasureResult]]:
    """Train one policy on each workload in turn (real envs, real measurements) and save it.
    Returns the training histories."""
    histories = []
    policy = None
    for i, w in enumerate(workloads):
        agent = registry.make(agent_name, policy_path=policy, learn=True, **agent_opts)
        env = make_env(w, target, budget=trials_per_workload,
                       **{**(env_options or {}), **agent.env_kwargs})
        try:
            histories.append(tune(env, agent, trials_per_workload, seed=seed + i))
        finally:
            env.close()
        agent.save(path)
        policy = path
    return histories


def run_split(agent: str, target: str, train: Sequence[str], evaluate: Sequence[str],
              train_trials: int, eval_trials: int, seeds: Sequence[int],
              policy_path: "str | None" = None, remeasure: int = 3,
              replay: "str | None" = None, train_steps: int = 100_000,
              on_miss: str = "surrogate", episode_trials: int = 64, threads: int = 0,
              baseline: "str | None" = "random", progress: bool = False) -> ResultsDoc:
    overlap = {get_workload(w).key for w in train} & {get_workload(w).key for w in evaluate}
    if overlap:
        raise TensorGymError(f"train and eval workloads overlap: {sorted(overlap)}")
    policy_path = policy_path or str(Path(tempfile.mkdtemp()) / f"{agent}-policy.zip")
    t0 = time.perf_counter()
    if replay is not None:
        # the RL agents' own training (tensorgym.baselines.rl), reached through the registry
        train_on_replay = getattr(registry.make(agent), "train_on_replay", None)
        if train_on_replay is None:
            raise TensorGymError(f"{agent} is not a stable-baselines3 agent (ppo, maskable-ppo)")
        done = train_on_replay(train, target, replay, train_steps, seeds[0], policy_path,
                               episode_trials=episode_trials, on_miss=on_miss, progress=progress)
        training = {"replay": {**dataclasses.asdict(done), "steps_per_s": done.steps_per_s}}
    else:
        train_policy(agent, list(train), target, train_trials, seeds[0], policy_path,
                     env_options={"num_threads": threads} if threads else None)
        training = {"live": {"trials_per_workload": train_trials,
                             "wall_s": time.perf_counter() - t0}}
    pretrained, scratch = f"{agent}:pretrained", f"{agent}:scratch"
    options = RunOptions(remeasure=remeasure, threads=threads,
                         session_options={"num_threads": threads} if threads else {},
                         agent_options={pretrained: {"policy_path": policy_path, "learn": False},
                                        scratch: {}})
    run = Run(uuid.uuid4().hex, utc_now(), device_info(target, threads), software_versions(),
              {"name": f"rl-split-{agent}", "train": list(train), "eval": list(evaluate),
               "train_trials": train_trials, "trials": eval_trials, "policy": policy_path,
               "training": training}, list(seeds))
    once = dataclasses.replace(options, remeasure=0)
    for w in evaluate:
        entries = [run_entry(algo, w, target, seed, eval_trials, once, display_name=name)
                   for seed in seeds
                   for name, algo in ((pretrained, agent), (scratch, agent), (baseline, baseline))
                   if algo]
        # the bests side by side, interleaved: a machine's speed drifts between entries
        remeasure_bests(entries, remeasure, vendor=False, threads=threads)
        run.entries += entries
    return ResultsDoc([run])


def main(argv: "Sequence[str] | None" = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tensorgym.leaderboard.rl_split")
    p.add_argument("--agent", default="maskable-ppo", choices=["ppo", "maskable-ppo"])
    p.add_argument("--target", default="cpu")
    p.add_argument("--train", nargs="+", required=True)
    p.add_argument("--eval", nargs="+", required=True, dest="evaluate")
    p.add_argument("--replay", metavar="DATASET",
                   help="train on this dataset's recorded measurements (docs/dataset.md)")
    p.add_argument("--train-steps", type=int, default=100_000,
                   help="with --replay: env steps of training, all workloads together")
    p.add_argument("--on-miss", default="surrogate", choices=["surrogate", "draw", "nearest"],
                   help="with --replay: how configs the dataset lacks are answered")
    p.add_argument("--episode-trials", type=int, default=64,
                   help="with --replay: trials per training episode")
    p.add_argument("--train-trials", type=int, default=64,
                   help="without --replay: live trials of training per workload")
    p.add_argument("--eval-trials", type=int, default=32)
    p.add_argument("--seeds", type=lambda s: [int(x) for x in s.split(",")], default=[0])
    p.add_argument("--threads", type=int, default=0,
                   help="CPU threads of the evaluated kernels (0: all cores)")
    p.add_argument("--baseline", default="random",
                   help="agent evaluated beside the policy with the same budget ('' for none)")
    p.add_argument("--remeasure", type=int, default=3,
                   help="rounds re-measuring the bests side by side before reporting")
    p.add_argument("--policy", help="where to save the trained policy")
    p.add_argument("--progress", action="store_true", help="a progress bar while training")
    p.add_argument("--out", required=True)
    args = p.parse_args(argv)
    try:
        doc = run_split(args.agent, args.target, args.train, args.evaluate, args.train_trials,
                        args.eval_trials, args.seeds, args.policy, args.remeasure,
                        replay=args.replay,
                        train_steps=args.train_steps, on_miss=args.on_miss,
                        episode_trials=args.episode_trials, threads=args.threads,
                        baseline=args.baseline or None, progress=args.progress)
    except TensorGymError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    doc.save(args.out)
    from .tables import markdown

    training = doc.runs[0].suite["training"]
    if "replay" in training:
        t = training["replay"]
        print(f"trained {args.agent} on replay: {t['steps']} steps ({t['trials']} trials, "
              f"answers {t['sources']}) in {t['wall_s']:.1f}s ({t['steps_per_s']:.0f} steps/s; "
              f"env {t['env_s']:.1f}s, updates {t['update_s']:.1f}s, rollouts "
              f"{t['wall_s'] - t['env_s'] - t['update_s']:.1f}s)")
    print(markdown(doc), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
