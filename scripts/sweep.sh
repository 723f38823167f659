#!/usr/bin/env bash
# usage: scripts/sweep.sh EXP [options] [key=value ...]
#
# Runs experiment EXP (exp-threshold, exp-scale-dtype, exp-group-size,
# exp-kv-ternary, exp-throughput) over its grid: every model x every value of
# the factor named in configs/EXP.conf, one job and one HDF5 file per point:
#     RESULTS/EXP/<model>__<value>.h5      (model = the model folder's name)
# Jobs run under GNU Parallel; the sweep is resumable: run it again after a
# kill, a crash or a failed job and only the points without a finished file
# run.  Files that exist but do not verify (truncated, incomplete) are
# deleted and rerun; leftover temporaries (*.h5.tmp.<pid>) are deleted.
#
# options:
#   --jobs N             jobs at once on each machine (default 1: one
#                        experiment already uses every core)
#   --model PATH         run on this model instead of the config's models
#                        (repeatable)
#   --results DIR        results folder (default results/)
#   --config FILE        config (default configs/EXP.conf)
#   --sshloginfile FILE  also run on the machines listed in FILE (GNU Parallel
#                        format; ':' is this machine).  Every machine needs the
#                        repository, built, at the same path relative to its
#                        home directory, and RESULTS must be a shared folder
#                        (NFS) -- or add --return:
#   --return             copy each point's file back from the machine that ran
#                        it (parallel --return) instead of a shared folder
#   --dry-run            print the plan (which points run, which are skipped)
#                        and the GNU Parallel command; change nothing
#   --prepare            do everything but run: remove stale and invalid files,
#                        write RESULTS/EXP/jobs, print the Slurm command
#                        (scripts/slurm/sweep.sbatch runs that file as an array)
#   key=value            override a setting of the config for every point
#                        (must be a key the config defines; `values=` and
#                        `models=` change the grid itself)
#
# Files kept in RESULTS/EXP/: jobs (one command per line, the grid; also what
# scripts/slurm/sweep.sbatch runs), joblog (GNU Parallel's --joblog: one line
# per finished job; entries whose file is gone or invalid are dropped before
# a resume so that they run again; the previous log is kept as joblog.prev),
# sweep.log (this script's messages).
#
# environment:
#   TERNLAB_EXP_CMD   command template for one point instead of
#                     "build/exp_<name> --model {model} --value {value} --out {out}";
#                     {exp} {model} {value} {out} are replaced (shell-quoted)
#   TERNLAB_VERIFY_CMD, TERNLAB_BIN   see scripts/verify_run.sh
#   PARALLEL_EXTRA    more GNU Parallel options (e.g. "--retries 2")
#
# Exit status: 0 when every point has a verified file, 1 otherwise (the
# failed points are listed), 2 for a usage error.
set -euo pipefail

