"""Where the exported BERT encoder layer (no tensorgym kernel in it) loses to eager: both timed
in 3 interleaved rounds (median of 30 calls each), then a torch.profiler table of each (20
calls), on the CPU with 2 threads.

    python benchmarks/bench_bert_graph.py

Eager runs PyTorch's fused encoder-layer fast path (``_transformer_encoder_layer_fwd``); the
exported graph is what ``tensorgym.nn.compile`` starts from.
"""
from __future__ import annotations

import time
from typing import Any, Callable

import torch
from torch.profiler import ProfilerActivity, profile

from tensorgym.nn.models import MODELS


def median_ms(f: Callable[[Any], Any], x: Any, n: int = 30) -> float:
    with torch.no_grad():
        for _ in range(5):
            f(x)
        times = []
        for _ in range(n):
            t = time.perf_counter()
            f(x)
            times.append(time.perf_counter() - t)
    return sorted(times)[n // 2] * 1e3


def main() -> None:
    torch.set_num_threads(2)
    torch.manual_seed(0)
    build, shape = MODELS["bert_layer"]
    eager = build().eval()
    x = torch.randn(*shape)
    with torch.no_grad():
        exported = torch.export.export(eager, (x,)).module()
    for r in range(3):
        print(f"round {r}: eager {median_ms(eager, x):.3f} ms, "
              f"exported {median_ms(exported, x):.3f} ms")
    for name, f in (("eager", eager), ("exported", exported)):
        with torch.no_grad(), profile(activities=[ProfilerActivity.CPU]) as p:
            for _ in range(20):
                f(x)
        print(name)
        print(p.key_averages().table(sort_by="self_cpu_time_total", row_limit=12))


if __name__ == "__main__":
    main()
