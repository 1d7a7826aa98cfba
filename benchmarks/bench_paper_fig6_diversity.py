"""Figure 6: diversity-aware selection, choosing each batch from the top lambda*b candidates.

lambda = 1 is plain top-b selection (no room for diversity); 2 and 4 trade quality for coverage
of knob values (Equation 3, weight --alpha).

    python benchmarks/bench_paper_fig6_diversity.py --trials 800 --seeds 3
"""
from __future__ import annotations


from bench_paper_common import base_parser, study, tuner_options
from tensorgym.registry import make as make_agent


def main() -> None:
    p = base_parser(__doc__, ["conv2d-C1", "conv2d-C2", "conv2d-C5", "conv2d-C6"], 800)
    p.add_argument("--alpha", type=float, default=0.1, help="diversity weight of Equation 3")
    p.add_argument("--lambdas", type=float, nargs="+", default=[1.0, 2.0, 4.0])
    args = p.parse_args()
    methods = {
        f"lambda={lam:g}": (lambda lam=lam: make_agent(
            "xgb", plan_ratio=lam, alpha=args.alpha, **tuner_options(args)))
        for lam in args.lambdas
    }
    study(methods, args, f"Figure 6: diversity-aware selection (alpha={args.alpha:g})",
          "fig6_diversity.png", "Diversity-aware selection")


if __name__ == "__main__":
    main()
