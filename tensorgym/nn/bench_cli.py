"""``tensorgym bench-model MODEL --db X`` (registered by ``tensorgym/cli.py``): a built-in model
compiled with ``nn.compile`` on the tune in X, timed interleaved against PyTorch eager and
``torch.compile`` (inductor), then each replaced task against the PyTorch operator it replaces."""
from __future__ import annotations

import argparse
import copy
import json
import warnings
from typing import Any


def add_parser(sub: Any, positive: Any) -> None:
    """Add the ``bench-model`` command to the subparsers ``sub`` of the ``tensorgym`` parser."""
    p = sub.add_parser("bench-model", help="time a built-in model compiled on a tune's records "
                       "(nn.compile) against PyTorch eager and torch.compile, interleaved")
    p.add_argument("model", help="a built-in model (tensorgym list models)")
    p.add_argument("--db", required=True, help="records database of a tune (tune-model)")
    p.add_argument("--rounds", type=positive, default=5, help="interleaved rounds (median)")
    p.add_argument("--min-round-ms", type=float, default=50.0,
                   help="each variant's calls in a round last at least this long")
    p.add_argument("--no-inductor", action="store_true", help="leave torch.compile out")
    p.add_argument("--faster-only", action="store_true",
                   help="compile with faster_only=True (a kernel replaces its operator only "
                   "where it wins a race against it) and time the module of every kernel beside")
    p.add_argument("--attention", action="store_true",
                   help="compile with attention=True (attention runs its two batch_matmul "
                   "kernels with PyTorch's softmax between them)")
    p.add_argument("--json", action="store_true")


def cmd_bench_model(args: argparse.Namespace) -> int:
    from .bench import inductor, interleaved, task_pair
    from .compiled import CompileWarning, compile
    from .models import get_model

    model, x = get_model(args.model)

    def compiled(faster_only: bool) -> Any:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", CompileWarning)  # the report below says it
            return compile(model, x, args.db, name=args.model, faster_only=faster_only,
                           attention=args.attention)

    cm = compiled(args.faster_only)
    report = cm.tensorgym_report
    check = output_check(cm, model, x)
    fns = {"tensorgym": lambda: cm(x), "eager": lambda: model(x)}
    if any(k.reason.startswith("PyTorch's op is faster") for k in report.kept):
        every = compiled(False)  # what keeping the faster PyTorch ops buys, side by side
        fns["tensorgym, every kernel"] = lambda: every(x)
    if report.pools:  # what the separable max pools buy, side by side
        from .pool import with_pytorch_pools

        plain = with_pytorch_pools(cm)
        fns["tensorgym, PyTorch's pools"] = lambda: plain(x)
    ind, why = (None, "left out (--no-inductor)") if args.no_inductor else inductor(model, x)
    if ind is not None:
        fns["inductor"] = lambda: ind(x)
    lat = interleaved(fns, args.rounds, args.min_round_ms / 1e3)
    tasks = []
    for key, k in cm.tensorgym_kernels.items():
        ours, theirs = task_pair(k)
        t = interleaved({"ours": ours, "pytorch": theirs}, args.rounds, args.min_round_ms / 1e3)
        count = sum(r.key == key for r in report.replaced)
        tasks.append({"task": key, "count": count, "ours_ms": t["ours"] * 1e3,
                      "pytorch_ms": t["pytorch"] * 1e3, "speedup": t["pytorch"] / t["ours"]})
    out = {"model": args.model, "device": report.device, "rounds": args.rounds,
           "latency_ms": {k: v * 1e3 for k, v in lat.items()}, "inductor": why or "ok",
           "replaced": len(report.replaced), "kept": len(report.kept), "output": check,
           "tasks": tasks}
    if args.json:
        print(json.dumps(out))
    else:
        _print(out, report)
    return 0


RTOL, ATOL = 1e-4, 1e-5  # what tests/test_nn_compile.py asks of every built-in model


def output_check(compiled: Any, model: Any, x: Any, rtol: float = RTOL,
                 atol: float = ATOL) -> dict:
    """The compiled module's output against eager's on the bench input: the largest absolute
    and relative differences, and whether every element is within ``rtol`` (plus ``atol``).

    A deep network's logits can be large while some sit near zero, where an element-wise rtol
    asks for more than fp32 gives; so both outputs are also compared with the model run in
    float64 (``vs_float64``: each one's largest error), which says whether the kernels' error
    is of fp32 rounding's size (eager's own) or beyond it."""
    import torch

    with torch.no_grad():
        got, want = compiled(x), model(x)
        exact = _float64_output(model, x)
    worst = float((got - want).abs().max())
    scale = float(want.abs().max())
    out = {"max_abs": worst, "max_eager": scale,
           "max_rel": worst / scale if scale else 0.0,  # to the output's scale
           "within": bool(torch.allclose(got, want, rtol=rtol, atol=atol)),
           "rtol": rtol, "atol": atol}
    if exact is not None:
        out["vs_float64"] = {"tensorgym": float((got.double() - exact).abs().max()),
                             "eager": float((want.double() - exact).abs().max())}
    return out


def _float64_output(model: Any, x: Any) -> Any:
    """``model`` run in float64 on ``x`` (a copy; None where the model cannot run so)."""
    import torch

    try:
        exact = copy.deepcopy(model).double()(x.double())
    except (RuntimeError, TypeError, NotImplementedError):  # an op without a float64 kernel
        return None
    return exact if isinstance(exact, torch.Tensor) else None


def _print(out: dict, report: Any) -> None:
    from .bench import latency_table

    lat = out["latency_ms"]
    print(f"{report.summary()}; median of {out['rounds']} interleaved rounds")
    c = out["output"]
    print(f"output against eager: max |diff| {c['max_abs']:.3g} (of max |eager| "
          f"{c['max_eager']:.3g}), "
          + ("within" if c["within"] else "NOT within")
          + f" rtol {c['rtol']:g} + atol {c['atol']:g}")
    if "vs_float64" in c:
        e = c["vs_float64"]
        print(f"against the model in float64: max |error| tensorgym {e['tensorgym']:.3g}, "
              f"eager {e['eager']:.3g} (fp32 rounding)")
    print(latency_table(lat))
    if out["inductor"] != "ok":
        print(f"inductor: {out['inductor']}")
    if "inductor" in lat:
        print(f"tensorgym vs inductor: {lat['inductor'] / lat['tensorgym']:.2f}x")
    print("\n| task | count | ours ms | PyTorch ms | speedup |\n|---|---:|---:|---:|---:|")
    for t in out["tasks"]:
        print(f"| `{t['task']}` | {t['count']} | {t['ours_ms']:.4f} | {t['pytorch_ms']:.4f} "
              f"| {t['speedup']:.2f}x |")
    if report.kept:
        print(f"\n{len(report.kept)} operator nodes keep PyTorch's op:")
        for k in report.kept:
            print(f"  {k.node} `{k.key}`: {k.reason}")
