"""``ppo-pretrained``'s policy: which schedule edit to make next, learned across the corpus's train
tasks on the replay world, saved as a small numpy file.

Training (``train``; ``python -m tensorgym.agents.edit_policy train --dataset D --steps N --out
agents/weights/ppo-pretrained-cpu.npz``): MaskablePPO (sb3-contrib, ``MlpPolicy``) on
``ReplayMultiTaskEditEnv`` walks (``tensorgym/envs/replay_multitask.py``: hill climbs of
``budget`` named moves from each task's reference schedule, rewarded by the gain of the best
so far) over the tasks of ``corpus-train-TARGET`` only. The misses of those walks are answered
by a world model fitted on the **train tasks' records only** (``WorldModel.fit`` on the
dataset's train-split ``TaskSamples``), so that nothing of the test tasks reaches the policy.
A learning curve (mean episode return against env steps) is written beside the weights as a PNG.
``python -m tensorgym.agents.edit_policy evaluate --dataset D [--trials T]`` prints replay
figures of a policy (``edit_eval.py``).

The file (``save_policy`` / ``load_policy``) holds the actor only, the MLP and its action head,
as float32 arrays in an ``.npz`` with a JSON ``header``: schema, observation layout and length,
the move slot table, the knob-feature version, the dataset's digest and device, steps, seconds,
the final mean return. Inference (``NumpyPolicy``) needs numpy alone; a file whose observation
layout, slots or feature version differ from this code's is refused (train it again).
"""
from __future__ import annotations

import argparse
import json
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Optional, Sequence

import numpy as np

from tensorgym.envs.named_moves import N_SLOTS, OBS_LAYOUT, OBS_LENGTH, slot_table
from tensorgym.errors import TensorGymError

WEIGHTS = Path(__file__).resolve().parent / "weights"
DEFAULT_FILE = {"cpu": WEIGHTS / "ppo-pretrained-cpu.npz"}
SCHEMA = "tensorgym-edit-policy"
ACTIVATIONS = {"tanh": np.tanh, "relu": lambda x: np.maximum(x, 0.0)}


def feature_version() -> int:
    from tensorgym.dataset.world.model import FEATURE_VERSION

    return int(FEATURE_VERSION)


def _layout() -> dict[str, Any]:
    return {"obs_layout": [list(p) for p in OBS_LAYOUT], "obs_length": OBS_LENGTH,
            "slots": slot_table(), "feature_version": feature_version()}


class NumpyPolicy:
    """The actor of a saved policy: ``logits(obs)``; ``sample(obs, mask, rng)`` a move slot from
    the masked softmax."""

    def __init__(self, weights: list[tuple[np.ndarray, np.ndarray]], activation: str,
                 header: dict[str, Any]) -> None:
        self.weights, self.activation, self.header = weights, activation, header

    def logits(self, obs: np.ndarray) -> np.ndarray:
        h = np.asarray(obs, np.float32)
        act = ACTIVATIONS[self.activation]
        for w, b in self.weights[:-1]:
            h = act(h @ w.T + b)
        w, b = self.weights[-1]
        return h @ w.T + b

    def probabilities(self, obs: np.ndarray, mask: np.ndarray) -> np.ndarray:
        """Masked softmax of one observation (zeros where ``mask`` is False)."""
        z = self.logits(obs[None])[0].astype(np.float64)
        z = np.where(mask, z, -np.inf)
        z = np.exp(z - z[mask].max())
        return z / z.sum()

    def sample(self, obs: np.ndarray, mask: np.ndarray, rng: np.random.Generator) -> int:
        if not mask.any():
            raise TensorGymError("no move is allowed: nothing to sample")
        return int(rng.choice(len(mask), p=self.probabilities(obs, mask)))


def save_policy(weights: list[tuple[np.ndarray, np.ndarray]], activation: str,
                path: "str | os.PathLike", about: dict[str, Any]) -> None:
    """Write an actor (``(W, b)`` per layer, the action head last) as an ``.npz``."""
    header = {"schema": SCHEMA, "activation": activation, "layers": len(weights),
              **_layout(), "about": about}
    arrays = {"header": np.frombuffer(json.dumps(header).encode(), np.uint8)}
    for i, (w, b) in enumerate(weights):
        arrays[f"w{i}"], arrays[f"b{i}"] = w.astype(np.float32), b.astype(np.float32)
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(f"{path}.tmp.npz")
    np.savez_compressed(tmp, **arrays)
    tmp.replace(path)


