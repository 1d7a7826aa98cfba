"""What this process may use of the machine (its cores), and one timer per device across
processes. The CPU's identity (its vector width) is hardware's: ``tensorgym.hardware.host``."""
from __future__ import annotations

import fcntl
import os
import re
import stat
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from ..errors import TensorGymError

#: where the lock files live unless ``$TENSORGYM_LOCK_DIR`` names another directory: one per
#: machine, shared by every user and container of it that shares /tmp
LOCK_DIR_ENV = "TENSORGYM_LOCK_DIR"
_OPEN = os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW


def lock_dir() -> Path:
    """The machine's lock directory, made world-writable and sticky (as /tmp is) so that every
    user's processes share it; a directory that is a link, or one another user made without
    the sticky bit, is refused."""
    root = Path(os.environ.get(LOCK_DIR_ENV) or Path(tempfile.gettempdir()) / "tensorgym-locks")
    try:
        root.mkdir(mode=0o777, parents=True, exist_ok=True)
        info = os.lstat(root)
        if not stat.S_ISDIR(info.st_mode):
            raise TensorGymError(f"lock directory {root} is not a directory (a link?); set "
                                 f"${LOCK_DIR_ENV} to a directory of this machine's")
        if info.st_uid == os.getuid() and stat.S_IMODE(info.st_mode) != 0o1777:
            os.chmod(root, 0o1777)
        elif info.st_uid not in (os.getuid(), 0) and not info.st_mode & stat.S_ISVTX:
            raise TensorGymError(f"lock directory {root} belongs to another user and is not "
                                 f"sticky; set ${LOCK_DIR_ENV} to a directory of your own")
    except OSError as e:
        raise TensorGymError(f"cannot use the lock directory {root}: {e}; set "
                             f"${LOCK_DIR_ENV} to a directory of this machine's") from None
    return root


def _open_lock(path: Path) -> int:
    """A descriptor of lock file ``path``, made if missing (readable and writable by all, so
    that another user's processes can lock it too); read-only where another user made it."""
    try:
        fd = os.open(path, os.O_RDWR | _OPEN, 0o666)
    except PermissionError:
        return os.open(path, os.O_RDONLY | _OPEN, 0o666)  # flock needs no write access
    try:
        os.fchmod(fd, 0o666)
    except OSError:  # another user's file, opened for writing already: nothing to change
        pass
    return fd


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
    """A lock file per device, shared by every tensorgym process on this machine (in
    :func:`lock_dir`, whichever user and cache directory each process has).

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
        root = Path(directory) if directory is not None else lock_dir()
        root.mkdir(parents=True, exist_ok=True)
        self.path = root / (re.sub(r"[^A-Za-z0-9._-]+", "_", device)[:200] + ".lock")
        self._fd = self._turn_fd = -1

    def _file(self) -> int:
        if self._fd < 0:
            self._fd = _open_lock(self.path)
        return self._fd

    def _turnstile(self) -> int:
        if self._turn_fd < 0:
            self._turn_fd = _open_lock(self.path.with_suffix(".turn"))
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
        fd = _open_lock(self.path)
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
