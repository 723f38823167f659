#!/usr/bin/env bash
# usage: scripts/sweep.sh EXP [options] [key=value ...]
#
# Runs experiment EXP (exp-threshold, exp-scale-dtype, exp-group-size,
# exp-kv-ternary, exp-throughput) over its grid: every model x every value of
# the factor named in configs/EXP.conf, one job and one HDF5 file per point:
#     RESULTS/EXP/<model>__<value>.h5      (model = the model folder's name)
#     RESULTS/EXP/<model>__<value>__<device>.h5   where the config's (or an
#                                          override's) device is not cpu, so
#                                          a CUDA sweep into the same folder
#                                          neither skips nor replaces the CPU
#                                          points (the programs name files so)
# Jobs run under GNU Parallel; the sweep is resumable: run it again after a
# kill, a crash or a failed job and only the points without a finished file
# run.  Files that exist but do not verify (truncated, incomplete) are
# deleted and rerun; leftover temporaries (*.h5.tmp.<host>.<pid>) are deleted.  A
# finished file whose root attribute device is not the sweep's (a CUDA run
# written before the names said so) is moved to its own device's name, or
# into misplaced/ where that is taken, and the point runs; one of another
# experiment or factor value, or of other settings (a sweep's run file
# records its point's digest of the config after the overrides, the model's
# path and the value, sweep_point: a window changed, the config edited,
# another checkpoint of the same folder name), goes into misplaced/, and the
# point runs.  (A file without sweep_point, a program run by hand, is
# checked by experiment, value, device and the model folder's name only.)
# The points read the settings as the sweep planned them: a snapshot of the
# config after the overrides, RESULTS/EXP/config/<digest>.conf (a config
# edited while the sweep, or a prepared Slurm array, runs does not reach
# them: it had given points settings other than their recorded digest).
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
#                        home directory, and a login that sets SHELL (Parallel
#                        runs each job with it; without, it runs nothing and
#                        reports success); RESULTS must be a shared folder
#                        (NFS) -- or add --return:
#   --return             copy each point's file back from the machine that ran
#                        it (parallel --return) instead of a shared folder;
#                        needs rsync here and on every machine
#   --dry-run            print the plan (which points run, which are skipped)
#                        and the GNU Parallel command; change nothing
#   --prepare            do everything but run: remove stale and invalid files,
#                        write RESULTS/EXP/jobs, print the Slurm command
#                        (scripts/slurm/sweep.sbatch runs that file as an array)
#   key=value            override a setting of the config for every point
#                        (must be a key the config defines; `values=` and
#                        `models=` change the grid itself).  Paths in
#                        overrides (tokens=FILE, models=PATH ...) are from the
#                        current directory, as --model, --results and --config
#                        are; paths inside a config file are from the
#                        repository root (where the points run).
#
# Files kept in RESULTS/EXP/: jobs (one command per line, the grid; also what
# scripts/slurm/sweep.sbatch runs), joblog (GNU Parallel's --joblog: one line
# per finished job; entries whose file is gone or invalid are dropped before
# a resume so that they run again, and a finished point left without a line
# gets one from a job that skips it; the previous log is kept as joblog.prev),
# sweep.log (this script's messages), config/ (the settings' snapshots).
#
# environment:
#   TERNLAB_EXP_CMD   command template for one point instead of "build/exp_<name>
#                     --model {model} --value {value} --out {out} --config {config}";
#                     {exp} {model} {value} {out} {config} are replaced (shell-quoted;
#                     {config} is the snapshot), and a template without {config}
#                     gets the overrides appended
#   TERNLAB_VERIFY_CMD, TERNLAB_BIN   see scripts/verify_run.sh
#   PARALLEL_EXTRA    more GNU Parallel options (e.g. "--retries 2")
#
# Signals: TERM, INT or HUP to this script stop the sweep (a sweep started in
# the background by a script, `&` without job control, has INT ignored by the
# shell from its start, which bash cannot trap: stop it with TERM): GNU Parallel is
# sent TERM, which sends the running points TERM (each removes its temporary
# file; TERM again after 2 s, KILL after 3) and starts no new one; the script
# exits 128 + the signal's number once Parallel is gone and the folder's lock
# is free of the points (10 s at most).  Run the same command again to resume.
#
# Exit status: 0 when every point has a verified file, 1 otherwise (the
# failed points are listed; also --help that cannot be written), 2 for a
# usage error, 129/130/143 when stopped by HUP/INT/TERM.
set -euo pipefail

