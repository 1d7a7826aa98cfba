"""What a tune and nn.compile's choices buy end to end, side by side in one process: a built-in
model compiled on a tune's records with attention left to PyTorch (the default) and with
attention's two batch_matmul kernels (``attention=True``); optionally the same model compiled
on another tune's records (``--baseline-db``); beside PyTorch eager, interleaved.

    python benchmarks/bench_compile_choices.py bert_layer --db /tmp/e2e3/bert_layer.db --rounds 9 \
        [--baseline-db /tmp/e2e2/bert_layer.db]

``--baseline-db``: another tune's records (e.g. one by the previous version's seeds), compiled
with the defaults, timed beside.

Prints each variant's median latency and eager's over it. Run it on an idle machine.
"""
from __future__ import annotations

import argparse
import warnings

import torch

from tensorgym.hardware.cpu import host_cpu_name
from tensorgym.nn import CompileWarning, compile, get_model
from tensorgym.nn.bench import interleaved, latency_table


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("model")
    p.add_argument("--db", required=True)
    p.add_argument("--baseline-db", help="another tune's records, compiled as before")
    p.add_argument("--rounds", type=int, default=9)
    p.add_argument("--min-round-ms", type=float, default=50.0)
    args = p.parse_args()
    model, x = get_model(args.model)
    variants = {"tensorgym": (args.db, {}),
                "tensorgym, attention kernels": (args.db, dict(attention=True))}
    if args.baseline_db:
        variants = {"tensorgym on the baseline db": (args.baseline_db, {}), **variants}
    fns = {"eager": lambda: model(x)}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", CompileWarning)
        for name, (db, kw) in variants.items():
            cm = compile(model, x, db, name=args.model, **kw)
            with torch.no_grad():
                torch.testing.assert_close(cm(x), model(x), rtol=1e-4, atol=1e-5)
            fns[name] = (lambda m: (lambda: m(x)))(cm)
            print(f"{name}: {cm.tensorgym_report.summary()}", flush=True)
    lat = interleaved(fns, args.rounds, args.min_round_ms / 1e3)
    print(f"\n{args.model} on {host_cpu_name()}, {torch.get_num_threads()} threads, median of "
          f"{args.rounds} interleaved rounds")
    print(latency_table({name: s * 1e3 for name, s in lat.items()}))


if __name__ == "__main__":
    main()
