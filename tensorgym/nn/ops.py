"""The ``torch.library`` operator that runs a tensorgym kernel on torch tensors:
``torch.ops.tensorgym.kernel(inputs, address, out_shape, numels, workspaces)``.

``address`` is the entry point of a kernel loaded in this process (``kernels.CheckedKernel``),
``inputs`` its inputs in the order and layout the kernel takes (packed where its program says),
``numels`` how many floats each must hold, ``workspaces`` the floats of each scratch buffer. The
op allocates the output (float32, ``out_shape``, contiguous) and the scratch buffers with torch,
and calls the kernel with their data pointers. Its fake implementation gives the output's shape,
so ``torch.export`` and ``torch.compile`` see it as one opaque op. The address is only valid in
the process that loaded the kernel: a graph holding it cannot be saved and run elsewhere.

Importing this module imports torch and defines the op (in torch's operator registry).
"""
from __future__ import annotations

import ctypes

import torch


#: ``torch.library.Library`` rather than ``torch.library.custom_op``: the latter wraps every
#: call in its autograd and aliasing layers, 18 us a call against 7 (MobileNetV2 calls 53
#: kernels a forward). A kernel has no autograd formula either way: an input that requires
#: grad is refused (``_run``)
_LIBRARY = torch.library.Library("tensorgym", "DEF")
_LIBRARY.define("kernel(Tensor[] inputs, int address, int[] out_shape, int[] numels, "
                "int[] workspaces) -> Tensor")


def _run(inputs: list[torch.Tensor], address: int, out_shape: list[int], numels: list[int],
         workspaces: list[int]) -> torch.Tensor:
    if len(inputs) != len(numels):
        raise RuntimeError(f"tensorgym kernel takes {len(numels)} inputs, got {len(inputs)}")
    if torch.is_grad_enabled() and any(t.requires_grad for t in inputs):
        # no autograd formula: without this a backward would pass through with wrong gradients
        raise RuntimeError("tensorgym kernels are inference only: an input requires grad (run "
                           "the model under torch.no_grad() or on inputs that need none)")
    args = []
    for i, (t, n) in enumerate(zip(inputs, numels)):
        if t.dtype != torch.float32 or t.device.type != "cpu" or t.numel() != n:
            raise RuntimeError(f"tensorgym kernel input {i}: expected a float32 CPU tensor of "
                               f"{n} elements, got {t.dtype} on {t.device} with {t.numel()} "
                               "(the model was compiled for other shapes)")
        args.append(t.contiguous())
    out = torch.empty(out_shape, dtype=torch.float32)
    scratch = [torch.empty(n, dtype=torch.float32) for n in workspaces]
    buffers = [*args, out, *scratch]
    fn = ctypes.CFUNCTYPE(None, *[ctypes.c_void_p] * len(buffers))(address)
    fn(*[b.data_ptr() for b in buffers])
    return out


_LIBRARY.impl("kernel", _run, "CPU")


@torch.library.register_fake("tensorgym::kernel", lib=_LIBRARY)
def _(inputs: list[torch.Tensor], address: int, out_shape: list[int], numels: list[int],
      workspaces: list[int]) -> torch.Tensor:
    return inputs[0].new_empty(out_shape, dtype=torch.float32)


def kernel(inputs: list[torch.Tensor], address: int, out_shape: list[int], numels: list[int],
           workspaces: list[int]) -> torch.Tensor:
    """Run the kernel at ``address`` on ``inputs``; returns its output, of ``out_shape``."""
    return torch.ops.tensorgym.kernel.default(inputs, address, out_shape, numels, workspaces)


def pack(t: torch.Tensor, shape: list[int], dim: int, block: int) -> torch.Tensor:
    """``t`` reshaped to ``shape`` (the workload's layout) and packed as
    ``loopast.PackedLayout(dim, block)`` packs a NumPy array (block number first, the offset in
    the block last), contiguous; ``block`` 0: only reshaped."""
    t = t.reshape(shape)
    if not block:
        return t.contiguous()
    split = [*shape[:dim], shape[dim] // block, block, *shape[dim + 1:]]
    order = [dim, *[d if d < dim else d + 1 for d in range(len(shape)) if d != dim], dim + 1]
    return t.reshape(split).permute(order).contiguous()


__all__ = ["kernel", "pack"]
