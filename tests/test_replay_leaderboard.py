"""The leaderboard's replay track (issue 14, item 6): entries answered from a dataset reproduce
exactly for a seed, the results record the track and the dataset's digest, each best is
re-measured live before it is reported, tables never rank two tracks together, and validation
re-measures a replay entry on this machine."""
import dataclasses
import statistics

import pytest

from tensorgym.leaderboard import tables
from tensorgym.leaderboard.run import RunOptions, run_entry, run_suite
from tensorgym.leaderboard.results import (ResultsDoc, ResultsError, merge, one_track,
                                         split_tracks)
from tensorgym.leaderboard.suites import get_suite
from tensorgym.leaderboard.validate import validate
from tensorgym.cli import main
from tensorgym.dataset import Dataset
from tensorgym.errors import TensorGymError
from tensorgym.workloads import get_workload

SUITE = get_suite("tiny-cpu")  # one matmul:16,16,16 task
WORKLOAD = SUITE.tasks[0][0]


@pytest.fixture(scope="module")
def db(tiny_dataset):
    return tiny_dataset


def replay_options(db, **kw):
    return RunOptions(**{"trials": 6, "seeds": [0], "remeasure": 1, "vendor": False,
                         "threads": 1, "replay": db, **kw})


@pytest.fixture(scope="module")
def board(db):
    return run_suite(SUITE, ["random", "ga"], replay_options(db, seeds=[0, 1]))


def entry_on_replay(db, agent, seed, on_miss="surrogate"):
    opts = dataclasses.replace(replay_options(db), remeasure=0, records=False, session_options={
        "measure": "replay", "dataset": db, "on_miss": on_miss, "num_threads": 1})
    return run_entry(agent, WORKLOAD, "cpu", seed, 6, opts)


@pytest.mark.parametrize("agent", ["random", "ga", "xgb"])
def test_replay_entries_reproduce_for_a_seed(db, agent):
    a, b = entry_on_replay(db, agent, 3), entry_on_replay(db, agent, 3)
    assert [dataclasses.asdict(t) for t in a.trials] == [dataclasses.asdict(t) for t in b.trials]
    assert len(a.trials) == 6
    assert {t.source for t in a.trials} <= {"recorded", "surrogate"}
    assert a.build_time == a.measure_time == 0.0  # nothing was built or timed


def test_nearest_answers_with_recorded_samples(db):
    e = entry_on_replay(db, "random", 0, on_miss="nearest")
    recorded = {c for r in Dataset.load(db).records for c in r.costs}
    assert all(set(t.runtimes) <= recorded for t in e.trials if t.ok)


def test_replay_run_records_track_digest_sources_and_live_bests(board, db, tmp_path):
    (run,) = board.runs
    assert run.track == "replay"
    assert run.dataset["digest"] == Dataset.load(db).digest
    assert run.dataset["on_miss"] == "surrogate" and run.dataset["device"].endswith("/1t")
    assert len(run.entries) == 4
    flops = get_workload(WORKLOAD).flops
    for e in run.entries:
        assert sum(e.sources().values()) == len(e.trials) == 6
        # the reported figure is the live re-measurement, not a replayed answer
        assert e.best.runtimes and e.best.runtimes != e.trials[e.best.trial].runtimes
        assert e.best.gflops == pytest.approx(flops / statistics.median(e.best.runtimes) / 1e9)
    back = ResultsDoc.load(board.save(tmp_path / "r.json"))
    assert back.runs[0].track == "replay" and back.runs[0].dataset == run.dataset
    assert [t.source for t in back.runs[0].entries[0].trials] == \
        [t.source for t in run.entries[0].trials]


def test_rankings_never_mix_tracks(board, tmp_path):
    live = dataclasses.replace(board.runs[0], run_id="live-copy", track="live", dataset={})
    mixed = merge([board, ResultsDoc([live])])
    with pytest.raises(ResultsError, match="mixes tracks"):
        one_track(mixed)
    with pytest.raises(ResultsError, match="mixes tracks"):
        tables.markdown(mixed)
    assert list(split_tracks(mixed)) == ["live", "replay"]
    a, b = board.save(tmp_path / "replay.json"), ResultsDoc([live]).save(tmp_path / "live.json")
    assert main(["leaderboard", "show", str(a), str(b), "--md", str(tmp_path / "t.md")]) == 0
    text = (tmp_path / "t.md").read_text()
    assert text.count("## Leaderboard") == 2 and "# Replay track" in text
    assert text.index("# Replay track") > text.index("## Leaderboard")  # live first, apart
    assert main(["leaderboard", "show", str(a), str(b), "--csv", str(tmp_path / "t.csv")]) != 0


def test_validate_remeasures_a_replay_entry_live(board):
    doc = ResultsDoc([dataclasses.replace(board.runs[0], entries=board.runs[0].entries[:1])])
    (check,) = validate(doc, repeats=1, attempts=1, threads=1)
    e = doc.runs[0].entries[0]
    assert check.claimed_gflops == e.best.gflops  # never the replayed search figure
    assert check.measured_gflops > 0 and check.status in ("ok", "NOT REPRODUCED")


def test_old_documents_read_as_live_and_bad_tracks_are_refused(board):
    obj = board.to_json()
    run = obj["runs"][0]
    old = {k: v for k, v in run.items() if k not in ("track", "dataset")}
    assert ResultsDoc.from_json({**obj, "runs": [old]}).runs[0].track == "live"
    with pytest.raises(ResultsError, match="track"):
        ResultsDoc.from_json({**obj, "runs": [{**run, "track": "dream"}]})
    with pytest.raises(ResultsError, match="digest"):
        ResultsDoc.from_json({**obj, "runs": [{**run, "dataset": {}}]})


def test_replay_run_refuses_what_it_cannot_do_honestly(db):
    with pytest.raises(TensorGymError, match="on_miss"):
        run_suite(SUITE, ["random"], replay_options(db, on_miss="measure"))
    with pytest.raises(TensorGymError, match="remeasure"):
        run_suite(SUITE, ["random"], replay_options(db, remeasure=0))
    with pytest.raises(TensorGymError, match="recorded on"):  # another thread count: another device
        run_suite(SUITE, ["random"], replay_options(db, threads=2))
    with pytest.raises(TensorGymError, match="no records"):
        run_suite(get_suite("quick-cpu"), ["random"], replay_options(db, on_miss="nearest"))
