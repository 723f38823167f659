# kernels/cuda/gpu.mk — GPU correctness tests and the GPU benchmark.
#
#   make test-gpu     build build/gpu/test_gpu and run it ("N passed, N failed";
#                     "SKIPPED: no GPU" and exit 0 where there is no GPU; T=quick a
#                     smaller set, T=gemv the one- and multi-token GEMVs' configurations,
#                     T=mt the multi-token GEMV's alone, T=wg only the wgmma GEMM's split / tile tests, e.g.
#                     under compute-sanitizer); from the
#                     top Makefile also the CUDA backend tests (test_runner gpu_ cuda_:
#                     fixtures' logits on the GPU, GPU vs CPU greedy, graphs, --tp on GPUs)
#   make bench-gpu    build build/gpu/bench_gpu, run it (BENCH_GPU_OUT, default
#                     results/bench_gpu: CSV + markdown), copy the markdown to
#                     paper/tables/bench_gpu.md (a run without BENCH_ARGS only),
#                     and convert the CSV to HDF5
#                     (bench_gpu.h5, via src/log/h5log.h) where libhdf5 exists
#   make bench-gpu-h5 only the CSV -> HDF5 conversion (on a machine with HDF5,
#                     e.g. after fetching a CSV written on the device machine)
#
# Included by the top Makefile, or used alone (the device machine has nvcc and
# cuBLAS but no HDF5 / OpenBLAS / cJSON): make -f kernels/cuda/gpu.mk test-gpu
# These programs compile only the sources they need, with gcc and nvcc.

GPU_NVCC    ?= $(or $(NVCC),$(shell command -v nvcc 2>/dev/null),/usr/local/cuda/bin/nvcc)
GPU_CUDA    ?= $(patsubst %/bin/nvcc,%,$(GPU_NVCC))
GPU_BUILD   ?= build/gpu
GPU_CC      ?= gcc
# -gencode form: HOPPER.md notes the -arch=sm_90a shorthand can add a plain sm_90 pass
GPU_ARCH    ?= -gencode=arch=compute_90a,code=sm_90a
GPU_NVFLAGS := -O3 $(GPU_ARCH) -std=c++17 -Isrc -Ikernels -I. --compiler-options -Wall,-Werror
GPU_CFLAGS  := -std=c11 -D_GNU_SOURCE -O2 -Wall -Wextra -Werror -Wno-unused-parameter -fopenmp \
               -Isrc -Ikernels -I.
GPU_LIBS    := -L$(GPU_CUDA)/lib64 -lcublas -lcudart -lgomp -lm -lpthread
BENCH_GPU_OUT ?= results/bench_gpu

