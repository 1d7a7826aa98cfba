"""What ``leaderboard show`` leaves out, and read commands on a path that does not exist (issue
38): a malformed check of a validation report is a "Not ranked" row naming the report and the
check; a cell of that table is cut, so a 5,000-digit workload key cannot flood the board; a read
command on a missing path says so and creates nothing."""
from __future__ import annotations

import copy
import json

import gymnasium as gym
import pytest

import tensorgym  # noqa: F401  (registers the envs)
from .cli_run import cli
from tensorgym.errors import TensorGymError
from tensorgym.leaderboard.tables import MAX_CELL


@pytest.fixture(scope="module")
def results(tmp_path_factory) -> tuple[dict, dict]:
    """A real results document (2 trials of ``tiny-cpu``) and its validation report."""
    d = tmp_path_factory.mktemp("board")
    rc, _, err = cli(["leaderboard", "run", "tiny-cpu", "--agents", "random", "--trials", "2",
                      "--seeds", "0", "--remeasure", "0", "--no-vendor",
                      "--out", str(d / "r.json"), "--db", str(d / "r.db")])
    assert rc == 0, err
    doc = json.loads((d / "r.json").read_text())
    doc["runs"][0]["device"]["name"] = "cpu/nosuchcpu/Left Out Test CPU/2t"  # checked statically
    (d / "r.json").write_text(json.dumps(doc))
    rc, _, err = cli(["validate", str(d / "r.json"), "--allow-skip", "--out", str(d / "v.json")])
    assert rc == 0, err
    return doc, json.loads((d / "v.json").read_text())


def test_a_malformed_report_check_is_a_not_ranked_row(results, tmp_path):
    doc, report = results
    report = copy.deepcopy(report)
    report["checks"].append(dict(report["checks"][0], digest=["not", "a", "digest"]))
    (tmp_path / "r.json").write_text(json.dumps(doc))
    (tmp_path / "v.json").write_text(json.dumps(report))
    rc, out, err = cli(["leaderboard", "show", str(tmp_path / "r.json"),
                        "--validation", str(tmp_path / "v.json")])
    assert rc == 0, err
    bad = len(report["checks"]) - 1
    row = next(line for line in out.splitlines() if f"checks[{bad}]" in line)
    assert "## Not ranked" in out and "v.json" in row and "digest" in row
    assert "matmul:16,16,16" in out.split("## Not ranked")[0]  # the entry is still ranked


def test_a_huge_workload_key_is_cut_in_the_not_ranked_table(results, tmp_path):
    doc = copy.deepcopy(results[0])
    doc["runs"][0]["entries"][0]["workload"] = "matmul:" + "9" * 5000
    (tmp_path / "r.json").write_text(json.dumps(doc))
    rc, out, err = cli(["leaderboard", "show", str(tmp_path / "r.json")])
    assert rc == 0, err
    rows = out.split("## Not ranked")[1].splitlines()
    assert any("characters)" in r for r in rows)
    assert max(len(r) for r in rows) <= 2 * (MAX_CELL + 40)


@pytest.mark.parametrize("argv", [
    ["dataset", "info", "{path}"], ["dataset", "export", "--db", "{path}", "--out", "{out}"],
    ["leaderboard", "run", "tiny-cpu", "--replay", "{path}", "--out", "{out}"],
    ["leaderboard", "show", "{path}"], ["validate", "{path}"]])
def test_a_read_command_on_a_missing_path_creates_nothing(argv, tmp_path):
    path, out = tmp_path / "missing.db", tmp_path / "out.jsonl"
    rc, _, err = cli([a.format(path=path, out=out) for a in argv])
    assert rc != 0 and "error:" in err and "unexpected" not in err
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_a_replay_env_on_a_missing_dataset_creates_nothing(tmp_path):
    path = tmp_path / "missing.db"
    with pytest.raises(TensorGymError, match="no dataset"):
        gym.make("TensorSched-v0", workload="matmul:16,16,16", target="cpu", measure="replay",
                 dataset=str(path))
    assert list(tmp_path.iterdir()) == []
