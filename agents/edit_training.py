"""The stable-baselines3 side of ``edit_policy.train``: the ``VecEnv`` adapter over
``ReplayMultiTaskEditEnv`` (``Walks``), the learning-curve callback (``Curve``) and the export of
MaskablePPO's actor as numpy arrays (``actor_weights``). Imported only when training."""
from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Optional, Sequence

import numpy as np
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.vec_env import VecEnv
from tqdm import tqdm

from tensorgym.errors import TensorGymError


class Walks(VecEnv):
    """``ReplayMultiTaskEditEnv`` as an SB3 ``VecEnv`` (same-step autoreset, ``infos`` a dict per
    env with ``terminal_observation`` and ``episode``; masks through
    ``env_method("action_masks")``, as sb3-contrib's MaskablePPO asks)."""

    def __init__(self, env: Any) -> None:
        self.env = env  # before VecEnv's __init__, which asks get_attr("render_mode")
        self.render_mode = None
        super().__init__(env.num_envs, env.single_observation_space, env.single_action_space)
        self._actions: Optional[np.ndarray] = None

    def reset(self) -> np.ndarray:
        seed = self._seeds[0] if self._seeds and self._seeds[0] is not None else None
        self._reset_seeds()
        obs, _ = self.env.reset(seed=seed)
        return obs

    def step_async(self, actions: np.ndarray) -> None:
        self._actions = np.asarray(actions, np.int64).reshape(self.num_envs)

    def step_wait(self) -> tuple:
        obs, rewards, term, trunc, info = self.env.step(self._actions)
        dones = term | trunc
        infos: list[dict] = [{} for _ in range(self.num_envs)]
        for e in np.flatnonzero(dones):
            infos[e] = {"terminal_observation": info["final_obs"][e],
                        "TimeLimit.truncated": bool(trunc[e] and not term[e]),
                        "episode": {"r": float(info["episode_return"][e]),
                                    "l": int(info["moves"][e]), "t": 0.0}}
        return obs, rewards.astype(np.float32), dones, infos

    def close(self) -> None:
        self.env.close()

    def get_attr(self, attr_name: str, indices: Any = None) -> list:
        value = getattr(self, attr_name) if attr_name == "render_mode" else \
            getattr(self.env, attr_name)
        return [value] * len(self._indices(indices))

    def set_attr(self, attr_name: str, value: Any, indices: Any = None) -> None:
        raise TensorGymError("the walks have no per-env attributes to set")

    def env_method(self, method_name: str, *args: Any, indices: Any = None,
                   **kwargs: Any) -> list:
        if method_name != "action_masks":
            raise TensorGymError(f"the walks answer env_method('action_masks') only, not "
                                 f"{method_name!r}")
        masks = self.env.action_masks()
        return [masks[i] for i in self._indices(indices)]

    def env_is_wrapped(self, wrapper_class: Any, indices: Any = None) -> list[bool]:
        return [False] * len(self._indices(indices))

    def _indices(self, indices: Any) -> Sequence[int]:
        if indices is None:
            return range(self.num_envs)
        return [indices] if isinstance(indices, int) else list(indices)


class Curve(BaseCallback):
    """Mean return of the episodes that ended in each rollout, against env steps; a tqdm bar
    over the steps."""

    def __init__(self, total: int, progress: bool = True) -> None:
        super().__init__()
        self.points: list[tuple[int, float]] = []
        self._returns: list[float] = []
        self.bar = tqdm(total=total, unit=" steps", disable=not progress, smoothing=0)

    def _on_step(self) -> bool:
        for info in self.locals["infos"]:
            if "episode" in info:
                self._returns.append(info["episode"]["r"])
        self.bar.update(self.training_env.num_envs)
        return True

    def _on_rollout_end(self) -> None:
        if self._returns:
            self.points.append((int(self.num_timesteps), float(np.mean(self._returns))))
            self.bar.set_postfix(mean_return=f"{self.points[-1][1]:.3f}", refresh=False)
        self._returns = []

    def close(self) -> None:
        self.bar.close()

    def final_return(self) -> float:
        """The mean return over the last tenth of the rollouts (at least one)."""
        if not self.points:
            return math.nan
        k = max(1, len(self.points) // 10)
        return float(np.mean([r for _, r in self.points[-k:]]))

    def plot(self, path: Path, title: str) -> None:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(5, 3.2), dpi=90)
        if self.points:
            x, y = zip(*self.points)
            ax.plot(x, y, lw=1.2)
        ax.set_xlabel("env steps (moves)")
        ax.set_ylabel("mean episode return")
        ax.set_title(title, fontsize=8)
        ax.grid(alpha=0.3)
        fig.tight_layout()
        fig.savefig(path)
        plt.close(fig)


def actor_weights(policy: Any) -> tuple[list[tuple[np.ndarray, np.ndarray]], str]:
    """``(W, b)`` of each layer of MaskablePPO's actor (its policy MLP, then the action head)
    and the activation's name."""
    import torch.nn as nn

    if not isinstance(policy.features_extractor, nn.Flatten) and \
            type(policy.features_extractor).__name__ != "FlattenExtractor":
        raise TensorGymError("only a flattening features extractor can be exported")
    layers = [m for m in policy.mlp_extractor.policy_net if isinstance(m, nn.Linear)]
    acts = {type(m).__name__ for m in policy.mlp_extractor.policy_net
            if not isinstance(m, nn.Linear)}
    name = {"Tanh": "tanh", "ReLU": "relu"}.get(acts.pop() if len(acts) == 1 else "", None)
    if name is None and layers:
        raise TensorGymError(f"cannot export an actor with activations {sorted(acts)}")
    out = [(m.weight.detach().cpu().numpy().copy(), m.bias.detach().cpu().numpy().copy())
           for m in layers + [policy.action_net]]
    return out, name or "tanh"
