"""Results documents (schema round-trip, typed reading, merge), the tables and plots built from
them, and the static checks of validation (re-measurement: tests/test_validate.py)."""
from __future__ import annotations

import json

import numpy as np
import pytest

from tensorgym import registry
from tensorgym.leaderboard.metrics import best_so_far, geomean, normalized_auc, trials_to_reach
from tensorgym.leaderboard.results import (Best, Entry, Malformed, ResultsDoc, ResultsError, Run,
                                         Trial, VendorResult, entry_digest, merge)
from tensorgym.leaderboard.suites import SUITES, get_suite
from tensorgym.leaderboard import tables
from tensorgym.leaderboard.validate import problems, screen
from tensorgym.errors import TensorGymError
from tensorgym.search import tune
from tensorgym.templates import space_for
from tensorgym.workloads import WORKLOADS, get_workload
from tests.test_baselines import SyntheticEnv

WORKLOAD = "matmul:16,16,16"


def synthetic_run(agents=("random", "ga"), seeds=(0, 1), device="cpu/test/1t", run_id=None,
                  trials=24) -> Run:
    w = get_workload(WORKLOAD)
    run = Run(run_id or f"run-{device}", "2026-01-01T00:00:00+00:00", {"name": device},
              {"python": "3"}, {"name": "synthetic"}, list(seeds),
              vendor=[VendorResult(w.key, "cpu", "torch", 2.0, [1e-3])])
    for agent in agents:
        for seed in seeds:
            history = tune(SyntheticEnv(space_for(w, "cpu"), flops=w.flops), registry.make(agent),
                           trials, seed)
            e = Entry(agent, w.key, "cpu", seed, trials, w.flops, 1.0, 0.2, 0.3, 0.5,
                      [Trial.from_result(r) for r in history])
            i = max(range(len(history)), key=lambda k: history[k].gflops)
            e.best = Best(e.trials[i].config, i, history[i].gflops, history[i].gflops,
                          list(history[i].costs))
            run.entries.append(e)
    return run


def test_metrics():
    assert best_so_far([1, 3, 2, 5]).tolist() == [1, 3, 3, 5]
    assert trials_to_reach([1, 3, 3, 5], 3) == 2
    assert trials_to_reach([1, 3], 4) is None
    assert normalized_auc([5, 5], 5) == 1.0
    assert normalized_auc([1, 2], 4, budget=4) == pytest.approx((1 + 2 + 2 + 2) / 16)
    assert geomean([2, 8]) == pytest.approx(4)


def test_schema_round_trip(tmp_path):
    doc = ResultsDoc([synthetic_run()])
    path = doc.save(tmp_path / "r.json")
    obj = json.loads(path.read_text())
    assert obj["schema"] == "tensorgym-results" and obj["schema_version"].startswith("1.")
    trial = obj["runs"][0]["entries"][0]["trials"][0]
    assert {"config", "runtimes", "compile_time", "error", "invalidity"} <= set(trial)
    again = ResultsDoc.load(path)
    assert again == doc
    assert again.runs[0].entries[0].curve() == doc.runs[0].entries[0].curve()


def test_failed_trials_survive_round_trip(tmp_path):
    w = get_workload(WORKLOAD)
    history = tune(SyntheticEnv(space_for(w, "cpu"), fail_every=2), registry.make("random"), 10)
    trials = [Trial.from_result(r) for r in history]
    bad = [t for t in trials if not t.ok]
    assert bad and all(t.invalidity == "runtime" and t.error == "RUNTIME_DEVICE" for t in bad)
    run = Run("x", "t", {"name": "d"}, {}, {}, [0],
              [Entry("random", w.key, "cpu", 0, 10, w.flops, 1, 0, 0, 1, trials)])
    assert ResultsDoc.load(ResultsDoc([run]).save(tmp_path / "f.json")) == ResultsDoc([run])


def test_bad_documents_are_rejected(tmp_path):
    p = tmp_path / "bad.json"
    p.write_text("{not json")
    with pytest.raises(ResultsError, match="not JSON"):
        ResultsDoc.load(p)
    p.write_text(json.dumps({"schema": "other"}))
    with pytest.raises(ResultsError, match="not a tensorgym-results"):
        ResultsDoc.load(p)
    p.write_text(json.dumps({"schema": "tensorgym-results", "schema_version": "9.0", "runs": []}))
    with pytest.raises(ResultsError, match="not supported"):
        ResultsDoc.load(p)
    p.write_text(json.dumps({"schema": "tensorgym-results", "schema_version": "1.0",
                             "runs": [{"run_id": "x"}]}))
    with pytest.raises(ResultsError, match="malformed"):
        ResultsDoc.load(p)


