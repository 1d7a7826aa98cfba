"""Registers ``TensorSched-<workload>-<target>`` for every registered workload and target, and
the generic ``TensorSched-v0`` (``gym.make("TensorSched-v0", workload=..., target=...)``), and
``TensorSchedNetwork-v0``, a network's task scheduling (``tensorgym.nn.network_env``)."""
from __future__ import annotations

from typing import Any

import gymnasium as gym

from ..errors import TensorGymError
from ..templates import TARGET_ALIASES
from ..workloads import WORKLOADS, Workload, get_workload

ENTRY_POINT = "tensorgym.envs.tensor_sched:TensorSchedEnv"
FIXED_ENTRY_POINT = "tensorgym.envs:make_fixed"
NETWORK_ENTRY_POINT = "tensorgym.nn.network_env:NetworkSchedEnv"


def make_fixed(*, fixed_workload: str, fixed_target: str, **kwargs):
    """The env of a ``TensorSched-<workload>-<target>`` id: its name fixes both, so a
    ``workload=`` or ``target=`` that says otherwise is an error, not a silent swap."""
    from .tensor_sched import TensorSchedEnv  # registration imports no env (gym.make does)

    for key, fixed in (("workload", fixed_workload), ("target", fixed_target)):
        if key in kwargs and kwargs[key] != fixed:
            raise TensorGymError(f"TensorSched-{fixed_workload}-{fixed_target} is fixed to "
                                 f"{key}={fixed!r}; "
                                 f"for {key}={kwargs[key]!r} use gym.make(\"TensorSched-v0\", "
                                 f"workload=..., target=...)")
        kwargs[key] = fixed
    return TensorSchedEnv(**kwargs)


def make_env(workload: "str | Workload", target: str, **kwargs: Any) -> Any:
    """The tuning env for any workload (registered name, shape key or ``Workload``) and target:
    ``gym.make("TensorSched-v0", workload=..., target=..., **kwargs)``."""
    return gym.make("TensorSched-v0", workload=get_workload(workload), target=target, **kwargs)


def env_ids() -> list[str]:
    return [f"TensorSched-{w}-{t}" for w in WORKLOADS for t in TARGET_ALIASES]


def _register() -> None:
    # Measured times are not deterministic; observations are pure functions of the program.
    if "TensorSched-v0" not in gym.registry:
        gym.register("TensorSched-v0", entry_point=ENTRY_POINT, nondeterministic=True)
    if "TensorSchedNetwork-v0" not in gym.registry:  # a network's task scheduling
        gym.register("TensorSchedNetwork-v0", entry_point=NETWORK_ENTRY_POINT,
                     nondeterministic=True)
    for name in WORKLOADS:
        for target in TARGET_ALIASES:
            env_id = f"TensorSched-{name}-{target}"
            if env_id not in gym.registry:
                gym.register(env_id, entry_point=FIXED_ENTRY_POINT, nondeterministic=True,
                             kwargs={"fixed_workload": name, "fixed_target": target})


_register()