# the CPU kernels whole (the dispatcher references every variant)
GPU_C_SRC  := src/core/err.c src/core/mem.c src/core/dtype.c src/quant/quant_rules.c \
              src/quant/quant_spec.c src/quant/tern_matrix.c $(sort $(wildcard kernels/cpu/*.c)) \
              kernels/cuda/tern_wg_plan.c
GPU_CU_SRC := kernels/cuda/dense_gemv.cu kernels/cuda/tern_gemv.cu kernels/cuda/tern_gemv_i8.cu kernels/cuda/tern_gemv_rows.cu kernels/cuda/tern_gemv_bmma.cu kernels/cuda/tern_gemm.cu kernels/cuda/tern_gemm_wg.cu kernels/cuda/tern_cuda.cu
GPU_HDRS   := $(wildcard kernels/*.h kernels/cuda/*.h kernels/cuda/*.cuh kernels/cpu/*.h \
                src/core/*.h src/quant/*.h)
GPU_OBJ    := $(GPU_C_SRC:%.c=$(GPU_BUILD)/obj/%.o) $(GPU_CU_SRC:%.cu=$(GPU_BUILD)/obj/%.o)

GPU_FLAGS_avx2   := -mavx2 -mfma -mf16c
GPU_FLAGS_avx512 := -mavx512f -mavx512bw -mavx512vl -mavx512dq -mavx512vnni -mavx2 -mfma -mf16c

.PHONY: test-gpu bench-gpu bench-gpu-h5 gpu-progs

gpu-progs: $(GPU_BUILD)/test_gpu $(GPU_BUILD)/bench_gpu

$(GPU_BUILD)/obj/%_avx2.o: %_avx2.c $(GPU_HDRS)
	@mkdir -p $(dir $@)
	$(GPU_CC) $(GPU_CFLAGS) $(GPU_FLAGS_avx2) -c $< -o $@
$(GPU_BUILD)/obj/%_avx512.o: %_avx512.c $(GPU_HDRS)
	@mkdir -p $(dir $@)
	$(GPU_CC) $(GPU_CFLAGS) $(GPU_FLAGS_avx512) -c $< -o $@
$(GPU_BUILD)/obj/%.o: %.c $(GPU_HDRS)
	@mkdir -p $(dir $@)
	$(GPU_CC) $(GPU_CFLAGS) -c $< -o $@
$(GPU_BUILD)/obj/%.o: %.cu $(GPU_HDRS)
	@mkdir -p $(dir $@)
	$(GPU_NVCC) $(GPU_NVFLAGS) -c $< -o $@

$(GPU_BUILD)/test_gpu: $(GPU_BUILD)/obj/tests/gpu/test_gpu.o $(GPU_OBJ)
	$(GPU_NVCC) $(GPU_ARCH) $^ -o $@ $(GPU_LIBS)
# (bench_gpu --chain norm runs the engine's norm kernel: fwd_cuda.cu too)
$(GPU_BUILD)/bench_gpu: $(GPU_BUILD)/obj/experiments/bench_gpu.o $(GPU_OBJ) $(GPU_BUILD)/obj/kernels/cuda/fwd_cuda.o
	$(GPU_NVCC) $(GPU_ARCH) $^ -o $@ $(GPU_LIBS)

# From the top Makefile, GPU_MODEL_TESTS names build/ternlab and build/test_runner:
# test-gpu then also runs the CUDA backend's tests on the fixtures (gpu_*, cuda_*).
test-gpu: $(GPU_BUILD)/test_gpu $(GPU_MODEL_TESTS)
	$(GPU_BUILD)/test_gpu $(T)
	$(if $(GPU_MODEL_TESTS),TERNLAB_BIN=$(BUILD)/ternlab TERNLAB_BUILD=$(BUILD) $(BUILD)/test_runner gpu_ cuda_)

# (the paper's table only from a whole default run: BENCH_ARGS such as --quick,
# --shape or --sweep-only leave it as it is)
# (from the top Makefile also its git_commit, which bench_gpu records: build/git_commit)
bench-gpu: $(GPU_BUILD)/bench_gpu | $(BUILD_COMMIT)
	$(GPU_BUILD)/bench_gpu --out $(BENCH_GPU_OUT) $(BENCH_ARGS)
	@if [ -z "$(strip $(BENCH_ARGS))" ]; then mkdir -p paper/tables && \
	  cp $(BENCH_GPU_OUT)/bench_gpu.md paper/tables/.bench_gpu.md.tmp && \
	  mv paper/tables/.bench_gpu.md.tmp paper/tables/bench_gpu.md; \
	 else echo "bench-gpu: BENCH_ARGS given: paper/tables/bench_gpu.md left as it is"; fi
	@if pkg-config --exists hdf5 2>/dev/null; then $(MAKE) -f kernels/cuda/gpu.mk bench-gpu-h5; \
	 else echo "bench-gpu: no libhdf5 here; run 'make bench-gpu-h5' where HDF5 exists"; fi

# CSV -> HDF5 through src/log/h5log.h (needs libhdf5; not on the device machine).
$(GPU_BUILD)/bench_csv2h5: tests/gpu/bench_csv2h5.c src/log/h5log.c src/core/err.c src/core/mem.c
	@mkdir -p $(dir $@)
	$(GPU_CC) $(GPU_CFLAGS) $(shell pkg-config --cflags hdf5) $^ -o $@ $(shell pkg-config --libs hdf5)
bench-gpu-h5: $(GPU_BUILD)/bench_csv2h5
	$(GPU_BUILD)/bench_csv2h5 $(BENCH_GPU_OUT)/bench_gpu.csv $(BENCH_GPU_OUT)/bench_gpu.h5
