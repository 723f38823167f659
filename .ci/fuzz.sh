#!/usr/bin/env bash
# CI step: builds every libFuzzer harness (tests/fuzz/fuzz_*.c, clang) and runs
# each for FUZZ_SECONDS (default 30).  Fails when a harness finds a crash,
# leak, timeout or broken promise, or does not build; the inputs are left in
# build/fuzz/crashes/<harness>/ (copy a fixed one into tests/fuzz/regressions/).
#   FUZZ_SECONDS=60 .ci/fuzz.sh          .ci/fuzz.sh config tokens
set -uo pipefail
cd "$(dirname "$0")/.."
if ! command -v clang >/dev/null && ! command -v clang-14 >/dev/null; then
  echo "fuzz: clang missing: running scripts/deps.sh" >&2
  bash scripts/deps.sh || exit 1
fi
FUZZ_SECONDS="${FUZZ_SECONDS:-30}" exec tests/fuzz/run.sh "$@"
