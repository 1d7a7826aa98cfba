"""The process model: helper processes need nothing from the caller's script and die with it."""
import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from tensorgym.processes.child import Child, ChildDied, ChildPool, ChildTimeout
from tensorgym.processes.host import DeviceLock, available_cpus

from .proc_tree import descendants, survivors

STEP = textwrap.dedent("""
    import gymnasium as gym
    import tensorgym
    env = gym.make("TensorSched-v0", workload=tensorgym.matmul(16, 8, 12), target="cpu")
    obs, info = env.reset(seed=0)
    obs, reward, terminated, truncated, info = env.step(env.action_space.sample())
    u = env.unwrapped
    rows = u.featurize(u.space.sample(u.np_random, 300))  # big enough for helper processes
    print("ok", info["error"], rows.shape[0])
""")


def _ok(proc: subprocess.CompletedProcess) -> None:
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.split()[:3] == ["ok", "NO_ERROR", "300"], proc.stdout


def test_a_script_without_a_main_guard_takes_a_step(tmp_path):
    script = tmp_path / "example.py"
    script.write_text(STEP)
    _ok(subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True,
                       text=True, timeout=300))


def test_code_from_stdin_and_from_c_takes_a_step(tmp_path):
    _ok(subprocess.run([sys.executable, "-"], input=STEP, cwd=tmp_path, capture_output=True,
                       text=True, timeout=300))
    _ok(subprocess.run([sys.executable, "-c", STEP], cwd=tmp_path, capture_output=True,
                       text=True, timeout=300))


HANG = textwrap.dedent("""
    import sys
    from tensorgym import loopast as A
    from tensorgym.measure import LocalMeasurer, MeasureOptions
    from tensorgym.templates import space_for
    from tensorgym.workloads import matmul
    import numpy as np
    w = matmul(8, 8, 8)
    a, b, c = (A.Buffer(n, (8, 8)) for n in "ABC")
    i = A.LoopVar("i")
    row = A.BinOp("%", i, A.IntImm(8))
    body = A.For(i, 10**15, "serial", A.Store(c, (row, A.IntImm(0)),
                 A.BinOp("+", A.Load(c, (row, A.IntImm(0))), A.Load(a, (row, A.IntImm(1))))))
    m = LocalMeasurer("cpu", MeasureOptions(timeout=600, n_parallel=2))
    configs = space_for(w, "cpu").sample(np.random.default_rng(0), 4)
    m.measure(w, configs)  # starts both builders and the worker
    print("hanging", flush=True)
    m.run_program(w, A.Program("hang", (a, b, c), (), body), configs[0])
""")


def test_kill_9_leaves_no_child_alive_even_with_a_hanging_kernel(tmp_path):
    proc = subprocess.Popen([sys.executable, "-c", HANG], cwd=tmp_path, stdout=subprocess.PIPE,
                            text=True)
    try:
        assert proc.stdout.readline().strip() == "hanging"
        time.sleep(1.0)  # the kernel is spinning in the worker now
        kids = descendants(proc.pid)
        assert len(kids) >= 3  # two builders and the worker
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    assert not survivors(kids, within=5.0)


class Echo:
    def __init__(self, prefix: str) -> None:
        self.prefix = prefix

    def echo(self, x):
        return self.prefix + str(x)

    def sleep(self, s: float) -> float:
        time.sleep(s)
        return s

    def fail(self):
        raise ValueError("boom")

    def die(self):
        os._exit(3)


def test_child_calls_errors_deaths_and_timeouts():
    child = Child(Echo, "> ")
    try:
        assert child.call("echo", 1) == "> 1"
        with pytest.raises(Exception, match="boom"):
            child.call("fail")
        assert child.call("echo", 2) == "> 2"  # an error in a call leaves the child serving
        with pytest.raises(ChildDied, match="exit code 3"):
            child.call("die")
        with pytest.raises(ChildTimeout):
            child.call("sleep", 30, timeout=0.5)
        assert not child.alive
        assert child.call("echo", 3) == "> 3"  # started again on demand
    finally:
        child.kill()


def test_pool_keeps_order_and_reports_each_failure_on_its_own_call():
    pool = ChildPool(Echo, "", size=2)
    try:
        out = pool.map("sleep", [(0.01,), (30,), (0.02,), (0.03,)], timeout=3)
        assert [ok for ok, _ in out] == [True, False, True, True]
        assert isinstance(out[1][1], ChildTimeout)
        assert [v for ok, v in out if ok] == [0.01, 0.02, 0.03]
    finally:
        pool.close()


def test_available_cpus_follows_the_affinity_mask():
    out = subprocess.run(["taskset", "-c", "0", sys.executable, "-c",
                          "from tensorgym.processes.host import available_cpus as a; print(a())"],
                         capture_output=True, text=True, timeout=60)
    if out.returncode != 0 and "taskset" in out.stderr:
        pytest.skip(f"taskset is not usable here: {out.stderr}")
    assert out.stdout.strip() == "1"
    assert 1 <= available_cpus() <= (os.cpu_count() or 1)


def test_timed_runs_exclude_each_other_and_builds(tmp_path):
    a, b = DeviceLock("host", tmp_path), DeviceLock("host", tmp_path)
    import fcntl

    with a.exclusive():
        with pytest.raises(BlockingIOError):
            fcntl.flock(b._file(), fcntl.LOCK_SH | fcntl.LOCK_NB)
    with a.shared():
        fcntl.flock(b._file(), fcntl.LOCK_SH | fcntl.LOCK_NB)  # builds share
        fcntl.flock(b._file(), fcntl.LOCK_UN)
    a.close()
    b.close()


