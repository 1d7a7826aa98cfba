"""A task: what records, datasets and replay are keyed by. Measurements are only comparable
within one: the same workload, on the same target, on the same device."""
from __future__ import annotations

from dataclasses import dataclass

from .errors import TensorGymError
from .hardware.device import Device


@dataclass(frozen=True)
class Task:
    """``workload``: the workload's key (``Workload.key``, e.g. ``matmul:64,64,64``);
    ``target``: the target as records store it (``cpu``, ``cuda``, ``opencl``); ``device``: the
    device's fingerprint (``str(Device)``), as records store it."""

    workload: str
    target: str
    device: str

    def __post_init__(self) -> None:
        bad = [f"{name}={value!r}" for name, value in
               (("workload", self.workload), ("target", self.target), ("device", self.device))
               if not isinstance(value, str)]
        if bad:
            raise TensorGymError(f"a Task is three strings (the workload's key, the target, the "
                                 f"device's fingerprint), got {', '.join(bad)}")

    @property
    def device_info(self) -> Device:
        """The device, parsed from its fingerprint; ``TensorGymError`` if it names none."""
        return Device.parse(self.device)


__all__ = ["Task"]