die() { echo "sweep: $*" >&2; exit 2; }
abspath() { case $1 in /*) printf '%s' "$1" ;; *) printf '%s/%s' "$PWD" "$1" ;; esac; }

[ $# -ge 1 ] || die "usage: scripts/sweep.sh EXP [--jobs N] [--model PATH] [--results DIR] [--config FILE] [--sshloginfile FILE] [--return] [--dry-run] [key=value ...]"
case $1 in -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;; esac
exp=$1; shift
case $exp in exp-*) ;; *) die "experiment names start with exp- (got '$exp'); see configs/" ;; esac

jobs=1 results=results config="" sshlogin="" ret=0 dry=0 prepare=0
models=() overrides=()
while [ $# -gt 0 ]; do
  case $1 in
    --jobs) [ $# -ge 2 ] || die "--jobs needs a number"; jobs=$2; shift 2 ;;
    --jobs=*) jobs=${1#*=}; shift ;;
    --model) [ $# -ge 2 ] || die "--model needs a path"; models+=("$2"); shift 2 ;;
    --results) [ $# -ge 2 ] || die "--results needs a folder"; results=$(abspath "$2"); shift 2 ;;
    --config) [ $# -ge 2 ] || die "--config needs a file"; config=$(abspath "$2"); shift 2 ;;
    --sshloginfile) [ $# -ge 2 ] || die "--sshloginfile needs a file"; sshlogin=$(abspath "$2"); shift 2 ;;
    --return) ret=1; shift ;;
    --dry-run) dry=1; shift ;;
    --prepare) prepare=1; shift ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    -*) die "unknown option $1 (see scripts/sweep.sh --help)" ;;
    *=*) overrides+=("$1"); shift ;;
    *) die "unexpected argument '$1' (settings are key=value)" ;;
  esac
done
[[ $jobs =~ ^[1-9][0-9]*$ ]] || die "--jobs must be a positive integer (got '$jobs')"
# Models given on the command line are paths from where the user stands.
for i in "${!models[@]}"; do
  [ -e "${models[$i]}" ] && models[$i]=$(cd "$(dirname "${models[$i]}")" && pwd)/$(basename "${models[$i]}")
done

root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
[ -n "$config" ] || config=$root/configs/$exp.conf
[ -f "$config" ] || die "no config $config (experiments: $(ls configs 2>/dev/null | sed 's/\.conf$//' | tr '\n' ' '))"

# ---- the config (same rules as src/log/expconf.c) ---------------------------
# Prints "key<TAB>value" for every setting; comments start at a '#' that
# begins the value or follows a blank.
conf_pairs() {
  awk '
    /^[ \t]*(#|$)/ { next }
    {
      line = $0; sub(/\r$/, "", line)
      eq = index(line, "=")
      if (eq == 0) { printf "%s:%d: expected key = value\n", FILENAME, NR > "/dev/stderr"; bad = 1; next }
      key = substr(line, 1, eq - 1); gsub(/^[ \t]+|[ \t]+$/, "", key)
      if (key !~ /^[a-z0-9_]+$/) { printf "%s:%d: bad key \"%s\"\n", FILENAME, NR, key > "/dev/stderr"; bad = 1; next }
      val = substr(line, eq + 1); sub(/^[ \t]+/, "", val)
      out = ""; prev = " "
      for (i = 1; i <= length(val); i++) {
        c = substr(val, i, 1)
        if (c == "#" && (prev == " " || prev == "\t")) break
        out = out c; prev = c
      }
      sub(/[ \t]+$/, "", out)
      if (key in seen) { printf "%s:%d: key %s already set\n", FILENAME, NR, key > "/dev/stderr"; bad = 1; next }
      seen[key] = 1
      printf "%s\t%s\n", key, out
    }
    END { exit bad }' "$config"
}
pairs=$(conf_pairs) || die "cannot parse $config"
conf_get() { printf '%s\n' "$pairs" | awk -F '\t' -v k="$1" '$1 == k { sub(/^[^\t]*\t/, ""); print; found = 1 } END { exit !found }'; }
for kv in "${overrides[@]+"${overrides[@]}"}"; do
  k=${kv%%=*}; k=${k%"${k##*[![:space:]]}"}
  conf_get "$k" >/dev/null || die "override '$kv': unknown key '$k' ($config defines: $(printf '%s\n' "$pairs" | cut -f1 | tr '\n' ' '))"
  v=${kv#*=}; v=${v#"${v%%[![:space:]]*}"}
  pairs=$(printf '%s\n' "$pairs" | awk -F '\t' -v k="$k" -v v="$v" 'BEGIN { OFS = "\t" } $1 == k { $0 = k OFS v } { print }')
done
factor=$(conf_get factor) || die "$config: no 'factor'"
read -r -a values <<< "$(conf_get values || true)"
[ ${#values[@]} -gt 0 ] || die "$config: 'values' is empty"
if [ ${#models[@]} -eq 0 ]; then
  read -r -a models <<< "$(conf_get models || true)"
fi
[ ${#models[@]} -gt 0 ] || die "no models (config 'models' or --model)"

# ---- the grid ---------------------------------------------------------------
name=${exp#exp-}; name=${name//-/_}
template=${TERNLAB_EXP_CMD:-"build/exp_$name --model {model} --value {value} --out {out}"}
if [ -z "${TERNLAB_EXP_CMD:-}" ] && [ ! -x "build/exp_$name" ] && [ $dry -eq 0 ] && [ $prepare -eq 0 ]; then
  die "build/exp_$name is missing: build it first (make build/exp_$name)"
fi
dir=$results/$exp
rel() { case $1 in "$root"/*) printf '%s' "${1#"$root"/}" ;; *) printf '%s' "$1" ;; esac; }
safe() { printf '%s' "$1" | tr -c 'A-Za-z0-9._+-' '_'; }
q() { printf '%q' "$1"; }

outs=() lines=()
declare -A seen_out=()
for m in "${models[@]}"; do
  mname=$(safe "$(basename "$m")")
  for v in "${values[@]}"; do
    out=$(rel "$dir")/${mname}__$(safe "$v").h5
    [ -z "${seen_out[$out]:-}" ] || die "two points write $out (models with the same folder name, or values that differ only in punctuation)"
    seen_out[$out]=1
    cmd=$template
    cmd=${cmd//\{exp\}/$(q "$exp")}
    cmd=${cmd//\{model\}/$(q "$m")}
    cmd=${cmd//\{value\}/$(q "$v")}
    cmd=${cmd//\{out\}/$(q "$out")}
    for kv in "${overrides[@]+"${overrides[@]}"}"; do cmd+=" $(q "$kv")"; done
    outs+=("$out")
    lines+=("bash scripts/sweep_point.sh $(q "$out") -- $cmd")
  done
done
n=${#outs[@]}

# ---- plan: what is finished, what runs --------------------------------------
done_n=0
declare -a state=()
for i in "${!outs[@]}"; do
  if [ -e "${outs[$i]}" ]; then
    if bash scripts/verify_run.sh "${outs[$i]}" >/dev/null 2>&1; then state[$i]=done; done_n=$((done_n + 1))
    else state[$i]=invalid; fi
  else
    state[$i]=missing
  fi
done

parallel_cmd=(parallel --will-cite --jobs "$jobs" --joblog "$dir/joblog" --resume-failed --halt never
              --line-buffer --tagstring '{#}')
if [ -n "$sshlogin" ]; then
  [ -f "$sshlogin" ] || die "no ssh login file $sshlogin"
  parallel_cmd+=(--sshloginfile "$sshlogin" --workdir .)
  # The output path is the first argument of every jobs line (printf %q's
  # form: backslash escapes undone, so a folder with spaces comes back too).
  [ $ret -eq 1 ] && parallel_cmd+=(--return '{= s/^\S+\s+\S+\s+((?:\\.|\S)+)\s.*$/$1/; s/\\(.)/$1/g =}')
fi
# shellcheck disable=SC2206
[ -n "${PARALLEL_EXTRA:-}" ] && parallel_cmd+=($PARALLEL_EXTRA)
parallel_cmd+=(-a "$dir/jobs")

if [ $dry -eq 1 ]; then
  echo "sweep: $exp, factor '$factor', $n points ($done_n complete), config $(rel "$config")"
  for i in "${!outs[@]}"; do
    case ${state[$i]} in
      done) s="complete, skipped" ;; invalid) s="INVALID, rerun" ;; *) s="run" ;;
    esac
    printf '%3d  %-18s %s\n' $((i + 1)) "$s" "${lines[$i]}"
  done
  printf 'sweep: would run:'; printf ' %q' "${parallel_cmd[@]}"; printf '\n'
  exit 0
fi

command -v parallel >/dev/null || die "GNU parallel is missing (scripts/deps.sh installs it)"
mkdir -p "$dir"
# One sweep per results folder at a time (the lock goes with this shell and
# its jobs: the points of a SIGKILLed sweep, which GNU Parallel leaves running
# in process groups of their own, keep it until they end).
exec 9>"$dir/.lock"
flock -n 9 || die "another sweep is running on $(rel "$dir") (lock $(rel "$dir")/.lock)"
log() { echo "sweep: $*" | tee -a "$dir/sweep.log"; }
log "---- $(date -u +%Y-%m-%dT%H:%M:%SZ) $exp on $(hostname): $n points, $done_n already complete"

# Leftovers of killed runs, and files that do not verify: remove (rerun).
# (A temporary whose point's lock is held belongs to a run still going — a
# Slurm task, an orphan of a killed sweep: left alone; sweep_point.sh.)
stale=0 live=0
while IFS= read -r -d '' tmp; do
  base=$(basename "${tmp%.tmp.*}")
  if [ -e "$dir/.locks/$base.lock" ] && ! flock -n "$dir/.locks/$base.lock" true; then
    live=$((live + 1))
  else
    rm -f -- "$tmp" && stale=$((stale + 1))
  fi
done < <(find "$dir" -maxdepth 1 -name '*.h5.tmp.*' -print0)
[ "$stale" -gt 0 ] && log "removed $stale temporary file(s) left by a killed run"
[ "$live" -gt 0 ] && log "left $live temporary file(s) of points still being written elsewhere"
for i in "${!outs[@]}"; do
  if [ "${state[$i]}" = invalid ]; then
    reason=$(bash scripts/verify_run.sh "${outs[$i]}" 2>&1 || true)
    rm -f -- "${outs[$i]}"
    log "removed ${outs[$i]}: $reason (will rerun)"
  fi
done

# The jobs file; a different grid from last time is allowed (new models or
# values) but the old joblog's sequence numbers no longer mean the same jobs.
printf '%s\n' "${lines[@]}" > "$dir/jobs.new"
if [ -f "$dir/jobs" ] && ! cmp -s "$dir/jobs" "$dir/jobs.new"; then
  log "note: the job list differs from the previous sweep in $(rel "$dir") (settings, models or values changed);"
  log "      finished files are kept and not rerun -- use another --results folder to rerun with new settings"
fi
mv "$dir/jobs.new" "$dir/jobs"

# Keep in the joblog only the jobs that succeeded, are still the same
# command, and whose file verifies: GNU Parallel's --resume-failed then runs
# every other point (and each point appears once in the joblog).
if [ -f "$dir/joblog" ]; then
  cp "$dir/joblog" "$dir/joblog.prev"
  ok_seqs=" "
  for i in "${!outs[@]}"; do [ "${state[$i]}" = done ] && ok_seqs+="$((i + 1)) "; done
  awk -F '\t' -v ok="$ok_seqs" -v jobs="$dir/jobs" '
    BEGIN { while ((getline l < jobs) > 0) cmd[++n] = l }
    NR == 1 { print; next }
    index(ok, " " $1 " ") && $7 == 0 && $9 == cmd[$1] && !printed[$1]++ { print }
  ' "$dir/joblog.prev" > "$dir/joblog"
  kept=$(($(wc -l < "$dir/joblog") - 1))
  [ "$kept" -lt 0 ] && kept=0
  log "resume: joblog keeps $kept finished job(s); $((n - done_n)) point(s) to run"
fi

if [ $prepare -eq 1 ]; then
  log "prepared $(rel "$dir")/jobs ($n lines, $((n - done_n)) to run); on Slurm, from $root:"
  log "  sbatch --array=1-$n scripts/slurm/sweep.sbatch $(rel "$dir")/jobs"
  exit 0
fi

if [ "$done_n" -lt "$n" ]; then
  log "running $((n - done_n)) point(s) with $jobs job(s) at a time: joblog $(rel "$dir")/joblog"
  set +e
  "${parallel_cmd[@]}" 2>&1 | tee -a "$dir/sweep.log"
  set -e
fi

# ---- result -----------------------------------------------------------------
failed=()
for out in "${outs[@]}"; do
  bash scripts/verify_run.sh "$out" >/dev/null 2>&1 || failed+=("$out")
done
if [ ${#failed[@]} -gt 0 ]; then
  log "${#failed[@]} of $n point(s) have no finished file:"
  for f in "${failed[@]}"; do log "  $f"; done
  log "see $(rel "$dir")/sweep.log and $(rel "$dir")/joblog; run the same command again to retry them"
  exit 1
fi
log "all $n points complete in $(rel "$dir")"
