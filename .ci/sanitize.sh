#!/usr/bin/env bash
# CI step: the whole test suite under AddressSanitizer + UndefinedBehaviorSanitizer
# with leak checking (make SANITIZE=1 -> build-san/).  Fails on a failing test
# and on ANY sanitizer report, including reports from CLI child processes that
# a test expected to fail (their exit code alone would hide a crash): every
# report is also written to a log folder, which must stay empty.
#
#   .ci/sanitize.sh            whole suite
#   .ci/sanitize.sh kv_ gguf   only tests whose names contain these
#   TEST_RUNNER=path           run another runner binary built from build-san objects
set -uo pipefail
cd "$(dirname "$0")/.."

JOBS="${JOBS:-$(nproc 2>/dev/null || echo 2)}"
# HAVE_CUDA=0: the CUDA objects are compiled (and checked) by the normal build;
# sanitizers instrument the C code.
if ! make SANITIZE=1 HAVE_CUDA=0 -j"$JOBS" build-san/test_runner build-san/ternlab build-san/exp_threshold \
     build-san/exp_scale_dtype build-san/exp_group_size build-san/exp_kv_ternary build-san/exp_throughput; then
  echo "sanitize: build failed" >&2
  exit 1
fi

logdir="$(mktemp -d /tmp/ternlab-sanitize-XXXXXX)"
# abort_on_error=0: a report ends the process with an exit code, so the runner
# records a failure and carries on with the next test.
export ASAN_OPTIONS="detect_leaks=1:abort_on_error=0:strict_string_checks=1:detect_stack_use_after_return=1:check_initialization_order=1:log_path=$logdir/asan"
export LSAN_OPTIONS="${LSAN_OPTIONS:-}"
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1:log_path=$logdir/ubsan"
export TERNLAB_BIN="$PWD/build-san/ternlab" TERNLAB_BUILD="$PWD/build-san"

"${TEST_RUNNER:-build-san/test_runner}" "$@" 2>&1 | tee "$logdir/suite.log"
rc=${PIPESTATUS[0]}

reports=$(find "$logdir" -type f \( -name 'asan.*' -o -name 'ubsan.*' \) | sort)
if [ -n "$reports" ]; then
  n=$(echo "$reports" | wc -l)
  echo
  echo "sanitize: $n sanitizer report(s):"
  for f in $reports; do
    echo "---- $f"
    # the report's first lines and our own frames (src/, tests/, kernels/)
    grep -m1 -E 'ERROR: |runtime error|SUMMARY' "$f"
    grep -E '#[0-9]+ .* (/[^ ]*)?(src|tests|kernels)/' "$f" | head -8
    grep -m1 'SUMMARY' "$f"
  done
  echo "sanitize: FAILED (reports kept in $logdir)"
  exit 1
fi
if [ "$rc" -ne 0 ]; then
  echo "sanitize: FAILED (test failures, rc $rc; log in $logdir/suite.log)"
  exit 1
fi
rm -rf "$logdir"
echo "sanitize: OK (no sanitizer reports)"
