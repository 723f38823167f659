# ternlab: one Makefile for the runtime, the CLI, tests, experiments, sweeps, figures.
#   make            build everything this machine can (CUDA objects too when nvcc exists)
#   make test       build and run the test suite (prints "N passed, N failed[, N skipped]")
#   DEBUG=1         -g -O0        SANITIZE=1   AddressSanitizer + UBSan (leak checking on)
#   NO_DEPS=1       do not call scripts/deps.sh when a dependency is missing

CC       ?= cc
BUILD    ?= build
PKGS     := hdf5 openblas libcjson libcrypto
# (the figures' Python modules too: the Debian python3, as scripts/paper.mk's PY)
deps_ok   = $(shell pkg-config --exists $(PKGS) 2>/dev/null && command -v parallel >/dev/null && \
              /usr/bin/python3 -c 'import h5py, matplotlib' 2>/dev/null && echo yes)
DEPS_OK  := $(deps_ok)

# A fresh machine: scripts/deps.sh installs what is missing while this file is
# read, before any flag below is formed from pkg-config (an install from a
# rule came too late: the objects then compiled without the packages' include
# paths).  Not for NO_DEPS=1, nor for goals that build nothing.
ifneq ($(DEPS_OK),yes)
ifneq ($(NO_DEPS),1)
ifneq ($(filter-out clean deps,$(or $(MAKECMDGOALS),all)),)
$(info ternlab: installing missing dependencies (scripts/deps.sh))
DEPS_RC := $(shell bash scripts/deps.sh 1>&2; echo $$?)
ifneq ($(DEPS_RC),0)
$(error scripts/deps.sh failed (exit $(DEPS_RC)): install the packages it names, or build with NO_DEPS=1)
endif
DEPS_OK := $(deps_ok)
endif
endif
endif

ifeq ($(DEPS_OK),yes)
PKG_CFLAGS := $(shell pkg-config --cflags $(PKGS))
PKG_LIBS   := $(shell pkg-config --libs $(PKGS))
endif

OPT      := -O2
ifeq ($(DEBUG),1)
OPT      := -g -O0
endif
SAN      :=
ifeq ($(SANITIZE),1)
SAN      := -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined
OPT      := -g -O1
BUILD    := build-san
endif

WARN     := -Wall -Wextra -Werror -Wno-unused-parameter
CFLAGS   += -std=c11 -D_GNU_SOURCE $(OPT) $(SAN) $(WARN) -fopenmp -Isrc -Ikernels -I. $(PKG_CFLAGS)
LDLIBS   += $(PKG_LIBS) -lm -lpthread -fopenmp $(SAN)

# SIMD kernels: the file name says which instruction set it may use; the
# choice among them is made at run time from cpuid (kernels/cpu/dispatch.c).
FLAGS_avx2   := -mavx2 -mfma -mf16c
FLAGS_avx512 := -mavx512f -mavx512bw -mavx512vl -mavx512dq -mavx512vnni -mavx2 -mfma -mf16c

