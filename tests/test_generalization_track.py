"""The leaderboard's generalization track: live runs scored at each budget k on the best of their
first k trials, re-measured beside the vendor and the reference tuner, with declared training."""
from __future__ import annotations

import json

import pytest

from tensorgym import registry
from tensorgym.cli import main
from tensorgym.errors import TensorGymError
from tensorgym.leaderboard.generalization import (REFERENCE, generalization_rows,
                                                  prefix_best, training_of)
from tensorgym.leaderboard.results import ResultsDoc, ResultsError, one_track
from tensorgym.leaderboard.run import RunOptions, run_suite
from tensorgym.leaderboard.suites import Suite, get_suite

TINY = Suite("tiny", (("conv2d:1,8,10,10,16,3,1,1", "cpu"),), trials=6, seeds=(0,))


@pytest.fixture(scope="module")
def doc():
    return run_suite(TINY, ["random"], RunOptions(track="generalization", ks=(2, 4),
                                                  remeasure=1, threads=1, records=False))


def test_every_run_is_scored_at_each_k_on_its_own_prefix(doc):
    (run,) = doc.runs
    assert run.track == "generalization" and one_track(doc) == "generalization"
    assert run.suite["ks"] == [2, 4, 6] and run.suite["reference"] == REFERENCE
    assert {e.agent for e in run.entries} == {"random", REFERENCE}  # the normaliser ran too
    for e in run.entries:
        assert [p.k for p in e.at_k] == [2, 4, 6] and len(e.trials) == 6
        for p in e.at_k:
            i, g = prefix_best(e, p.k)
            assert p.best.trial == i < p.k and p.best.gflops_search == g
            assert p.best.gflops > 0 and p.best.runtimes  # re-measured, not the search figure
        assert e.best == e.at_k[-1].best
        searched = [p.best.gflops_search for p in e.at_k]
        assert searched == sorted(searched)  # a longer prefix never has a slower best
    assert run.vendor and run.vendor[0].gflops > 0


def test_the_table_normalises_by_the_vendor_and_the_reference_tuner(doc):
    rows = generalization_rows(doc)
    assert {(r.agent, r.k) for r in rows} == {(a, k) for a in ("random", REFERENCE)
                                              for k in (2, 4, 6)}
    for r in rows:
        assert r.tasks == 1 and r.seeds == 1 and r.vs_vendor > 0
        if r.agent == REFERENCE:
            assert r.vs_reference == pytest.approx(1.0)
        assert r.trained_on == "nothing" and r.training_steps is None


def test_the_document_round_trips_and_is_ranked_apart(doc, tmp_path):
    path = doc.save(tmp_path / "gen.json")
    back = ResultsDoc.load(path)
    assert [p.k for p in back.runs[0].entries[0].at_k] == [2, 4, 6]
    mixed = ResultsDoc(back.runs + [dataclass_copy(back.runs[0], track="live")])
    with pytest.raises(ResultsError, match="mixes tracks"):
        one_track(mixed)


def dataclass_copy(run, **changes):
    import dataclasses

    return dataclasses.replace(run, run_id=run.run_id + "-b", **changes)


def test_declared_training_is_reported_and_a_test_split_refused(monkeypatch):
    info = training_of("ppo-pretrained", {})
    assert info["split"] == "train" and info["steps"] > 0 and info["seconds"] > 0
    assert training_of("xgb-pretrained", {"pretrain": False})["split"] == "train"
    assert training_of("random", {}) == {}
    agent = registry.make("ppo-pretrained")
    monkeypatch.setattr(type(agent), "training", property(lambda self: {"split": "test"}))
    with pytest.raises(TensorGymError, match="trained on split 'test'"):
        training_of("ppo-pretrained", {})


def test_the_cli_runs_the_track_and_refuses_what_it_cannot_do(tmp_path, capsys):
    out = tmp_path / "g.json"
    assert main(["leaderboard", "run", "quick-cpu", "--track", "generalization",
                 "--task-sample", "1", "--agents", "random", "--trials", "3", "--ks", "2",
                 "--seeds", "0", "--remeasure", "1", "--threads", "1", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "# Generalization track: quick-cpu[1/3]" in text and "| random | 2 |" in text
    assert json.loads(out.read_text())["runs"][0]["track"] == "generalization"
    assert main(["leaderboard", "run", "quick-cpu", "--track", "generalization", "--replay",
                 "x.parquet", "--out", str(out)]) == 2
    assert "not with --replay" in capsys.readouterr().err


def test_a_suite_sample_spreads_over_the_list():
    suite = get_suite("corpus-test-cpu")
    s = suite.sample(5)
    assert s.name == f"corpus-test-cpu[5/{len(suite.tasks)}]" and len(s.tasks) == 5
    assert s.tasks[0] == suite.tasks[0] and s.tasks[-1] == suite.tasks[-1]
    assert suite.sample(len(suite.tasks) + 3) is suite
    with pytest.raises(TensorGymError):
        suite.sample(0)
