#!/usr/bin/env bash
# Collects issue 33's corpus dataset: campaigns over the corpus's test and train suites
# (tensorgym dataset collect --suite ... --time-budget ..., docs/dataset.md "Campaigns"), then
# exports the records database as Parquet. Resumable: run it again (on the same machine, or on
# another one: records keep their device) and each campaign goes on where it stopped. It times
# kernels for hours: run it when nothing else is timed on this machine.
#
#   bash scripts/collect_corpus_dataset.sh                       # 25 min test, 95 min train
#   TEST_BUDGET=0 TRAIN_BUDGET=2h bash scripts/collect_corpus_dataset.sh   # train only
#
# Settings (environment): TARGET (cpu), TEST_BUDGET (25m; 0 skips), TRAIN_BUDGET (95m; 0
# skips), CHUNK (32), THREADS (0: all cores), DB (data/corpus-$TARGET.db: the format of truth,
# not committed), OUT (data/corpus-$TARGET-<cpu>.parquet, the committed export; <cpu> is LLVM's
# name of this machine's CPU).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
TARGET=${TARGET:-cpu}
TEST_BUDGET=${TEST_BUDGET:-25m}
TRAIN_BUDGET=${TRAIN_BUDGET:-95m}
CHUNK=${CHUNK:-32}
THREADS=${THREADS:-0}
DB=${DB:-data/corpus-$TARGET.db}
tg=.venv/bin/tensorgym
cpu=$(.venv/bin/python -c "import llvmlite.binding as b; print(b.get_host_cpu_name())")
OUT=${OUT:-data/corpus-$TARGET-$cpu.parquet}
for side in test train; do
  budget=$([ "$side" = test ] && echo "$TEST_BUDGET" || echo "$TRAIN_BUDGET")
  if [ "$budget" != 0 ]; then
    "$tg" dataset collect --suite "corpus-$side-$TARGET" --time-budget "$budget" --db "$DB" \
        --chunk "$CHUNK" --threads "$THREADS"
  fi
done
"$tg" dataset export --db "$DB" --out "$OUT"
"$tg" dataset info "$OUT" | head -3