die() { echo "sweep: $*" >&2; exit 2; }
abspath() { case $1 in /*) printf '%s' "$1" ;; *) printf '%s/%s' "$PWD" "$1" ;; esac; }
# this header as help: 1 when it cannot be written (a full disk: sed's own 4 had come
# out); 0 where the reader stopped reading (`| head`: sed's SIGPIPE had made it 1 or 141)
show_help() {
  local rc=0
  { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; } 2>/dev/null || rc=$?
  [ "$rc" -eq 0 ] || [ "$rc" -eq 141 ] && exit 0
  echo "sweep: cannot write the help to standard output" >&2
  exit 1
}

[ $# -ge 1 ] || die "usage: scripts/sweep.sh EXP [--jobs N] [--model PATH] [--results DIR] [--config FILE] [--sshloginfile FILE] [--return] [--dry-run] [key=value ...]"
case $1 in -h|--help) show_help ;; esac
exp=$1; shift
case $exp in exp-*) ;; *) die "experiment names start with exp- (got '$exp'); see configs/" ;; esac

jobs=1 results=results config="" sshlogin="" ret=0 dry=0 prepare=0
models=() overrides=()
declare -A given=() set_keys=()
while [ $# -gt 0 ]; do
  # a single-valued option or a setting given twice is refused (the last had been taken)
  case $1 in
    --jobs|--jobs=*|--results|--config|--sshloginfile)
      o=${1%%=*}; [ -z "${given[$o]:-}" ] || die "$o is given more than once"; given[$o]=1 ;;
    -*) ;;
    *=*)
      k=${1%%=*}; k=${k%"${k##*[![:space:]]}"}; k=${k#"${k%%[![:space:]]*}"}
      [ -n "$k" ] || die "setting '$1' has no key"
      [ -z "${set_keys[$k]:-}" ] || die "setting '$k' is given more than once ('${set_keys[$k]}' and '$1')"
      set_keys[$k]=$1 ;;
  esac
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
    -h|--help) show_help ;;
    -*) die "unknown option $1 (see scripts/sweep.sh --help)" ;;
    *=*) overrides+=("$1"); shift ;;
    *) die "unexpected argument '$1' (settings are key=value)" ;;
  esac
done
[[ $jobs =~ ^[1-9][0-9]*$ ]] || die "--jobs must be a positive integer (got '$jobs')"
if [ $ret -eq 1 ]; then # (it had been ignored without --sshloginfile, and failed late without rsync)
  [ -n "$sshlogin" ] || die "--return applies to points run on other machines: give --sshloginfile too"
  command -v rsync >/dev/null || die "--return copies files with rsync, which this machine lacks (Debian: rsync; every machine of the login file needs it too)"
fi
root=$(cd "$(dirname "$0")/.." && pwd)
rel() { case $1 in "$root"/*) printf '%s' "${1#"$root"/}" ;; *) printf '%s' "$1" ;; esac; }
# Models given on the command line are paths from where the user stands, kept
# from the repository root where inside it (the points run there, on every
# machine of an --sshloginfile sweep: made absolute, a machine whose home path
# differs had not found them), else absolute.
# (a path ending in . or .. as the folder it names, physically, as the programs open it:
# `--model .` had named the points ".__<value>.h5", hidden from the tables, and its runs,
# recording the folder's name, had been taken for another point's; CDPATH is not consulted)
from_here() {
  case ${1%/} in
    .|..|*/.|*/..) if [ -d "$1" ]; then (CDPATH='' cd -P -- "$1" && pwd -P); return; fi ;;
  esac
  if [ -e "$1" ]; then printf '%s/%s' "$(CDPATH='' cd -- "$(dirname -- "$1")" && pwd)" "$(basename -- "$1")"
  else printf '%s' "$1"; fi
}
for i in "${!models[@]}"; do models[$i]=$(rel "$(from_here "${models[$i]}")"); done
# So are the paths in overrides (the points run from the repository root, where
# a relative tokens= had been looked up): tokens= becomes a path from the root
# when the file is inside the repository (every machine of an --sshloginfile
# sweep has it at that place), else absolute; models= the same way.
for i in "${!overrides[@]}"; do
  kv=${overrides[$i]}
  k=${kv%%=*}; k=${k%"${k##*[![:space:]]}"}; k=${k#"${k%%[![:space:]]*}"}
  v=${kv#*=}; v=${v#"${v%%[![:space:]]*}"}
  case $k in
    tokens)
      [ -f "$v" ] || die "override '$kv': no token file $(abspath "$v") (a relative path is from the current directory, $PWD)"
      overrides[$i]="tokens=$(rel "$(from_here "$v")")" ;;
    models)
      # (with --model too, the override had been dropped without a word)
      [ ${#models[@]} -eq 0 ] || die "override '$kv' and --model both name the models: give one of them"
      read -r -a ms <<< "$v"
      # (from the root where inside the repository, as tokens=: made absolute, a checkout under
      # a folder with a blank had split each path in two in the blank-separated list)
      for j in "${!ms[@]}"; do
        ms[$j]=$(rel "$(from_here "${ms[$j]}")")
        [[ ${ms[$j]} != *[[:space:]]* ]] ||
          die "override '$kv': the model path ${ms[$j]} has a blank, and models= is a blank-separated list: give it with --model"
      done
      overrides[$i]="models=${ms[*]}" ;;
  esac
done

cd "$root"
# (tee -p, GNU coreutils 8.24 and later: log() and the run's output use it)
tee -p </dev/null >/dev/null 2>&1 || die "this tee has no -p (GNU coreutils 8.24 or later is needed)"
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
  # (the value through the environment: awk -v reads backslash escapes, and window=C:\new had
  # put a line "ew = ..." into the settings)
  pairs=$(printf '%s\n' "$pairs" | K=$k V=$v awk -F '\t' 'BEGIN { OFS = "\t"; k = ENVIRON["K"]; v = ENVIRON["V"] }
                                                       $1 == k { $0 = k OFS v } { print }')
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
# Every point reads the snapshot of the settings (written once the folder's
# lock is held; content-addressed: the same settings, the same file), so that
# a config edited while the sweep or a prepared Slurm array runs does not give
# points settings other than their tag says.
snap_digest=$(printf '%s\n' "$pairs" | sha256sum | cut -c1-16)
default_cmd="build/exp_$name --model {model} --value {value} --out {out} --config {config}"
template=${TERNLAB_EXP_CMD:-$default_cmd}
if [ -z "${TERNLAB_EXP_CMD:-}" ] && [ ! -x "build/exp_$name" ] && [ $dry -eq 0 ] && [ $prepare -eq 0 ]; then
  die "build/exp_$name is missing: build it first (make build/exp_$name)"
fi
dir=$results/$exp
snap=$(rel "$dir")/config/$snap_digest.conf
safe() { printf '%s' "$1" | tr -c 'A-Za-z0-9._+-' '_'; }
q() { printf '%q' "$1"; }

device=$(conf_get device || true)
want_dev=${device:-cpu}
dev_suffix=""
[ -z "$device" ] || [ "$device" = cpu ] || dev_suffix=__$(safe "$device")
outs=() lines=() bases=() pvals=() tags=() pmods=()
declare -A seen_out=()
# a point's tag: a digest of its settings — the config after the overrides
# (but the lists of values and models), the model's path (from the repository
# root where it is inside: a moved or second checkout keeps its points) and the
# value — recorded in its run file (sweep_point.sh --tag), so that a finished
# file of other settings (window changed, config edited, another checkpoint
# of the same folder name) is not counted as this point's
point_tag() {
  { printf '%s\n' "$pairs" | awk -F '\t' '$1 != "values" && $1 != "models"' | LC_ALL=C sort
    printf 'model\t%s\nvalue\t%s\n' "$(rel "$(realpath -m -- "$1")")" "$2"; } | sha256sum | cut -c1-16
}
for m in "${models[@]}"; do
  mname=$(safe "$(basename "$m")")
  for v in "${values[@]}"; do
    out=$(rel "$dir")/${mname}__$(safe "$v")$dev_suffix.h5
    bases+=("$(rel "$dir")/${mname}__$(safe "$v")")
    pvals+=("$v")
    [ -z "${seen_out[$out]:-}" ] || die "two points write $out (models with the same folder name, or values that differ only in punctuation)"
    seen_out[$out]=1
    cmd=$template
    # (the replacements quoted: bash 5.2's patsub_replacement had read their backslashes and
    # & — printf %q's escapes — so re\\t in a path lost its backslash and a value's & went unquoted)
    cmd=${cmd//\{exp\}/"$(q "$exp")"}
    cmd=${cmd//\{model\}/"$(q "$m")"}
    cmd=${cmd//\{value\}/"$(q "$v")"}
    cmd=${cmd//\{out\}/"$(q "$out")"}
    cmd=${cmd//\{config\}/"$(q "$snap")"}
    if [[ $template != *'{config}'* ]]; then
      for kv in "${overrides[@]+"${overrides[@]}"}"; do cmd+=" $(q "$kv")"; done
    fi
    outs+=("$out")
    pmods+=("$(basename "$m")")
    tags+=("$(point_tag "$m" "$v")")
    lines+=("bash scripts/sweep_point.sh $(q "$out") --device $(q "$want_dev") --expect $(q "experiment=$exp") --expect $(q "factor_value=$v") --expect $(q "model/=${pmods[-1]}") --tag ${tags[-1]} -- $cmd")
  done
done
n=${#outs[@]}

# ---- every value's settings, once, before any point -------------------------
# (the program's --check: the config after the overrides, each value's QuantSpec,
# KV policy, device and lengths.  A setting the program refuses, a `factor=`
# override say, had failed every point in turn, each after its start.)
if [ -z "${TERNLAB_EXP_CMD:-}" ] && [ -x "build/exp_$name" ]; then
  "build/exp_$name" --check --config "$config" "${overrides[@]+"${overrides[@]}"}" >/dev/null ||
    die "build/exp_$name refuses these settings (above); no point ran"
fi

# ---- plan: what is finished, what runs --------------------------------------
# A finished file under a point's name that says it ran on another device
# (written before CUDA runs had __cuda in their names, or by hand) is not
# this point: it is moved to its own device's name (or, where that is taken,
# into misplaced/), and the point runs.  (ternlab verify --device prints the
# file's device and exits 3.)  One of another experiment or factor value
# (copied or renamed by hand) goes into misplaced/ and the point runs
# (--expect: exit 4).
bin=${TERNLAB_BIN:-build/ternlab}
dev_name() { # base, device -> the point's file name for that device
  if [ "$2" = cpu ]; then printf '%s.h5' "$1"; else printf '%s__%s.h5' "$1" "$(safe "$2")"; fi
}
# point_check I: point I's file, checked once — 0 a finished run file of this
# point; 3 another device's (its device in $chk_dev); 4 another experiment's,
# value's or settings'; 5 open for writing in another process (its HDF5 file
# lock held; not read); 1 not a finished run file.  One `ternlab verify` with the
# point's device and attributes; under TERNLAB_VERIFY_CMD (or without the
# program) scripts/verify_run.sh first, then those checks where they can run.
point_check() {
  local r=0
  chk_dev=""
  if [ -n "${TERNLAB_VERIFY_CMD:-}" ] || [ ! -x "$bin" ]; then
    bash scripts/verify_run.sh "${outs[$1]}" >/dev/null 2>&1 || { r=$?; [ $r -eq 5 ] && return 5; return 1; }
    [ -x "$bin" ] || return 0
  fi
  chk_dev=$("$bin" verify --device "$want_dev" --expect "experiment=$exp" \
            --expect "factor_value=${pvals[$1]}" --expect "model/=${pmods[$1]}" \
            --expect "sweep_point?=${tags[$1]}" "${outs[$1]}" 2>/dev/null) || r=$?
  case $r in
    0) return 0 ;;
    3) [ -n "$chk_dev" ] && return 3 || return 0 ;;
    4) return 4 ;;
    5) return 5 ;;
    *) return 1 ;;
  esac
}
done_n=0
declare -a state=() other_dev=()
for i in "${!outs[@]}"; do
  # (a folder there had been reported as a file another process is writing, and the point
  # had failed on every run)
  [ ! -d "${outs[$i]}" ] || die "${outs[$i]} is a folder where point $((i + 1))'s run file goes: move it away"
  if [ -e "${outs[$i]}" ]; then
    r=0
    point_check "$i" || r=$?
    case $r in
      0) state[$i]=done; done_n=$((done_n + 1)) ;;
      3) state[$i]=other; other_dev[$i]=$chk_dev ;;
      4) state[$i]=foreign ;;
      5) state[$i]=busy ;;
      *) state[$i]=invalid ;;
    esac
  else
    state[$i]=missing
  fi
