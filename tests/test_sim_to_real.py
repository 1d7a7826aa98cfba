"""benchmarks/bench_sim_to_real.py (issue 33, item 5): Kendall's tau-b on hand-computed cases,
and one replay-then-live run of the tiny-cpu suite on a dataset measured here first."""
import json
import math
import sys
from pathlib import Path

import pytest

from tensorgym.workloads import get_workload

from .conftest import TINY_WORKLOAD, collect_dataset

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
import bench_sim_to_real as sim  # noqa: E402

# (x, y, tau-b by hand)
HAND = [
    ([1, 2, 3, 4], [1, 2, 3, 4], 1.0),
    ([1, 2, 3, 4], [4, 3, 2, 1], -1.0),
    # pairs: (12) C, (13) C, (14) C, (23) D, (24) C, (34) C: C=5, D=1, no ties -> 4/6
    ([1, 2, 3, 4], [1, 3, 2, 4], 4 / 6),
    # x ties pair (12); y has no ties. Untied-in-x pairs: 5 (C=4: 13 14 23 24, D=1: 34);
    # untied-in-y: 6 -> (4 - 1) / sqrt(5 * 6)
    ([1, 1, 2, 3], [1, 2, 4, 3], 3 / math.sqrt(30)),
    # x ties (12), y ties (34): C = 13 14 23 24 = 4, D = 0 -> 4 / sqrt(5 * 5)
    ([1, 1, 2, 3], [1, 2, 3, 3], 4 / 5),
    # a pair tied in both counts in neither factor: (12) tied in x and y; C=2 (13, 23) -> 2/2
    ([1, 1, 2], [5, 5, 9], 1.0),
]


@pytest.mark.parametrize("x, y, expected", HAND)
def test_tau_b_matches_hand_computation(x, y, expected):
    assert sim.tau_b(x, y) == pytest.approx(expected)
    assert sim.kendall_tau(x, y) == pytest.approx(expected)  # scipy's, where installed


@pytest.mark.parametrize("x, y", [([1, 1, 1], [1, 2, 3]), ([2, 3], [5, 5]), ([1], [1])])
def test_tau_is_undefined_for_a_constant_ranking(x, y):
    assert sim.kendall_tau(x, y) is None
    if len(x) > 1:
        assert sim.tau_b(x, y) is None


def test_live_order_rotates_agents_seed_by_seed():
    assert sim.interleaved(["a", "b", "c"], [0, 1, 2, 3]) == [
        ("a", 0), ("b", 0), ("c", 0), ("b", 1), ("c", 1), ("a", 1),
        ("c", 2), ("a", 2), ("b", 2), ("a", 3), ("b", 3), ("c", 3)]


def test_end_to_end_on_tiny_cpu(tmp_path, capsys):
    db = collect_dataset(tmp_path, TINY_WORKLOAD, 8)  # real measurements, 1 thread
    out = tmp_path / "s2r.json"
    argv = ["--suite", "tiny-cpu", "--dataset", db, "--agents", "random,grid", "--seeds", "0",
            "--trials", "4", "--threads", "1", "--remeasure", "1", "--out", str(out),
            "--docs", str(tmp_path / "docs")]
    doc = sim.main(argv)
    assert doc == json.loads(out.read_text())
    (task,) = doc["tasks"]
    assert task["workload"] == get_workload(TINY_WORKLOAD).key
    for a in ("random", "grid"):
        r = task["agents"][a]
        assert set(r["seeds"]["replay_predicted"]) == set(r["seeds"]["live"]) == {"0"}
        assert r["replay_predicted"] > 0 and r["live"] > 0 and r["replay_config_live"] > 0
        assert r["ratio"] > 0 and r["promise"] > 0
    tied = any(len({task["agents"][a][k] for a in ("random", "grid")}) == 1
               for k in ("replay_predicted", "live"))
    assert (task["tau"] is None) == tied  # two agents: +-1 unless one side ties them
    assert task["tau"] is None or -1 <= task["tau"] <= 1
    assert doc["summary"]["median_ratio"] > 0
    replay = json.loads((tmp_path / "docs" / "1-replay.json").read_text())
    live = json.loads((tmp_path / "docs" / "1-live.json").read_text())
    assert replay["runs"][0]["track"] == "replay" and live["runs"][0]["track"] == "live"
    assert {t["source"] for e in live["runs"][0]["entries"] for t in e["trials"]} == {"measured"}
    printed = capsys.readouterr().out
    assert "[1/1]" in printed and "| task | speed | tau |" in printed and "mean tau" in printed
    # resumed: the done task is kept, nothing runs again
    assert sim.main([*argv, "--resume"])["tasks"] == doc["tasks"]
    assert "done earlier" in capsys.readouterr().out
    with pytest.raises(Exception, match="other settings"):
        sim.main([*argv[:-2], "--trials", "5", "--resume"])
    # replay at this machine's speed: the factor read for the task is kept, and a run at the
    # recorded speed does not resume into it
    read = sim.main([*argv[:-2], "--replay-speed", "live", "--out", str(tmp_path / "live.json")])
    (task,) = read["tasks"]
    assert task["speed"]["read"] and task["speed"]["speed"] > 0 and task["speed"]["ratios"]
    assert doc["tasks"][0]["speed"] == {"speed": 1.0, "read": False}
    with pytest.raises(Exception, match="other settings"):
        sim.main([*argv[:-2], "--out", str(tmp_path / "live.json"), "--resume"])
    # the replay side alone, against that run's live side and at its speed
    alone = [*argv[:-2], "--replay-speed", "live", "--on-miss", "nearest",
             "--live-from", str(tmp_path / "live.json")]
    again = sim.main([*alone, "--out", str(tmp_path / "again.json")])
    (t2,) = again["tasks"]
    assert again["settings"]["live_from"] == str((tmp_path / "live.json").resolve())
    assert t2["speed"]["speed"] == task["speed"]["speed"] and t2["speed"]["from"] == "live_from"
    for a in ("random", "grid"):
        assert t2["agents"][a]["seeds"]["live"] == task["agents"][a]["seeds"]["live"]
        assert t2["agents"][a]["ratio"] == pytest.approx(
            t2["agents"][a]["replay_predicted"] / task["agents"][a]["live"])
    with pytest.raises(Exception, match="trials"):
        sim.main([*alone[:alone.index("--trials")], "--trials", "5",
                  *alone[alone.index("--trials") + 2:], "--out", str(tmp_path / "x.json")])


def test_summary_undoes_each_tasks_speed_for_the_ratio_at_recorded_speed():
    def task(speed, ratio):
        return {"tau": 1.0, "speed": {"speed": speed, "read": True},
                "agents": {"a": {"ratio": ratio, "promise": 1.0}}}

    s = sim.summary([task(0.5, 1.0), task(2.0, 1.0), task(1.0, 0.9)])
    assert s["median_ratio"] == 1.0 and s["median_speed"] == 1.0
    assert s["median_ratio_at_recorded_speed"] == pytest.approx(0.9)  # 2.0, 0.5, 0.9
    old = {"tau": 1.0, "agents": {"a": {"ratio": 0.8, "promise": 1.0}}}  # no speed kept
    assert sim.summary([old])["median_ratio_at_recorded_speed"] == 0.8
