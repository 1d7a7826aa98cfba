"""Helper processes that need nothing from the caller and die with it.

multiprocessing's ``spawn`` re-imports the caller's ``__main__``, so a plain script without an
``if __name__ == "__main__":`` guard could not take a step. A ``Child`` is instead started as
``python -m tensorgym.processes.child FD``: it imports only tensorgym, builds one server object
from a picklable factory, and answers ``(method, args)`` calls over a pipe.

A child may start under a lock (``start_lock``: a ``DeviceLock`` held shared from ``spawn``
until it serves, as a build holds it), so that its start, which takes a core for its imports,
never runs while a kernel is timed on the same cores. It holds it ``START_LOCK_LIMIT_S`` at
most: a child that hangs while starting must not hold off timed runs for good.

During a call, a server may report progress: ``serve`` gives a server that has a ``notify``
attribute a function that sends a note to the parent, where ``Child.progress`` collects the notes
of the call in flight (``poll`` waits for the answer without taking it).

It dies with its parent: its stdin is a pipe that only the parent holds, and a thread in the child
exits the process when that pipe reaches end-of-file, which happens however the parent ends (a
``kill -9`` included) and even while the child's main thread is stuck in a kernel (ctypes and the
compilers release the GIL). Children run in their own session, so a Ctrl-C in a terminal reaches
only the parent, which then closes them.
"""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
import traceback
from multiprocessing.connection import Connection, wait
from typing import TYPE_CHECKING, Any, Callable, Optional, Sequence

if TYPE_CHECKING:  # for annotations only: zygote imports this module
    from .host import DeviceLock
    from .zygote import Zygote

_PACKAGE_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
START_LOCK_LIMIT_S = 30.0  # the longest a child holds the lock it starts under (a start: ~0.5 s)


class ChildError(Exception):
    """The call raised inside the child; the message carries the child's traceback."""


class ChildDied(Exception):
    """The child process ended (crashed, was killed) before it answered."""


class ChildTimeout(Exception):
    """The child did not answer in time; it has been killed."""


def launch(module: str, factory: Callable[..., Any], args: tuple,
           env: "dict[str, str] | None" = None,
           held: "tuple[int, float] | None" = None) -> tuple[subprocess.Popen, Connection]:
    """Start ``python -m module FD [HELD LIMIT]`` and send it ``sys.path`` and what to serve;
    ``held`` (a descriptor that holds a lock, ``DeviceLock.shared_fd``, and a limit in seconds)
    goes to the process, which closes it once it serves, or after the limit."""
    ours, theirs = socket.socketpair()
    env = {**os.environ, **(env or {})}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (_PACKAGE_ROOT, env.get("PYTHONPATH")) if p)
    fds = (theirs.fileno(),) if held is None else (theirs.fileno(), held[0])
    limit = () if held is None else (str(held[1]),)
    try:
        proc = subprocess.Popen([sys.executable, "-m", module, *map(str, fds), *limit],
                                stdin=subprocess.PIPE, pass_fds=fds, env=env,
                                start_new_session=True)
    finally:
        theirs.close()
    conn = Connection(ours.detach())
    try:
        conn.send(list(sys.path))  # first, so the factory unpickles as it would here
        conn.send((factory, args))
    except OSError:
        pass  # it died at once: the handshake says so
    return proc, conn


