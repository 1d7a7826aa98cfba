"""Task extraction from PyTorch models (issue 32, deliverable 3): ``extract_tasks(model, x)``
gives a model's tunable fused tasks (conv2d with groups, dense, batch_matmul, matmul, each with
its epilogue), how often each occurs and the nodes it stands for; ``MODELS`` are the built-in
networks (random weights); ``load_corpus()`` gives the de-duplicated tasks of them all and
their fixed train/test split by model (``corpus``). torch and torchvision are optional
(``pip install 'tensorgym[nn]'``): importing this package imports neither."""
from .corpus import (KINDS, TEST_MODELS, Corpus, CorpusError, CorpusTask, load_corpus,
                     write_corpus)
from .extract import TraceError, extract_tasks, task_table
from .models import DESCRIPTIONS, MODELS, ModelUnavailableError, get_model, model_tasks
from .tasks import (EPILOGUE_OPS, PARAMS, ModelTask, TaskKeyError,
                    TaskTable, UntunableNode, parse_key)

__all__ = ["extract_tasks", "task_table", "TraceError", "MODELS", "DESCRIPTIONS",
           "ModelUnavailableError", "get_model", "model_tasks", "EPILOGUE_OPS", "PARAMS",
           "ModelTask", "TaskKeyError", "TaskTable", "UntunableNode",
           "parse_key", "KINDS", "TEST_MODELS", "Corpus", "CorpusError", "CorpusTask",
           "load_corpus", "write_corpus"]
