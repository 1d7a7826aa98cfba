"""What the kernel op's dispatch costs a network: a built-in model compiled on a tune's records,
timed interleaved with the same module whose kernel calls go through a
``torch.library.custom_op`` copy of the op (as ``tensorgym::kernel`` was defined before
2026-12-07), and with PyTorch eager.

    python benchmarks/bench_kernel_op.py mobilenet_v2 --db /tmp/e2e/mobilenet_v2.db --rounds 15
"""
from __future__ import annotations

import argparse
import warnings

import torch

from tensorgym.hardware.cpu import host_cpu_name
from tensorgym.nn import CompileWarning, compile, get_model
from tensorgym.nn.bench import interleaved, latency_table
from tensorgym.nn.ops import _run


@torch.library.custom_op("tensorgym_bench::kernel", mutates_args=())
def custom_kernel(inputs: list[torch.Tensor], address: int, out_shape: list[int],
                  numels: list[int], workspaces: list[int]) -> torch.Tensor:
    return _run(inputs, address, out_shape, numels, workspaces)


@custom_kernel.register_fake
def _(inputs, address, out_shape, numels, workspaces):
    return inputs[0].new_empty(out_shape, dtype=torch.float32)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("model")
    p.add_argument("--db", required=True)
    p.add_argument("--rounds", type=int, default=15)
    args = p.parse_args()
    model, x = get_model(args.model)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", CompileWarning)
        cm = compile(model, x, args.db, name=args.model)
        old = compile(model, x, args.db, name=args.model)  # the same records: the same kernels
    calls = 0
    for node in old.graph.nodes:
        if node.target is torch.ops.tensorgym.kernel.default:
            node.target = torch.ops.tensorgym_bench.kernel.default
            calls += 1
    old.recompile()
    with torch.no_grad():
        torch.testing.assert_close(old(x), cm(x))
    lat = interleaved({"eager": lambda: model(x), "Library op (now)": lambda: cm(x),
                       "custom_op (before)": lambda: old(x)}, args.rounds, 0.05)
    print(f"{args.model} on {host_cpu_name()}, {torch.get_num_threads()} threads, {calls} kernel "
          f"calls a forward, median of {args.rounds} interleaved rounds")
    print(latency_table({name: s * 1e3 for name, s in lat.items()}))


if __name__ == "__main__":
    main()