done

# --termseq: a stopped sweep's points get 2 s to stop and remove their
# temporaries (Parallel's default sends KILL after 350 ms, short for a loaded
# machine), then TERM again, and KILL after 3 s (each step ends early once the
# points' process groups are gone).
parallel_cmd=(parallel --will-cite --jobs "$jobs" --joblog "$dir/joblog" --resume-failed --halt never
              --line-buffer --tagstring '{#}' --termseq TERM,2000,TERM,1000,KILL,200)
if [ -n "$sshlogin" ]; then
  [ -f "$sshlogin" ] || die "no ssh login file $sshlogin"
  parallel_cmd+=(--sshloginfile "$sshlogin" --workdir .)
  # The output path is the first argument of every jobs line (printf %q's
  # form: backslash escapes undone, so a folder with spaces comes back too).
  [ $ret -eq 1 ] && parallel_cmd+=(--return '{= s/^\S+\s+\S+\s+((?:\\.|\S)+)\s.*$/$1/; s/\\(.)/$1/g =}')
  # (no shared folder: the settings' snapshot goes to each machine first)
  [ $ret -eq 1 ] && parallel_cmd+=(--basefile "$snap")
fi
# shellcheck disable=SC2206
[ -n "${PARALLEL_EXTRA:-}" ] && parallel_cmd+=($PARALLEL_EXTRA)
parallel_cmd+=(-a "$dir/jobs")

