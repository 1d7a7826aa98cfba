"""Search settings compared on surrogate tunes: which tuner options find the best configs, and
at what cost in the tuner's own time, with measurement taken out of the question.

    python benchmarks/bench_search_settings.py --db 'runs/*.db' --workloads conv2d-C6 \\
        --settings '{}' '{"n_chains": 128, "sa_steps": 100, "sa_resume_steps": 25}' --seeds 16

A teacher (XGBoost regression of GFLOP/s on the relation features, deeper than the tuner's
model) is fitted on every distinct config that the records databases ``--db`` (paths or glob
patterns) hold for a workload on the CPU target; failures count as 0 GFLOP/s. Its Spearman
correlation on a held-out fifth is printed first. Each setting then tunes ``--trials`` trials
per seed, the teacher's estimate standing in for each measurement, and the table gives the
teacher-GFLOP/s of the best config found (mean, min and every seed) and the seconds the tuner
spent (annealing, featurizing and fitting, one process: no annealing helper; a helper changes
no proposal). A seed gives the same first batch to every setting of the same batch size.

The teacher is an estimate: a setting that does better here finds what the teacher rates
highly, which is a landscape like the real one, not the real one. A setting's worth is confirmed
by real tunes (``bench_trial_cost.py``, ``bench_paper_fig4_models.py``). The databases of a
Figure 4 study (``bench_paper_fig4_models.py --db``) give ~4,000 configs per workload.
"""
from __future__ import annotations

import argparse
import functools
import glob
import json
import statistics
import time

import numpy as np


def teacher_data(workload, space, paths: list[str]) -> tuple[list, np.ndarray]:
    """Every distinct config of ``workload`` the databases hold, and its mean GFLOP/s."""
    from tensorgym.errors import InvalidConfigError
    from tensorgym.records import Records

    seen: dict[int, tuple] = {}
    for path in paths:
        records = Records(path)
        try:
            for r in records.query(workload_key=workload.key, target="cpu"):
                try:
                    config = space.from_json(r.config_json)
                except InvalidConfigError:  # a config of an older space
                    continue
                seen.setdefault(config.index, (config, []))[1].append(r.gflops if r.ok else 0.0)
        finally:
            records.close()
    configs = [c for c, _ in seen.values()]
    return configs, np.array([statistics.fmean(g) for _, g in seen.values()])


def surrogate_tune(env, teacher, options: dict, trials: int, seed: int,
                   prior: list = ()) -> tuple[float, float]:
    """(the teacher-GFLOP/s of the best config found, the tuner's seconds). ``prior``: configs
    told to the tuner first, as earlier measurements (the teacher's figures), as ``tune`` tells
    a database's earlier results; the best is of the new trials."""
    from tensorgym.agents.tuner import ModelTuner

    tuner = ModelTuner(**{"sa_helper": False, "pretrain": False, **options})
    tuner.prepare(env, trials)
    best, spent, done = 0.0, 0.0, 0
    try:
        t0 = time.perf_counter()
        tuner.reset(env.space, seed)
        if prior:
            tuner.tell(measured(env, teacher, list(prior)))
        spent += time.perf_counter() - t0
        while done < trials:
            t0 = time.perf_counter()
            batch = tuner.ask(trials - done)
            spent += time.perf_counter() - t0
            results = measured(env, teacher, batch)
            gflops = np.array([r.gflops for r in results])
            t0 = time.perf_counter()
            tuner.tell(results)
            tuner.model  # the refit, which the next ask would make
            spent += time.perf_counter() - t0
            done += len(batch)
            best = max(best, float(gflops.max()))
    finally:
        tuner.close()
    return best, spent


def measured(env, teacher, configs: list) -> list:
    """``configs`` as measurements, the teacher's estimate standing in for each timing."""
    from tensorgym.measure.result import MeasureResult

    flops = env.workload.flops
    gflops = np.maximum(teacher.predict(env.featurize(configs, "relation")), 0.0)
    return [MeasureResult(c, (flops / (g * 1e9),) if g > 0 else (), flops=flops)
            for c, g in zip(configs, gflops)]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--db", nargs="+", required=True, help="records databases (glob patterns)")
    p.add_argument("--workloads", nargs="+", default=["conv2d-C6"])
    p.add_argument("--settings", nargs="+", default=["{}"],
                   help="tuner options, one JSON object per setting ({}: the defaults)")
    p.add_argument("--trials", type=int, default=256)
    p.add_argument("--seeds", type=int, default=8)
    p.add_argument("--prior", type=int, default=0, help="configs of the databases told to each "
                   "tune first, as a database's earlier measurements (random, per seed)")
    args = p.parse_args()

    from scipy.stats import spearmanr

    from tensorgym.registry import make_model
    from tensorgym.envs.tensor_sched import TensorSchedEnv

    paths = sorted({f for pattern in args.db for f in glob.glob(pattern)})
    if not paths:
        raise SystemExit(f"no records database matches {args.db}")
    settings = [json.loads(s) for s in args.settings]
    for name in args.workloads:
        env = TensorSchedEnv(name, "cpu", records=False)
        env.featurize = functools.partial(env.featurize, n_jobs=1)  # the tuner's seconds: one core
        try:
            configs, y = teacher_data(env.workload, env.space, paths)
            if len(configs) < 100:
                raise SystemExit(f"{name}: {len(configs)} measured configs in {len(paths)} "
                                 "databases; a teacher needs 100 or more")
            X = env.featurize(configs, "relation")
            teacher = make_model("xgb-reg", n_rounds=400, max_depth=6)
            order = np.random.default_rng(0).permutation(len(y))
            cut = int(0.8 * len(y))
            teacher.fit(X[order[:cut]], y[order[:cut]])
            rho = spearmanr(teacher.predict(X[order[cut:]]), y[order[cut:]])[0]
            teacher.fit(X, y)
            print(f"{name}: teacher on {len(y):,} configs of {len(paths)} databases "
                  f"(best measured {y.max():.1f} GFLOP/s), held-out Spearman {rho:.3f}")
            print(f"{'setting':58s} {'mean':>7s} {'min':>7s} {'tuner s':>8s}  per seed")
            for options in settings:
                runs = [surrogate_tune(env, teacher, options, args.trials, seed, [
                    configs[i] for i in np.random.default_rng(1000 + seed).permutation(
                        len(configs))[:args.prior]]) for seed in range(args.seeds)]
                bests = [b for b, _ in runs]
                print(f"{json.dumps(options):58s} {statistics.fmean(bests):7.1f} "
                      f"{min(bests):7.1f} {statistics.fmean(s for _, s in runs):8.2f}  "
                      + " ".join(f"{b:.0f}" for b in bests), flush=True)
        finally:
            env.close()


if __name__ == "__main__":
    main()
