"""The measurement farm on real Ray (no mocks): a local ``ray.init()`` and a two-node cluster on
this machine (``ray.cluster_utils.Cluster``). One exclusive timer per device, crash isolation
in the timing actor, the same best as the local runner, and a node killed mid-collect that loses
no result and writes none twice. Every Ray process ends with its fixture."""
from __future__ import annotations

import dataclasses
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import numpy as np
import pytest

ray = pytest.importorskip("ray", reason="ray is not installed: pip install 'tensorgym[ray]'")
from ray.cluster_utils import Cluster  # noqa: E402

from tensorgym.errors import ErrorCode, TensorGymError  # noqa: E402
from tensorgym.measure import MeasureOptions  # noqa: E402
from tensorgym.measure.ray import RayMeasurer  # noqa: E402
from tensorgym.records import Records  # noqa: E402
from tensorgym.session import make_measurer  # noqa: E402
from tensorgym.task import Task  # noqa: E402
from tensorgym.templates import default_config, space_for  # noqa: E402
from tensorgym.workloads import matmul  # noqa: E402

from .proc_tree import descendants, survivors  # noqa: E402

MB = 2**20
FAST = MeasureOptions(repeat=2, min_repeat_ms=1, timeout=3.0)
W = matmul(16, 16, 16)
# Ray lets a dead node go after two missed half-second health checks, not after 15 s.
QUICK_DEATH = {"health_check_initial_delay_ms": 0, "health_check_period_ms": 500,
               "health_check_failure_threshold": 2}


def _stop_ray(shutdown, seen: set[int]) -> None:
    """Shut Ray down and check that no process it (or tensorgym under it) started survives."""
    seen |= descendants(os.getpid())
    shutdown()
    assert survivors(seen, within=20) == []


def _no_overlap(windows: list[tuple[float, float]]) -> bool:
    w = sorted(windows)
    return all(a_end <= b_start for (_, a_end), (b_start, _) in zip(w, w[1:]))


def test_import_tensorgym_does_not_import_ray():
    code = ("import sys, tensorgym, tensorgym.envs, tensorgym.cli, tensorgym.measure;"
            "sys.exit('ray' in sys.modules)")
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0


def test_an_address_where_nothing_answers_is_refused_at_once():
    from tensorgym.measure.ray import reachable

    with pytest.raises(TensorGymError, match="nothing answers there"):
        reachable("127.0.0.1:1")  # Ray itself would retry it for minutes
    with pytest.raises(TensorGymError, match="nothing answers there"):
        reachable("ray://127.0.0.1:1")
    for bad in ("nonsense", "127.0.0.1:", ":6379", "host:port"):
        with pytest.raises(TensorGymError, match="host:port or ray://host:port"):
            reachable(bad)
    reachable(None), reachable("auto")  # Ray's own to find


@pytest.fixture(scope="module")
def not_ray():
    """Two addresses that accept connections but are no Ray cluster: a socket that says
    nothing, an HTTP/1 server. Their connections stay open while the module runs."""
    silent = socket.create_server(("127.0.0.1", 0))
    held: list = []
    threading.Thread(target=lambda: [held.append(silent.accept()) for _ in iter(int, 1)],
                     daemon=True).start()
    http = ThreadingHTTPServer(("127.0.0.1", 0), BaseHTTPRequestHandler)
    threading.Thread(target=http.serve_forever, daemon=True).start()
    yield {"silent": f"127.0.0.1:{silent.getsockname()[1]}",
           "http": f"127.0.0.1:{http.server_address[1]}", "held": held}
    http.shutdown()
    silent.close()


DEADLINE = 2.0  # $TENSORGYM_RAY_TIMEOUT in these tests (the default is 10 s)


def _tune(address: str, deadline: float, **kw) -> subprocess.Popen:
    env = {**os.environ, "TENSORGYM_RAY_TIMEOUT": str(deadline)}
    return subprocess.Popen([sys.executable, "-m", "tensorgym", "tune", "matmul:16,16,16",
                             "--trials", "4", "--ray", address], env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, **kw)


@pytest.mark.parametrize("kind,says", [("silent", "said nothing within 2 s"),
                                       ("http", "answered b'")])