if [ $dry -eq 1 ]; then
  echo "sweep: $exp, factor '$factor', $n points ($done_n complete), config $(rel "$config")"
  for i in "${!outs[@]}"; do
    case ${state[$i]} in
      done) s="complete, skipped" ;; invalid) s="INVALID, rerun" ;;
      other) s="A ${other_dev[$i]} RUN: moved, run" ;;
      foreign) s="ANOTHER POINT'S RUN: moved, run" ;;
      busy) s="OPEN IN ANOTHER PROCESS: left, fails" ;; *) s="run" ;;
    esac
    printf '%3d  %-18s %s\n' $((i + 1)) "$s" "${lines[$i]}"
  done
  printf 'sweep: would run:'; printf ' %q' "${parallel_cmd[@]}"; printf '\n'
  exit 0
fi

command -v parallel >/dev/null || die "GNU parallel is missing (scripts/deps.sh installs it)"
# (another parallel first on PATH, moreutils' say, had failed every point with its own usage)
case $(parallel --version 2>/dev/null </dev/null || true) in
  "GNU parallel"*) ;;
  *) die "$(command -v parallel) is not GNU Parallel (moreutils' parallel?): put GNU Parallel first on PATH" ;;
esac
[ ! -e "$results" ] || [ -d "$results" ] || die "--results $(rel "$results") is not a folder"
mkdir -p "$dir" 2>/dev/null || die "cannot create $(rel "$dir") (read-only file system, or no permission?)"
[ -w "$dir" ] || die "cannot write in $(rel "$dir") (read-only file system, or no permission?)"
# One sweep per results folder at a time (the lock goes with this shell and
# its jobs: the points of a SIGKILLed sweep, which GNU Parallel leaves running
# in process groups of their own, keep it until they end).
# (the braces keep 2>/dev/null to the exec: on a bare exec it would stay, and
# every later message of this script, "another sweep is running" first, would
# go to /dev/null)
{ exec 9>"$dir/.lock"; } 2>/dev/null || die "cannot create the lock $(rel "$dir")/.lock (read-only file system?)"
flock -n 9 || die "another sweep is running on $(rel "$dir") (lock $(rel "$dir")/.lock)"
# (tee -p: a closed standard output — `sweep.sh ... | head` — no longer ends the
# sweep, with SIGPIPE through the tee and GNU Parallel, leaving a point running
# alone: the messages go on into sweep.log)
log() { echo "sweep: $*" | tee -p -a "$dir/sweep.log"; }
# the settings' snapshot the points read (atomically: a point may start reading it)
if [ ! -f "$snap" ]; then
  mkdir -p "$dir/config"
  { printf '# %s after the overrides: the settings scripts/sweep.sh gave the points of %s\n' "$(rel "$config")" "$exp"
    printf '%s\n' "$pairs" | awk -F '\t' '{ k = $1; sub(/^[^\t]*\t/, ""); printf "%s = %s\n", k, $0 }'
  } > "$snap.tmp.$$" && mv -f -- "$snap.tmp.$$" "$snap" || die "cannot write the settings' snapshot $snap"
