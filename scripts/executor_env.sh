#!/usr/bin/env bash
# The Spark executors' Python environment as one archive (DBLOG_SPARK_EXECUTOR_ENV): a venv with
# requirements-executor.in at requirements.txt's pins, packed by venv-pack. An uncompressed tar:
# packing and unpacking cost seconds, not a minute (on a real cluster, compress it: `-o env.tar.gz`).
# venv-pack keeps the base interpreter's path: workers need the same Python at the same path (or
# build the environment in the workers' image instead).
#   scripts/executor_env.sh [OUT]   (default .local/cluster/executor-env.tar)
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-.local/cluster/executor-env.tar}
V=.local/cluster/executor-venv
stamp=$(cat requirements-executor.in requirements.txt | sha256sum | cut -c1-16)
if [ -s "$OUT" ] && [ "$(cat "$OUT.stamp" 2>/dev/null)" = "$stamp" ]; then
  echo "[executor-env] $OUT is up to date"; exit 0
fi
mkdir -p "$(dirname "$OUT")"
rm -rf "$V"
uv venv -q --python "$(.venv/bin/python -c 'import sys; print(sys._base_executable)')" "$V"
uv pip install -q --python "$V/bin/python" -r requirements-executor.in -c requirements.txt
.venv/bin/venv-pack -q -p "$V" -o "$OUT" --force
echo "$stamp" >"$OUT.stamp"
echo "[executor-env] packed $(du -h "$OUT" | cut -f1) into $OUT"
