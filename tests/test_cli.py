"""The command line: listing, argument errors (one line, non-zero, no traceback), and the
tune / leaderboard / validate commands end to end on a tiny workload with real measurements."""
from __future__ import annotations

import json

import pytest

from tensorgym.cli import main


def run_cli(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_list_everything(capsys):
    code, out, _ = run_cli(capsys, "list")
    assert code == 0
    for text in ("conv2d-C6", "matmul-1024", "targets: cpu, opencl, cuda", "quick-cpu",
                 "resnet18-cpu", "maskable-ppo", "envs ("):
        assert text in out


@pytest.mark.parametrize("argv, message", [
    ([], "required"),
    (["tune"], "required: workload"),
    (["tune", "nosuch-workload"], "unknown workload"),
    (["tune", "matmul:1,2"], "cannot build matmul"),
    (["tune", "matmul:16,16,16", "--trials", "0"], "positive integer"),
    (["tune", "matmul:16,16,16", "--target", "tpu"], "unknown target"),
    (["tune", "matmul:16,16,16", "--agent", "nope"], "unknown agent"),
    (["tune", "matmul:16,16,16", "--opt", "oops"], "key=value"),
    (["leaderboard", "run", "nosuite", "--out", "x.json"], "unknown suite"),
    (["leaderboard", "run", "tiny-cpu"], "required: --out"),
    (["leaderboard", "run", "tiny-cpu", "--agents", "random,nope", "--out", "x.json"],
     "unknown agent"),
    (["leaderboard", "show", "/no/such/file.json"], "cannot read"),
    (["validate", "/no/such/file.json"], "cannot read"),
    (["list", "planets"], "invalid choice"),
    (["tune", "matmul:16,16,16", "--threads", "-1"], "integer >= 0"),
    (["validate", "r.json", "--repeats", "x"], "positive integer"),
])
def test_bad_arguments_give_one_line(capsys, argv, message):
    code, out, err = run_cli(capsys, *argv)
    assert code != 0
    assert message in err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_help_exits_zero(capsys):
    code, out, _ = run_cli(capsys, "tune", "--help")
    assert code == 0 and "--export-source" in out


# ---------------------------------------------------------------- end to end, real measurements

def test_tune_json_db_and_source(capsys, tmp_path):
    db, src = tmp_path / "r.db", tmp_path / "kernel.ll"
    code, out, err = run_cli(capsys, "tune", "matmul:16,16,16", "--trials", "6", "--agent",
                             "random", "--seed", "1", "--db", str(db), "--export-source",
                             str(src), "--json", "--threads", "1")
    assert code == 0, err
    summary = json.loads(out)
    assert summary["trials"] == 6 and summary["failures"] == 0
    assert summary["best_gflops"] > 0 and set(summary["best_config"]["knobs"]) >= {"reorder"}
    assert summary["best_gflops_found"] > 0  # the reported best is the end's re-timing of it
    assert 1 <= summary["best_sets"] <= 3  # its sets of rounds (re-taken where they disagreed)
    assert src.read_text().strip() and "compare" not in summary  # only with --compare
    from tensorgym.records import Records

    assert len(Records(str(db)).query(workload_key="matmul:16,16,16")) == 6  # no extra trials


def test_tune_json_compare_gives_the_side_by_side_figures(capsys, tmp_path):
    """``--json --compare``: the best re-measured beside the starting schedule and the vendor
    library (the text summary's speedups), as figures; ``wall_time`` does not include them."""
    code, out, err = run_cli(capsys, "tune", "matmul:16,16,16", "--trials", "3", "--agent",
                             "grid", "--db", str(tmp_path / "r.db"), "--json", "--compare",
                             "--threads", "1")
    assert code == 0, err
    summary = json.loads(out)
    c = summary["compare"]
    assert c["rounds"] == 3 and c["best_gflops"] > 0 and c["speedup_reference"] > 0
    if c["vendor_skipped"] is None:  # PyTorch installed: timed in the same rounds
        assert c["vendor_library"] and c["vendor_gflops"] > 0
        assert c["speedup_vendor"] == pytest.approx(c["best_gflops"] / c["vendor_gflops"])
    else:
        assert c["vendor_gflops"] is None and c["speedup_vendor"] is None


def test_tune_human_output(capsys, tmp_path):
    code, out, _ = run_cli(capsys, "tune", "matmul:16,16,16", "--trials", "3", "--agent",
                           "grid", "--db", str(tmp_path / "r.db"), "--no-progress")
    assert code == 0 and "best:" in out and "GFLOP/s" in out and "config:" in out


@pytest.mark.parametrize("factors, median, retakes",
                         [((2, 1), False, 0), ((2, 1, 0.5), True, 1)])
def test_tune_says_when_its_best_took_sets_of_rounds_again(capsys, tmp_path, monkeypatch,
                                                           factors, median, retakes):
    """A best whose end-of-tune rounds were taken again (``reconfirm``'s ``sets``) says so, and
    that the median set was reported where the sets never settled, and how many sets were set
    aside because the machine ran slow."""
    from dataclasses import replace

    from tensorgym.session import TuningSession

    reconfirm = TuningSession.reconfirm

    def again(self, *a, **kw):  # no real re-take: a loaded machine may take one
        best = reconfirm(self, *a, **{**kw, "slow_retakes": 0})
        extra = {k: v for k, v in best.extra.items() if k != "slow_retakes"}
        self.best = replace(best, extra={**extra, "sets": len(factors),
                                         "set_gflops": [f * best.gflops for f in factors],
                                         **({"slow_retakes": retakes} if retakes else {})})
        return self.best

    monkeypatch.setattr(TuningSession, "reconfirm", again)
    args = ("tune", "matmul:16,16,16", "--trials", "3", "--agent", "grid", "--no-progress")
    code, out, _ = run_cli(capsys, *args, "--db", str(tmp_path / "a.db"))
    assert code == 0 and f"timed in {len(factors)} sets of rounds (" in out and ", then " in out
    assert ("the median set reported" in out) == median
    assert ("set(s) of rounds taken again, the machine having run slow" in out) == bool(retakes)
    code, out, _ = run_cli(capsys, *args, "--db", str(tmp_path / "b.db"), "--json")
    summary = json.loads(out)
    assert code == 0 and summary["best_sets"] == len(factors)
    assert summary["best_slow_retakes"] == retakes
    assert summary["best_set_gflops"] == pytest.approx(
        [f * summary["best_gflops"] for f in factors])


def test_leaderboard_run_show_validate(capsys, tmp_path):
    results = tmp_path / "results.json"
    code, out, err = run_cli(
        capsys, "leaderboard", "run", "tiny-cpu", "--agents", "random,ga", "--trials", "4",
        "--seeds", "0", "--remeasure", "1", "--threads", "1", "--db", str(tmp_path / "r.db"),
        "--out", str(results), "--csv", str(tmp_path / "t.csv"), "--plots", str(tmp_path))
    assert code == 0, err
    assert "| 1 |" in out and "random" in out and "ga" in out
    doc = json.loads(results.read_text())
    entries = doc["runs"][0]["entries"]
    assert len(entries) == 2 and all(len(e["trials"]) == 4 for e in entries)
    assert all(0 <= e["search_time"] <= e["wall_time"] for e in entries)
    assert all(e["best"]["runtimes"] for e in entries)  # the best was re-measured
    assert doc["runs"][0]["vendor"][0]["gflops"] > 0
    assert list(tmp_path.glob("curves-*.png"))
    assert doc["runs"][0]["device"]["name"].endswith("/1t")

    code, out, _ = run_cli(capsys, "leaderboard", "show", str(results), str(results),
                           "--out", str(tmp_path / "merged.json"))
    assert code == 0 and len(json.loads((tmp_path / "merged.json").read_text())["runs"]) == 1

    # one thread and a loose tolerance: on a shared machine a 2-thread kernel can be many times
    # slower for a while (threads spin at barriers), and the honest claim must not flake
    code, out, err = run_cli(capsys, "validate", str(results), "--repeats", "1",
                             "--tolerance", "0.7", "--threads", "1")
    assert code == 0, out + err
    for e in doc["runs"][0]["entries"]:
        e["best"]["gflops"] *= 10  # a claim no re-measurement can reproduce
        e["best"]["runtimes"] = [t / 10 for t in e["best"]["runtimes"]]  # (consistent with it)
    doctored = tmp_path / "doctored.json"
    doctored.write_text(json.dumps(doc))
    code, out, _ = run_cli(capsys, "validate", str(doctored), "--repeats", "1", "--threads", "1")
    assert code == 1 and out.count("NOT REPRODUCED") == 2


def test_peak_measures_and_keeps_the_best(capsys, tmp_path):
    book = tmp_path / "peak.json"
    assert main(["peak", "--threads", "1", "--book", str(book), "--json"]) == 0
    first = json.loads(capsys.readouterr().out)
    assert first["best_before"] is None and len(first["samples"]) == 5
    assert first["best"] == pytest.approx(max(first["samples"]), abs=0.01) and first["best"] > 0
    assert main(["peak", "--threads", "1", "--book", str(book)]) == 0
    out = capsys.readouterr().out
    assert "FMA peak" in out and "best before" in out and str(book) in out
    assert json.loads(book.read_text())[first["key"]]["gflops"] >= first["best"]