class Child:
    """One helper process serving the object ``factory(*args)`` (or, with a ``zygote``, a fork
    of the zygote's own such object: ``tensorgym.processes.zygote``)."""

    module = "tensorgym.processes.child"  # what the process runs (``python -m``)
    env: dict = {}  # and with which variables besides the caller's

    def __init__(self, factory: Callable[..., Any], *args: Any, name: str = "child",
                 zygote: "Zygote | None" = None, start_lock: "DeviceLock | None" = None,
                 env: "dict[str, str] | None" = None) -> None:
        if zygote is not None and start_lock is not None:
            raise ValueError("a zygote's fork is already started: it takes no start_lock")
        self.factory, self.args, self.name, self.zygote = factory, args, name, zygote
        # variables for the process besides the caller's (a zygote's fork has the zygote's)
        self.env = {**type(self).env, **(env or {})}
        self.start_lock = start_lock  # held shared from spawn until the process serves
        self.start_lock_limit = START_LOCK_LIMIT_S  # or this long at most
        self.proc: Optional[subprocess.Popen] = None
        self.conn: Optional[Connection] = None
        self.calls = 0  # calls answered since the last start
        self.busy = False
        self.progress: list[tuple[float, Any]] = []  # (time.monotonic() received, note)
        self._answer: Optional[tuple] = None  # seen by ``poll``, not yet taken by ``result``
        self.starting = False  # spawned, its handshake not yet taken
        self.owner = os.getpid()

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def ready(self) -> bool:
        """Whether it serves, without waiting: a start in progress (``spawn``) is done once its
        handshake has arrived (a failed start raises ``ChildDied``, as ``handshake`` does)."""
        if self.starting:  # also one that died while starting: its handshake says so
            if not self.poll(0):
                return False
            self.handshake(0)
            return True
        return self.alive

    def start(self, timeout: float = 120.0) -> None:
        self.spawn()
        self.handshake(timeout)

    def spawn(self) -> None:
        """Start the process and send it what to serve; ``handshake`` waits until it serves (so
        a pool starts its children at once, and a spare starts ahead of its use). With a
        ``zygote``, the process is a fork of it, already serving."""
        self.kill()
        if self.zygote is not None:
            try:
                self.proc, self.conn = self.zygote.fork()
            except ChildError as e:
                raise ChildDied(f"the {self.name} process did not start: {e}") from None
        else:
            held = self.start_lock.shared_fd() if self.start_lock is not None else None
            try:
                self.proc, self.conn = launch(self.module, self.factory, self.args, self.env,
                                              None if held is None else
                                              (held, self.start_lock_limit))
            finally:
                if held is not None:
                    os.close(held)  # the process's copy holds the lock now
        self.owner = os.getpid()
        self.busy = False
        self._answer = None
        self.starting = True

    def handshake(self, timeout: float = 120.0) -> None:
        try:
            status, value = self._recv(timeout)
        except (ChildDied, ChildTimeout, OSError) as e:
            self.kill()
            raise ChildDied(f"the {self.name} process did not start: {e}") from None
        if status != "ok":
            self.kill()
            raise ChildDied(f"the {self.name} process did not start:\n{value}")
        self.calls = 0
        self.starting = False

    def send(self, method: str, *args: Any) -> None:
        """Start a call; ``result`` collects it (lets a pool keep several children busy). A
        child not started yet starts; one still starting is waited for."""
        if self.starting:  # one that died while starting raises ChildDied here
            self.handshake()
        elif not self.alive:
            self.start()
        self.progress, self._answer = [], None
        try:
            self.conn.send((method, args))
        except OSError as e:
            self.kill()
            raise ChildDied(f"the {self.name} process is gone: {e}") from None
        self.busy = True

    def result(self, timeout: Optional[float] = None) -> Any:
        """The answer of the call in flight; kills the child on a timeout or a lost pipe."""
        try:
            status, value = self._recv(timeout)
        except (ChildDied, ChildTimeout):
            self.kill()
            raise
        self.busy = False
        self.calls += 1
        if status != "ok":
            raise ChildError(value)
        return value

    def call(self, method: str, *args: Any, timeout: Optional[float] = None) -> Any:
        self.send(method, *args)
        return self.result(timeout)

    def poll(self, timeout: Optional[float] = 0.0) -> bool:
        """Wait up to ``timeout`` seconds for the next message of the call in flight: True for
        its answer (or the child's death: ``result`` says so), False for a progress note (kept in
        ``progress``) or for none."""
        if self._answer is not None:
            return True
        try:
            if not self.conn.poll(timeout):
                return False
            message = self.conn.recv()
        except (EOFError, OSError):
            return True
        if message[0] == "progress":
            self.progress.append((time.monotonic(), message[1]))
            return False
        self._answer = message
        return True

    def _recv(self, timeout: Optional[float]) -> tuple:
        end = None if timeout is None else time.monotonic() + timeout
        while not self.poll(None if end is None else max(0.0, end - time.monotonic())):
            if end is not None and time.monotonic() >= end:
                raise ChildTimeout(f"the {self.name} process gave no answer within {timeout:g} s")
        if self._answer is None:  # the pipe broke
            code = self.proc.wait(5) if self.proc is not None else None
            raise ChildDied(f"the {self.name} process died (exit code {code})")
        answer, self._answer = self._answer, None
        return answer

    def kill(self) -> None:
        proc, conn = self.proc, self.conn
        self.proc = self.conn = None
        self.busy = self.starting = False
        self._answer = None
        if proc is not None and self.owner != os.getpid():
            return  # a forked copy of the owner: the process is not ours to end
        if conn is not None:
            conn.close()
        if proc is not None:
            if proc.poll() is None:
                proc.kill()
            proc.wait()
            if proc.stdin is not None:
                proc.stdin.close()


    def __del__(self) -> None:
        try:
            self.kill()
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass


