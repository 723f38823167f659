#!/usr/bin/env bash
# Installs ternlab's dependencies from Debian packages when they are missing.
# Idempotent: does nothing when everything is present.  CUDA is optional and is
# not installed here (the CUDA toolkit is used when nvcc is on the machine).
set -euo pipefail

need=()
have_pkg() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"; }
for p in libhdf5-dev hdf5-tools libopenblas-dev libcjson-dev parallel python3-matplotlib \
         python3-h5py pkg-config make gcc libssl-dev; do
  have_pkg "$p" || need+=("$p")
done
# Fuzzing (tests/fuzz/run.sh, .ci/fuzz.sh): clang and its libFuzzer runtime,
# which Debian ships in libclang-rt-<major>-dev (14 on bookworm).
clang_major=14
if command -v clang >/dev/null; then
  clang_major=$(clang -dumpversion 2>/dev/null | cut -d. -f1)
  [ -n "$clang_major" ] || clang_major=14
fi
for p in clang "libclang-rt-${clang_major}-dev"; do
  have_pkg "$p" || need+=("$p")
done

if [ ${#need[@]} -eq 0 ]; then
  echo "deps: all present"
  exit 0
fi

echo "deps: installing ${need[*]}"
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${need[@]}"
echo "deps: done"