HOLD = textwrap.dedent("""
    import os, sys, time
    from tensorgym.processes.host import DeviceLock
    directory, mode, tag = sys.argv[1:4]
    lock = DeviceLock("host", directory)
    with (lock.exclusive() if mode == "ex" else lock.shared()):
        with open(os.path.join(directory, "order"), "a") as f:
            f.write(tag + "\\n")
        while tag == "A" and not os.path.exists(os.path.join(directory, "release")):
            time.sleep(0.01)
""")


def test_a_waiting_timer_goes_before_later_builds(tmp_path):
    """flock alone lets new shared holders in while an exclusive one waits: overlapping builds
    of several processes could starve a timer for minutes."""
    import fcntl

    def start(mode, tag):
        return subprocess.Popen([sys.executable, "-c", HOLD, str(tmp_path), mode, tag])

    def wait_for(pred, seconds=60):
        end = time.monotonic() + seconds
        while not pred() and time.monotonic() < end:
            time.sleep(0.01)
        return pred()

    def turnstile_taken():
        fd = os.open(tmp_path / "host.turn", os.O_RDWR | os.O_CREAT)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            fcntl.flock(fd, fcntl.LOCK_UN)
            return False
        except BlockingIOError:
            return True
        finally:
            os.close(fd)

    order = tmp_path / "order"
    procs = []
    try:
        procs.append(start("sh", "A"))  # a build, held until told
        assert wait_for(lambda: order.exists() and order.read_text() == "A\n")
        procs.append(start("ex", "B"))  # a timer: waits for A
        assert wait_for(turnstile_taken)  # B waits, holding the turnstile
        procs.append(start("sh", "C"))  # a later build
        wait_for(lambda: "C" in order.read_text(), seconds=2)  # (it must not get in)
    finally:  # however the test ends, no holder is left behind
        (tmp_path / "release").touch()
        for p in procs:
            try:
                p.wait(60)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
    assert [p.returncode for p in procs] == [0, 0, 0]
    assert order.read_text().split() == ["A", "B", "C"]

TIME_SOME = textwrap.dedent("""
    import json, sys
    import numpy as np
    from tensorgym.measure import LocalMeasurer, MeasureOptions
    from tensorgym.templates import space_for
    from tensorgym.workloads import matmul
    w = matmul(64, 64, 64)
    m = LocalMeasurer("cpu", MeasureOptions(repeat=3, min_repeat_ms=20, compile_cache=False))
    configs = space_for(w, "cpu").sample(np.random.default_rng(int(sys.argv[1])), 6)
    print(json.dumps([r.extra["timed"] for r in m.measure(w, configs) if r.ok]))
    m.close()
""")


def test_two_processes_never_time_on_one_device_at_once(tmp_path):
    env = dict(os.environ, XDG_CACHE_HOME=str(tmp_path))  # their own lock directory
    procs = [subprocess.Popen([sys.executable, "-c", TIME_SOME, str(seed)], env=env,
                              stdout=subprocess.PIPE, text=True) for seed in (1, 2)]
    windows = [json.loads(p.communicate(timeout=300)[0]) for p in procs]
    assert all(len(w) >= 3 for w in windows)
    for a0, a1 in windows[0]:
        for b0, b1 in windows[1]:
            assert a1 <= b0 or b1 <= a0, "two timed runs overlapped"


def test_an_env_owns_its_feature_helpers_and_close_stops_them():
    import gymnasium as gym
    import numpy as np

    import tensorgym

    env = gym.make("TensorSched-v0", workload=tensorgym.matmul(16, 8, 12), target="cpu",
                   records=False)
    u = env.unwrapped
    u.session.featurizer.featurize(u.workload, u.space.sample(np.random.default_rng(0), 300), n_jobs=2,
                           fast=False)  # lowered on helper processes
    helpers = [c.proc.pid for c in u.session.featurizer.helpers.pool.children if c.alive]
    assert helpers
    env.close()
    assert not survivors(set(helpers), within=5.0)


def test_device_locks_are_the_machines_not_each_cache_dirs(tmp_path):
    """Two processes with different cache dirs (two users, a container) used to lock different
    files and time kernels at the same moment: the lock directory is one per machine."""
    code = "from tensorgym.processes.host import DeviceLock; print(DeviceLock('host').path)"
    paths = set()
    for cache in ("a", "b"):
        env = {k: v for k, v in os.environ.items() if k != "TENSORGYM_LOCK_DIR"}
        env["XDG_CACHE_HOME"] = str(tmp_path / cache)
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                             text=True, check=True)
        paths.add(out.stdout.strip())
    assert len(paths) == 1 and not paths.pop().startswith(str(tmp_path))


def test_the_lock_directory_can_be_named_and_a_link_is_refused(tmp_path, monkeypatch):
    from tensorgym.errors import TensorGymError
    from tensorgym.processes.host import lock_dir

    monkeypatch.setenv("TENSORGYM_LOCK_DIR", str(tmp_path / "locks"))
    assert DeviceLock("host").path.parent == tmp_path / "locks" == lock_dir()
    assert oct(os.stat(tmp_path / "locks").st_mode & 0o7777) == oct(0o1777)
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "elsewhere")
    monkeypatch.setenv("TENSORGYM_LOCK_DIR", str(tmp_path / "link"))
    with pytest.raises(TensorGymError, match="is not a directory"):
        lock_dir()
