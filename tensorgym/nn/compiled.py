"""``tensorgym.nn.compile(model, example_input, db=...)``: a module whose tuned operators run
tensorgym's kernels, everything else staying PyTorch.

The model is exported (``torch.export``) and its graph walked as task extraction walks it
(``extract.operator_nodes``). Each task with an ok record in ``db`` on this device (PyTorch's
thread count: ``torch.get_num_threads()``, baked into the kernels) has its best config built,
checked by the measurement worker and loaded here (``kernels``: the bytes the worker checked);
its nodes become calls of ``torch.ops.tensorgym.kernel`` (``rewrite``). A task without such a
record, or whose kernel fails the check, keeps PyTorch's op: the report
(``module.tensorgym_report``) says why, and a warning lists them. So does a task whose kernel,
timed here side by side with the PyTorch operator it would replace (``race``), is not faster
(with ``faster_only=True``; off by default: on conv nets the per-operator race misjudged
what a kept operator costs inside the network, and every kernel ran faster end to end).
"""
from __future__ import annotations

import os
import warnings
from contextlib import closing
from typing import Any, Optional

from ..errors import TensorGymError
from ..processes.host import available_cpus
from ..hardware.target import get_target
from ..measure import MeasureOptions
from ..records import Records
from ..templates import canonical_target
from .extract import _aten, _name, export_graph, operator_nodes
from .report import CompileReport, KeptNode, ReplacedNode

#: how a kernel is checked before it may run in the caller's process (a few samples: its time
#: is reported, not recorded)
CHECK_OPTIONS = MeasureOptions(repeat=3, max_repeat=3, min_repeat_ms=1.0, calibrate=False)
RACE_ROUNDS = 7  # interleaved rounds of a kernel against the PyTorch op (medians compared)
RACE_ROUND_S = 0.02


def race(kernel: Any, batch_norm: bool = False) -> tuple[float, float]:
    """(the kernel's, the PyTorch operator's) seconds per call on random inputs in this
    process, the median of ``RACE_ROUNDS`` interleaved rounds (``bench.task_pair``). PyTorch's
    side runs what the node would run if kept: with ``batch_norm`` (the kernel folded one in),
    the operator then an eval-mode batch norm, not a folded bias."""
    from .bench import interleaved, task_pair

    ours, theirs = task_pair(kernel, batch_norm=batch_norm)
    t = interleaved({"ours": ours, "pytorch": theirs}, RACE_ROUNDS, RACE_ROUND_S)
    return t["ours"], t["pytorch"]


def race_attention(qk: Any, av: Any, scale: float) -> tuple[float, float]:
    """(the two kernels with the softmax between them, PyTorch's
    ``scaled_dot_product_attention``): seconds per call, raced as ``race`` races one kernel."""
    from .bench import attention_pair, interleaved

    ours, theirs = attention_pair(qk, av, scale)
    t = interleaved({"ours": ours, "pytorch": theirs}, RACE_ROUNDS, RACE_ROUND_S)
    return t["ours"], t["pytorch"]


class CompileWarning(UserWarning):
    """Operators of the model that keep PyTorch's implementation (the report says why)."""


