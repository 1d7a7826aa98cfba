"""The corpus's tables in Markdown (``tensorgym corpus``): tasks by operator kind and by epilogue,
each split into train and test; the models and their sides; and one split's tasks."""
from __future__ import annotations

from collections import Counter
from typing import Callable

from .corpus import KINDS, SPLITS, Corpus, CorpusTask


def _counts(corpus: Corpus, rows: list[str], row_of: Callable[[CorpusTask], str]) -> list[str]:
    per = {name: Counter(row_of(t) for t in corpus.split(name)) for name in SPLITS}
    lines = []
    for row in rows:
        n = [per[name][row] for name in SPLITS]
        lines.append(f"| {row} | " + " | ".join(map(str, n)) + f" | {sum(n)} |")
    totals = [len(corpus.split(name)) for name in SPLITS]
    return lines + ["| all | " + " | ".join(map(str, totals)) + f" | {sum(totals)} |"]


def _epilogue(t: CorpusTask) -> str:
    return "+".join(t.epilogue) or "(none)"


def markdown(corpus: Corpus) -> str:
    """The operator table (rows ``KINDS``), the epilogue table and the models table."""
    head = "| train tasks | test tasks | total |\n|---|---:|---:|---:|"
    epilogues = sorted(Counter(map(_epilogue, corpus.tasks)).items(), key=lambda e: -e[1])
    lines = [f"## The corpus: {len(corpus.tasks)} tasks of {len(corpus.models)} models, "
             f"batch {corpus.batch}", "",
             "| operator " + head, *_counts(corpus, list(KINDS), lambda t: t.kind), "",
             "| epilogue " + head, *_counts(corpus, [e for e, _ in epilogues], _epilogue), "",
             "| model | split | tasks | of them train tasks | of them test tasks |",
             "|---|---|---:|---:|---:|"]
    for m in corpus.models:
        mine = [t for t in corpus.tasks if m.name in t.model_names]
        test = sum(corpus.split_of(t) == "test" for t in mine)
        lines.append(f"| {m.name} | {m.split} | {m.tasks} | {len(mine) - test} | {test} |")
    return "\n".join(lines) + "\n"


def split_markdown(corpus: Corpus, name: str) -> str:
    """The tasks of split ``name`` ("train", "test" or "all"), each with its models."""
    tasks = corpus.split(name)
    lines = [f"## The corpus's {name} tasks: {len(tasks)}", "",
             "| key | operator | GFLOP | models (occurrences) |", "|---|---|---:|---|"]
    for t in tasks:
        models = ", ".join(f"{m} ({n})" for m, n in t.models)
        lines.append(f"| `{t.key}` | {t.kind} | {t.flops / 1e9:.4g} | {models} |")
    return "\n".join(lines) + "\n"
