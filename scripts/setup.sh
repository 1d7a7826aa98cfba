#!/usr/bin/env bash
# Creates .venv (once) and installs tensorgym with everything the tests need.
# torch is pinned (torch==2.13.0, in pyproject's extras): a bare `torch` pulls a multi-GB CUDA build.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ] || [ "$(.venv/bin/python -c 'import sys; print(sys.prefix != sys.base_prefix)')" != True ]; then
  "$PY" -m venv .venv
fi
stamp=.venv/.tensorgym-installed
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
  .venv/bin/python -m pip install -q --upgrade pip
  .venv/bin/python -m pip install -q -e ".[all]"
  touch "$stamp"
fi
