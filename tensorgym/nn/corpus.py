"""The corpus (issue 32): the tasks of all built-in models (``MODELS``, batch 1), de-duplicated
by key, each tagged with the models it comes from and how often it occurs in each; and a fixed
train/test split by model.

The split: the test models are ``TEST_MODELS`` (ResNeXt-50, MobileNetV2, the BERT layer), every
other built-in model is a train model. The train tasks are all the tasks of the train models;
the test tasks are the tasks that occur only in test models. A task that a test model shares
with a train model (ResNeXt-50's stem and 1x1 convolutions, which ResNet-50 has too) is a train
task: a train model is tuned whole, and a test task must be one no train model has, so that
the test set is made of tasks never seen in training. The test models are the smallest set of
models whose test tasks cover every operator kind (``KINDS`` but matmul, which no model has):
grouped convolutions occur only in ResNeXt-50, depthwise ones only in the MobileNets and
batch_matmul only in the transformer blocks. Of the two transformers BERT, the language model, is
held out; ViT-B/16's encoder stays in train, as ResNet-50 and MobileNetV3 do beside the other two
test models. So the grouped convolutions, and the relu6 epilogue (MobileNetV2's), occur in
test tasks only: the test side also measures how an agent does on what it never saw.

The corpus is kept in ``corpus.json`` beside this module, so that the leaderboard's corpus
suites and ``tensorgym corpus`` load it without torch. ``write_corpus`` (``tensorgym corpus
--regenerate``) extracts the models again (torch and torchvision, the versions pyproject pins)
and rewrites it; tests/test_corpus.py checks that the extraction reproduces it exactly.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional, Sequence

from ..errors import TensorGymError
from .tasks import TaskTable, parse_key

#: The corpus's operator kinds, in table order.
KINDS = ("conv2d", "depthwise conv2d", "grouped conv2d", "dense", "batch_matmul", "matmul")
SPLITS = ("train", "test")
TEST_MODELS = ("resnext50", "mobilenet_v2", "bert_layer")
BATCH = 1
DATA = Path(__file__).with_name("corpus.json")
SCHEMA = "tensorgym-corpus"
VERSION = 1


class CorpusError(TensorGymError, ValueError):
    """An unknown split or model, or a corpus file that is not one or contradicts itself."""


def kind_of(key: str) -> str:
    """The operator kind (one of ``KINDS``) of a task key: conv2d with groups == IC > 1 is
    depthwise, with other groups > 1 grouped."""
    op, params, groups, _ = parse_key(key)
    if op != "conv2d" or groups == 1:
        return op
    return "depthwise conv2d" if groups == params[1] else "grouped conv2d"


@dataclass(frozen=True)
class CorpusTask:
    """One de-duplicated task: its key (a ``tensorgym.workloads`` key), ``op``, ``groups``,
    ``epilogue``, ``flops`` (one occurrence, the epilogue not counted) and ``models``: (model,
    occurrences in it) for each model that has it, in ``MODELS`` order."""

    key: str
    op: str
    groups: int
    epilogue: tuple[str, ...]
    flops: int
    models: tuple[tuple[str, int], ...]

    @property
    def kind(self) -> str:
        return kind_of(self.key)

    @property
    def model_names(self) -> tuple[str, ...]:
        return tuple(m for m, _ in self.models)

    def to_json(self) -> dict[str, Any]:
        return {"key": self.key, "op": self.op, "groups": self.groups,
                "epilogue": list(self.epilogue), "flops": self.flops,
                "models": dict(self.models)}

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> "CorpusTask":
        task = cls(obj["key"], obj["op"], int(obj["groups"]), tuple(obj["epilogue"]),
                   int(obj["flops"]), tuple((m, int(n)) for m, n in obj["models"].items()))
        op, _, groups, epilogue = parse_key(task.key)
        if (op, groups, epilogue) != (task.op, task.groups, task.epilogue) or not task.models:
            raise CorpusError(f"corpus task {task.key}: its fields contradict its key, or it "
                              "comes from no model")
        return task


@dataclass(frozen=True)
class CorpusModel:
    """A built-in model in the corpus: its distinct tasks, their occurrences, its operator
    nodes that fit no task (e.g. Inception-v3's 1x7 convolutions) and its side of the split."""

    name: str
    tasks: int
    instances: int
    untunable: int
    split: str


@dataclass(frozen=True)
class Corpus:
    """The corpus's tasks (in order of first occurrence, models in ``MODELS`` order), its models
    and the test models of the split (the module docstring gives the split's rule)."""

    tasks: tuple[CorpusTask, ...]
    models: tuple[CorpusModel, ...]
    batch: int = BATCH

    @property
    def train_models(self) -> tuple[str, ...]:
        return tuple(m.name for m in self.models if m.split == "train")

    @property
    def test_models(self) -> tuple[str, ...]:
        return tuple(m.name for m in self.models if m.split == "test")

    def split_of(self, task: CorpusTask) -> str:
        """"train" if any train model has ``task``, else "test"."""
        return "train" if set(task.model_names) & set(self.train_models) else "test"

    def split(self, name: str = "all") -> tuple[CorpusTask, ...]:
        """The tasks of split ``name`` ("train", "test"; "all": every task)."""
        if name == "all":
            return self.tasks
        if name not in SPLITS:
            raise CorpusError(f"unknown split {name!r}; use one of {', '.join(SPLITS)} or all")
        return tuple(t for t in self.tasks if self.split_of(t) == name)

    def keys(self, name: str = "all") -> tuple[str, ...]:
        return tuple(t.key for t in self.split(name))

    def to_json(self) -> dict[str, Any]:
        return {"schema": SCHEMA, "version": VERSION, "batch": self.batch,
                "models": [vars(m) for m in self.models],
                "split": {"train_models": list(self.train_models),
                          "test_models": list(self.test_models),
                          **{name: list(self.keys(name)) for name in SPLITS}},
                "tasks": [t.to_json() for t in self.tasks]}

    def dumps(self) -> str:
        """The corpus file's text: indented JSON, one model and one task to a line."""
        obj = self.to_json()
        rows = {name: obj[name] for name in ("models", "tasks")}
        text = json.dumps({k: f"@{k}@" if k in rows else v for k, v in obj.items()}, indent=1)
        for name, items in rows.items():
            text = text.replace(f'"@{name}@"', "[\n" + ",\n".join(
                "  " + json.dumps(x) for x in items) + "\n ]")
        return text + "\n"

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> "Corpus":
        """The corpus of a file's JSON; its stored split must be the one its models give."""
        if not isinstance(obj, dict) or obj.get("schema") != SCHEMA or \
                obj.get("version") != VERSION:
            raise CorpusError(f"not a {SCHEMA} file of version {VERSION}")
        try:
            corpus = cls(tuple(CorpusTask.from_json(t) for t in obj["tasks"]),
                         tuple(CorpusModel(**m) for m in obj["models"]), int(obj["batch"]))
        except (KeyError, TypeError, ValueError) as e:
            raise CorpusError(f"malformed corpus file: {type(e).__name__}: {e}") from None
        stored = obj.get("split", {})
        if stored != corpus.to_json()["split"]:
            raise CorpusError("the corpus file's split is not the one its models' sides give: "
                              "regenerate it (tensorgym corpus --regenerate)")
        return corpus


def build_corpus(tables: Sequence[TaskTable],
                 test_models: Sequence[str] = TEST_MODELS) -> Corpus:
    """The corpus of these models' task tables, split with ``test_models`` as the test side."""
    names = [t.model for t in tables]
    unknown = sorted(set(test_models) - set(names))
    if unknown or len(set(test_models)) in (0, len(names)):
        raise CorpusError(f"test models {', '.join(test_models) or '(none)'}: each must be one "
                          f"of {', '.join(names)}, and both sides need a model"
                          + (f" (unknown: {', '.join(unknown)})" if unknown else ""))
    merged: dict[str, tuple[Any, list[tuple[str, int]]]] = {}
    for table in tables:
        for t in table.tasks:
            merged.setdefault(t.key, (t, []))[1].append((table.model, t.count))
    tasks = tuple(CorpusTask(t.key, t.op, t.groups, t.epilogue, t.flops, tuple(models))
                  for t, models in merged.values())
    models = tuple(CorpusModel(t.model, len(t.tasks), t.instances, len(t.untunable),
                               "test" if t.model in test_models else "train") for t in tables)
    return Corpus(tasks, models)


def extract_corpus(test_models: Sequence[str] = TEST_MODELS) -> Corpus:
    """The corpus extracted from the built-in models now (needs torch and torchvision)."""
    from .models import MODELS, model_tasks

    return build_corpus([model_tasks(name) for name in MODELS], test_models)


def load_corpus(path: Optional[Path] = None) -> Corpus:
    """The corpus of ``path`` (default: the committed ``corpus.json``); imports no torch."""
    path = Path(path) if path is not None else DATA
    try:
        obj = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise CorpusError(f"cannot read the corpus {path}: {e}") from None
    return Corpus.from_json(obj)


def write_corpus(path: Optional[Path] = None) -> Corpus:
    """Extract the corpus again and write it to ``path`` (default: the committed file)."""
    corpus = extract_corpus()
    (Path(path) if path is not None else DATA).write_text(corpus.dumps())
    return corpus
