"""Task extraction from PyTorch models (issue 32, deliverable 3): ``extract_tasks(model, x)``
gives a model's tunable fused tasks (conv2d with groups, dense, batch_matmul, matmul, each with
its epilogue), how often each occurs and the nodes it stands for; ``MODELS`` are the built-in
networks (random weights); ``load_corpus()`` gives the de-duplicated tasks of them all and
their fixed train/test split by model (``corpus``); ``compile(model, x, db=...)`` runs a model's
tuned operators on tensorgym's checked kernels (``compiled``). torch and torchvision are optional
(``pip install 'tensorgym[nn]'``): importing this package imports neither."""
from .compiled import CHECK_OPTIONS, CompileWarning, compile
from .corpus import (KINDS, TEST_MODELS, Corpus, CorpusError, CorpusTask, load_corpus,
                     write_corpus)
from .extract import TraceError, extract_tasks, task_table
from .models import DESCRIPTIONS, MODELS, ModelUnavailableError, get_model, model_tasks
from .report import CompileReport, KeptNode, ReplacedNode
from .tasks import (EPILOGUE_OPS, PARAMS, ModelTask, TaskKeyError,
                    TaskTable, UntunableNode, parse_key)

__all__ = ["compile", "CHECK_OPTIONS", "CompileWarning", "CompileReport", "KeptNode",
           "ReplacedNode", "extract_tasks", "task_table", "TraceError", "MODELS", "DESCRIPTIONS",
           "ModelUnavailableError", "get_model", "model_tasks", "EPILOGUE_OPS", "PARAMS",
           "ModelTask", "TaskKeyError", "TaskTable", "UntunableNode",
           "parse_key", "KINDS", "TEST_MODELS", "Corpus", "CorpusError", "CorpusTask",
           "load_corpus", "write_corpus"]
