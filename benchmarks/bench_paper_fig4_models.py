"""Figure 4: the statistical cost model (GBT, rank loss) vs black-box search (random, GA).

    python benchmarks/bench_paper_fig4_models.py --trials 800 --seeds 3
    python benchmarks/bench_paper_fig4_models.py --trials 16 --seeds 1 \
        --workloads matmul-1024 --batch-size 8
"""
from __future__ import annotations

from bench_paper_common import base_parser, study, tuner_options
from tensorgym import registry
from tensorgym.registry import make as make_agent


def main() -> None:
    p = base_parser(__doc__, ["conv2d-C1", "conv2d-C2", "conv2d-C6", "matmul-1024"], 800)
    args = p.parse_args()
    methods = {
        "GBT (rank)": lambda: make_agent("xgb", **tuner_options(args)),
        "GA": lambda: registry.make("ga", batch_size=args.batch_size),
        "Random": lambda: registry.make("random", batch_size=args.batch_size),
    }
    study(methods, args, "Figure 4: cost model vs black-box search", "fig4_models.png",
          "Cost model vs black-box search")


if __name__ == "__main__":
    main()