def test_an_address_that_answers_but_is_no_ray_cluster_fails_within_its_deadline(
        not_ray, monkeypatch, kind, says):
    address = not_ray[kind]
    monkeypatch.setenv("TENSORGYM_RAY_TIMEOUT", str(DEADLINE))
    assert not ray.is_initialized()
    t0 = time.monotonic()
    with pytest.raises(TensorGymError) as e:
        RayMeasurer("cpu", FAST, address=address)
    assert time.monotonic() - t0 < DEADLINE + 3
    for part in (repr(address), "is not a Ray cluster", says, "ray start --head"):
        assert part in str(e.value)
    assert not ray.is_initialized()  # refused before ray.init: nothing of Ray to clean up

    t0 = time.monotonic()
    p = _tune(address, DEADLINE)
    out, err = p.communicate(timeout=120)
    assert p.returncode == 1, err
    assert f"{address!r}: it accepts connections but is not a Ray cluster" in err
    assert time.monotonic() - t0 < DEADLINE + 30  # + starting Python, tensorgym and ray


def test_a_bad_deadline_is_refused(monkeypatch):
    from tensorgym.measure.ray import connect_timeout

    monkeypatch.delenv("TENSORGYM_RAY_TIMEOUT", raising=False)
    assert connect_timeout() == 10.0
    for bad in ("0", "-1", "soon", "inf", "nan"):
        monkeypatch.setenv("TENSORGYM_RAY_TIMEOUT", bad)
        with pytest.raises(TensorGymError, match="TENSORGYM_RAY_TIMEOUT"):
            connect_timeout()


def test_sigterm_ends_a_tune_waiting_on_an_address_that_says_nothing(not_ray):
    before = len(not_ray["held"])
    p = _tune(not_ray["silent"], 120)
    deadline = time.monotonic() + 60
    while len(not_ray["held"]) == before and p.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert p.poll() is None and len(not_ray["held"]) > before  # it waits on the handshake
    children = descendants(p.pid)
    t0 = time.monotonic()
    p.terminate()
    p.communicate(timeout=10)
    assert time.monotonic() - t0 < 5
    assert p.returncode in (-signal.SIGTERM, 128 + signal.SIGTERM)
    assert survivors(children, within=5) == []


def test_bad_measure_and_replay_arguments_are_refused():
    with pytest.raises(TensorGymError, match="unknown measure"):
        make_measurer("cpu", measure="mpi")
    with pytest.raises(TensorGymError, match="drop ray="):
        make_measurer("cpu", measure="replay", dataset="x.parquet", ray="auto")


@pytest.fixture(scope="class")
def local_ray():
    before = descendants(os.getpid())
    ray.init(num_cpus=2, object_store_memory=100 * MB, include_dashboard=False,
             log_to_driver=False)
    yield
    _stop_ray(ray.shutdown, descendants(os.getpid()) - before)


@pytest.fixture(scope="class")
def cluster():
    """A head and a worker node, both on this machine, one CPU each."""
    before = descendants(os.getpid())
    args = dict(num_cpus=1, object_store_memory=100 * MB)
    c = Cluster(initialize_head=True, head_node_args={
        **args, "include_dashboard": False, "_system_config": QUICK_DEATH})
    worker = c.add_node(**args)
    ray.init(address=c.address, log_to_driver=False)
    seen: set[int] = set()
    yield c, worker, seen
    _stop_ray(lambda: (ray.shutdown(), c.shutdown()), seen | descendants(os.getpid()) - before)


