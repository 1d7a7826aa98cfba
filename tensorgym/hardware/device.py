"""A device: what records are keyed by (measurements are only comparable on the same one), as
fields, with its one string form, the fingerprint stored in records, datasets and results:

- ``cpu/<arch>[/<isa>]/<model>/<n>t``: LLVM's name of the host CPU (``znver4``), the instruction
  set code is generated for when it is not the host's own (``avx2``, ``avx512``), the CPU's
  model name (``/proc/cpuinfo``) and the thread count kernels use;
- ``cuda:<name>/<arch>``: the GPU's name and the architecture code is built for (``sm_90``);
- ``opencl:<platform>/<name>/<version>``: the platform's name, the device's and its version.

``str(Device.parse(s)) == s`` for every such string, and ``Device.parse(str(d)) == d`` for every
device the runtimes name (the CPU model and the GPU names may hold ``/``, the other fields not).
"""
from __future__ import annotations

import operator
import re
from dataclasses import dataclass, field
from typing import NoReturn

from ..errors import TensorGymError

KINDS = ("cpu", "cuda", "opencl")
#: the instruction sets ``CPURuntime(isa=...)`` generates code for (``cpu.ISAS``)
CPU_ISAS = ("avx2", "avx512")
FORMATS = ("cpu/<arch>[/<isa>]/<model>/<n>t", "cuda:<name>/<arch>",
           "opencl:<platform>/<name>/<version>")
_THREADS = re.compile(r"[1-9][0-9]*t")


@dataclass(frozen=True)
class Device:
    """``kind``: ``cpu``, ``cuda`` or ``opencl``; ``model``: the CPU's model name, the GPU's or
    the OpenCL device's name; ``arch``: LLVM's CPU name or the CUDA architecture (``""`` for
    OpenCL); ``isa``: the CPU instruction set code is generated for, ``""`` for the host's own;
    ``threads``: the CPU thread count (0 elsewhere); ``platform``, ``version``: OpenCL's. ``node``:
    the Ray node the device is on, ``""`` if none; not part of the string form nor of equality
    (measurements on two nodes' identical devices are comparable)."""

    kind: str
    model: str
    arch: str = ""
    isa: str = ""
    threads: int = 0
    platform: str = ""
    version: str = ""
    node: str = field(default="", compare=False)

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise TensorGymError(f"unknown device kind {self.kind!r}; use one of "
                                 f"{', '.join(KINDS)}")
        try:
            object.__setattr__(self, "threads", operator.index(self.threads))  # numpy ints too
        except TypeError:
            raise TensorGymError(f"a thread count is an integer, not {self.threads!r}") from None
        if self.kind == "cpu" and self.threads < 1:
            raise TensorGymError(f"a CPU device runs kernels on 1 or more threads, not "
                                 f"{self.threads}")
        if self.kind != "cpu" and (self.isa or self.threads):
            raise TensorGymError(f"a {self.kind} device has no isa or thread count")
        if self.kind != "opencl" and (self.platform or self.version):
            raise TensorGymError(f"a {self.kind} device has no OpenCL platform or version")

    def __str__(self) -> str:
        if self.kind == "cpu":
            isa = f"/{self.isa}" if self.isa else ""
            return f"cpu/{self.arch}{isa}/{self.model}/{self.threads}t"
        if self.kind == "cuda":
            return f"cuda:{self.model}/{self.arch}"
        return f"opencl:{self.platform}/{self.model}/{self.version}"

    @classmethod
    def parse(cls, text: "str | Device") -> "Device":
        """The device a fingerprint names (a ``Device`` is returned as it is); a string of none
        of the three forms raises ``TensorGymError`` saying which it lacks."""
        if isinstance(text, Device):
            return text
        if not isinstance(text, str):
            raise TensorGymError(f"a device is a string, got {type(text).__name__} {text!r}")
        if text.startswith("cpu/"):
            head, _, threads = text[4:].rpartition("/")
            arch, slash, middle = head.partition("/")
            if not _THREADS.fullmatch(threads):
                _malformed(text, "it does not end in /<n>t, the thread count")
            if not (arch and slash):
                _malformed(text, "it lacks <arch>/<model> before the thread count")
            isa, slash, model = middle.partition("/")
            if not (slash and isa in CPU_ISAS):
                isa, model = "", middle
            return cls("cpu", model, arch, isa, int(threads[:-1]))
        kind, colon, rest = text.partition(":")
        if colon and kind == "cuda":
            name, slash, arch = rest.rpartition("/")
            if not slash or not arch:
                _malformed(text, "it lacks the /<arch> after the GPU's name")
            return cls("cuda", name, arch)
        if colon and kind == "opencl":
            platform, slash, rest = rest.partition("/")
            name, slash2, version = rest.rpartition("/")
            if not (slash and slash2):
                _malformed(text, "it lacks one of <platform>, <name> and <version>")
            return cls("opencl", name, platform=platform, version=version)
        _malformed(text, "it starts with none of cpu/, cuda: and opencl:")

    @property
    def request_kind(self) -> str:
        """What a request for a device of this kind names (``Measurer(runner="ray",
        device=...)``): ``cpu/<model>``, ``cuda/<name>`` or ``opencl/<name>``, whatever the
        thread count, architecture or version."""
        return f"{self.kind}/{self.model}"


def _malformed(text: str, why: str) -> NoReturn:
    raise TensorGymError(f"malformed device {text!r}: {why}; a device is "
                         f"{', '.join(FORMATS[:-1])} or {FORMATS[-1]}")


__all__ = ["CPU_ISAS", "Device", "KINDS"]
