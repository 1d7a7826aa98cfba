"""Run the ``tensorgym`` command in-process and capture what it says."""
from __future__ import annotations

import io
import warnings
from contextlib import redirect_stderr, redirect_stdout

from tensorgym.cli import main


def cli(argv: list[str]) -> tuple[int, str, str]:
    """(exit code, stdout, stderr) of ``tensorgym *argv``, warnings silenced."""
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        rc = main(argv)
    return rc, out.getvalue(), err.getvalue()
