"""``tensorgym validate`` and ``leaderboard show`` against doctored results files: one genuine run
of a tiny matmul (real measurements, one thread), then copies of it with one thing changed, each
checked through the command line."""
from __future__ import annotations

import copy
import csv
import json
from pathlib import Path
from typing import Any, Callable

import pytest

from tensorgym.cli import main

FAKE_DEVICE = "cpu/fake/Faster CPU/1t"
# a 16^3 matmul's genuine figure varies by 2x either way, so a genuine best taken in a slow phase
# can re-measure 2x faster: a 4x forgery once passed at tolerance 0.5 in CI. 10x cannot.
FORGERY = 10.0


def cli(capsys, *argv: str) -> tuple[int, str]:
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out + err


@pytest.fixture(scope="module")
def genuine(tmp_path_factory) -> tuple[Path, dict]:
    d = tmp_path_factory.mktemp("genuine")
    path = d / "genuine.json"
    code = main(["leaderboard", "run", "tiny-cpu", "--agents", "random", "--trials", "6",
                 "--seeds", "0", "--threads", "1", "--remeasure", "2", "--no-vendor",
                 "--db", str(d / "r.db"), "--out", str(path)])
    assert code == 0
    return path, json.loads(path.read_text())


def doctor(genuine: tuple[Path, dict], tmp_path: Path,
           change: Callable[[dict, dict], Any], name: str = "doctored") -> Path:
    """A copy of the genuine document whose first run and entry went through ``change``."""
    doc = copy.deepcopy(genuine[1])
    run = doc["runs"][0]
    run["run_id"] += "-" + name
    change(run, run["entries"][0])
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps(doc))
    return path


def validate(capsys, path: Path, *extra: str) -> tuple[int, str]:
    # a 16^3 matmul runs for half a microsecond: in a slow phase of a shared VM it re-measures
    # up to 2x slower, for seconds. Tolerance 0.5 still tells every FORGERY from the genuine.
    return cli(capsys, "validate", path, "--threads", "1", "--repeats", "1", "--attempts", "4",
               "--tolerance", "0.5", *extra)


def test_genuine_run_validates_and_show_marks_it(capsys, genuine, tmp_path):
    report = tmp_path / "v.json"
    code, out = validate(capsys, genuine[0], "--out", report)
    assert code == 0, out
    assert "| ok |" in out and "1 of 1 entries reproduced" in out
    verdicts = json.loads(report.read_text())["checks"]
    assert [c["status"] for c in verdicts] == ["ok"] and verdicts[0]["measured_gflops"] > 0

    code, out = cli(capsys, "leaderboard", "show", genuine[0])
    assert code == 0 and "| random | 1 | 0/1 * |" in out  # a claim until validated
    code, out = cli(capsys, "leaderboard", "show", genuine[0], "--validation", report)
    assert code == 0 and "| random | 1 | 1/1 |" in out
    csv_path = tmp_path / "t.csv"
    cli(capsys, "leaderboard", "show", genuine[0], "--validation", report, "--csv", csv_path)
    (row,) = csv.DictReader(csv_path.read_text().splitlines())
    assert row["validated"] == "1" and row["agent"] == "random"


def _scale_best(run: dict, e: dict, k: float = 2.0, runtimes: bool = True) -> None:
    e["best"]["gflops"] *= k
    if runtimes:
        e["best"]["runtimes"] = [t / k for t in e["best"]["runtimes"]]


def _scale_trials(run: dict, e: dict, k: float = 2.0) -> None:
    for t in e["trials"]:
        t["gflops"] *= k
        t["runtimes"] = [x / k for x in t["runtimes"]]
    e["best"]["gflops_search"] *= k


def _set(path: str, value: Any) -> Callable[[dict, dict], None]:
    def change(run: dict, e: dict) -> None:
        *keys, last = path.split(".")
        obj: Any = e
        for k in keys:
            obj = obj[int(k)] if k.isdigit() else obj[k]
        obj[last] = value
    return change


