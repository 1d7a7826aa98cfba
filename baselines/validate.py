"""Re-measure the best config of every entry of a results document on this machine and flag
claims that do not reproduce: more than ``tolerance`` slower than claimed even in the fastest
re-measured sample. (Contention on a shared machine only ever slows a kernel down, so the
fastest sample asks "can this config reach the claimed speed here at all?"; a doctored claim
fails it, a busy neighbour does not.)"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from tensorgym.workloads import get_workload

from .harness import device_info, device_threads, remeasure
from .results import ResultsDoc
from .tables import device_name

#: remeasure(workload, target, config, repeats) -> (costs, error); replaceable for tests
Remeasure = Callable[..., tuple[list[float], str]]


@dataclass
class Check:
    task: str
    agent: str
    seed: int
    claimed_gflops: float
    measured_gflops: float
    status: str  # ok | NOT REPRODUCED | error | skipped
    note: str = ""

    @property
    def ratio(self) -> float:
        return self.measured_gflops / self.claimed_gflops if self.claimed_gflops else 0.0


def validate(doc: ResultsDoc, tolerance: float = 0.25, repeats: int = 3,
             any_device: bool = False, measure: Remeasure = remeasure,
             progress: "Callable[[str], None] | None" = None) -> list[Check]:
    """Entries measured on another device are skipped unless ``any_device`` (GFLOP/s are only
    comparable on the same device)."""
    here: dict[tuple[str, int], Any] = {}  # (target, threads) -> this machine's device name
    checks = []
    for run, e in doc.entries():
        task = f"{e.label or e.workload}@{e.target}"
        if e.best is None:
            checks.append(Check(task, e.agent, e.seed, 0.0, 0.0, "skipped", "no valid trial"))
            continue
        claimed = e.best.gflops or e.best.gflops_search
        threads = device_threads(device_name(run)) or 0  # re-measure with the run's threads
        key = (e.target, threads)
        if key not in here:
            try:
                here[key] = device_info(e.target, threads)["name"]
            except Exception as ex:  # noqa: BLE001  (target absent here: say why, go on)
                here[key] = ex
        if isinstance(here[key], Exception):
            checks.append(Check(task, e.agent, e.seed, claimed, 0.0, "skipped",
                                f"target unavailable: {here[key]}"))
            continue
        if device_name(run) != here[key] and not any_device:
            checks.append(Check(task, e.agent, e.seed, claimed, 0.0, "skipped",
                                f"measured on {device_name(run)}, this is {here[key]}"))
            continue
        w = get_workload(e.workload)
        costs, err = measure(w, e.target, e.best.config, repeats, threads=threads)
        if err:
            checks.append(Check(task, e.agent, e.seed, claimed, 0.0, "error", err))
        else:
            measured = w.flops / min(costs) / 1e9
            ok = measured >= (1 - tolerance) * claimed
            checks.append(Check(task, e.agent, e.seed, claimed, measured,
                                "ok" if ok else "NOT REPRODUCED"))
        if progress:
            c = checks[-1]
            progress(f"{c.task} {c.agent} seed {c.seed}: claimed {c.claimed_gflops:.2f}, "
                     f"measured {c.measured_gflops:.2f} GFLOP/s: {c.status}")
    return checks


def report(checks: list[Check]) -> str:
    lines = ["| task | agent | seed | claimed GFLOP/s | re-measured GFLOP/s (fastest sample) "
             "| ratio | status |",
             "|---|---|---|---|---|---|---|"]
    for c in checks:
        status = c.status + (f" ({c.note})" if c.note else "")
        lines.append(f"| {c.task} | {c.agent} | {c.seed} | {c.claimed_gflops:.2f} "
                     f"| {c.measured_gflops:.2f} | {c.ratio:.2f} | {status} |")
    return "\n".join(lines) + "\n"
