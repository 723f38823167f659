#!/usr/bin/env bash
# usage: scripts/verify_run.sh FILE...
# Exit 0 when every FILE is a finished ternlab run file; otherwise print the
# reason for the first that is not and exit 1 -- or 5 where that file is open
# for writing in another process (its HDF5 file lock held: h5py's "r+", a
# viewer), which is not read (a reader's open fails as on a damaged file, and
# a sweep had removed the finished run).  The checker is, in order:
#   $TERNLAB_VERIFY_CMD FILE            (a command prefix, e.g. for tests)
#   ${TERNLAB_BIN:-build/ternlab} verify FILE   (h5log_verify_schema: opens, complete == 1,
#                                        every schema dataset present and readable, the
#                                        root attributes' kinds, the datasets' shapes)
#   h5dump -a /complete FILE            (fallback while `ternlab verify` is missing:
#                                        opens, and the root attribute complete is 1)
set -u
[ $# -ge 1 ] || { echo "usage: $0 FILE..." >&2; exit 2; }

bin=${TERNLAB_BIN:-build/ternlab}
mode=h5dump
if [ -n "${TERNLAB_VERIFY_CMD:-}" ]; then
  mode=custom
elif [ -x "$bin" ] && "$bin" verify --help >/dev/null 2>&1; then
  mode=ternlab
fi

for f in "$@"; do
  if [ ! -f "$f" ]; then echo "$f: no such file"; exit 1; fi
  # (HDF5 takes flock's exclusive lock on a file it opens for writing)
  # (on a descriptor of the file as it is: flock FILE opens with O_CREAT, and a run file
  # removed meanwhile came back empty)
  { flock -s -n -E 75 9; } 2>/dev/null 9<"$f"
  if [ $? -eq 75 ]; then
    echo "$f: open for writing in another process (its HDF5 file lock is held): not checked"; exit 5
  fi
  case $mode in
    custom)  out=$($TERNLAB_VERIFY_CMD "$f" 2>&1) || { echo "$f: ${out:-verification failed}"; exit 1; } ;;
    ternlab) out=$("$bin" verify "$f" 2>&1) || { echo "${out:-$f: verification failed}"; exit 1; } ;;
    h5dump)
      out=$(h5dump -a /complete "$f" 2>&1) || { echo "$f: h5dump cannot read it (truncated or corrupt?)"; exit 1; }
      printf '%s\n' "$out" | grep -Eq '^[[:space:]]*\(0\):[[:space:]]*1[[:space:]]*$' \
        || { echo "$f: incomplete (root attribute complete is not 1)"; exit 1; } ;;
  esac
done
exit 0