fi
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
# The caches' temporaries (RESULTS/cache/*.tmp.<host>.<pid>: the reference's
# and the file hashes') of a process of this machine that is gone — a
# SIGKILLed point (TERM, INT, HUP remove their own); another machine's are
# left to it.  (The host as tmp_begin writes it: bytes outside [A-Za-z0-9._-]
# as '_'.)
myhost=$(hostname 2>/dev/null || echo host); myhost=${myhost:0:64}; myhost=${myhost//[^A-Za-z0-9._-]/_}
gone() { # pid $1 no longer runs on this machine (unsure: not gone)
  if [ -d /proc/self ]; then [ ! -e "/proc/$1" ]
  elif command -v ps >/dev/null 2>&1; then ! ps -p "$1" >/dev/null 2>&1
  else return 1; fi
}
while IFS= read -r -d '' tmp; do
  rest=${tmp##*.tmp.}; tpid=${rest##*.}; thost=${rest%.*}
  if [ "$thost" = "$myhost" ] && [[ $tpid =~ ^[0-9]+$ ]] && gone "$tpid"; then
    rm -f -- "$tmp" && stale=$((stale + 1))
  fi
done < <(find "$results/cache" -maxdepth 1 -name '*.tmp.*' -print0 2>/dev/null)
[ "$stale" -gt 0 ] && log "removed $stale temporary file(s) left by a killed run"
[ "$live" -gt 0 ] && log "left $live temporary file(s) of points still being written elsewhere"
# (each removal or move under the point's lock, as sweep_point.sh holds it
# while a point runs: a point another process is writing — a Slurm task —
# is left alone, and the file is looked at again under the lock)
point_lock() { mkdir -p "$dir/.locks"; printf '%s/.locks/%s.lock' "$dir" "$(basename "$1")"; }
# points_hold_lock: closes this sweep's hold on the folder's lock (fd 9) and says whether
# others still hold it: the points, which inherited it, still running
points_hold_lock() { exec 9>&-; ! flock -n "$dir/.lock" true 2>/dev/null; }
for i in "${!outs[@]}"; do
  if [ "${state[$i]}" = invalid ]; then
    reason=$(bash scripts/verify_run.sh "${outs[$i]}" 2>&1 || true)
    if flock -n "$(point_lock "${outs[$i]}")" bash -c \
         'bash scripts/verify_run.sh "$1" >/dev/null 2>&1; r=$?; [ $r -eq 0 ] && exit 3; [ $r -eq 5 ] && exit 5
          rm -f -- "$1"' _ "${outs[$i]}"; then
      log "removed ${outs[$i]}: $reason (will rerun)"
    elif r=$?; [ $r -eq 3 ]; then
      log "kept ${outs[$i]}: finished by another process meanwhile"
    elif [ $r -eq 5 ]; then
      log "left ${outs[$i]}: open for writing in another process meanwhile (its HDF5 file lock is held)"
    else
      log "left ${outs[$i]} ($reason): another process is writing it"
    fi
  elif [ "${state[$i]}" = busy ]; then
    # (not read, not removed: a finished run that h5py's "r+" or a viewer holds open fails
    # a reader's open as a damaged file does, and had been removed and run again)
    log "left ${outs[$i]}: open for writing in another process (its HDF5 file lock is held); its point fails until that process closes it"
  elif [ "${state[$i]}" = other ] || [ "${state[$i]}" = foreign ]; then
    why="a run on ${other_dev[$i]:-}, not $want_dev"
    if [ "${state[$i]}" = other ]; then to=$(dev_name "${bases[$i]}" "${other_dev[$i]}")
    else to=${outs[$i]}; why=$("$bin" verify --expect "experiment=$exp" --expect "factor_value=${pvals[$i]}" \
                               --expect "model/=${pmods[$i]}" --expect "sweep_point?=${tags[$i]}" "${outs[$i]}" 2>&1 |
                               sed 's/^ternlab verify: [^:]*: //' | head -1 || true); fi
    if [ -e "$to" ]; then
      mkdir -p "$dir/misplaced"
      tag=${other_dev[$i]:-point}
      to=$dir/misplaced/$(basename "${outs[$i]%.h5}").$(safe "$tag").$(date -u +%Y%m%dT%H%M%SZ).$$.h5
      to=$(rel "$to")
    fi
    # (moved only if still the same file: a run of this point that finished
    # meanwhile replaced it, and is left in place)
    ino=$(stat -c %i -- "${outs[$i]}" 2>/dev/null || true)
    if flock -n "$(point_lock "${outs[$i]}")" bash -c \
         '[ "$(stat -c %i -- "$1" 2>/dev/null)" = "$3" ] || exit 3; mv -n -- "$1" "$2" && [ ! -e "$1" ]' \
         _ "${outs[$i]}" "$to" "$ino"; then
      log "moved ${outs[$i]} to $to: $why (will run this point)"
    else
      log "left ${outs[$i]} ($why): another process is writing it, or replaced it"
    fi
  fi
done

# The jobs file; a different grid from last time is allowed (new models or
# values) but the old joblog's sequence numbers no longer mean the same jobs.
printf '%s\n' "${lines[@]}" > "$dir/jobs.new"
if [ -f "$dir/jobs" ] && ! cmp -s "$dir/jobs" "$dir/jobs.new"; then
  log "note: the job list differs from the previous sweep in $(rel "$dir") (settings, models, values or a path's spelling changed):"
  log "      the joblog keeps only lines of unchanged commands; a file of other settings was moved into misplaced/ above, if any (files made by hand, without sweep_point, are kept)"
fi
mv "$dir/jobs.new" "$dir/jobs"

# Keep in the joblog only the jobs that succeeded, are still the same
# command, and whose file verifies: GNU Parallel's --resume-failed then runs
# every other point (and each point appears once in the joblog).
kept=0
if [ -f "$dir/joblog" ]; then
  cp "$dir/joblog" "$dir/joblog.prev"
  ok_seqs=" "
  for i in "${!outs[@]}"; do [ "${state[$i]}" = done ] && ok_seqs+="$((i + 1)) "; done
  OK=$ok_seqs JOBS=$dir/jobs awk -F '\t' '
    BEGIN { ok = ENVIRON["OK"]; jobs = ENVIRON["JOBS"]; while ((getline l < jobs) > 0) cmd[++n] = l }
    NR == 1 { print; next }
    index(ok, " " $1 " ") && $7 == 0 && $8 == 0 && $9 == cmd[$1] && !printed[$1]++ { print }
  ' "$dir/joblog.prev" > "$dir/joblog"
  kept=$(($(wc -l < "$dir/joblog") - 1))
  [ "$kept" -lt 0 ] && kept=0
  log "resume: joblog keeps $kept finished job(s); $((n - done_n)) point(s) to run"
fi
# Finished points without a kept line (their job killed by a signal while the
# run it started went on to write the file; Parallel killed under its jobs; the
# same point under a command spelt differently) go through Parallel too: their
# job finds the file complete and skips it, and the joblog gets its line.
# Without that, a sweep with every file present ran nothing and the next one
# copied a joblog short of those points over joblog.prev, losing them.

if [ $prepare -eq 1 ]; then
  log "prepared $(rel "$dir")/jobs ($n lines, $((n - done_n)) to run); on Slurm, from $root:"
  log "  sbatch --array=1-$n scripts/slurm/sweep.sbatch $(q "$(rel "$dir")/jobs")"
  exit 0
fi

if [ "$done_n" -lt "$n" ] || [ "$kept" -lt "$n" ]; then
  if [ "$done_n" -lt "$n" ]; then
    log "running $((n - done_n)) point(s) with $jobs job(s) at a time: joblog $(rel "$dir")/joblog"
  else
    log "all $n points have their files; $((n - kept)) of them have no joblog line: their jobs skip them and record it"
  fi
  # A signal to this script is forwarded to GNU Parallel.  (Without it the
  # shell died alone and Parallel ran the rest of the grid headless, holding
  # the folder's lock.)  GNU Parallel 20221122 (man parallel, --term-seq): TERM
  # kills the running jobs' process groups (--termseq above: TERM, TERM, KILL
  # over 3.2 s; sweep_point.sh's trap removes the point's temporary) and starts no more;
  # HUP would wait for the running jobs to finish.  TERM is sent again every
  # second while Parallel lives: it ignores TERM until its jobs start.
  stop_sig="" par_pid=""
  on_signal() { stop_sig=$1; [ -z "$par_pid" ] || kill -TERM "$par_pid" 2>/dev/null || true; }
  trap 'on_signal TERM' TERM
  trap 'on_signal INT' INT
  trap 'on_signal HUP' HUP
  set +e
  # Parallel's output to the terminal and the log; tee ignores the signals (a
  # Ctrl-C reaches the whole foreground group) and ends when Parallel's and
  # its jobs' copies of the pipe are closed.
  exec 7> >(trap '' TERM INT HUP; exec tee -p -a "$dir/sweep.log")
  tee_pid=$!
  "${parallel_cmd[@]}" >&7 2>&1 7>&- &
  par_pid=$!
  [ -z "$stop_sig" ] || kill -TERM "$par_pid" 2>/dev/null
  # Parallel's end is polled, not waited for: a `wait "$par_pid"` that a
  # trapped signal interrupted could block for good in bash 5.2 (reaping in
  # the handler, then waiting for any child: the tee, which waits for us),
  # as a killed sweep once did.  A short sleep in the background, waited
  # for, is what a signal interrupts.
  alive() { kill -0 "$par_pid" 2>/dev/null; }
  while :; do
    if [ -z "$stop_sig" ]; then
      while [ -z "$stop_sig" ] && alive; do sleep 0.2 & wait $! 2>/dev/null; done
      [ -n "$stop_sig" ] || break # Parallel ended by itself
    fi
    # stopping: wait for Parallel to go, TERM again each second
    for _ in 1 2 3 4 5 6 7 8 9 10; do alive && sleep 0.1; done
    alive || break
    kill -TERM "$par_pid" 2>/dev/null
  done
  exec 7>&-
  wait "$tee_pid" 2>/dev/null
  trap - TERM INT HUP
  set -e
  if [ -n "$stop_sig" ]; then
    log "stopped by SIG$stop_sig: the running point(s) were killed and no new one started; run the same command again to resume" || true
    # The points inherited the lock (fd 9), as did the tee and this shell's
    # sleeps: once ours is closed it is free when the last of them has gone,
    # which Parallel need not have waited for (a KILLed process can outlive its
    # parent by a moment).  Exit then, so that the same command run again right
    # away is not refused.
    if points_hold_lock; then
      log "waiting (10 s at most) for the stopped points to let go of $(rel "$dir")/.lock" || true
      r=0
      flock -w 10 -E 75 "$dir/.lock" true 2>/dev/null || r=$?
      [ $r -ne 75 ] || log "$(rel "$dir")/.lock is still held: a point may still be running, or another sweep started" || true
    fi
    case $stop_sig in HUP) exit 129 ;; INT) exit 130 ;; *) exit 143 ;; esac
  fi