def compile(model: Any, example_input: Any, db: "str | os.PathLike", target: str = "cpu", *,
            options: Optional[MeasureOptions] = None, name: str = "",
            fast_pools: bool = True, faster_only: bool = False,
            attention: bool = False) -> Any:
    """``model`` (an ``nn.Module``, put in eval mode) with its tuned operators replaced by
    tensorgym kernels: a ``torch.fx.GraphModule`` taking ``example_input``'s shapes, with
    ``tensorgym_report`` (a ``CompileReport``). ``db``: the records database of a tune
    (``tensorgym tune-model``); ``options``: how each kernel is checked (``CHECK_OPTIONS``);
    ``fast_pools``: large max pools run as a separable max of PyTorch ops (``nn.pool``);
    ``faster_only``: a kernel replaces its operator only if it beats it side by side (``race``);
    ``attention``: attention runs its two batch_matmul tasks' kernels with PyTorch's softmax
    between them (off by default: on the Emerald Rapids VM they ran BERT's attention in 0.88 ms
    against PyTorch's 0.66). Inference only: the kernels have no autograd formula (an input
    that requires grad while grad is enabled is refused with a RuntimeError)."""
    import torch

    from .kernels import bind_openmp
    from .rewrite import drop_unused_constants  # its import defines torch.ops.tensorgym.kernel

    if canonical_target(target) != "cpu":
        raise TensorGymError(f"nn.compile runs kernels on the CPU only, not {target!r}")
    if not os.path.exists(db):
        raise TensorGymError(f"records database {os.fspath(db)!r} does not exist")
    label = name or type(model).__name__
    gm = export_graph(model, example_input, label).module()
    found, untunable, walk = operator_nodes(gm.graph)
    threads = torch.get_num_threads()
    cores = available_cpus()
    if threads > cores:
        raise TensorGymError(f"PyTorch runs {threads} threads but this process may use {cores} "
                             f"core(s) (its affinity or CPU quota): call "
                             f"torch.set_num_threads({cores}) first, as the kernels use "
                             "PyTorch's thread count")
    device = get_target("cpu").device_fingerprint(num_threads=threads)
    openmp = bind_openmp(os.path.join(os.path.dirname(torch.__file__), "lib"))
    report = CompileReport(label, device, openmp)
    report.kept += [KeptNode(u.node, u.op, f"untunable: {u.reason}") for u in untunable]
    state = _Compiler(gm, device, threads, options or CHECK_OPTIONS, report, faster_only,
                      attention)
    try:
        with closing(Records(db)) as records:
            for i, (node, task) in enumerate(found):
                state.one(records, node, task, walk.chains.get(node, []), f"_tensorgym_{i}")
    finally:
        state.close()
    if fast_pools:
        from .pool import fast_pools as rewrite_pools

        report.pools = rewrite_pools(gm)
    drop_unused_constants(gm)
    gm.graph.lint()
    gm.recompile()
    gm.tensorgym_report = report
    gm.tensorgym_kernels = state.kernels  # key -> CheckedKernel: keeps the loaded code alive
    if report.kept:
        warnings.warn(f"{report.summary()}; kept: " + "; ".join(
            f"{k.node} ({k.reason})" for k in report.kept), CompileWarning, stacklevel=2)
    return gm


