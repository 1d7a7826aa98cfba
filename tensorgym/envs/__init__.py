"""Registers ``TensorSched-<workload>-<target>`` for every registered workload and target, and
the generic ``TensorSched-v0`` (``gym.make("TensorSched-v0", workload=..., target=...)``)."""
from __future__ import annotations

import gymnasium as gym

from ..templates import TARGET_ALIASES
from ..workloads import WORKLOADS

ENTRY_POINT = "tensorgym.envs.tensor_sched:TensorSchedEnv"


def env_ids() -> list[str]:
    return [f"TensorSched-{w}-{t}" for w in WORKLOADS for t in TARGET_ALIASES]


def _register() -> None:
    # Measured times are not deterministic; observations are pure functions of the program.
    if "TensorSched-v0" not in gym.registry:
        gym.register("TensorSched-v0", entry_point=ENTRY_POINT, nondeterministic=True)
    for name in WORKLOADS:
        for target in TARGET_ALIASES:
            env_id = f"TensorSched-{name}-{target}"
            if env_id not in gym.registry:
                gym.register(env_id, entry_point=ENTRY_POINT, nondeterministic=True,
                             kwargs={"workload": name, "target": target})


_register()