def load_policy(path: "str | os.PathLike") -> NumpyPolicy:
    """The policy saved at ``path``; a clear ``TensorGymError`` if it is missing, damaged or
    made for other observations or moves than this code's."""
    p = Path(path)
    if not p.is_file():
        raise TensorGymError(f"no edit policy at {p}: train one with python -m "
                             "tensorgym.agents.edit_policy train --dataset DATASET --out FILE")
    try:
        with np.load(p, allow_pickle=False) as z:
            header = json.loads(bytes(z["header"]).decode())
            if header.get("schema") != SCHEMA:
                raise ValueError(f"not a {SCHEMA} file")
            weights = [(z[f"w{i}"], z[f"b{i}"]) for i in range(int(header["layers"]))]
        activation = header["activation"]
        if activation not in ACTIVATIONS:
            raise ValueError(f"unknown activation {activation!r}")
        n_in = OBS_LENGTH
        for w, b in weights:
            if w.ndim != 2 or w.shape[1] != n_in or b.shape != (w.shape[0],):
                raise ValueError("layer shapes do not chain")
            n_in = w.shape[0]
    except (OSError, ValueError, KeyError, TypeError, EOFError) as e:
        raise TensorGymError(f"edit policy {p} is damaged: {e}") from None
    expected = _layout()
    for key, want in expected.items():
        if header.get(key) != want:
            raise TensorGymError(f"edit policy {p} was trained on another {key} than this "
                                 f"tensorgym's ({header.get(key)!r} != {want!r}): train it "
                                 "again (python -m tensorgym.agents.edit_policy train)")
    if n_in != N_SLOTS:
        raise TensorGymError(f"edit policy {p} has {n_in} actions, this code {N_SLOTS} slots")
    return NumpyPolicy(weights, activation, header)


def default_policy_path(target: str = "cpu") -> Path:
    if target not in DEFAULT_FILE:
        raise TensorGymError(f"no edit policy is shipped for {target}; give one with "
                             "--opt policy=FILE")
    return DEFAULT_FILE[target]


# ---------------------------------------------------------------- training


@dataclass
class TrainConfig:
    """What ``train`` does: ``steps`` env steps (moves) of MaskablePPO over walks of
    ``budget`` moves, ``num_envs`` at once, on ``split``'s corpus tasks (``tasks``: some of
    them only); PPO's hyperparameters."""

    steps: int = 100_000
    seed: int = 0
    target: str = "cpu"
    split: str = "train"
    num_envs: int = 64
    budget: int = 16
    n_steps: int = 64
    batch_size: int = 512
    n_epochs: int = 4
    learning_rate: float = 3e-4
    gamma: float = 0.99
    ent_coef: float = 0.01
    net_arch: list[int] = field(default_factory=lambda: [128, 128])
    torch_threads: int = 1
    tasks: Optional[list[str]] = None


def train_world(data: Any, device: str, keys: Sequence[str], seed: int) -> Any:
    """A world model fitted on the records of the tasks ``keys`` only."""
    from tensorgym.dataset.world.model import WorldModel
    from tensorgym.dataset.world.samples import task_samples

    wanted = set(keys)
    tasks = [s for s in task_samples(data, device) if s.task.workload in wanted]
    if not tasks:
        raise TensorGymError(f"dataset {data.path} holds no record of the tasks to train on")
    return WorldModel.fit(tasks, seed=seed)


