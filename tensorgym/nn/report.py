"""What ``nn.compile`` did: which nodes run tensorgym's kernels, which keep PyTorch's op and
why (``module.tensorgym_report``). Nothing here imports torch."""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class ReplacedNode:
    """An operator node (and its fused epilogue) that now runs a checked tensorgym kernel."""

    node: str
    key: str
    config_index: int
    kernel_ms: float  # the measurement worker's median time of the kernel, at compile time
    sha256: str  # of the binary the worker checked and this process loaded
    note: str = ""
    versus_pytorch: float = 0.0  # PyTorch's op time / the kernel's, raced at compile (0: not)


@dataclass(frozen=True)
class KeptNode:
    """An operator node that keeps PyTorch's implementation, and why."""

    node: str
    key: str  # the task key, or the operator's kind where it fits no task
    reason: str


@dataclass
class CompileReport:
    model: str
    device: str  # the device the kernels were looked up and checked on (PyTorch's threads)
    openmp: str  # the libgomp the kernels call (torch's copy)
    replaced: list[ReplacedNode] = field(default_factory=list)
    kept: list[KeptNode] = field(default_factory=list)
    pools: list[str] = field(default_factory=list)  # max pools run as a separable max (nn.pool)

    def summary(self) -> str:
        return (f"{self.model} on {self.device}: {len(self.replaced)} operator nodes run "
                f"tensorgym kernels, {len(self.kept)} keep PyTorch's")

    def markdown(self) -> str:
        lines = [self.summary(), "", "| node | task | kernel | reason or note |",
                 "|---|---|---|---|"]
        lines += [f"| {r.node} | `{r.key}` | config {r.config_index}, {r.kernel_ms:.4f} ms, "
                  f"{r.sha256[:12]}"
                  + (f", {r.versus_pytorch:.2f}x PyTorch's op" if r.versus_pytorch else "")
                  + f" | {r.note or '-'} |" for r in self.replaced]
        lines += [f"| {k.node} | `{k.key}` | PyTorch | {k.reason} |" for k in self.kept]
        lines += [f"| {p} | max_pool2d | PyTorch ops | a separable max (nn.pool) |"
                  for p in self.pools]
        return "\n".join(lines) + "\n"

    def __str__(self) -> str:
        return self.markdown()
