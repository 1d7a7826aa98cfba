#!/usr/bin/env bash
# Installs (scripts/setup.sh) and runs a short tune of ResNet-18's C6 convolution on this CPU
# with the reference agent, printing the best GFLOP/s and the speedups it found.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/tensorgym tune conv2d-C6 --target cpu --trials "${TRIALS:-96}" --agent xgb --seed 0 "$@"
