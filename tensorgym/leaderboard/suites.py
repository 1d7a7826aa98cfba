"""Named leaderboard suites: which (workload, target) tasks, how many trials, which seeds.

The corpus suites (``corpus-train-TARGET``, ``corpus-test-TARGET``) are the two sides of the
corpus's fixed split by model (``tensorgym.nn.corpus``; ``tensorgym corpus`` shows it), read from
its committed file, so that they need no torch. Test: 128 trials and seeds 0, 1, 2, to rank
agents on tasks of models that no train task comes from. Train: the same trials and one seed,
as a pass that tunes (and records) every train task once, e.g. to collect a dataset or pretrain
a cost model before the test suite; it is ~200 tasks, a job for a cluster (``--ray``).
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from tensorgym.errors import TensorGymError
from tensorgym.nn.corpus import load_corpus

_QUICK = ("conv2d:1,32,14,14,32,3,1,1", "matmul:128,128,128", "conv2d:1,16,28,28,32,3,2,1")
_RESNET18 = tuple(f"conv2d-C{i}" for i in range(1, 13))


@dataclass(frozen=True)
class Suite:
    name: str
    tasks: tuple[tuple[str, str], ...]  # (workload name or key, target)
    trials: int
    seeds: tuple[int, ...]
    description: str = ""

    def to_json(self) -> dict:
        return {"name": self.name, "tasks": [list(t) for t in self.tasks], "trials": self.trials,
                "seeds": list(self.seeds), "description": self.description}

    def sample(self, n: int) -> "Suite":
        """``n`` of the tasks, spread evenly over the list (first, last and between: the
        corpus suites list tasks by operator), named ``NAME[n/total]``; deterministic."""
        if n < 1:
            raise TensorGymError(f"a sample needs at least one task, got {n}")
        if n >= len(self.tasks):
            return self
        picks = sorted({round(i * (len(self.tasks) - 1) / max(n - 1, 1)) for i in range(n)})
        return replace(self, name=f"{self.name}[{n}/{len(self.tasks)}]",
                       tasks=tuple(self.tasks[i] for i in picks))

    @classmethod
    def from_json(cls, obj: dict) -> "Suite":
        return cls(obj["name"], tuple((w, t) for w, t in obj["tasks"]), int(obj["trials"]),
                   tuple(obj["seeds"]), obj.get("description", ""))


def _suites() -> dict[str, Suite]:
    out = {}
    for target in ("cpu", "opencl", "cuda"):
        out[f"resnet18-{target}"] = Suite(
            f"resnet18-{target}", tuple((w, target) for w in _RESNET18), 1000, (0, 1, 2),
            f"ResNet-18 layers C1-C12 of the paper's Table 1 on {target}")
        out[f"quick-{target}"] = Suite(
            f"quick-{target}", tuple((w, target) for w in _QUICK), 64, (0, 1, 2),
            f"three small layers on {target}: a fast run")
        out[f"tiny-{target}"] = Suite(
            f"tiny-{target}", (("matmul:16,16,16", target),), 8, (0, 1),
            f"one tiny matmul on {target}: for tests and smoke checks")
    return {**out, **_corpus_suites()}


CORPUS_TRIALS = 128
CORPUS_SEEDS = {"train": (0,), "test": (0, 1, 2)}


def _corpus_suites() -> dict[str, Suite]:
    corpus = load_corpus()
    out = {}
    for split in ("train", "test"):
        keys = corpus.keys(split)
        models = corpus.train_models if split == "train" else corpus.test_models
        for target in ("cpu", "opencl", "cuda"):
            name = f"corpus-{split}-{target}"
            out[name] = Suite(name, tuple((k, target) for k in keys), CORPUS_TRIALS,
                              CORPUS_SEEDS[split],
                              f"the corpus's {len(keys)} {split} tasks on {target}, from "
                              f"{', '.join(models)} (tensorgym corpus)")
    return out


SUITES: dict[str, Suite] = _suites()


def get_suite(name: str) -> Suite:
    try:
        return SUITES[name]
    except KeyError:
        raise TensorGymError(f"unknown suite {name!r}; choose from {', '.join(SUITES)}") from None
