#!/usr/bin/env bash
# The first GPU run after a session without a GPU (dev/NOTES.md, thirty-second
# session): the host code and benchmark changes that were only built, verified
# and measured in one device call.  Here (the development machine):
#   make -j2 && mkdir -p .devlibs && rm -f .devlibs/bundle.tar.xz &&
#   scripts/device_bundle.sh .devlibs build/ternlab build/test_runner \
#       build/exp_kv_ternary build/exp_throughput
# then, through the device tool, with carry [".devlibs"]:
#   bash kernels/cuda/dev/verify_on_gpu.sh [STEP...]     (default: all)
# STEPs: tests  bench  e2e  chain (and for the bf16 bulk-copy GEMV: bf  bfsweep
# engine  bfe2e; for the host changes of sessions without a GPU: host, which
# needs only the bundle of ternlab, test_runner and the exp_* programs; on two
# GPUs: tp; the LM head GEMV and the step's ends: lmhead, with test_gpu and
# bench_gpu built here and in the bundle; the paper's tables: tables, with the same bundle; the side uploads: sideup; the
# dense GEMV's two rows a warp: r2, with bench_gpu_r1 and bench_gpu_mma in the bundle too;
# x staged as f32: xf, with bench_gpu_r2; the fused forms at 2 .. 8 tokens: mt, with test_gpu;
# their last commits: v64; the few-token forms' A/B on an H200: mtab; the GLU form's device default: dflt; the KV and head_dim tables: kvhd;
# the LM head kept in L2 (dev/lm_keep.patch applied): keep; every kernel test and the engine's: full; the greedy tests under a
# forced OpenBLAS core: tie).  Logs and tables are written under
# /tmp/verify-gpu and come back as $OUT/verify.tgz and $OUT/status.txt (the
# device tool returns few files).
# Each step records its exit status; the script goes on after a failure so
# one call returns everything (all four steps: ~8 min with the build, under
# the device tool's 10 min a call; `tests` alone ~6 min).
set -uo pipefail
dest=${OUT:-gpu-out}
out=/tmp/verify-gpu
rm -rf "$out"
mkdir -p "$dest" "$out" /tmp/tl
steps=("$@")
[ ${#steps[@]} -eq 0 ] && steps=(tests bench e2e chain)
tar xJf .devlibs/bundle.tar.xz -C /tmp/tl || { echo "no .devlibs/bundle.tar.xz (see the header)"; exit 2; }
export LD_LIBRARY_PATH=/tmp/tl/lib:/usr/local/cuda/lib64:/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
export TERNLAB_BIN=/tmp/tl/bin/ternlab TERNLAB_BUILD=/tmp/tl/bin TERNLAB_TEST_TIMEOUT=200
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.memory,power.limit --format=csv > "$out/gpu.txt" 2>&1
# Some device images set OPENBLAS_CORETYPE=Haswell on AVX-512 CPUs: the CPU side of the GPU-vs-CPU
# greedy tests then runs Haswell sgemm kernels whose rounding parted bitnet-tiny's and llama-tiny's
# ternary greedy tokens from the GPU's (tokens 30 and 62; sixty-fourth session). The programs
# respect a user's core, so the script drops the image's (KEEP_CORETYPE=1 keeps it) and records it.
echo "OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE-unset} (kept: ${KEEP_CORETYPE:-0}); $(grep -m1 'model name' /proc/cpuinfo)" >> "$out/gpu.txt"
[ "${KEEP_CORETYPE:-0}" = 1 ] || unset OPENBLAS_CORETYPE
# (test_gpu and bench_gpu built here only for the steps that run them)
if [[ " ${steps[*]} " =~ \ (tests|bench|chain|bf|bfsweep)\  ]]; then
    make -f kernels/cuda/gpu.mk GPU_BUILD=/tmp/g /tmp/g/test_gpu /tmp/g/bench_gpu -j16 > "$out/build.log" 2>&1
    echo "build rc=$?" | tee -a "$out/status.txt"
fi

run() { # name command...: output to $out/name.log, status to status.txt
    local name=$1; shift
    local t0=$SECONDS
    "$@" > "$out/$name.log" 2>&1
    local rc=$?
    echo "$name rc=$rc $((SECONDS - t0))s: $(tail -1 "$out/$name.log")" | tee -a "$out/status.txt"
    # (after every command: a call cut off at its time limit still returns what ran)
    tar czf "$dest/verify.tgz" -C "$out" . && cp "$out/status.txt" "$dest/"
}

lm_heads() { # name binary [tokens]: a bench_gpu binary on the LM heads' shapes (default 1 .. 4 tokens)
    local name=$1 bin=$2 ms=${3:-1,2,3,4} sh
    for sh in 32000x4096 256000x4608; do
        run "${name}_$sh" "$bin" --out "$out/${name}_$sh" --shape "$sh" --ms "$ms"
    done
}
e2e_b24() { # name: the 7B and 27B decoding 2 and 4 sequences, the LM head on the GEMV (lm1) and on cuBLAS (lm0)
    local lm
    for lm in 1 0; do
        run "${1}_lm$lm" env TERNLAB_CUDA_LM_GEMV=$lm /tmp/tl/bin/ternlab bench-e2e --shapes 7b,27b \
            --configs tern-i8 --batches 2,4 --prefill 16 --out "$out/${1}_lm$lm.h5" --md "$out/${1}_lm$lm.md"
    done
}
gemv_ab() { # prefix binary...: the dense GEMV's tests, each binary (where in the bundle) on the LM
    # heads' shapes, twice, then e2e_b24 (the logs named prefix + binary + round + shape)
    local p=$1 i b
    shift
    run test_gpu_dense /tmp/tl/bin/test_gpu dense
    for i in 1 2; do
        for b in "$@"; do
            [ -x "/tmp/tl/bin/$b" ] && lm_heads "$p${b}_$i" "/tmp/tl/bin/$b"
        done
    done
    e2e_b24 "${p}e2e_b24"
}

for s in "${steps[@]}"; do
    case $s in
    tests) # the GPU tests, the engine's (gpu_failed_launch_resends_tables is new)
        run test_gpu_quick /tmp/g/test_gpu quick
        run engine_tests /tmp/tl/bin/test_runner gpu_ cuda_ exp_device bench_e2e ;;
    bench) # the new protocol (the same calls a replay for every kernel of a shape), twice
        for i in $(seq "${BENCH_RUNS:-2}"); do
            run bench_gpu_$i /tmp/g/bench_gpu --out "$out/bench_gpu_$i"
        done ;;
    e2e) # the BF16 reference now keeps its cuBLAS workspace: three full tables
        for i in $(seq "${E2E_RUNS:-3}"); do
            run bench_e2e_$i /tmp/tl/bin/ternlab bench-e2e --shapes 7b,27b --out "$out/e2e_$i.h5" \
                --md "$out/e2e_$i.md"
        done ;;
    chain) # variants behind the engine's norm, on the 7B's and 27B's one-token shapes
        for sh in 12288x4096 4096x4096 22016x4096 4096x11008 8192x4608 4608x4096; do
            run chain_$sh /tmp/g/bench_gpu --out "$out/chain_$sh" --shape "$sh" --ms 1 --chain norm \
                --sweep-only var_63520,63521,63530,63531,64520,65520,65521,65820,65822
        done ;;
    bf) # the bf16 bulk-copy GEMV (thirty-third session): its grid of variants, the refusals
        run test_gpu_bf /tmp/g/test_gpu bf
        run test_gpu_errors /tmp/g/test_gpu errors ;;
    bfsweep) # its variants at M = 1, 8, 16 (BF_SHAPES, BF_VARS override the lists)
        for sh in ${BF_SHAPES:-36864x4608 4608x36864 14336x4096 4096x14336 4096x4096}; do
            run bfsweep_$sh /tmp/g/bench_gpu --out "$out/bfsweep_$sh" --shape "$sh" --ms 1,8,16 \
                --sweep-only bf_${BF_VARS:-63520,64520,65520,66520,68520,62520,63530,65530,64530,65820,65420,63420,65521,64521,65540}
        done ;;
    engine) # the engine's GPU tests
        run engine_tests /tmp/tl/bin/test_runner gpu_ cuda_ exp_device bench_e2e ;;
    bfe2e) # bf16 activations end to end, twice
        for i in 1 2; do
            run bfe2e_$i /tmp/tl/bin/ternlab bench-e2e --shapes 7b,27b --configs bf16,tern-bf16 --batches 1,8 \
                --prefill 16 --out "$out/bfe2e_$i.h5" --md "$out/bfe2e_$i.md"
        done ;;
    host) # host changes made without a GPU (fifty-seventh, fifty-eighth sessions): the cgroup
        # quota as the GPU machine's container sets it, the thread count the programs take,
        # the engine's GPU tests with the host tests those sessions added, the 7B at batch 1
        run cgroup sh -c 'nproc; cat /proc/self/cgroup; for f in /sys/fs/cgroup/cpu.max \
            /sys/fs/cgroup/cpu/cpu.cfs_quota_us /sys/fs/cgroup/cpu,cpuacct/cpu.cfs_quota_us; do
            [ -f "$f" ] && echo "$f: $(cat "$f")"; done; /tmp/tl/bin/ternlab info --model data/llama-tiny | grep -i thread'
        run host_tests /tmp/tl/bin/test_runner gpu_ cuda_ bench_e2e exp_device ppl_cli_kv exp_each quantize_stopped \
            diag_cgroup preflight_workspace_tokens mem_paths
        for i in 1 2; do
            run e2e7b_$i /tmp/tl/bin/ternlab bench-e2e --shapes 7b --configs bf16,tern-i8 --batches 1 --prefill 16 \
                --out "$out/e2e7b_$i.h5" --md "$out/e2e7b_$i.md"
        done ;;
    tp) # two GPUs (kind nvidia-h100-x2 / h200-x2): the tensor-parallel tests, the fault
        # injection's among them (fifty-eighth session: the ranks poll instead of waiting), and
        # the 7B at tp 2 twice, against the README's tp 2 table (the poll's cost, if any)
        run tp_tests /tmp/tl/bin/test_runner gpu_tp gpu_device_fault
        for i in 1 2; do
            run e2e_tp2_$i /tmp/tl/bin/ternlab bench-e2e --shapes 7b --configs bf16,tern-i8 --batches 1,8 --tp 2 \
                --prefill 16 --out "$out/e2e_tp2_$i.h5" --md "$out/e2e_tp2_$i.md"
        done ;;
    lmhead) # sixtieth session: a ternary model's LM head on ternlab's bf16 GEMV, the last residual
        # add in the final norm, the step's first kernel doing the embedding (test_gpu and bench_gpu
        # from the bundle: scripts/device_bundle.sh ... build/gpu/test_gpu build/gpu/bench_gpu)
        run test_gpu_dense /tmp/tl/bin/test_gpu dense
        # batch 1: the BF16 reference, then tern-i8 with the changes, each alone off, all off (the
        # 27B with all and with none); two rounds, the engine's GPU tests between them
        for i in 1 2; do
            [ "$i" = 2 ] && run engine_tests /tmp/tl/bin/test_runner gpu_ cuda_ exp_device bench_e2e
            for v in bf16 on lm0 tail0 ids0 both0; do
                lm=1 tl=1 im=1 cfg=tern-i8 shapes=7b
                case $v in bf16) cfg=bf16 shapes=7b,27b ;; on | both0) shapes=7b,27b ;; esac
                case $v in lm0) lm=0 ;; tail0) tl=0 ;; ids0) im=0 ;; both0) lm=0 tl=0 im=0 ;; esac
                run e2e_${v}_$i env TERNLAB_CUDA_LM_GEMV=$lm TERNLAB_CUDA_TAIL=$tl TERNLAB_CUDA_IDS_MAPPED=$im \
                    /tmp/tl/bin/ternlab bench-e2e \
                    --shapes $shapes --configs $cfg --batches 1 --prefill 16 --out "$out/e2e_${v}_$i.h5" \
                    --md "$out/e2e_${v}_$i.md"
            done
        done
        # where a step's time goes outside its graph: the inputs' upload, the graph, the ids back
        run step_time env TERNLAB_CUDA_STEP_TIME=1 /tmp/tl/bin/ternlab bench-e2e --shapes 7b --configs tern-i8 \
            --batches 1 --prefill 16 --sync-steps --same-process --out "$out/e2e_sync.h5" --md "$out/e2e_sync.md"
        lm_heads bench_lm /tmp/tl/bin/bench_gpu 1,4 ;;
    sideup) # sixty-first session: a chained step's inputs up on a side stream into one of two
        # buffers while the step before runs (TERNLAB_CUDA_SIDE_UP; bundle built with
        # dev/side_upload.patch applied, not kept: no gain on an H100): the engine's GPU tests, then
        # the 7B and 27B at batch 1 with and without, three rounds, and the BF16 reference once
        # (and the dense GEMV's 2 .. 4 tokens on the tensor cores: its tests, the LM heads' shapes)
        run test_gpu_dense /tmp/tl/bin/test_gpu dense
        lm_heads bench_lm /tmp/tl/bin/bench_gpu
        run engine_tests /tmp/tl/bin/test_runner gpu_ cuda_ exp_device bench_e2e
        run e2e_bf16 /tmp/tl/bin/ternlab bench-e2e --shapes 7b,27b --configs bf16 --batches 1 --prefill 16 \
            --out "$out/e2e_bf16.h5" --md "$out/e2e_bf16.md"
        for i in 1 2 3; do
            for su in 1 0; do
                run e2e_su${su}_$i env TERNLAB_CUDA_SIDE_UP=$su /tmp/tl/bin/ternlab bench-e2e --shapes 7b,27b \
                    --configs tern-i8 --batches 1 --prefill 16 --out "$out/e2e_su${su}_$i.h5" --md "$out/e2e_su${su}_$i.md"
            done
        done ;;
    gemv) # sixty-first session: the dense GEMV (as built; with dev/dense_gemv_mma.patch applied,
        # its 2 .. 4 tokens on the tensor cores): its tests, the LM heads' shapes at 1 .. 4 tokens
        # twice, the engine's LM-head and chain tests, the 7B and 27B at batch 1 twice
        run test_gpu_dense /tmp/tl/bin/test_gpu dense
        for i in 1 2; do
            lm_heads bench_lm_$i /tmp/tl/bin/bench_gpu
        done
        run engine_lm /tmp/tl/bin/test_runner gpu_tail gpu_decode_chain bench_e2e
        for i in 1 2; do
            run e2e_b1_$i /tmp/tl/bin/ternlab bench-e2e --shapes 7b,27b --configs bf16,tern-i8 --batches 1 \
                --prefill 16 --out "$out/e2e_b1_$i.h5" --md "$out/e2e_b1_$i.md"
        done ;;
    r2) # sixty-second session: the dense GEMV's 2 .. 4 tokens with two rows a warp (bench_gpu,
        # test_gpu as built) against the form before (bench_gpu_r1: one row a warp, built at
        # d9fcf83) and the tensor-core form (bench_gpu_mma), twice, on the LM heads' shapes; any card
        # (it replaces the sixty-first session's h200 step, which compared the last two on an H200 only)
        gemv_ab lm_ bench_gpu bench_gpu_r1 bench_gpu_mma ;;
    xf) # sixty-second session: the dense GEMV's 2 .. 4 tokens with x staged as f32 (bench_gpu,
        # test_gpu and ternlab built with dev/dense_gemv_xf.patch applied) against two rows a warp
        # with bf16 x (bench_gpu_r2: the kept form, as built),
        # twice, on the LM heads' shapes; the 7B and 27B decoding 2 and 4 sequences, LM head on
        # the GEMV and on cuBLAS
        gemv_ab xf_ bench_gpu bench_gpu_r2 ;;
    mt) # sixty-third session: decode steps of 2 .. 8 sequences: o's int8 pass from the attention's
        # maxima (TERNLAB_CUDA_OMAX) and the GLU in the gate|up GEMV where the int8 dispatch would
        # not take the multi-token GEMV (TERNLAB_CUDA_MT_FUSE): their kernel tests, the engine's
        # GPU tests, the 7B and 27B at batches 2, 3, 4, 8 with both, neither and each alone (two
        # rounds), then the multi-token and one-token GEMVs' whole tests (test_gpu from the bundle)
        run test_gpu_fusedmt /tmp/tl/bin/test_gpu fusedmt
        run engine_tests /tmp/tl/bin/test_runner gpu_ cuda_ exp_device bench_e2e
        for i in 1 2; do
            for v in on off om mt; do
                case $v in on) ev=() ;; off) ev=(TERNLAB_CUDA_MT_FUSE=0 TERNLAB_CUDA_OMAX=0) ;;
                om) ev=(TERNLAB_CUDA_MT_FUSE=0) ;; mt) ev=(TERNLAB_CUDA_OMAX=0) ;; esac
                run e2e_${v}_$i env "${ev[@]}" \
                    /tmp/tl/bin/ternlab bench-e2e --shapes 7b,27b --configs tern-i8 --batches 2,3,4,8 --prefill 16 \
                    --out "$out/e2e_${v}_$i.h5" --md "$out/e2e_${v}_$i.md"
            done
        done
        run test_gpu_gemv /tmp/tl/bin/test_gpu gemv ;;
    dflt) # sixty-ninth session: the GLU form's device default on the card at hand: the 27B at
        # batches 2 and 8 with TERNLAB_CUDA_MT_FUSE unset (the device's bound), 8 and 0, two rounds
        # (DFLT_ROUNDS), then the bound's own test (its memory clock read through the CUDA
        # attribute; gpu.txt has nvidia-smi's clocks.max.memory, an independent reading, to set beside it)
        for i in $(seq "${DFLT_ROUNDS:-2}"); do
            for v in unset 8 0; do
                ev=(); [ $v = unset ] || ev=(TERNLAB_CUDA_MT_FUSE=$v)
                run dflt_${v}_$i env "${ev[@]}" /tmp/tl/bin/ternlab bench-e2e --shapes 27b \
                    --configs tern-i8 --batches 2,8 --prefill 16 --out "$out/dflt_${v}_$i.h5" --md "$out/dflt_${v}_$i.md"
            done
        done
        run dflt_test /tmp/tl/bin/test_runner gpu_glu_form_default_by_memory ;;
    mtab) # sixty-seventh session: the few-token forms on an H200, where one round had the 27B
        # slower with them (B = 2 4.287 against 4.198 ms with both off) and the 7B faster: both
        # shapes at batches 2, 4, 8, three rounds of both on, off, each alone and the GLU form's
        # bound at 2 and 4 tokens (TERNLAB_CUDA_MT_FUSE=N, o's maxima on)
        for i in 1 2 3; do
            for v in on off om mt f2 f4; do
                case $v in on) ev=() ;; off) ev=(TERNLAB_CUDA_MT_FUSE=0 TERNLAB_CUDA_OMAX=0) ;;
                om) ev=(TERNLAB_CUDA_MT_FUSE=0) ;; mt) ev=(TERNLAB_CUDA_OMAX=0) ;;
                f2) ev=(TERNLAB_CUDA_MT_FUSE=2) ;; f4) ev=(TERNLAB_CUDA_MT_FUSE=4) ;; esac
                run ab_${v}_$i env "${ev[@]}" /tmp/tl/bin/ternlab bench-e2e --shapes 7b,27b \
                    --configs tern-i8 --batches 2,4,8 --prefill 16 --out "$out/ab_${v}_$i.h5" --md "$out/ab_${v}_$i.md"
            done
        done ;;
    kvhd) # sixty-seventh session: the ternary-KV and head_dim tables (make bench-e2e-kv / -hd, last
        # run at 9c68763 before the step's ends and the few-token forms changed), three runs each,
        # alternating (the middle of three goes to paper/tables, paper/data). An H200's memory: at
        # batch 64 the 1024-token prompts' f32 pages are ~73 GB beside the BF16 7B's 13.5 GB (an
        # H100 80GB refuses the activations, "out of memory")
        for i in 1 2 3; do
            run kv_$i /tmp/tl/bin/ternlab bench-e2e --shapes 7b --configs bf16,tern-i8 --kv none,all \
                --batches 1,8,64 --prompt 1024 --prefill 64 --out "$out/kv_$i.h5" --md "$out/kv_$i.md"
            run hd_$i /tmp/tl/bin/ternlab bench-e2e --shapes 7b,7b-hd256 --configs bf16,tern-i8 --kv none,all \
                --batches 1,8,64 --prompt 1024 --prefill 64 --out "$out/hd_$i.h5" --md "$out/hd_$i.md"
        done ;;
    keep) # sixty-eighth session: a ternary model's LM head kept in L2 between steps (its first
        # rows read evict-last into the persisting set-aside; TERNLAB_CUDA_LM_KEEP=MiB, default the
        # device's most; not kept: the bundle built with dev/lm_keep.patch applied): the tests,
        # then 7B / 27B tern-i8 at batch 1 and 8, three rounds of the default, none (0), 8 and 16 MiB
        run test_gpu_dense /tmp/tl/bin/test_gpu dense
        run engine_keep /tmp/tl/bin/test_runner gpu_lm_keep gpu_tail bench_e2e
        for i in 1 2 3; do
            for v in def 0 8 16; do
                case $v in def) ev=() ;; *) ev=(TERNLAB_CUDA_LM_KEEP=$v) ;; esac
                run keep_${v}_$i env "${ev[@]}" /tmp/tl/bin/ternlab bench-e2e --shapes 7b,27b \
                    --configs tern-i8 --batches 1,8 --prefill 16 --out "$out/keep_${v}_$i.h5" --md "$out/keep_${v}_$i.md"
            done
        done ;;
    v64) # sixty-fourth session: the sixty-third's last three commits (test helpers, one row on the
        # one-CTA int8 kernel, the engine's int8 conditions in helpers) on a GPU: the few-token and
        # multi-token GEMV tests, the engine's GPU tests, one round of the few-token A/B
        run test_gpu_fusedmt /tmp/tl/bin/test_gpu fusedmt
        run engine_tests /tmp/tl/bin/test_runner gpu_ cuda_ exp_device bench_e2e
        run test_gpu_gemv /tmp/tl/bin/test_gpu gemv
        for v in on off; do
            case $v in on) ev=() ;; off) ev=(TERNLAB_CUDA_MT_FUSE=0 TERNLAB_CUDA_OMAX=0) ;; esac
            run e2e_$v env "${ev[@]}" /tmp/tl/bin/ternlab bench-e2e --shapes 7b,27b --configs tern-i8 \
                --batches 1,2,4,8 --prefill 16 --out "$out/e2e_$v.h5" --md "$out/e2e_$v.md"
        done ;;
    tie) # sixty-fifth session: the GPU-vs-CPU greedy tests with the CPU's OpenBLAS core forced to
        # Haswell (TIE_CORES overrides), where the sixty-fourth session's card parted; a failure
        # now prints each path's logits at the parting step (fixture_forced_logits)
        for c in ${TIE_CORES:-Haswell}; do
            run tie_$c env OPENBLAS_CORETYPE=$c /tmp/tl/bin/test_runner gpu_greedy_equals_cpu
        done ;;
    full) # every kernel test (test_gpu with no group: the whole suite, from the bundle) and the
        # engine's GPU tests: the full GPU verification at the bundle's commit
        # (the engine's first, then the kernels' under a limit, FULL_LIMIT seconds: a call that
        # would run past the device's own limit still returns the log of what ran)
        run engine_tests /tmp/tl/bin/test_runner gpu_ cuda_ exp_device bench_e2e
        run test_gpu_all timeout "${FULL_LIMIT:-360}" /tmp/tl/bin/test_gpu ;;
    tables) # the paper's tables (sixty-first session): bench-e2e's default run and bench_gpu's, three
        # times each, alternating (the middle of three goes to paper/tables, paper/data)
        for i in 1 2 3; do
            run tables_e2e_$i /tmp/tl/bin/ternlab bench-e2e --out "$out/tables_e2e_$i.h5" --md "$out/tables_e2e_$i.md"
            run tables_gpu_$i /tmp/tl/bin/bench_gpu --out "$out/tables_gpu_$i"
        done ;;
    *) echo "unknown step $s (tests bench e2e chain bf bfsweep engine bfe2e host tp lmhead sideup gemv r2 xf mt mtab dflt kvhd keep v64 full tie tables)" | tee -a "$out/status.txt" ;;
    esac
    # (after every step: a call cut off at its time limit still returns what ran)
    tar czf "$dest/verify.tgz" -C "$out" . && cp "$out/status.txt" "$dest/"
done
cat "$out/status.txt"