def _delete(key: str) -> Callable[[dict, dict], None]:
    return lambda run, e: e.pop(key)


def _foreign(run: dict, e: dict) -> None:
    run["device"]["name"] = FAKE_DEVICE


DOCTORED = {
    # GFLOP/s consistent with doctored runtimes: only a re-measurement can tell
    "inflated best": (lambda r, e: _scale_best(r, e, FORGERY), "NOT REPRODUCED"),
    "inflated trials": (lambda r, e: (_scale_trials(r, e, FORGERY), _scale_best(r, e, FORGERY)),
                        "NOT REPRODUCED"),
    # numbers that do not follow from their own runtimes
    "inflated best figure": (lambda r, e: _scale_best(r, e, runtimes=False),
                             "invalid (best.gflops"),
    "inflated trial figures": (lambda r, e: [t.update(gflops=2 * t["gflops"])
                                             for t in e["trials"]], "runtimes give"),
    "null best, trials doubled": (lambda r, e: (e.update(best=None),
                                                [t.update(gflops=2 * t["gflops"])
                                                 for t in e["trials"]]), "runtimes give"),
    "null best": (_set("best", None), "invalid (no best, but 6 valid trials)"),
    "best points nowhere": (_set("best.trial", 99), "invalid (best.trial 99"),
    "inflated best, foreign device": (lambda r, e: (_scale_best(r, e, runtimes=False),
                                                    _foreign(r, e)), "invalid (best.gflops"),
    "foreign device": (_foreign, f"skipped (measured on {FAKE_DEVICE}"),
    "wrong type: seed": (_set("seed", "0"), "seed: expected int, got str"),
    "wrong type: runtimes": (_set("trials.0.runtimes", "fast"), "expected list, got str"),
    "wrong type: best": (_set("best", [1, 2]), "best: expected an object"),
    "missing field": (_delete("flops"), "missing field 'flops'"),
    "missing trials": (_delete("trials"), "missing field 'trials'"),
    "unknown workload": (_set("workload", "matmul:16,16"), "cannot build matmul"),
    "config not in the space": (_set("trials.0.config.knobs.tile_i", [99, 1, 1]),
                                "config not in matmul/cpu"),
    "label of another workload": (_set("label", "conv2d-C6"),
                                  "labelled 'conv2d-C6': matmul:16,16,16 is unnamed"),
    "infinite GFLOP/s": (_set("trials.0.gflops", float("inf")), "trial 0: inf GFLOP/s"),
    "flops inflated": (_set("flops", 2 * 16 ** 3 * 2), "flops 16384, but matmul:16,16,16 has"),
    "over budget": (_set("budget", 3), "6 trials for a budget of 3"),
}


@pytest.mark.parametrize("name", DOCTORED)
def test_doctored_file_is_flagged(capsys, genuine, tmp_path, name):
    change, verdict = DOCTORED[name]
    code, out = validate(capsys, doctor(genuine, tmp_path, change))
    assert code == 1, out
    assert verdict in out, out
    assert "| ok |" not in out and "Traceback" not in out


def test_foreign_device_passes_only_with_allow_skip(capsys, genuine, tmp_path):
    path = doctor(genuine, tmp_path, _foreign)
    code, out = validate(capsys, path, "--allow-skip")
    assert code == 0 and "1 not checked" in out
    code, out = validate(capsys, path, "--any-device")  # measured for reference, not a pass
    assert code == 1 and "re-measured here for reference only" in out


def test_thread_count_comes_from_this_machine(capsys, genuine):
    # the file says 1 thread; measuring with 2 is another device, and the file never decides
    code, out = cli(capsys, "validate", genuine[0], "--threads", "2", "--repeats", "1")
    assert code == 1 and "skipped" in out and "rerun with --threads 1" in out


