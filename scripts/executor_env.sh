#!/usr/bin/env bash
# The Spark executors' Python environment as one archive (DBLOG_SPARK_EXECUTOR_ENV): a venv with
# requirements-executor.in at requirements.txt's pins, packed by venv-pack. Gzipped, at level 1 (a
# plain tar is unpacked by Spark without its files' modes: the interpreter would not run).
# venv-pack keeps the base interpreter's path: workers need the same Python at the same path (or
# build the environment in the workers' image instead).
#   scripts/executor_env.sh [OUT]   (default .local/cluster/executor-env.tar.gz)
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-.local/cluster/executor-env.tar.gz}
V=.local/cluster/executor-venv
stamp=$(cat requirements-executor.in requirements.txt "$0" | sha256sum | cut -c1-16)
if [ -s "$OUT" ] && [ "$(cat "$OUT.stamp" 2>/dev/null)" = "$stamp" ]; then
  echo "[executor-env] $OUT is up to date"; exit 0
fi
mkdir -p "$(dirname "$OUT")"
rm -rf "$V"
# --copies: the interpreter is a file in the archive, not a link out of it (Spark refuses to unpack one).
"$(.venv/bin/python -c 'import sys; print(sys._base_executable)')" -m venv --copies --without-pip "$V"
uv pip install -q --python "$V/bin/python" -r requirements-executor.in -c requirements.txt
.venv/bin/venv-pack -q -p "$V" -o "$OUT" --force --compress-level 1
echo "$stamp" >"$OUT.stamp"
echo "[executor-env] packed $(du -h "$OUT" | cut -f1) into $OUT"
