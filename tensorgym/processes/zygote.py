"""A zygote: a ``Child``-like process that builds its server object once and forks a copy of
itself, already serving, for each ``Child(..., zygote=z)`` that starts.

A new measurement worker started from scratch costs ~0.25 s (interpreter, numpy, llvmlite,
gymnasium, then the workload's reference output); a fork of a zygote that holds all of it costs
milliseconds. That makes it cheap to stop a losing kernel's first run by killing its worker
(``worker.first_run_limit``).

Forking is safe because the zygote never starts a thread: its server is built, and its
references computed, with OpenBLAS held to one thread (``ZYGOTE_ENV``) and before any OpenMP
region runs; kernels run only in the forks. Runtimes whose drivers start threads or contexts as
they load (OpenCL, CUDA) do not survive a fork: they use plain children.

Lifetimes: the zygote's stdin is a pipe only the parent holds, as for a ``Child``; its forks
inherit that pipe and end when it closes, so they end with the parent and with the zygote's
``close``. For each fork the parent receives a pidfd (a handle to that very process, never to
a later one given the same pid): the zygote reaps a fork only when the parent asks
(``reap``), after it has seen the fork end.
"""
from __future__ import annotations

import os
import select
import signal
import socket
import sys
import threading
import traceback
from functools import lru_cache
from multiprocessing.connection import Connection
from typing import Any, Callable, Optional

from .child import (Child, ChildDied, ChildError, ChildTimeout, _exit_with_parent,
                    build_server, serve_object)

# The zygote forks: it must have no threads, and OpenBLAS starts its pool as numpy loads.
ZYGOTE_ENV = {"OPENBLAS_NUM_THREADS": "1"}
FORK, REAP = "__fork__", "__reap__"  # the zygote's own calls


@lru_cache(maxsize=None)
def supported() -> bool:
    """Whether this system can run a zygote: fork, and pidfds (Linux 5.3 or later). Where it
    cannot, workers start anew: the same measurements, slower restarts."""
    if not (hasattr(os, "fork") and hasattr(os, "pidfd_open")
            and hasattr(signal, "pidfd_send_signal")):
        return False
    try:
        os.close(os.pidfd_open(os.getpid()))
    except OSError:
        return False
    return True


class ForkedProcess:
    """The parent's handle on a fork of a zygote, with the part of ``subprocess.Popen``'s
    interface ``Child`` uses."""

    stdin = None

    def __init__(self, pid: int, pidfd: int, zygote: "Zygote") -> None:
        self.pid, self._pidfd, self._zygote = pid, pidfd, zygote
        self.returncode: Optional[int] = None

    def poll(self) -> Optional[int]:
        if self.returncode is None and self._pidfd >= 0:
            if select.select([self._pidfd], [], [], 0)[0]:
                self._ended()
        return self.returncode

    def kill(self) -> None:
        if self.returncode is None and self._pidfd >= 0:
            signal.pidfd_send_signal(self._pidfd, signal.SIGKILL)

    def wait(self, timeout: Optional[float] = None) -> Optional[int]:
        if self.returncode is None and self._pidfd >= 0:
            if select.select([self._pidfd], [], [], timeout)[0]:
                self._ended()
        return self.returncode

    def _ended(self) -> None:
        os.close(self._pidfd)
        self._pidfd = -1
        code = self._zygote.reap(self.pid)
        self.returncode = code if code is not None else -1

    def __del__(self) -> None:
        if getattr(self, "_pidfd", -1) >= 0:
            os.close(self._pidfd)


class Zygote(Child):
    """A ``Child`` serving ``factory(*args)`` that also forks copies of itself (``fork``); its
    own calls compute what every later fork should inherit. It reserves the method names
    ``FORK`` and ``REAP``."""

    module = "tensorgym.processes.zygote"
    env = ZYGOTE_ENV

    def __init__(self, factory: Callable[..., Any], *args: Any, name: str = "zygote",
                 env: "dict[str, str] | None" = None) -> None:
        super().__init__(factory, *args, name=name, env=env)

    def fork(self) -> tuple[ForkedProcess, Connection]:
        """A new fork, serving, and the parent's end of its pipe."""
        pid = self.call(FORK)
        with socket.socket(fileno=os.dup(self.conn.fileno())) as sock:
            _, (conn_fd, pidfd), _, _ = socket.recv_fds(sock, 1, 2)
        return ForkedProcess(pid, pidfd, self), Connection(conn_fd)

    def reap(self, pid: int) -> Optional[int]:
        """The exit code of an ended fork (None where the zygote cannot tell)."""
        if not self.alive:
            return None
        try:
            return self.call(REAP, pid)
        except (ChildDied, ChildError, ChildTimeout):
            return None

    def close(self) -> None:
        """End the zygote; closing its stdin, the forks' lifeline, ends them too."""
        self.kill()


# ---------------------------------------------------------------- the zygote's side


def _fork(conn: Connection, sock: socket.socket, server: Any) -> None:
    ours, theirs = socket.socketpair()
    pid = os.fork()
    if pid == 0:  # the fork: serve the inherited server on its own pipe
        try:
            conn.close()
            sock.close()
            ours.close()
            threading.Thread(target=_exit_with_parent, daemon=True).start()
            serve_object(Connection(theirs.detach()), server)
        finally:
            os._exit(0)
    theirs.close()
    pidfd = os.pidfd_open(pid)  # before any reap: it names this process and no other
    try:
        conn.send(("ok", pid))
        socket.send_fds(sock, [b"f"], [ours.fileno(), pidfd])
    finally:
        ours.close()
        os.close(pidfd)


def _reap(pid: int) -> Optional[int]:
    try:
        return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
    except ChildProcessError:
        return None


def main(conn: Connection) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    server = build_server(conn)
    if server is None:
        return
    conn.send(("ok", None))
    sock = socket.socket(fileno=os.dup(conn.fileno()))
    while True:  # no thread watches stdin here (a fork must not inherit threads): select does
        ready = select.select([conn, 0], [], [])[0]
        if 0 in ready and not os.read(0, 65536):
            return  # the parent is gone
        if conn not in ready:
            continue
        try:
            method, args = conn.recv()
        except (EOFError, OSError):
            return
        try:
            if method == FORK:
                _fork(conn, sock, server)
                continue
            reply = ("ok", _reap(*args) if method == REAP else getattr(server, method)(*args))
        except BaseException:  # noqa: BLE001 - reported to the parent, which raises it
            reply = ("error", traceback.format_exc())
        conn.send(reply)


if __name__ == "__main__":
    main(Connection(int(sys.argv[1])))