def train(dataset: "str | os.PathLike", out: "str | os.PathLike",
          config: Optional[TrainConfig] = None, progress: bool = True) -> dict[str, Any]:
    """Train a policy on ``config.split``'s corpus tasks of ``dataset`` and save its actor at
    ``out`` (and the learning curve at ``out`` with ``.png``); returns its ``about``."""
    import torch
    from sb3_contrib import MaskablePPO

    from tensorgym.dataset import Dataset
    from tensorgym.envs.replay_multitask import ReplayMultiTaskEditEnv, WalkConfig
    from tensorgym.leaderboard.suites import get_suite

    from .edit_training import Curve, Walks, actor_weights

    cfg = config or TrainConfig()
    if cfg.steps < 1:
        raise TensorGymError(f"steps must be >= 1, got {cfg.steps}")
    t0 = time.perf_counter()
    data = Dataset.load(dataset)
    keys = [k for k, _ in get_suite(f"corpus-{cfg.split}-{cfg.target}").tasks]
    present = {t.workload for t in data.by_task if t.target == cfg.target}
    if cfg.tasks is not None:
        outside = sorted(set(cfg.tasks) - set(keys))
        if outside:
            raise TensorGymError(f"tasks {', '.join(outside)} are not {cfg.split} tasks of the "
                                 "corpus: a policy trains on its split only")
        keys = [k for k in keys if k in set(cfg.tasks)]
    keys = [k for k in keys if k in present]
    if not keys:
        raise TensorGymError(f"dataset {dataset} holds no {cfg.split} task of the corpus on "
                             f"{cfg.target}")
    devices = data.devices(cfg.target)
    if len(devices) != 1:
        raise TensorGymError(f"dataset {dataset} has {len(devices)} {cfg.target} devices; "
                             "give one of one device")
    world = train_world(data, devices[0], keys, cfg.seed)
    env = ReplayMultiTaskEditEnv(keys, data, WalkConfig(num_envs=cfg.num_envs,
                                                        budget=cfg.budget,
                                                        target=cfg.target), world=world)
    saved = torch.get_num_threads()
    torch.set_num_threads(cfg.torch_threads)
    try:
        vec = Walks(env)
        model = MaskablePPO("MlpPolicy", vec, seed=cfg.seed, verbose=0, device="cpu",
                            n_steps=cfg.n_steps, batch_size=cfg.batch_size,
                            n_epochs=cfg.n_epochs, learning_rate=cfg.learning_rate,
                            gamma=cfg.gamma, ent_coef=cfg.ent_coef,
                            policy_kwargs={"net_arch": list(cfg.net_arch)})
        curve = Curve(cfg.steps, progress)
        train_s = time.perf_counter()
        model.learn(total_timesteps=cfg.steps, callback=curve)
        train_s = time.perf_counter() - train_s
        curve.close()
        weights, activation = actor_weights(model.policy)
    finally:
        torch.set_num_threads(saved)
    final = curve.final_return()
    about = {"dataset": Path(dataset).name, "digest": data.digest, "device": devices[0],
             "split": cfg.split, "tasks": len(keys), "world": f"fitted on the {cfg.split} "
             "tasks' records", "steps": int(model.num_timesteps), "seconds": round(train_s, 1),
             "wall_seconds": round(time.perf_counter() - t0, 1), "final_mean_return": final,
             "config": asdict(cfg)}
    save_policy(weights, activation, out, about)
    curve.plot(Path(out).with_suffix(".png"), f"ppo-pretrained on {len(keys)} {cfg.split} "
               f"tasks ({devices[0]})")
    env.close()
    return about


def main(argv: Any = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tensorgym.agents.edit_policy",
                                description="train ppo-pretrained's edit policy on replay")
    sub = p.add_subparsers(dest="command", required=True)
    t = sub.add_parser("train", help="train on the corpus's train tasks and save the actor")
    t.add_argument("--dataset", required=True)
    t.add_argument("--out", required=True)
    t.add_argument("--steps", type=int, default=TrainConfig.steps)
    t.add_argument("--seed", type=int, default=0)
    t.add_argument("--target", default="cpu")
    t.add_argument("--num-envs", type=int, default=TrainConfig.num_envs)
    t.add_argument("--budget", type=int, default=TrainConfig.budget)
    t.add_argument("--no-progress", action="store_true")
    e = sub.add_parser("evaluate", help="mean log-speedup of walks on the replay world")
    e.add_argument("--dataset", required=True)
    e.add_argument("--policy", default=None, help="default: the shipped one")
    e.add_argument("--suite", default="corpus-test-cpu")
    e.add_argument("--episodes", type=int, default=2)
    e.add_argument("--budget", type=int, default=16)
    e.add_argument("--seed", type=int, default=0)
    e.add_argument("--trials", type=int, default=0, help="also tune each task with this many "
                   "trials through search.tune, ppo-pretrained against random (0: walks only)")
    args = p.parse_args(argv)
    try:
        if args.command == "train":
            cfg = TrainConfig(steps=args.steps, seed=args.seed, target=args.target,
                              num_envs=args.num_envs, budget=args.budget)
            about = train(args.dataset, args.out, cfg, progress=not args.no_progress)
            print(f"{args.out}: {about['steps']} steps in {about['seconds']} s on "
                  f"{about['tasks']} {about['split']} tasks of {about['dataset']} "
                  f"({about['device']}); final mean return {about['final_mean_return']:.3f}")
        else:
            from .edit_eval import report

            report(args.dataset, args.policy or default_policy_path(), args.suite,
                   args.episodes, args.budget, args.seed, args.trials, print)
    except TensorGymError as err:
        print(f"error: {err}")
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())


__all__ = ["DEFAULT_FILE", "NumpyPolicy", "TrainConfig", "default_policy_path", "load_policy",
           "main", "save_policy", "train", "train_world"]