fi

# ---- result -----------------------------------------------------------------
# job_ok I: the joblog's last line for point I says its job exited 0, no signal.
# sweep_point.sh exits 0 only once the point's file verifies, so such a job with
# no good file did not run where it was sent: GNU Parallel runs a job on another
# machine with that login's $SHELL, and runs nothing, reporting success, where
# it is unset
job_ok() {
  [ -f "$dir/joblog" ] &&
    awk -F '\t' -v s="$(($1 + 1))" 'NR > 1 && $1 == s { e = $7; g = $8 } END { exit !(e == "0" && g == "0") }' \
      "$dir/joblog"
}
failed=()
for i in "${!outs[@]}"; do
  r=0
  point_check "$i" || r=$?
  case $r in
    0) ;;
    3|4) failed+=("${outs[$i]} (a run of another device or point)") ;;
    5) failed+=("${outs[$i]} (open for writing in another process: its HDF5 file lock is held; not checked)") ;;
    *) if job_ok "$i"; then
         failed+=("${outs[$i]} (its job exited 0 without it: the command did not run there; over ssh, check that the login sets SHELL)")
       else
         failed+=("${outs[$i]}")
       fi ;;
  esac
done
if [ ${#failed[@]} -gt 0 ]; then
  log "${#failed[@]} of $n point(s) have no finished file:"
  for f in "${failed[@]}"; do log "  $f"; done
  # (points still holding the folder's lock once ours is closed: GNU Parallel ended before its
  # jobs -- killed -- and they run on; "run again" had then been refused as another sweep)
  if points_hold_lock; then
    log "points of this sweep are still running (GNU Parallel ended before them: was it killed?); they hold $(rel "$dir")/.lock: run the same command again once they end"
  else
    log "see $(rel "$dir")/sweep.log and $(rel "$dir")/joblog; run the same command again to retry them"
  fi
  exit 1
fi
log "all $n points complete in $(rel "$dir")"
