"""Built-in models with random weights (nothing is downloaded: ``weights=None``), batch 1.

``MODELS``: name -> (constructor, example input shape). The torchvision models need
``pip install 'tensorgym[nn]'`` (torch 2.13.0 and the torchvision that matches it, 0.28.0).
"""
from __future__ import annotations

import re
import sys
import warnings
from typing import Any, Callable

from ..errors import TensorGymError

INSTALL = "pip install 'tensorgym[nn]'"


class ModelUnavailableError(TensorGymError):
    """An unknown model name, or torch / torchvision missing."""


def _torch() -> Any:
    try:
        import torch  # torch: optional, only the models and task extraction need it
    except ImportError:
        raise ModelUnavailableError(f"the models need torch: {INSTALL}") from None
    return torch


def _torchvision_models() -> Any:
    """``torchvision.models``. A torchvision whose compiled ops do not load against this torch
    (e.g. the CUDA wheel beside a CPU-only torch) fails on import while registering fake kernels
    of ops it could not load (torchvision::nms, ::qnms); the models use none of them, so each
    such op is declared (a placeholder schema, never called) and the import retried."""
    torch = _torch()
    for _ in range(8):
        try:
            import torchvision.models  # torch: optional, the built-in models are torchvision's
            return torchvision.models
        except ImportError:
            raise ModelUnavailableError(f"the built-in models need torchvision: {INSTALL}") \
                from None
        except RuntimeError as e:
            missing = re.fullmatch(r"operator torchvision::(\w+) does not exist", str(e))
            if missing is None:
                raise ModelUnavailableError(f"torchvision does not import: {e} "
                                            f"({INSTALL})") from None
            for name in [m for m in sys.modules if m.split(".")[0] == "torchvision"]:
                del sys.modules[name]
            warnings.warn(f"torchvision's compiled op {missing.group(1)} does not load against "
                          f"torch {torch.__version__}; the built-in models load without it, "
                          f"and torchvision.ops.{missing.group(1)} cannot run in this process",
                          RuntimeWarning, stacklevel=2)
            torch.library.define(f"torchvision::{missing.group(1)}", "(Tensor x) -> Tensor")
    raise ModelUnavailableError(f"torchvision does not import against torch "
                                f"{torch.__version__}: {INSTALL}")


def _tv(name: str, **kwargs: Any) -> Callable[[], Any]:
    def build() -> Any:
        return getattr(_torchvision_models(), name)(weights=None, **kwargs)
    build.__name__ = name
    return build


def _vit_b_16_encoder() -> Any:
    """The encoder of ViT-B/16 (position embedding, 12 blocks, final LayerNorm): what follows
    the patch embedding, on its (1, 197, 768) tokens."""
    return _torchvision_models().vit_b_16(weights=None).encoder


def _bert_layer() -> Any:
    nn = _torch().nn
    # BERT's feed-forward activation is GELU (PyTorch's layer defaults to ReLU)
    return nn.TransformerEncoderLayer(768, 12, 3072, activation="gelu", batch_first=True)


def _dqn() -> Any:
    """The Nature DQN (Mnih et al. 2015) on 4 stacked 84x84 frames, 18 actions."""
    nn = _torch().nn
    return nn.Sequential(nn.Conv2d(4, 32, 8, 4), nn.ReLU(), nn.Conv2d(32, 64, 4, 2), nn.ReLU(),
                         nn.Conv2d(64, 64, 3, 1), nn.ReLU(), nn.Flatten(),
                         nn.Linear(3136, 512), nn.ReLU(), nn.Linear(512, 18))


#: name -> (constructor, example input shape), batch 1.
MODELS: dict[str, tuple[Callable[[], Any], tuple[int, ...]]] = {
    "resnet18": (_tv("resnet18"), (1, 3, 224, 224)),
    "resnet50": (_tv("resnet50"), (1, 3, 224, 224)),
    "resnext50": (_tv("resnext50_32x4d"), (1, 3, 224, 224)),
    "vgg11": (_tv("vgg11"), (1, 3, 224, 224)),
    "densenet121": (_tv("densenet121"), (1, 3, 224, 224)),
    "inception_v3": (_tv("inception_v3", aux_logits=False, init_weights=False), (1, 3, 299, 299)),
    "mobilenet_v2": (_tv("mobilenet_v2"), (1, 3, 224, 224)),
    "mobilenet_v3": (_tv("mobilenet_v3_large"), (1, 3, 224, 224)),
    "vit_b_16_encoder": (_vit_b_16_encoder, (1, 197, 768)),
    "bert_layer": (_bert_layer, (1, 128, 768)),
    "dqn": (_dqn, (1, 4, 84, 84)),
}

DESCRIPTIONS: dict[str, str] = {
    "resnet18": "torchvision ResNet-18", "resnet50": "torchvision ResNet-50",
    "resnext50": "torchvision ResNeXt-50 32x4d (grouped convs)", "vgg11": "torchvision VGG-11",
    "densenet121": "torchvision DenseNet-121",
    "inception_v3": "torchvision Inception-v3, 299x299, no aux logits",
    "mobilenet_v2": "torchvision MobileNetV2 (depthwise convs)",
    "mobilenet_v3": "torchvision MobileNetV3-Large",
    "vit_b_16_encoder": "torchvision ViT-B/16's encoder: 12 blocks on 197 tokens of 768",
    "bert_layer": "BERT-base encoder layer: nn.TransformerEncoderLayer(768, 12, 3072, GELU), seq 128",
    "dqn": "the Nature DQN conv net on 4x84x84 frames",
}


def get_model(name: str) -> tuple[Any, Any]:
    """(model in eval mode with random weights, example input) of a built-in model."""
    if name not in MODELS:
        raise ModelUnavailableError(f"unknown model {name!r}; built-in: {', '.join(MODELS)}")
    build, shape = MODELS[name]
    torch = _torch()
    # the same weights every time, and the caller's random state untouched
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        return build().eval(), torch.randn(*shape)


def model_tasks(name: str) -> Any:
    """The ``TaskTable`` of a built-in model."""
    from .extract import extract_tasks

    model, x = get_model(name)
    return extract_tasks(model, x, name)
