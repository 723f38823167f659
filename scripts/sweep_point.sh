#!/usr/bin/env bash
# usage: scripts/sweep_point.sh OUT [--device D] [--expect KEY=VALUE ...] [--tag T] -- COMMAND [ARGS...]
# Runs one point of a sweep (one line of a sweep's jobs file):
#  - OUT already a finished run file (scripts/verify_run.sh) -> skipped, exit 0;
#    with --device / --expect only if it is also this point's (ternlab verify
#    with them): one of another device, experiment or value is moved into
#    misplaced/ beside it and the point runs;
#  - OUT open for writing in another process (its HDF5 file lock held: h5py's
#    "r+", a viewer; verify_run.sh exits 5), before or after COMMAND -> left as
#    it is, exit 75;
#  - otherwise OUT and OUT.tmp.* left by an earlier, killed run are removed,
#    COMMAND runs (it writes OUT through h5log: OUT.tmp.<host>.<pid>, renamed when
#    complete), and OUT must verify afterwards (else it is removed, exit 3).
#  - --tag T: the sweep's digest of the point's settings (config after the
#    overrides, the model's path): COMMAND runs with TERNLAB_SWEEP_POINT=T,
#    which the experiment programs record as the root attribute sweep_point,
#    and a finished OUT with another sweep_point (a sweep's run of other
#    settings) is moved into misplaced/ and the point runs; one without it (a
#    program run by hand) counts as the point's where the --expect checks
#    (experiment, value, the model folder's name) pass.
#  - SIGTERM/SIGINT/SIGHUP stop COMMAND and remove its temporary file, so a
#    killed sweep leaves no half-written file (a SIGKILLed one may leave a
#    temporary; the next sweep removes it).
#  - one process per point: OUT's lock (DIR/.locks/NAME.lock, flock) is held
#    from the check to the end, by COMMAND too (it inherits the descriptor),
#    so a point still running — a Slurm task, or the orphan of a SIGKILLed
#    sweep — makes another run of it exit 75 ("being written") instead of
#    removing its temporary and writing the file twice.
set -u
usage() { echo "usage: $0 OUT [--device D] [--expect KEY=VALUE ...] [--tag T] -- COMMAND [ARGS...]" >&2; exit 2; }
[ $# -ge 3 ] || usage
out=$1; shift
vargs=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do
  case $1 in
    --device|--expect) [ $# -ge 2 ] || usage; vargs+=("$1" "$2"); shift 2 ;;
    --tag) [ $# -ge 2 ] && [ -n "$2" ] || usage; vargs+=(--expect "sweep_point?=$2"); export TERNLAB_SWEEP_POINT=$2; shift 2 ;;
    *) usage ;;
  esac
done
[ $# -ge 2 ] && [ "$1" = "--" ] || usage
shift
here=$(dirname "$0")
bin=${TERNLAB_BIN:-build/ternlab}

mkdir -p -- "$(dirname "$out")/.locks"
lock="$(dirname "$out")/.locks/$(basename "$out").lock"
exec 8>>"$lock" || { echo "sweep: FAILED: cannot open the lock $lock" >&2; exit 2; }
if ! flock -n 8; then
  echo "sweep: FAILED: $out is being written by another process (lock $lock held); rerun when it ends" >&2
  exit 75
fi

# OUT open for writing in another process (verify_run.sh / ternlab verify exit 5: its HDF5
# file lock held, h5py's "r+", a viewer; a reader's open fails as on a damaged file): left
busy_exit() {
  echo "sweep: FAILED: $out is open for writing in another process (its HDF5 file lock is held):" \
       "not checked, not replaced; rerun when it is closed" >&2
  exit 75
}

if [ -e "$out" ]; then
  # 0 finished and this point's, 3 / 4 another device's / point's, 5 open for
  # writing in another process, else not finished: one `ternlab verify` with
  # the point's checks where it can run
  # (not under TERNLAB_VERIFY_CMD), else verify_run.sh and then those checks
  r=0
  if [ ${#vargs[@]} -gt 0 ] && [ -x "$bin" ] && [ -z "${TERNLAB_VERIFY_CMD:-}" ]; then
    why=$("$bin" verify "${vargs[@]}" "$out" 2>&1 >/dev/null) || r=$?
    case $r in 0|3|4|5) ;; *) reason=$why; r=1 ;; esac
  elif reason=$(bash "$here/verify_run.sh" "$out" 2>&1); then
    if [ ${#vargs[@]} -gt 0 ] && [ -x "$bin" ]; then
      why=$("$bin" verify "${vargs[@]}" "$out" 2>&1 >/dev/null) || r=$?
      case $r in 3|4) ;; *) r=0 ;; esac # (not a mismatch: as verify_run.sh said)
    fi
  else
    r=$?; [ $r -eq 5 ] || r=1
  fi
  [ $r -ne 5 ] || busy_exit
  if [ $r -eq 0 ]; then
    echo "sweep: $out complete, skipped"
    exit 0
  fi
  if [ $r -ne 1 ]; then
    mkdir -p -- "$(dirname "$out")/misplaced"
    to="$(dirname "$out")/misplaced/$(basename "${out%.h5}").point.$(date -u +%Y%m%dT%H%M%SZ).$$.h5"
    if ! mv -n -- "$out" "$to" || [ -e "$out" ]; then
      echo "sweep: FAILED: $out is another point's run (${why#ternlab verify: }) and cannot be moved to $to" >&2
      exit 3
    fi
    echo "sweep: moved $out to $to: ${why#ternlab verify: } (running this point)"
  else
    echo "sweep: $out is not a finished run file ($reason); rerunning"
  fi
fi
rm -f -- "$out" "$out".tmp.*
mkdir -p -- "$(dirname "$out")"

"$@" &
child=$!
stop() {
  kill -TERM "$child" 2>/dev/null
  wait "$child" 2>/dev/null
  rm -f -- "$out".tmp.*
  exit 143
}
trap stop TERM INT HUP
wait "$child"
rc=$?
trap - TERM INT HUP
if [ $rc -ne 0 ]; then
  rm -f -- "$out".tmp.*
  echo "sweep: FAILED (exit $rc): $*" >&2
  exit $rc
fi
vr=0
reason=$(bash "$here/verify_run.sh" "$out" 2>&1) || vr=$?
[ $vr -ne 5 ] || busy_exit # (opened for writing by another process since: left as it is)
if [ $vr -ne 0 ]; then
  rm -f -- "$out" "$out".tmp.*
  echo "sweep: FAILED: the command exited 0 but $out does not verify: $reason" >&2
  exit 3
fi
echo "sweep: $out done"