@pytest.mark.usefixtures("local_ray")
class TestLocalRay:
    def test_tune_through_ray_finds_the_local_best(self):
        from tensorgym import make_env
        from tensorgym.baselines.random_search import RandomSearch
        from tensorgym.search import tune

        # seed 0's 8 configs: the best was 8x ahead of the next; one thread, as two threads'
        # wake-ups on shared cores blur the small kernels
        w = matmul(64, 64, 64)
        bests = {}
        for runner in ("local", "ray"):
            m = make_measurer("cpu", options=MeasureOptions(repeat=3, min_repeat_ms=2),
                              num_threads=1, ray=runner == "ray")
            env = make_env(w, "cpu", budget=8, records=False, measurer=m)
            try:
                history = tune(env, RandomSearch(), 8, seed=0)
            finally:
                env.close()
                m.close()
            assert len(history) == 8
            bests[runner] = env.unwrapped.best.config
            if runner == "ray":
                assert all(r.extra["device"].startswith(m.device) for r in history)
        assert bests["ray"] == bests["local"]

    def test_a_crashing_kernel_costs_only_the_actors_worker(self):
        from .test_measure import W as W8, _program, segfault  # an 8x8x8 kernel that segfaults

        m = RayMeasurer("cpu", FAST)
        cfg = default_config(W8, "cpu")
        try:
            crash = m.run_program(W8, _program(segfault), cfg)
            assert crash.error == ErrorCode.RUNTIME_DEVICE and "died" in crash.error_msg
            assert m.measure(W8, [cfg])[0].ok  # the actor's worker restarted
            assert m.confirm(W8, m.measure(W8, [cfg])[0]).confirmed
        finally:
            m.close()

    def test_leaderboard_fans_out_runs_and_resumes(self, tmp_path, capsys):
        from tensorgym.leaderboard.results import ResultsDoc, _clean
        from tensorgym.cli import main

        argv = ["leaderboard", "run", "tiny-cpu", "--agents", "random", "--trials", "2",
                "--seeds", "0,1", "--threads", "1", "--remeasure", "1", "--no-vendor", "--ray"]
        first, second = tmp_path / "a.json", tmp_path / "b.json"
        assert main([*argv, "--out", str(first)]) == 0
        entries = {e.seed: e for _, e in ResultsDoc.load(first).entries()}
        assert sorted(entries) == [0, 1] and not Path(f"{first}.partial.jsonl").exists()
        # a run that failed after seed 0 left it in its journal: the rerun runs only seed 1
        # and a line cut short by a kill mid-write: that run is run again, the rest resumes
        Path(f"{second}.partial.jsonl").write_text(
            json.dumps(_clean(dataclasses.asdict(entries[0]))) + "\n" + '{"agent": "ran')
        assert main([*argv, "--out", str(second)]) == 0
        err = capsys.readouterr().err
        assert "resuming: 1 of 2 runs done earlier" in err
        assert "1 damaged line(s) (first at line 2): those runs are run again" in err
        again = {e.seed: e for _, e in ResultsDoc.load(second).entries()}
        assert again[0].trials == entries[0].trials and len(again[1].trials) == 2
        assert again[1].best is not None and again[1].best.gflops > 0

    def test_a_clusters_own_address_passes_the_handshake_check(self):
        from tensorgym.measure.ray import reachable

        reachable(ray.get_runtime_context().gcs_address, timeout=5.0)  # its GCS answers HTTP/2

    def test_no_matching_device_fails_fast_listing_the_cluster(self):
        with pytest.raises(TensorGymError, match="no cpu device of kind 'cpu/No Such CPU'") as e:
            RayMeasurer("cpu", FAST, device="cpu/No Such CPU")
        m = RayMeasurer("cpu", FAST)
        m.close()
        assert "2 CPUs, 0 GPUs" in str(e.value) and f"[{m.device}]" in str(e.value)


class TestTwoNodes:
    def test_each_device_times_one_kernel_at_a_time(self, cluster):
        configs = space_for(W, "cpu").sample(np.random.default_rng(0), 8)
        m = RayMeasurer("cpu", FAST, address=cluster[0].address)
        try:
            assert len(m.devices) == 2  # one per node, both this machine's CPU
            results = dict(m.measure_iter(W, configs))
            windows = m.runner.timed_windows()
        finally:
            m.close()
        assert sorted(results) == list(range(8))
        assert {r.extra["device"] for r in results.values() if r.ok} <= set(windows)
        assert all(_no_overlap(w) for w in windows.values())
        # both nodes are this machine: its device lock keeps their timers apart too
        assert _no_overlap([w for ws in windows.values() for w in ws])

    def test_killing_a_node_mid_collect_loses_nothing(self, cluster, tmp_path):
        c, worker, seen = cluster
        configs = space_for(W, "cpu").sample(np.random.default_rng(1), 16)
        # no compile cache: builds take long enough that both nodes still have work at the kill
        m = RayMeasurer("cpu", replace(FAST, compile_cache=False))
        records = Records(tmp_path / "records.db")
        got: list[int] = []
        killed = False
        try:
            for i, r in m.measure_iter(W, configs):
                # the caller is the single writer
                records.add_many(Task(W.key, "cpu", m.device), [r])
                got.append(i)
                assert r.ok or r.error != ErrorCode.UNKNOWN_ERROR, r.error_msg
                if not killed:
                    seen |= descendants(os.getpid())  # the processes about to be orphaned
                    c.remove_node(worker, allow_graceful=False)
                    killed = True
        finally:
            m.close()
        assert sorted(got) == list(range(16))  # each config exactly once
        rows = records.query(W.key, "cpu")
        assert sorted(r.config_index for r in rows) == sorted(c.index for c in configs)
        records.close()
