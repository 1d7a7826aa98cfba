"""What this process may use of the machine (its cores), and one timer per device across
processes. The CPU's identity (its vector width) is hardware's: ``tensorgym.hardware.host``."""
from __future__ import annotations

import fcntl
import os
import re
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import platformdirs


def available_cpus() -> int:
    """Cores this process may run on: its affinity mask (``taskset``), capped by a cgroup CPU
    quota (containers), not the machine's core count."""
    try:
        n = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        n = os.cpu_count() or 1
    try:
        quota, period = Path("/sys/fs/cgroup/cpu.max").read_text().split()[:2]
        if quota != "max":
            n = min(n, max(1, int(int(quota) // int(period))))
    except (OSError, ValueError):
        pass
    return max(1, n)


class DeviceLock:
    """A lock file per device, shared by every tensorgym process on this machine.

    Timing a kernel holds it exclusively, so no two timed runs overlap on one device (two
    ``tensorgym tune`` processes, an async vector env). Building holds the host CPU's lock shared:
    builds run side by side, but never while a kernel is being timed on the same cores.

    A waiting timer goes first: ``flock`` grants a shared lock while an exclusive one waits, so
    builds of several processes that overlap could hold the timer off for minutes. Every
    acquisition therefore passes a turnstile (a second lock file, held exclusively only while
    acquiring the first); a timer keeps the turnstile until it has the lock, so new builds wait
    behind it while running ones finish.
    """

    def __init__(self, device: str, directory: "str | os.PathLike | None" = None) -> None:
        root = Path(directory or Path(platformdirs.user_cache_dir("tensorgym")) / "locks")
        root.mkdir(parents=True, exist_ok=True)
        self.path = root / (re.sub(r"[^A-Za-z0-9._-]+", "_", device)[:200] + ".lock")
        self._fd = self._turn_fd = -1

    def _file(self) -> int:
        if self._fd < 0:
            self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o666)
        return self._fd

    def _turnstile(self) -> int:
        if self._turn_fd < 0:
            self._turn_fd = os.open(self.path.with_suffix(".turn"),
                                    os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o666)
        return self._turn_fd

    @contextmanager
    def _held(self, mode: int) -> Iterator[None]:
        fd, turn = self._file(), self._turnstile()
        fcntl.flock(turn, fcntl.LOCK_EX)
        try:
            fcntl.flock(fd, mode)
        finally:
            fcntl.flock(turn, fcntl.LOCK_UN)
        try:
            yield
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)

    def exclusive(self):
        return self._held(fcntl.LOCK_EX)

    def shared_fd(self) -> int:
        """A new descriptor of the lock file that holds the lock shared (after the turnstile,
        as ``shared``), to hand to another process: the lock is held until every copy of the
        descriptor is closed (a process that ends closes its own)."""
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o666)
        turn = self._turnstile()
        try:
            fcntl.flock(turn, fcntl.LOCK_EX)
            try:
                fcntl.flock(fd, fcntl.LOCK_SH)
            finally:
                fcntl.flock(turn, fcntl.LOCK_UN)
        except BaseException:
            os.close(fd)
            raise
        return fd

    def shared(self):
        return self._held(fcntl.LOCK_SH)

    def close(self) -> None:
        for fd in (self._fd, self._turn_fd):
            if fd >= 0:
                os.close(fd)
        self._fd = self._turn_fd = -1

    def __getstate__(self) -> dict:
        return {"path": self.path, "_fd": -1, "_turn_fd": -1}