def test_merge_joins_machines_and_dedups_runs():
    a, b = synthetic_run(device="cpu/a/1t"), synthetic_run(device="cpu/b/2t", agents=("grid",))
    merged = merge([ResultsDoc([a]), ResultsDoc([b, a])])
    assert [r.run_id for r in merged.runs] == [a.run_id, b.run_id]
    rows = tables.task_rows(merged)
    assert {(r.device, r.agent) for r in rows} == {
        ("cpu/a/1t", "random"), ("cpu/a/1t", "ga"), ("cpu/b/2t", "grid")}


def test_tables_rank_and_aggregate():
    doc = ResultsDoc([synthetic_run(trials=120)])
    rows = tables.task_rows(doc)
    assert len(rows) == 2 and all(r.seeds == 2 and r.budget == 120 for r in rows)
    assert all(0 < r.frac_of_best <= 1.0 for r in rows)
    for r in rows:
        assert r.speedup_vs_vendor == pytest.approx(r.best_gflops / 2.0)
        assert 0 < r.auc <= 1
    ranked = tables.agent_rows(rows)
    assert [a.rank for a in ranked] == [1, 2]
    assert ranked[0].geomean_frac_of_best >= ranked[1].geomean_frac_of_best
    md = tables.markdown(doc)
    assert "| 1 |" in md and "matmul:16,16,16@cpu" in md
    csv_lines = tables.csv_text(doc).strip().splitlines()
    assert csv_lines[0].startswith("task,device,agent") and len(csv_lines) == 3


def test_plots_write_pngs(tmp_path):
    paths = __import__("tensorgym.leaderboard.plots", fromlist=["x"]).plot_results(
        ResultsDoc([synthetic_run()]), tmp_path)
    assert len(paths) == 1 and paths[0].read_bytes()[:4] == b"\x89PNG"


def test_plot_curves_of_uneven_runs(tmp_path):
    from tensorgym.leaderboard.plots import plot_curves

    path = plot_curves({"w1": {"m": [[1, 2, 3], [1, 2]]}, "w2": {"m": [np.ones(4)]}},
                       tmp_path / "sub" / "c.png", "t", center="mean")
    assert path.stat().st_size > 1000


def test_static_checks_accept_consistent_entries_and_flag_doctored_ones():
    run = synthetic_run(agents=("random",), seeds=(0,))
    entry = run.entries[0]
    assert problems(entry) == []
    entry.trials[3].gflops *= 2
    assert problems(entry)[0] == (f"trial 3: {entry.trials[3].gflops:.4g} GFLOP/s, its "
                                  f"runtimes give {entry.trials[3].gflops / 2:.4g}")
    entry.trials[3].gflops /= 2
    entry.best.gflops *= 3
    assert [p.split(",")[0] for p in problems(entry)] == [f"best.gflops {entry.best.gflops:.4g}"]


def test_typed_loading_names_the_bad_field(tmp_path):
    doc = ResultsDoc([synthetic_run(agents=("random",), seeds=(0, 1))]).to_json()
    doc["runs"][0]["entries"][1]["trials"][2]["runtimes"] = ["0.001"]
    p = tmp_path / "r.json"
    p.write_text(json.dumps(doc))
    with pytest.raises(ResultsError, match=r"entries\[1\]\.trials\[2\]\.runtimes\[0\]: "
                                           "expected float, got str"):
        ResultsDoc.load(p)
    malformed = []
    loaded = ResultsDoc.load(p, malformed)  # the rest of the document is still read
    assert len(loaded.runs[0].entries) == 1 and loaded.runs[0].entries[0].seed == 0
    assert [(m.where, m.agent, m.seed) for m in malformed] == [
        ("runs[0].entries[1]", "random", "1")]


def test_tables_mark_validated_entries():
    run = synthetic_run(agents=("random",), seeds=(0, 1))
    doc = ResultsDoc([run])
    assert tables.task_rows(doc)[0].validated == 0
    digest = entry_digest(run, run.entries[0])
    assert tables.task_rows(doc, {digest})[0].validated == 1
    assert "| 1 | random | 1 | 1/2 * |" in tables.markdown(doc, {digest})
    board = screen(doc, malformed=[Malformed("runs[1]", "r", "?", "?", "missing field 'x'")])
    assert board.rejected == [("runs[1] of run r", "missing field 'x'")]
    assert "## Not ranked" in tables.markdown(board.doc, board.validated, board.rejected)


def test_suites():
    assert [w for w, _ in get_suite("resnet18-cpu").tasks] == [f"conv2d-C{i}" for i in range(1, 13)]
    assert all(w in WORKLOADS for w, _ in get_suite("resnet18-cuda").tasks)
    for name in ("quick-cpu", "quick-opencl", "quick-cuda", "tiny-cpu"):
        s = SUITES[name]
        assert s.trials > 0 and s.seeds
        for w, t in s.tasks:
            get_workload(w)
            assert t == name.split("-")[1]
    with pytest.raises(TensorGymError, match="unknown suite"):
        get_suite("nope")
