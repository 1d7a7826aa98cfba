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
])
def test_bad_arguments_give_one_line(capsys, argv, message):
    code, out, err = run_cli(capsys, *argv)
    assert code != 0
    assert message in err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_help_exits_zero(capsys):
    code, out, _ = run_cli(capsys, "tune", "--help")
    assert code == 0 and "--export-source" in out
