"""Forks of a zygote serve as children do, inherit what the zygote computed, and end with it."""
import os
import signal
import subprocess
import sys
import textwrap

import pytest

from tensorgym.processes.child import Child, ChildDied, ChildTimeout
from tensorgym.processes.zygote import Zygote

from .proc_tree import descendants, survivors


class Counter:
    def __init__(self, start: int) -> None:
        self.value = start

    def add(self, n: int) -> int:
        self.value += n
        return self.value

    def pid(self) -> int:
        return os.getpid()

    def threads(self) -> int:
        return len(os.listdir("/proc/self/task"))

    def sleep(self, s: float) -> None:
        import time

        time.sleep(s)

    def die(self, code: int) -> None:
        os._exit(code)

    def getenv(self, name: str):
        return os.environ.get(name)


def _parent_of(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[1])


def test_forks_inherit_the_zygotes_state_and_serve_on_their_own():
    z = Zygote(Counter, 10)
    try:
        assert z.call("add", 5) == 15  # state every later fork starts from
        a, b = Child(Counter, 0, zygote=z), Child(Counter, 0, zygote=z)
        a.start()
        b.start()
        assert a.call("add", 1) == 16 and a.call("add", 1) == 17
        assert b.call("add", 100) == 115  # its own copy
        assert z.call("add", 0) == 15  # the zygote's unchanged
        zygote_pid = z.proc.pid
        assert _parent_of(a.call("pid")) == zygote_pid == _parent_of(b.call("pid"))
        assert z.call("threads") == 1  # safe to fork: no thread but the main one
        a.kill()
        b.kill()
    finally:
        z.close()


def test_a_fork_that_dies_or_hangs_is_reported_and_replaced():
    z = Zygote(Counter, 0)
    child = Child(Counter, 0, zygote=z)
    try:
        with pytest.raises(ChildDied, match="exit code 7"):
            child.call("die", 7)
        pid = None
        with pytest.raises(ChildTimeout):
            child.send("sleep", 30)
            pid = child.proc.pid
            child.result(0.3)
        assert not child.alive and pid not in descendants(os.getpid())  # killed and reaped
        assert child.call("add", 2) == 2  # a new fork on demand
    finally:
        child.kill()
        z.close()


def test_closing_the_zygote_ends_its_forks():
    z = Zygote(Counter, 0)
    forks = [Child(Counter, 0, zygote=z) for _ in range(3)]
    for f in forks:
        f.start()
    pids = {f.call("pid") for f in forks} | {z.proc.pid}
    z.close()
    assert not survivors(pids, within=5.0)


KILLED_PARENT = textwrap.dedent("""
    import os, sys, time
    sys.path.insert(0, sys.argv[1])
    from tensorgym.processes.child import Child
    from tests.test_zygote import Counter
    from tensorgym.processes.zygote import Zygote
    z = Zygote(Counter, 0)
    child = Child(Counter, 0, zygote=z)
    child.send("sleep", 600)  # busy in a call when its parent dies
    print(z.proc.pid, child.proc.pid, flush=True)
    time.sleep(600)
""")


def test_kill_9_of_the_parent_ends_the_zygote_and_its_busy_forks():
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    proc = subprocess.Popen([sys.executable, "-c", KILLED_PARENT, root], stdout=subprocess.PIPE,
                            text=True, cwd=root)
    try:
        pids = {int(p) for p in proc.stdout.readline().split()}
        assert len(pids) == 2 and pids <= descendants(proc.pid)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    assert not survivors(pids, within=5.0)


def test_a_cpu_measurers_worker_is_a_fork_of_its_zygote():
    from tensorgym.measure import LocalMeasurer, MeasureOptions
    from tensorgym.templates import default_config
    from tensorgym.workloads import matmul

    w = matmul(32, 32, 32)
    m = LocalMeasurer("cpu", MeasureOptions(calibrate=False))
    try:
        (r,) = m.measure(w, [default_config(w, "cpu")])
        assert r.ok
        worker = m._worker.proc.pid
        assert _parent_of(worker) == m._zygote.proc.pid
        m._worker.kill()
        (again,) = m.measure(w, [default_config(w, "cpu")])  # a new fork measures on
        assert again.ok and m._worker.proc.pid != worker
    finally:
        m.close()


def test_without_pidfds_a_cpu_measurer_starts_its_workers_anew(monkeypatch):
    import tensorgym.measure.local as measure
    from tensorgym.measure import LocalMeasurer, MeasureOptions
    from tensorgym.templates import default_config
    from tensorgym.workloads import matmul

    monkeypatch.setattr(measure, "zygote_supported", lambda: False)
    w = matmul(32, 32, 32)
    m = LocalMeasurer("cpu", MeasureOptions(calibrate=False))
    try:
        (r,) = m.measure(w, [default_config(w, "cpu")])
        assert r.ok and m._zygote is None and _parent_of(m._worker.proc.pid) == os.getpid()
    finally:
        m.close()


def test_a_child_and_a_zygotes_forks_get_their_env_not_the_parent(monkeypatch):
    """How a measurement worker gets OMP_PROC_BIND (measure.worker.worker_env): in its spawn's
    environment, leaving the parent's own untouched."""
    monkeypatch.delenv("TG_TEST_VAR", raising=False)
    c = Child(Counter, 0, env={"TG_TEST_VAR": "child"})
    z = Zygote(Counter, 0, env={"TG_TEST_VAR": "zygote"})
    try:
        c.start()
        assert c.call("getenv", "TG_TEST_VAR") == "child"
        f = Child(Counter, 0, zygote=z)
        f.start()
        assert f.call("getenv", "TG_TEST_VAR") == "zygote"
        assert z.call("getenv", "OPENBLAS_NUM_THREADS") == "1"  # the zygote's own kept
        assert "TG_TEST_VAR" not in os.environ
        f.kill()
    finally:
        c.kill()
        z.close()
