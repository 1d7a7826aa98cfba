"""Where the exported BERT encoder layer (no tensorgym kernel in it) loses to eager: both timed
in 3 rounds, then a torch.profiler table of each (20 calls), on the CPU, 2 threads.

    python benchmarks/bench_bert_graph.py
"""
import torch, time
from torch.profiler import profile, ProfilerActivity
torch.set_num_threads(2)
torch.manual_seed(0)
from tensorgym.nn.models import MODELS
build, shape = MODELS["bert_layer"]
m = build().eval()
x = torch.randn(*shape)
with torch.no_grad():
    ep = torch.export.export(m, (x,)).module()
def bench(f, n=30):
    with torch.no_grad():
        for _ in range(5): f(x)
        ts=[]
        for _ in range(n):
            t=time.perf_counter(); f(x); ts.append(time.perf_counter()-t)
    ts.sort(); return ts[len(ts)//2]*1e3
for r in range(3):
    print(f"round {r}: eager {bench(m):.3f} ms, exported {bench(ep):.3f} ms")
for name, f in (("eager", m), ("exported", ep)):
    with torch.no_grad(), profile(activities=[ProfilerActivity.CPU]) as p:
        for _ in range(20): f(x)
    print(name); print(p.key_averages().table(sort_by="self_cpu_time_total", row_limit=12))
