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

from .child import ChildDied, ChildError, _exit_with_parent, build_server, launch, serve_object

# The zygote forks: it must have no threads, and OpenBLAS starts its pool as numpy loads.
ZYGOTE_ENV = {"OPENBLAS_NUM_THREADS": "1"}


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


class Zygote:
    """A process serving ``factory(*args)`` that forks copies of itself (``fork``); ``call``
    runs a method on its own copy, e.g. to compute what every later fork should inherit."""

    def __init__(self, factory: Callable[..., Any], *args: Any, name: str = "zygote") -> None:
        self.factory, self.args, self.name = factory, args, name
        self.proc = None
        self.conn: Optional[Connection] = None
        self.owner = os.getpid()

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def start(self, timeout: float = 120.0) -> None:
        self.close()
        self.proc, self.conn = launch("tensorgym.hardware.zygote", self.factory, self.args,
                                      env=ZYGOTE_ENV)
        self.owner = os.getpid()
        try:
            if not self.conn.poll(timeout):
                raise ChildDied(f"no answer within {timeout:g} s")
            status, value = self.conn.recv()
        except (EOFError, OSError, ChildDied) as e:
            self.close()
            raise ChildDied(f"the {self.name} process did not start: {e}") from None
        if status != "ok":
            self.close()
            raise ChildDied(f"the {self.name} process did not start:\n{value}")

    def _ask(self, *message: Any) -> Any:
        if not self.alive:
            self.start()
        try:
            self.conn.send(message)
            status, value = self.conn.recv()
        except (EOFError, OSError) as e:
            self.close()
            raise ChildDied(f"the {self.name} process is gone: {e}") from None
        if status != "ok":
            raise ChildError(value)
        return value

    def call(self, method: str, *args: Any) -> Any:
        return self._ask("call", method, args)

    def fork(self) -> tuple[ForkedProcess, Connection]:
        """A new fork, serving, and the parent's end of its pipe."""
        pid = self._ask("fork")
        with socket.socket(fileno=os.dup(self.conn.fileno())) as sock:
            _, (conn_fd, pidfd), _, _ = socket.recv_fds(sock, 1, 2)
        return ForkedProcess(pid, pidfd, self), Connection(conn_fd)

    def reap(self, pid: int) -> Optional[int]:
        """The exit code of an ended fork (None where the zygote cannot tell)."""
        if not self.alive:
            return None
        try:
            return self._ask("reap", pid)
        except (ChildDied, ChildError):
            return None

    def close(self) -> None:
        proc, conn = self.proc, self.conn
        self.proc = self.conn = None
        if proc is None or self.owner != os.getpid():
            return
        if conn is not None:
            conn.close()
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        proc.stdin.close()  # the forks' lifeline: they end too

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass


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
            kind, *rest = conn.recv()
        except (EOFError, OSError):
            return
        try:
            if kind == "fork":
                _fork(conn, sock, server)
                continue
            if kind == "reap":
                reply = ("ok", _reap(rest[0]))
            else:
                method, args = rest
                reply = ("ok", getattr(server, method)(*args))
        except BaseException:  # noqa: BLE001 - reported to the parent, which raises it
            reply = ("error", traceback.format_exc())
        conn.send(reply)


if __name__ == "__main__":
    main(Connection(int(sys.argv[1])))
