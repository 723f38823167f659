#!/usr/bin/env bash
# Builds the libFuzzer harnesses (tests/fuzz/fuzz_*.c) with clang and runs each
# for a bounded time.  The library sources a harness needs are compiled
# directly with clang (-fsanitize=fuzzer,address,undefined); nothing here
# depends on the gcc-built build/libternlab.a.
#
#   tests/fuzz/run.sh                 build + run every harness for FUZZ_SECONDS (default 30)
#   tests/fuzz/run.sh config tokens   only these harnesses
#   FUZZ_SECONDS=60 tests/fuzz/run.sh
#   FUZZ_BUILD_ONLY=1 tests/fuzz/run.sh
#   FUZZ_KEEP_GOING=1 tests/fuzz/run.sh   do not stop at the first finding (libFuzzer
#                                       -fork=1 -ignore_crashes=1): every crashing
#                                       input of the run lands in build/fuzz/crashes/
#
# Layout: binaries in build/fuzz/, the growing corpus in build/fuzz/work/<name>
# (seeded from tests/fuzz/corpus/<name>, never written back into the tree),
# crash/leak/timeout inputs in build/fuzz/crashes/<name>/.  A crash input that
# is fixed belongs in tests/fuzz/regressions/<name>/, which the normal test
# suite replays (tests/test_fuzz_regressions.c).
#
# Prints one line per harness: seconds, executions, execs/s, corpus size, and
# the findings; exits 1 when any harness found something (or failed to build).
set -uo pipefail

ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$ROOT"
FUZZ_SECONDS="${FUZZ_SECONDS:-30}"
CLANG="${CLANG:-$(command -v clang || command -v clang-14 || true)}"
OUT="${FUZZ_OUT:-build/fuzz}"

if [ -z "$CLANG" ]; then
  echo "fuzz: clang not found (Debian: apt-get install clang libclang-rt-14-dev; scripts/deps.sh)" >&2
  exit 2
fi

CJSON_CFLAGS="$(pkg-config --cflags libcjson 2>/dev/null || echo -I/usr/include/cjson)"
CJSON_LIBS="$(pkg-config --libs libcjson 2>/dev/null || echo -lcjson)"
CFLAGS=(-std=c11 -D_GNU_SOURCE -g -O1 -fno-omit-frame-pointer
        -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined
        -Wall -Wextra -Werror -Wno-unused-parameter -Isrc -Ikernels -I. -Itests/fuzz $CJSON_CFLAGS)
CORE=(src/core/err.c src/core/mem.c src/core/dtype.c src/core/strnum.c)

