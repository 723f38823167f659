#!/usr/bin/env bash
# Packs built ternlab programs with the shared libraries they need that a bare
# GPU machine may lack (HDF5, OpenBLAS, cJSON, OpenSSL's libcrypto and their
# dependencies; not glibc, not the CUDA libraries, which come with the
# toolkit there), so that they run on a machine with a GPU but without the
# Debian packages:  scripts/device_bundle.sh OUTDIR PROGRAM...
# On the GPU machine:
#   mkdir -p /tmp/tl && tar xJf OUTDIR/bundle.tar.xz -C /tmp/tl
#   export LD_LIBRARY_PATH=/tmp/tl/lib:/usr/local/cuda/lib64:$LD_LIBRARY_PATH
#   /tmp/tl/bin/ternlab ...
# (one compressed file: what travels to the GPU machine stays small)
set -euo pipefail
out=$1; shift
mkdir -p "$out/stage/bin" "$out/stage/lib"
for p in "$@"; do cp "$p" "$out/stage/bin/"; done
# the commit the programs were built from, which they read beside themselves
for p in "$@"; do
  d=$(dirname "$p")
  for c in "$d/git_commit" "$d/../git_commit"; do
    [ -f "$c" ] && { cp "$c" "$out/stage/bin/git_commit"; break 2; }
  done
done
skip='^(linux-vdso|ld-linux|libc\.so|libm\.so|libpthread|libdl\.so|librt\.so|libresolv|libcuda|libcudart|libcublas|libnccl|libstdc\+\+|libgcc_s)'
for p in "$@"; do ldd "$p"; done | awk '/=>/ {print $1, $3}' | sort -u | while read -r name path; do
    [[ $name =~ $skip ]] && continue
    [ -f "$path" ] && cp -L "$path" "$out/stage/lib/$name"
done
# (xz -9: a 64 MiB window, so that the programs, each with the whole library, are stored once)
XZ_OPT=${XZ_OPT:--9 -T2} tar cJf "$out/bundle.tar.xz" -C "$out/stage" lib bin
rm -rf "$out/stage"
ls -la "$out"
