"""Figure 7: uncertainty-aware acquisition (bootstrap ensemble of 5 models, regression loss):
expected improvement and upper confidence bound vs the ensemble mean.

    python benchmarks/bench_paper_fig7_uncertainty.py --trials 800 --seeds 3
"""
from __future__ import annotations


from bench_paper_common import base_parser, study, tuner_options
from tensorgym.registry import make as make_agent


def main() -> None:
    p = base_parser(__doc__, ["conv2d-C1", "conv2d-C2", "conv2d-C5", "conv2d-C6"], 800)
    args = p.parse_args()
    names = {"ei": "Expected improvement", "ucb": "Upper confidence bound", "mean": "Mean"}
    methods = {
        label: (lambda acq=acq: make_agent(
            "xgb", model_options={"loss": "reg"}, uncertainty=acq, n_bootstrap=5,
            **tuner_options(args)))
        for acq, label in names.items()
    }
    study(methods, args, "Figure 7: uncertainty-aware acquisition", "fig7_uncertainty.png",
          "Acquisition functions")


if __name__ == "__main__":
    main()