class _Compiler:
    """One compile's kernels (by task key) and its measurer, started at the first check."""

    def __init__(self, gm: Any, device: str, threads: int, options: MeasureOptions,
                 report: CompileReport, faster_only: bool = False,
                 attention: bool = False) -> None:
        self.gm, self.device, self.threads, self.options = gm, device, threads, options
        self.report, self.faster_only, self.with_attention = report, faster_only, attention
        # (key, a batch norm folded) -> (kernel, PyTorch) seconds
        self.raced: dict[tuple[str, bool], tuple[float, float]] = {}
        self.kernels: dict = {}
        self.refused: dict[str, str] = {}
        self.measurer: Any = None

    def one(self, records: Records, node: Any, task: Any, chain: list, tag: str) -> None:
        from .rewrite import NotReplaceable, replace

        if isinstance(task, list):  # attention: two tasks with the softmax between them
            if self.with_attention:
                self.attention(records, node, task, chain, tag)
            else:
                self.report.kept.append(KeptNode(
                    _name(node), "+".join(t.key for t in task), "attention (PyTorch's unless "
                    "nn.compile(..., attention=True): its two batch_matmul kernels)"))
            return
        kernel = self.kernel(records, task)
        if isinstance(kernel, str):
            self.report.kept.append(KeptNode(_name(node), task.key, kernel))
            return
        versus = 0.0
        if self.faster_only:
            bn = any((_aten(n) or ("",))[0] == "batch_norm" for n in chain)
            if (task.key, bn) not in self.raced:
                self.raced[task.key, bn] = race(kernel, bn)
            ours, theirs = self.raced[task.key, bn]
            if ours >= theirs:
                self.report.kept.append(KeptNode(_name(node), task.key, (
                    f"PyTorch's op is faster here: {theirs * 1e3:.4f} ms against the kernel's "
                    f"{ours * 1e3:.4f} ms, timed side by side (faster_only=False runs the "
                    "kernel anyway)")))
                return
            versus = theirs / ours
        try:
            replace(self.gm, node, chain, kernel, tag)
        except NotReplaceable as e:
            self.report.kept.append(KeptNode(_name(node), task.key, str(e)))
            return
        self.report.replaced.append(ReplacedNode(task.nodes[0], task.key, kernel.config.index,
                                                 kernel.seconds * 1e3, kernel.sha256,
                                                 kernel.note, versus))

    def attention(self, records: Records, node: Any, tasks: list, chain: list, tag: str) -> None:
        """Attention as its two batch_matmul kernels with PyTorch's softmax between them."""
        from .rewrite import NotReplaceable, attention_scale, replace_attention

        key = "+".join(t.key for t in tasks)
        kernels = [self.kernel(records, t) for t in tasks]
        why = "; ".join(f"{t.key}: {k}" for t, k in zip(tasks, kernels) if isinstance(k, str))
        if why:
            self.report.kept.append(KeptNode(_name(node), key, why))
            return
        versus = 0.0
        try:
            if self.faster_only:
                ours, theirs = race_attention(*kernels, attention_scale(node))
                if ours >= theirs:
                    self.report.kept.append(KeptNode(_name(node), key, (
                        f"PyTorch's attention is faster here: {theirs * 1e3:.4f} ms against "
                        f"the kernels' {ours * 1e3:.4f} ms, timed side by side")))
                    return
                versus = theirs / ours
            replace_attention(self.gm, node, chain, *kernels, tag)
        except NotReplaceable as e:
            self.report.kept.append(KeptNode(_name(node), key, str(e)))
            return
        for t, k in zip(tasks, kernels):
            self.report.replaced.append(ReplacedNode(t.nodes[0], t.key, k.config.index,
                                                     k.seconds * 1e3, k.sha256, k.note, versus))

    def kernel(self, records: Records, task: Any) -> Any:
        """The checked kernel of ``task`` (one per key), or why there is none."""
        from .kernels import check_and_load, config_of, ranked_records

        key = task.key
        if key in self.kernels or key in self.refused:
            return self.kernels.get(key) or self.refused[key]
        workload = task.workload()
        ranked = ranked_records(records, key, self.device)
        if isinstance(ranked, str):
            self.refused[key] = ranked
            return ranked
        failed: list[str] = []  # why the faster configs were passed over
        for place, (rec, note) in enumerate(ranked, 1):
            config = config_of(workload, rec)
            if isinstance(config, str):
                failed.append(f"#{place}: {config}")
                continue
            if self.measurer is None:
                from ..session import make_measurer

                self.measurer = make_measurer("cpu", options=self.options,
                                              num_threads=self.threads)
            if failed:
                note = "; ".join(([note] if note else []) + [
                    f"passed over the faster config(s) {'; '.join(failed)}: #{place} is used"])
            got = check_and_load(self.measurer, workload, config, rec.device, note)
            if not isinstance(got, str):
                self.kernels[key] = got
                return got
            failed.append(f"#{place}: {got}")
        self.refused[key] = "; ".join(failed)
        return self.refused[key]

    def close(self) -> None:
        if self.measurer is not None:
            self.measurer.close()
            self.measurer = None


__all__ = ["CHECK_OPTIONS", "CompileWarning", "compile"]