# harness -> library sources it needs (besides CORE)
declare -A SRCS=(
  [safetensors]="src/load/safetensors.c src/load/json_strict.c"
  [st_index]="src/load/safetensors.c src/load/json_strict.c"
  [config]="src/load/config.c src/load/json_strict.c"
  [tokens]="src/load/tokens.c"
  [quantspec]="src/quant/quant_spec.c"
  [expconf]="src/log/expconf.c"
  [kvpolicy]="src/kv/kv_ternary.c"
  [gguf]="src/load/gguf.c"
)
ALL=(safetensors st_index config tokens quantspec expconf kvpolicy gguf)
names=("$@")
[ ${#names[@]} -eq 0 ] && names=("${ALL[@]}")

mkdir -p "$OUT"
status=0
summary=()
for name in "${names[@]}"; do
  src="tests/fuzz/fuzz_${name}.c"
  if [ -z "${SRCS[$name]+x}" ]; then
    echo "fuzz: unknown harness '$name' (known: ${ALL[*]})" >&2; status=1; continue
  fi
  missing=0
  for s in "$src" ${SRCS[$name]}; do [ -f "$s" ] || missing=1; done
  if [ $missing -eq 1 ]; then
    summary+=("$(printf '%-12s skipped (%s or %s not present yet)' "$name" "$src" "${SRCS[$name]}")")
    continue
  fi
  bin="$OUT/fuzz_$name"
  if ! "$CLANG" "${CFLAGS[@]}" "$src" "${CORE[@]}" ${SRCS[$name]} -o "$bin" \
       $CJSON_LIBS -lm -lpthread 2>"$OUT/build_$name.log"; then
    cat "$OUT/build_$name.log" >&2
    summary+=("$(printf '%-12s BUILD FAILED (see %s)' "$name" "$OUT/build_$name.log")")
    status=1
    continue
  fi
  [ "${FUZZ_BUILD_ONLY:-0}" = 1 ] && { summary+=("$(printf '%-12s built' "$name")"); continue; }

  work="$OUT/work/$name" crashes="$OUT/crashes/$name"
  mkdir -p "$work" "$crashes"
  seeds=()
  [ -d "tests/fuzz/corpus/$name" ] && seeds+=("tests/fuzz/corpus/$name")
  [ -d "tests/fuzz/regressions/$name" ] && seeds+=("tests/fuzz/regressions/$name")
  dict=()
  [ -f "tests/fuzz/$name.dict" ] && dict=(-dict="tests/fuzz/$name.dict")
  keep=()
  [ "${FUZZ_KEEP_GOING:-0}" = 1 ] && keep=(-fork=1 -ignore_crashes=1 -ignore_ooms=1 -ignore_timeouts=1)
  before=$(ls "$crashes" | wc -l)
  log="$OUT/$name.log"
  # -timeout: one input taking longer than 10 s is a hang (a finding);
  # -rss_limit_mb: a parser that asks for gigabytes on a small input is a finding.
  ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1}" \
  UBSAN_OPTIONS="${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}" \
    "$bin" "$work" "${seeds[@]}" "${dict[@]}" "${keep[@]}" -max_total_time="$FUZZ_SECONDS" \
      -timeout=10 -rss_limit_mb=2048 -max_len=65536 -print_final_stats=1 \
      -artifact_prefix="$crashes/" >"$log" 2>&1
  rc=$?
  runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' | tail -1)
  [ -z "$runs" ] && runs=$(grep -o 'Done [0-9]* runs' "$log" | grep -o '[0-9]*' | tail -1)
  # fork mode: the last "#N: cov: ..." status line counts every job's executions
  [ -z "$runs" ] && runs=$(grep -o '^#[0-9]*: cov' "$log" | grep -o '[0-9]*' | tail -1)
  secs=$(grep -o 'in [0-9]* second' "$log" | grep -o '[0-9]*' | tail -1)
  [ -z "$secs" ] && secs=$(grep -o 'time: [0-9]*s' "$log" | grep -o '[0-9]*' | tail -1)
  speed=$(grep -o 'stat::average_exec_per_sec: *[0-9]*' "$log" | grep -o '[0-9]*$' | tail -1)
  corp=$(ls "$work" | wc -l)
  after=$(ls "$crashes" | wc -l)
  new=$((after - before))
  found="no findings"
  if [ $rc -ne 0 ] || [ $new -gt 0 ]; then
    kind=$(grep -m1 -o 'ERROR: [A-Za-z]*Sanitizer: [a-z-]*\|runtime error: .*\|ERROR: libFuzzer: [a-z-]*' "$log" || true)
    found="FOUND (rc $rc): ${kind:-see $log}; inputs in $crashes/"
    grep -A25 -m1 'ERROR:\|runtime error' "$log" >&2 || tail -40 "$log" >&2
    status=1
  fi
  summary+=("$(printf '%-12s %4ss  %10s execs  %7s/s  corpus %5s  %s' \
                "$name" "${secs:-?}" "${runs:-?}" "${speed:-?}" "$corp" "$found")")
done

echo "fuzz summary (FUZZ_SECONDS=$FUZZ_SECONDS):"
printf '  %s\n' "${summary[@]}"
exit $status