LIB_SRC  := $(sort $(wildcard src/core/*.c src/load/*.c src/quant/*.c src/kv/*.c src/tp/*.c \
              src/runtime/*.c src/eval/*.c src/log/*.c kernels/cpu/*.c kernels/cuda/*.c))
CLI_SRC  := $(wildcard src/cli/*.c)
TEST_SRC := $(wildcard tests/*.c)
EXP_SRC  := $(wildcard experiments/*.c)
LIB_OBJ  := $(LIB_SRC:%.c=$(BUILD)/obj/%.o)
CLI_OBJ  := $(CLI_SRC:%.c=$(BUILD)/obj/%.o)
TEST_OBJ := $(TEST_SRC:%.c=$(BUILD)/obj/%.o)
EXP_BIN  := $(EXP_SRC:experiments/%.c=$(BUILD)/%)
LIB      := $(BUILD)/libternlab.a

# CUDA objects are built when nvcc exists (HAVE_CUDA=0 turns them off).
NVCC     ?= $(shell command -v nvcc 2>/dev/null || ls /usr/local/cuda/bin/nvcc 2>/dev/null)
CU_SRC   := $(wildcard kernels/cuda/*.cu src/runtime/*.cu)
ifneq ($(NVCC),)
ifneq ($(HAVE_CUDA),0)
ifneq ($(CU_SRC),)
CUDA_HOME ?= $(patsubst %/bin/nvcc,%,$(NVCC))
CU_OBJ   := $(CU_SRC:%.cu=$(BUILD)/obj/%.o)
CFLAGS   += -DTL_HAVE_CUDA=1 -I$(CUDA_HOME)/include
LDLIBS   += -L$(CUDA_HOME)/lib64 -lcudart -lcublas -lstdc++
NVFLAGS  := -O3 -gencode=arch=compute_90a,code=sm_90a -std=c++17 -Isrc -Ikernels -I. --compiler-options -Wall,-Werror,-fPIC
# NCCL (multi-GPU tensor parallelism) when its header is there (the toolkit's or Debian's)
ifneq ($(wildcard $(CUDA_HOME)/include/nccl.h /usr/include/nccl.h),)
CFLAGS   += -DTL_HAVE_NCCL=1
NVFLAGS  += -DTL_HAVE_NCCL=1
LDLIBS   += -lnccl
endif
endif
endif
endif

.PHONY: all deps test test-san check-ppl clean bench bench-e2e bench-e2e-kv bench-e2e-hd trace
all: $(BUILD)/ternlab $(BUILD)/test_runner $(EXP_BIN)

deps:
	bash scripts/deps.sh

$(BUILD)/obj/%_avx2.o: %_avx2.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(FLAGS_avx2) -MMD -MP -c $< -o $@
$(BUILD)/obj/%_avx512.o: %_avx512.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(FLAGS_avx512) -MMD -MP -c $< -o $@
$(BUILD)/obj/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -MMD -MP -c $< -o $@
# Run files record the commit this program was built from (exp_git_commit):
# the source tree's HEAD when make runs, "-dirty" where tracked sources differ
# from it (the paths below: the figures, tables and data that make itself
# writes into paper/ do not count, nor untracked files), in $(BUILD)/git_commit
# beside the programs, which read it there.  A text file, not a define: the
# programs stay the same bytes across commits that leave the code alone, and
# the reference cache (keyed by the program's bytes) stays valid.  Rewritten
# only when the value changes; outside a git checkout it is empty and the
# program looks the commit up when it runs (TL_SOURCE_DIR).  (--no-optional-
# locks: `git status` must not take the index lock of a tree someone works in.)
GIT_COMMIT := $(shell git -C '$(CURDIR)' rev-parse HEAD 2>/dev/null)
ifneq ($(GIT_COMMIT),)
GIT_COMMIT := $(GIT_COMMIT)$(if $(shell git -C '$(CURDIR)' --no-optional-locks status --porcelain \
                --untracked-files=no -- src kernels experiments tests scripts configs data Makefile 2>/dev/null),-dirty)
endif
BUILD_COMMIT := $(BUILD)/git_commit
.PHONY: FORCE
$(BUILD_COMMIT): FORCE
	@mkdir -p $(dir $@)
	@printf '%s\n' '$(GIT_COMMIT)' > $@.tmp.$$$$ && \
	  if cmp -s $@.tmp.$$$$ $@; then rm -f $@.tmp.$$$$; else mv $@.tmp.$$$$ $@; fi
$(BUILD)/obj/src/eval/experiment.o: CFLAGS += -DTL_SOURCE_DIR='"$(CURDIR)"'
$(BUILD)/obj/%.o: %.cu
	@mkdir -p $(dir $@)
	$(NVCC) $(NVFLAGS) -MMD -MP -c $< -o $@

$(LIB): $(LIB_OBJ) $(CU_OBJ)
	@rm -f $@
	ar rcs $@ $^

$(BUILD)/ternlab: $(CLI_OBJ) $(LIB) | $(BUILD_COMMIT)
	$(CC) $(CFLAGS) $^ -o $@ $(LDLIBS)

$(BUILD)/test_runner: $(TEST_OBJ) $(LIB) | $(BUILD_COMMIT)
	$(CC) $(CFLAGS) $^ -o $@ $(LDLIBS)

$(BUILD)/exp_%: experiments/exp_%.c $(LIB) | $(BUILD_COMMIT)
	$(CC) $(CFLAGS) $^ -o $@ $(LDLIBS)

# The test suite (CI runs exactly this; see README).
test: $(BUILD)/ternlab $(BUILD)/test_runner $(EXP_BIN)
	TERNLAB_BIN=$(BUILD)/ternlab TERNLAB_BUILD=$(BUILD) $(BUILD)/test_runner $(T)

# The same suite under ASan/UBSan.
test-san:
	$(MAKE) SANITIZE=1 test

# Full WikiText-2 test perplexity vs the transformers reference (minutes: ~3.5 on 2 cores).
check-ppl: $(BUILD)/ternlab $(BUILD)/test_runner
	TERNLAB_BIN=$(BUILD)/ternlab $(BUILD)/test_runner slow_ppl

# CPU kernel benchmark: ternary GEMV/GEMM vs OpenBLAS on the same matrices, medians, HDF5.
bench: $(BUILD)/ternlab
	@mkdir -p results
	$(BUILD)/ternlab bench --out results/bench_cpu.h5

clean:
	rm -rf build build-san build-trace

include scripts/paper.mk
GPU_MODEL_TESTS := $(BUILD)/ternlab $(BUILD)/test_runner
include kernels/cuda/gpu.mk

# The timing probe (kernels/cuda/tern_trace.cuh; development only): build-trace/ternlab
# records every kernel's wait and end per CTA; TERNLAB_TRACE=FILE ternlab bench-e2e ...
# dumps one decode step, scripts/trace_step.py FILE sums it up.
trace:
	$(MAKE) BUILD=build-trace NVFLAGS="$(NVFLAGS) -DTERN_TRACE=1" build-trace/ternlab

# End-to-end GPU throughput of synthetic 7B / 27B models, ternary vs BF16 (needs a GPU).
bench-e2e: $(BUILD)/ternlab
	@mkdir -p results paper/tables
	$(BUILD)/ternlab bench-e2e --out results/bench_e2e.h5 --md paper/tables/bench_e2e.md $(BENCH_ARGS)

# The same at long context under the KV policies (needs a GPU): the 7B shape, 1024-token prompts,
# f32 pages (none) against ternary pages (all).
bench-e2e-kv: $(BUILD)/ternlab
	@mkdir -p results paper/tables
	$(BUILD)/ternlab bench-e2e --shapes 7b --configs bf16,tern-i8 --kv none,all --batches 1,8,64 --prompt 1024 \
		--prefill 64 --out results/bench_e2e_kv.h5 --md paper/tables/bench_e2e_kv.md $(BENCH_ARGS)

# head_dim as the one factor (needs a GPU): the 7B shape against 7b-hd256 (16 heads of 256 dims,
# the same weights), 1024-token prompts, f32 and ternary pages.
bench-e2e-hd: $(BUILD)/ternlab
	@mkdir -p results paper/tables
	$(BUILD)/ternlab bench-e2e --shapes 7b,7b-hd256 --configs bf16,tern-i8 --kv none,all --batches 1,8,64 \
		--prompt 1024 --prefill 64 --out results/bench_e2e_hd.h5 --md paper/tables/bench_e2e_hd.md $(BENCH_ARGS)

# The experiments: `make exp-kv-ternary` (the main job) runs the sweep of that
# experiment's config on both embedded models through GNU Parallel (resumable),
# then draws its figure and table (its own only: the others' stay as they are; `make figures
# tables` draws every one).  MODEL="path ..." JOBS=N ARGS="key=value ..."
EXPERIMENTS := exp-threshold exp-scale-dtype exp-group-size exp-kv-ternary exp-throughput
.PHONY: $(EXPERIMENTS) experiments
$(EXPERIMENTS): all
	bash scripts/sweep.sh $@ --jobs $(JOBS) --results '$(RESULTS)' $(foreach m,$(MODEL),--model $(m)) $(ARGS)
	$(PY) scripts/figures.py --results '$(RESULTS)' --out paper/figures $@
	$(PY) scripts/tables.py --results '$(RESULTS)' --out paper/tables $@
experiments: $(EXPERIMENTS)

-include $(shell find $(BUILD) build-san -name '*.d' 2>/dev/null)
