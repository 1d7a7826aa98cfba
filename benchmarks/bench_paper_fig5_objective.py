"""Figure 5: rank loss (Equation 2) vs regression loss for the GBT cost model.

    python benchmarks/bench_paper_fig5_objective.py --trials 800 --seeds 3
"""
from __future__ import annotations


from bench_paper_common import base_parser, study, tuner_options
from tensorgym.registry import make as make_agent


def main() -> None:
    p = base_parser(__doc__, ["conv2d-C1", "conv2d-C2", "conv2d-C5", "conv2d-C6"], 800)
    args = p.parse_args()
    methods = {
        # rank is the default loss: left implicit, its runs are Figure 4's GBT runs (--reuse)
        f"GBT {loss}": (lambda loss=loss: make_agent(
            "xgb", model_options={"loss": loss} if loss != "rank" else None,
            **tuner_options(args)))
        for loss in ("rank", "reg")
    }
    study(methods, args, "Figure 5: rank vs regression objective", "fig5_objective.png",
          "Rank vs regression objective")


if __name__ == "__main__":
    main()
