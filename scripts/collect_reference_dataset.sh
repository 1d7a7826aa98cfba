#!/usr/bin/env bash
# Collects the reference dataset of issue 14 into data/ and exports it as Parquet:
# ResNet-18's C1..C12 and matmul-1024 on the CPU target, CONFIGS random configs each (plus the
# reference schedule) and the configs a TRIALS-trial tune of the reference agent (xgb) visits.
# Resumable: run it again after an interruption and it measures only what is missing. It
# measures for hours on a small machine: run it when nothing else is timed on this machine.
#
#   bash scripts/collect_reference_dataset.sh                        # the whole dataset
#   CONFIGS=20 TRIALS=0 WORKLOADS=conv2d-C6 bash scripts/collect_reference_dataset.sh  # a try
#
# Settings (environment): CONFIGS (1000), TRIALS (256; 0 skips the agent), WORKLOADS (all 13),
# THREADS (0: all cores), SEED (0), DB (data/reference.db, the records database: the format of
# truth, not committed) and OUT (data/reference.parquet, the export that is committed).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
CONFIGS=${CONFIGS:-1000}
TRIALS=${TRIALS:-256}
THREADS=${THREADS:-0}
SEED=${SEED:-0}
DB=${DB:-data/reference.db}
OUT=${OUT:-data/reference.parquet}
WORKLOADS=${WORKLOADS:-"conv2d-C1 conv2d-C2 conv2d-C3 conv2d-C4 conv2d-C5 conv2d-C6 conv2d-C7 \
conv2d-C8 conv2d-C9 conv2d-C10 conv2d-C11 conv2d-C12 matmul-1024"}
tg=.venv/bin/tensorgym
read -r -a workloads <<< "$WORKLOADS"
start=$(date +%s)
"$tg" dataset collect "${workloads[@]}" --target cpu --configs "$CONFIGS" --strategy random \
    --db "$DB" --threads "$THREADS" --seed "$SEED"
if [ "$TRIALS" -gt 0 ]; then
  "$tg" dataset collect "${workloads[@]}" --target cpu --configs "$TRIALS" --strategy agent \
      --agent xgb --db "$DB" --threads "$THREADS" --seed "$SEED"
fi
"$tg" dataset export --db "$DB" --out "$OUT"
"$tg" dataset info "$OUT"
echo "collected in $(( $(date +%s) - start ))s; $(du -h "$OUT" | cut -f1) in $OUT"