def test_one_bad_entry_is_reported_not_fatal(capsys, genuine, tmp_path):
    def add_bad_entries(run: dict, e: dict) -> None:
        good = copy.deepcopy(e)
        broken = copy.deepcopy(e)
        broken["trials"][0]["gflops"] = "33.9"
        unknown = copy.deepcopy(e)
        unknown["workload"] = "nosuch-workload"
        run["entries"] += [broken, unknown, good]

    code, out = validate(capsys, doctor(genuine, tmp_path, add_bad_entries))
    assert code == 1
    assert out.count("| ok |") == 2 and out.count("invalid (") == 2
    assert "unknown workload 'nosuch-workload'" in out and "4 entries" in out


def test_show_ranks_no_doctored_claim_above_the_genuine(capsys, genuine, tmp_path):
    def cheater(run: dict, e: dict) -> None:
        e["agent"] = "cheater"
        _scale_trials(run, e, FORGERY)
        _scale_best(run, e, FORGERY)

    consistent = doctor(genuine, tmp_path, cheater, "consistent")
    sloppy = doctor(genuine, tmp_path, lambda r, e: (
        e.update(agent="sloppy", best=None),
        [t.update(gflops=2 * t["gflops"]) for t in e["trials"]]), "sloppy")
    # without a validation report the consistent forgery is ranked, but marked as a claim;
    # the inconsistent one is not ranked at all
    code, out = cli(capsys, "leaderboard", "show", genuine[0], consistent, sloppy)
    assert code == 0
    assert "| cheater | 1 | 0/1 * |" in out and "| random | 1 | 0/1 * |" in out
    ranked, _, not_ranked = out.partition("## Not ranked")
    assert "sloppy" not in ranked and "sloppy seed 0" in not_ranked
    assert "runtimes give" in not_ranked

    report = tmp_path / "v.json"
    code, _ = validate(capsys, tmp_path / "consistent.json", "--out", report)
    assert code == 1
    code, out = cli(capsys, "leaderboard", "show", genuine[0], consistent, "--validation",
                    report)
    ranked, _, not_ranked = out.partition("## Not ranked")
    assert "cheater" not in ranked and "validation: NOT REPRODUCED" in not_ranked
    assert "| 1 | random | 1 | 0/1 * |" in ranked

    code, out = cli(capsys, "leaderboard", "show", genuine[0], consistent, "--validated-only")
    assert code == 0 and out.startswith("(no results)") and "not validated" in out


def test_a_validation_applies_only_to_the_content_it_checked(capsys, genuine, tmp_path):
    report = tmp_path / "v.json"
    assert validate(capsys, genuine[0], "--out", report)[0] == 0
    # the same run, edited after validation: the verdict no longer matches it
    doc = copy.deepcopy(genuine[1])
    doc["runs"][0]["entries"][0]["wall_time"] = 0.001
    edited = tmp_path / "edited.json"
    edited.write_text(json.dumps(doc))
    code, out = cli(capsys, "leaderboard", "show", edited, "--validation", report)
    assert code == 0 and "| random | 1 | 0/1 * |" in out


def test_not_a_validation_report(capsys, genuine):
    code, out = cli(capsys, "leaderboard", "show", genuine[0], "--validation", genuine[0])
    assert code == 1 and "malformed validation report" in out


def test_a_results_file_past_the_size_bound_is_refused_before_it_is_read(tmp_path, monkeypatch,
                                                                          capsys):
    """A 10^6-trial results file (452 MB) took 213 s and 4.9 GB to show: past MAX_FILE_BYTES a
    results file or report is one line of error, read no further."""
    from tensorgym.cli import main
    from tensorgym.leaderboard import results

    (tmp_path / "deep.json").write_text("[" * 100000 + "]" * 100000)
    assert main(["leaderboard", "show", str(tmp_path / "deep.json")]) == 1
    assert "is not JSON" in capsys.readouterr().err
    big = tmp_path / "big.json"
    big.write_text('{"schema": "x", "runs": []}' + " " * 2000)
    monkeypatch.setattr(results.read_bounded, "__defaults__", (1000,))
    for argv in (["leaderboard", "show", str(big)], ["validate", str(big)]):
        assert main(argv) == 1
        assert "is 2,027 bytes, over the 1,000 bytes a results file" in capsys.readouterr().err