class ChildPool:
    """``size`` children serving the same object; ``map`` spreads calls over them."""

    def __init__(self, factory: Callable[..., Any], *args: Any, size: int,
                 name: str = "child") -> None:
        self.children = [Child(factory, *args, name=name) for _ in range(max(1, size))]

    def map(self, method: str, calls: Sequence[tuple], timeout: Optional[float] = None,
            on_timeout: Optional[Callable[[int], Any]] = None) -> list[tuple[bool, Any]]:
        """Run ``method(*args)`` for every ``args`` in ``calls``; returns ``(True, value)`` or
        ``(False, exception)`` per call, in order. A call that runs past ``timeout`` seconds
        kills its child (a new one takes the next call)."""
        out: list = [None] * len(calls)
        todo = list(range(len(calls)))[::-1]
        running: dict[int, tuple[Child, int, float]] = {}  # id(child) -> (child, call, deadline)
        idle = list(self.children)
        while todo or running:
            self._start([c for c in idle[-len(todo):] if not c.alive] if todo else [])
            while todo and idle:
                child, i = idle.pop(), todo.pop()
                try:
                    child.send(method, *calls[i])
                except ChildDied as e:
                    out[i] = (False, e)
                    idle.append(child)
                    continue
                deadline = time.monotonic() + timeout if timeout is not None else None
                running[id(child)] = (child, i, deadline)
            deadlines = [d for _, _, d in running.values() if d is not None]
            wait_s = max(0.0, min(deadlines) - time.monotonic()) if deadlines else None
            ready = wait([c.conn for c, _, _ in running.values()], wait_s)
            now = time.monotonic()
            for key, (child, i, deadline) in list(running.items()):
                # the deadline first: an answer first seen after it may have come after it too
                if deadline is not None and now >= deadline:
                    child.kill()
                    out[i] = (False, ChildTimeout(f"no answer within {timeout:g} s"))
                elif child.conn in ready and child.poll(0):  # an answer, not a progress note
                    try:
                        out[i] = (True, child.result(0))
                    except (ChildError, ChildDied, ChildTimeout) as e:
                        out[i] = (False, e)
                else:
                    continue
                del running[key]
                idle.append(child)
        return out

    @staticmethod
    def _start(children: list[Child]) -> None:
        """Start dead children side by side, so that no call's clock runs while others start."""
        for child in children:
            child.spawn()
        for child in children:
            try:
                child.handshake()
            except ChildDied:
                pass  # send() tries once more and reports it on the call

    def close(self) -> None:
        for child in self.children:
            child.kill()


# ---------------------------------------------------------------- the child's side


def _exit_with_parent() -> None:
    """End this process as soon as the parent's end of stdin closes."""
    try:
        while os.read(0, 65536):
            pass
    finally:
        os._exit(0)


class _HeldLock:
    """The lock a child started under (a descriptor that holds it), released once: when the
    child serves, or after ``limit`` seconds."""

    def __init__(self, fd: int, limit: float) -> None:
        self.fd: Optional[int] = fd
        self._mutex = threading.Lock()
        self._timer = threading.Timer(limit, self.release)
        self._timer.daemon = True
        self._timer.start()

    def release(self) -> None:
        with self._mutex:
            if self.fd is not None:
                os.close(self.fd)
                self.fd = None
        self._timer.cancel()


def serve(conn: Connection, held: "_HeldLock | None" = None) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    threading.Thread(target=_exit_with_parent, daemon=True).start()
    server = build_server(conn)
    if server is not None:
        serve_object(conn, server, held)


def build_server(conn: Connection) -> Any:
    """The object the parent sends to serve, or None (the parent heard why, or is gone)."""
    try:
        sys.path[:] = conn.recv()
        factory, args = conn.recv()
        return factory(*args)
    except EOFError:
        return None
    except BaseException:  # noqa: BLE001 - reported to the parent, which raises it
        conn.send(("error", traceback.format_exc()))
        return None


def serve_object(conn: Connection, server: Any, held: "_HeldLock | None" = None) -> None:
    """Answer the parent's calls on ``server`` until the pipe closes (first releasing ``held``,
    the lock it started under, once the parent has heard that it serves)."""
    if hasattr(server, "notify"):
        server.notify = lambda note: conn.send(("progress", note))
    conn.send(("ok", None))
    if held is not None:
        held.release()
    while True:
        try:
            method, args = conn.recv()
        except (EOFError, OSError):
            return
        try:
            reply = ("ok", getattr(server, method)(*args))
        except BaseException:  # noqa: BLE001
            reply = ("error", traceback.format_exc())
        conn.send(reply)


if __name__ == "__main__":
    serve(Connection(int(sys.argv[1])),
          _HeldLock(int(sys.argv[2]), float(sys.argv[3])) if len(sys.argv) > 3 else None)
