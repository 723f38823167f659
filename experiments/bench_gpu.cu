/* bench_gpu.cu — ternary CUDA matmuls against cuBLAS BF16, same run, same GPU.
 *
 *   build/gpu/bench_gpu [--out DIR] [--quick] [--group row|tensor|32|64|128|256]
 *                       [--sweep-decode | --sweep-only NAME|var_V[,V..]|bf_V[,V..]] [--decode-variant V]
 *                       [--ms M1,M2,..|none]
 *                       [--shape NxK] [--calls N] [--chain norm]
 *
 * Shapes (N x K = rows x cols of W): 4096x4096, 14336x4096, 4096x14336,
 * 36864x4608, 4608x36864 (--shape: one given shape instead); M (tokens) in
 * {1, 8, 16, 64, 256, 2048}.
 * Kernels: tern_bf16 (bf16 activations), tern_i8 (int8 activations + per
 * token scales), tern_f32 (M <= 16: the fp32 reference path), cublas_bf16
 * (cublasGemmEx bf16 x bf16, fp32 accumulate, f32 out: the same output as
 * ours, the baseline of the ratios) and cublas_bf16_o16 (bf16 out, shown).
 *
 * Method (STYLE.md 7, METHOD.md): weights rotate over R device copies so that
 * R copies are >= 256 MB where at most 64 copies reach it (L2 is 60 MB: a
 * decode step streams weights from HBM, never from L2; the header states
 * the least any timed graph rotated over); every kernel of a shape runs C =
 * max(R of any of its kernels, --calls N, default 16) calls a graph, cycling
 * over its own copies, captured in one CUDA graph, warmed up, and each
 * replay timed with events; the median replay / C is the time of a call.
 * (With C = R, the dense bf16 weights of 36864 x 4608 — 340 MB, one copy —
 * were one call per replay, so the replay's launch gap fell on cuBLAS
 * alone; until the thirty-second session C was max(R, N) per kernel, 16
 * for cuBLAS against up to 61 for the ternary kernels.)  int8 activations
 * are quantised before the timing (the per-token pass is not timed).  The
 * device-to-device copy bandwidth (1 GiB, bytes read + written:
 * the larger of the medians of cudaMemcpyAsync and of a copy kernel,
 * tern_cuda_copy_bandwidth, as bench-e2e measures it) is measured
 * in the same run and is the "physical limit" of the bandwidth fraction.  Effective bandwidth counts packed codes
 * + f32 scales (+ dense bf16 weights for cuBLAS) + activations read +
 * outputs written, each once.
 *
 * --chain norm: the decode step's order for the int8 GEMVs of 1 .. 16
 * tokens (the sweep's entries and the tern_i8 rows): each call preceded by
 * the engine's one-CTA RMSNorm + int8 pass (fwdc_norm) that writes its
 * input, with the SM it holds left out of the one-token bulk-copy grids as
 * the engine does (tern_cuda_tbm_reserve 1); rows "..._norm" time the pair,
 * "norm" the norm alone.  Alone, a GEMV variant with one CTA per SM and
 * three stages often wins where the step prefers another (dev/NOTES.md,
 * thirtieth session): this ranks variants in the step's surroundings.
 *
 * Output: DIR/bench_gpu.csv (one row per shape, M, kernel; the last column
 * names the ternary kernel the dispatch chose), DIR/bench_gpu.md
 * (the paper table) and, on stdout, the same table.  HDF5: the device
 * machine has no libhdf5, so tests/gpu/bench_csv2h5.c turns the CSV into
 * DIR/bench_gpu.h5 through src/log/h5log.h where HDF5 exists (make bench-gpu
 * does both when it can). */
#include <cuda_runtime.h>

#include <algorithm>
#include <deque>
#include <functional>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <string>
#include <vector>

#include "cuda/fwd_cuda.h"
#include "cuda/tern_cuda.h"
#include "cuda/tern_launch.cuh"
extern "C" {
#include "core/dtype.h"
#include "core/err.h"
#include "core/mem.h"
#include "quant/quant.h"
}

#define DIE(...)                                                                            \
    do {                                                                                    \
        fprintf(stderr, "bench_gpu: " __VA_ARGS__);                                        \
        fprintf(stderr, "\n");                                                              \
        exit(1);                                                                            \
    } while (0)
#define CK(call)                                                                            \
    do {                                                                                    \
        cudaError_t e_ = (call);                                                            \
        if (e_ != cudaSuccess) DIE("%s:%d: %s: %s", __FILE__, __LINE__, #call, cudaGetErrorString(e_)); \
    } while (0)
#define TL(call)                                                                            \
    do {                                                                                    \
        if ((call) < 0) DIE("%s:%d: %s: %s", __FILE__, __LINE__, #call, err_msg());         \
    } while (0)

static const double ROTATE_BYTES = 256e6; /* weights streamed per graph, >> 60 MB L2 */
static const int WARMUP = 3, REPS = 15;

static uint64_t g_rng = 0x2545f4914f6cdd1dull;
static uint32_t rnd(void) {
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return (uint32_t)(g_rng >> 11);
}

/* Random bf16 in about [-1, 1) (hash of the index: no host transfer). */
__global__ void fill_bf16(uint16_t *p, size_t n, uint32_t seed, float scale) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        uint32_t h = (uint32_t)i * 2654435761u ^ seed;
        h ^= h >> 15, h *= 2246822519u, h ^= h >> 13, h *= 3266489917u, h ^= h >> 16;
        float v = ((float)(h & 0xffffff) / 8388608.0f - 1.0f) * scale;
        uint32_t u;
        memcpy(&u, &v, 4);
        p[i] = (uint16_t)((u + 0x7fff + ((u >> 16) & 1)) >> 16);
    }
}
__global__ void fill_i8(int8_t *p, size_t n, uint32_t seed) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        uint32_t h = (uint32_t)i * 2654435761u ^ seed;
        h ^= h >> 15, h *= 2246822519u, h ^= h >> 13;
        p[i] = (int8_t)(h & 0xff);
    }
}
__global__ void fill_f32(float *p, size_t n, uint32_t seed) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        uint32_t h = (uint32_t)i * 2654435761u ^ seed;
        h ^= h >> 15, h *= 2246822519u, h ^= h >> 13;
        p[i] = (float)(h & 0xffff) / 32768.0f - 1.0f + 1e-3f;
    }
}

/* The commit this program was built from: the top Makefile's git_commit
 * beside the program or in the folder above it (build/gpu/bench_gpu ->
 * build/git_commit), else "unknown". */
static std::string build_commit() {
    char c[96];
    exe_side_line("git_commit", 1, c, sizeof c);
    c[strcspn(c, ";")] = 0; /* (the CSV header's separator) */
    return c[0] ? c : "unknown";
}

/* Read-only stream (the memory floor of a GEMV over the same bytes). */
__global__ void read_kernel(const uint4 *__restrict__ src, size_t n, unsigned *out) {
    uint32_t acc = 0;
#pragma unroll 4
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        const uint4 v = __ldg(src + i);
        acc ^= v.x ^ v.y ^ v.z ^ v.w;
    }
    if (acc == 0x9e3779b9u) out[0] = acc; /* keeps the loads */
}

/* The codes read as a GEMV launched as a programmatic dependent reads them:
 * the next call let in at once, each thread's first U 16-byte loads issued
 * before the wait for the call before (weights depend on no kernel), the
 * rest after it, U at a time.  One CTA of 512 threads an SM, small enough that the next
 * call's CTAs fit beside it: the floor of a GEMV that overlaps its stream
 * with the call before it (registers only; the bulk-copy GEMVs prefetch into
 * shared memory). */
template <int U>
__global__ void __launch_bounds__(512) read_pdl(const uint4 *__restrict__ src, size_t n, unsigned *out) {
    pdl_trigger();
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    uint4 v[U];
#pragma unroll
    for (int u = 0; u < U; u++)
        v[u] = i + u * stride < n ? __ldg(src + i + u * stride) : make_uint4(0, 0, 0, 0);
    pdl_wait();
    uint32_t acc = 0;
    for (;;) { /* batches of U loads in flight */
#pragma unroll
        for (int u = 0; u < U; u++) acc ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
        i += (size_t)U * stride;
        if (i >= n) break;
#pragma unroll
        for (int u = 0; u < U; u++)
            v[u] = i + u * stride < n ? __ldg(src + i + u * stride) : make_uint4(0, 0, 0, 0);
    }
    if (acc == 0x9e3779b9u) out[0] = acc;
}

/* Access-pattern floors (no math), same bytes as a GEMV over the codes:
 * rows_warp: one warp per row, 512 contiguous bytes per instruction, 4 in flight;
 * tile64: a warp per 16-row tile x k slice, 8 rows x 64 B per instruction (the
 * register GEMV's pattern), U = 4 blocks per batch;
 * tile128: 4 rows x 128 B per instruction (8 lanes per row), 4 in flight. */
__global__ void read_rows_warp(const uint8_t *__restrict__ p, int64_t rows, int64_t rb,
                               unsigned *out) {
    const int lane = threadIdx.x & 31;
    const int64_t w = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    const int64_t nw = ((int64_t)gridDim.x * blockDim.x) >> 5;
    uint32_t acc = 0;
    for (int64_t r = w; r < rows; r += nw) {
        const uint8_t *row = p + r * rb;
        for (int64_t c = 16 * lane; c < rb; c += 2048) {
            uint4 v[4];
#pragma unroll
            for (int u = 0; u < 4; u++)
                v[u] = c + 512 * u < rb ? __ldg((const uint4 *)(row + c + 512 * u)) : make_uint4(0, 0, 0, 0);
#pragma unroll
            for (int u = 0; u < 4; u++) acc ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
        }
    }
    if (acc == 0x9e3779b9u) out[0] = acc;
}
template <int RPI> /* rows per instruction: 8 (64 B each) or 4 (128 B each) */
__global__ void read_tiles(const uint8_t *__restrict__ p, int64_t rows, int64_t rb, int64_t bps,
                           unsigned *out) {
    const int lane = threadIdx.x & 31, per = 32 / RPI, g = lane / per, t = lane % per;
    const int64_t tile = (int64_t)blockIdx.x * 4 + (threadIdx.x >> 5);
    const int64_t r0 = tile * 16;
    if (r0 >= rows) return;
    const int64_t b0 = blockIdx.y * bps * 64, b1 = min(b0 + bps * 64, rb);
    uint32_t acc = 0;
    const int seg = 16 * per; /* bytes per row per instruction */
    for (int64_t c = b0; c < b1; c += 4 * seg) {
        uint4 v[4][16 / RPI];
#pragma unroll
        for (int u = 0; u < 4; u++)
#pragma unroll
            for (int q = 0; q < 16 / RPI; q++) {
                int64_t r = r0 + RPI * q + g;
                if (r >= rows) r = rows - 1;
                const int64_t off = c + u * seg + 16 * t;
                v[u][q] = off < b1 ? __ldg((const uint4 *)(p + r * rb + off)) : make_uint4(0, 0, 0, 0);
            }
#pragma unroll
        for (int u = 0; u < 4; u++)
#pragma unroll
            for (int q = 0; q < 16 / RPI; q++) acc ^= v[u][q].x ^ v[u][q].y ^ v[u][q].z ^ v[u][q].w;
    }
    if (acc == 0x9e3779b9u) out[0] = acc;
}

/* Tensor-core issue rates (--mma-rate): each warp runs `iters` rounds of CH
 * independent MMAs (CH accumulator chains: 1 shows the latency, 8 the
 * rate); B1 = m16n8k256 .b1 AND-POPC (tern_gemv_bmma.cu), else m16n8k32 s8
 * (the mma.sync kernels). */
template <bool B1, int CH>
__global__ void mma_rate_kernel(int iters, unsigned *sink) {
    int d[CH][4] = {};
    uint32_t a = threadIdx.x * 2654435761u, b = threadIdx.x ^ 0x5bd1e995u;
    for (int it = 0; it < iters; it++) {
#pragma unroll
        for (int j = 0; j < CH; j++) {
            if (B1)
                asm volatile("mma.sync.aligned.m16n8k256.row.col.s32.b1.b1.s32.and.popc "
                             "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                             : "+r"(d[j][0]), "+r"(d[j][1]), "+r"(d[j][2]), "+r"(d[j][3])
                             : "r"(a), "r"(b), "r"(a ^ j), "r"(b ^ j), "r"(a + j), "r"(b + j));
            else
                asm volatile("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 "
                             "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                             : "+r"(d[j][0]), "+r"(d[j][1]), "+r"(d[j][2]), "+r"(d[j][3])
                             : "r"(a), "r"(b), "r"(a ^ j), "r"(b ^ j), "r"(a + j), "r"(b + j));
        }
    }
    int acc = 0;
#pragma unroll
    for (int j = 0; j < CH; j++) acc += d[j][0] + d[j][1] + d[j][2] + d[j][3];
    if (acc == 0x7fffffff) sink[0] = acc;
}

static double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    size_t n = v.size();
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* calls per graph at least (--calls): a replay's fixed cost (the graph's
 * launch, the first kernel's start) is spread over as many calls for every
 * kernel, whatever its copies */
static int g_min_calls = 16;
/* a shape's calls per graph: the same for every kernel of the shape (the
 * most copies any of them rotates over, at least g_min_calls) */
static int g_shape_calls = 16;

/* Times C = max(R, min_calls) calls fn(i % R), i = 0..C-1, captured in one
 * graph (fn(i) uses copy i of R); returns seconds per call. */
template <typename F>
static double time_graph(cudaStream_t s, int R, F fn, int min_calls = g_shape_calls) {
    const int C = std::max(R, min_calls);
    for (int i = 0; i < R; i++) fn(i); /* eager warm-up: lazy init stays outside the capture */
    CK(cudaStreamSynchronize(s));
    cudaGraph_t g;
    cudaGraphExec_t ge;
    CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    for (int i = 0; i < C; i++) fn(i % R);
    CK(cudaStreamEndCapture(s, &g));
    CK(cudaGraphInstantiate(&ge, g, 0));
    for (int i = 0; i < WARMUP; i++) CK(cudaGraphLaunch(ge, s));
    cudaEvent_t a, b;
    CK(cudaEventCreate(&a));
    CK(cudaEventCreate(&b));
    std::vector<double> t;
    for (int i = 0; i < REPS; i++) {
        CK(cudaEventRecord(a, s));
        CK(cudaGraphLaunch(ge, s));
        CK(cudaEventRecord(b, s));
        CK(cudaEventSynchronize(b));
        float ms;
        CK(cudaEventElapsedTime(&ms, a, b));
        t.push_back(ms * 1e-3 / C);
    }
    CK(cudaGetLastError());
    cudaEventDestroy(a);
    cudaEventDestroy(b);
    cudaGraphExecDestroy(ge);
    cudaGraphDestroy(g);
    return median(t);
}

/* --mma-rate for one kind, one chain count: W warps per SM (one CTA each) */
template <bool B1, int CH>
static void mma_rate_row(cudaStream_t s, const cudaDeviceProp &prop, int warps, double clk_ghz, unsigned *sink) {
    const int iters = 4096, sms = prop.multiProcessorCount;
    const double t = time_graph(s, 1, [&](int) { mma_rate_kernel<B1, CH><<<sms, 32 * warps, 0, s>>>(iters, sink); }, 1);
    const double per_sm = (double)warps * iters * CH / (t * 1e6); /* MMAs per SM per us */
    printf("mma rate: %s, %2d warps/SM, %d chains: %5.0f MMAs per SM per us, %6.2f cycles per MMA per warp "
           "(%.2f GHz)\n",
           B1 ? "m16n8k256.b1.and.popc" : "m16n8k32.s8          ", warps, CH, per_sm,
           clk_ghz * 1e3 * warps / per_sm, clk_ghz);
}

struct Row {
    int64_t N, K, M;
    std::string kernel;
    double t, bytes, flops;
    std::string config = ""; /* the ternary kernel chosen (tern_cuda_last_config) */
};

int main(int argc, char **argv) {
    const char *out = "results/bench_gpu";
    int quick = 0, sweep = 0, mma_rate = 0, chain_norm = 0;
    const char *shape_arg = NULL;
    const char *ms_arg = NULL;
    const char *sweep_only = NULL; /* --sweep-only NAME: that sweep entry alone (profiling); var_V[,V..]: bmma variants;
                                    * bf_V[,V..]: the bf16 bulk-copy GEMV's */
    QuantGroup grp = QG_ROW;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--out") && i + 1 < argc) out = argv[++i];
        else if (!strcmp(argv[i], "--quick")) quick = 1;
        else if (!strcmp(argv[i], "--sweep-decode")) sweep = 1;
        else if (!strcmp(argv[i], "--chain") && i + 1 < argc) {
            if (strcmp(argv[++i], "norm") != 0) DIE("--chain %s: expected norm", argv[i]);
            chain_norm = 1;
        }
        else if (!strcmp(argv[i], "--sweep-only") && i + 1 < argc) sweep = 1, sweep_only = argv[++i];
        else if (!strcmp(argv[i], "--mma-rate")) mma_rate = 1;
        else if (!strcmp(argv[i], "--ms") && i + 1 < argc) ms_arg = argv[++i];
        else if (!strcmp(argv[i], "--shape") && i + 1 < argc) shape_arg = argv[++i];
        else if (!strcmp(argv[i], "--calls") && i + 1 < argc) {
            char *end = nullptr;
            const long c = strtol(argv[++i], &end, 10);
            if (end == argv[i] || *end || c < 1 || c > 4096) DIE("--calls %s: expected 1 .. 4096 calls per graph", argv[i]);
            g_min_calls = (int)c;
        }
        else if (!strcmp(argv[i], "--force-kernel") && i + 1 < argc) { /* tern_cuda_force_kernel */
            const char *k = argv[++i];
            if (strlen(k) != 1 || k[0] < '0' || k[0] > '8')
                DIE("--force-kernel %s: expected 0 (automatic) .. 8 (see tern_cuda_force_kernel)", k);
            tern_cuda_force_kernel(k[0] - '0');
        }
        else if (!strcmp(argv[i], "--decode-variant") && i + 1 < argc) {
            char *end = nullptr;
            const long v = strtol(argv[++i], &end, 10);
            if (end == argv[i] || *end || v < 0 || v >= 70000)
                DIE("--decode-variant %s: expected a variant number 0 .. 69999 (tern_cuda_decode_variant)", argv[i]);
            tern_cuda_decode_variant((int)v);
        }
        else if (!strcmp(argv[i], "--group") && i + 1 < argc) {
            const char *g = argv[++i];
            int ok = 0;
            for (int k = 0; k < QG_COUNT; k++)
                if (!strcmp(g, quant_group_name((QuantGroup)k))) grp = (QuantGroup)k, ok = 1;
            if (!ok) DIE("--group %s: expected tensor, row, 32, 64, 128 or 256", g);
        } else
            DIE("usage: bench_gpu [--out DIR] [--quick] [--group G] [--sweep-decode | --sweep-only NAME|var_V[,V..]|bf_V[,V..]] "
                "[--decode-variant V] [--force-kernel K] [--ms M1,M2,..|none] [--shape NxK] [--calls N] [--chain norm] "
                "[--mma-rate] "
                "(unknown argument %s)",
                argv[i]);
    }
    struct Shape {
        int64_t N, K;
    };
    std::vector<Shape> shapes = {{4096, 4096}, {14336, 4096}, {4096, 14336}, {36864, 4608}, {4608, 36864}};
    /* --shape NxK: that shape alone (any, e.g. a model's own matrices) */
    if (shape_arg) {
        long long n = 0, k = 0;
        char tail = 0;
        if (sscanf(shape_arg, "%lldx%lld%c", &n, &k, &tail) != 2 || n < 1 || k < 1 || n > (1 << 20) ||
            k > (1 << 20) || n * k > ((long long)1 << 31))
            DIE("--shape %s: expected NxK (rows x columns, each 1..1048576, N * K <= 2^31)", shape_arg);
        shapes = {{n, k}};
    }
    int ndev = 0;
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) DIE("no GPU: nothing to measure");
    cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, 0));
    cudaStream_t s;
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    cublasHandle_t h;
    if (cublasCreate(&h) != CUBLAS_STATUS_SUCCESS) DIE("cublasCreate failed");
    void *cublas_ws;
    const size_t cublas_ws_bytes = 64u << 20;
    CK(cudaMalloc(&cublas_ws, cublas_ws_bytes));
    /* the stream first: cublasSetStream resets the workspace to cuBLAS's own pool */
    if (cublasSetStream(h, s) != CUBLAS_STATUS_SUCCESS) DIE("cublasSetStream failed");
    if (cublasSetWorkspace(h, cublas_ws, cublas_ws_bytes) != CUBLAS_STATUS_SUCCESS)
        DIE("cublasSetWorkspace failed");

    /* the physical limit: device-to-device copy, bytes read + written (the
     * function bench-e2e's roofline uses too) */
    double copy_bw, memcpy_bw, kernel_bw;
    if (tern_cuda_copy_bandwidth((size_t)1 << 30, 15, &memcpy_bw, &kernel_bw) < 0) DIE("%s", err_msg());
    copy_bw = std::max(memcpy_bw, kernel_bw); /* the stricter limit */
    printf("device: %s, %d SMs, L2 %d MB; D2D copy (read + write, 1 GiB): cudaMemcpyAsync %.0f GB/s, "
           "copy kernel %.0f GB/s; limit used %.0f GB/s; group %s\n",
           prop.name, prop.multiProcessorCount, prop.l2CacheSize >> 20, memcpy_bw / 1e9,
           kernel_bw / 1e9, copy_bw / 1e9, quant_group_name(grp));
    if (mma_rate) { /* MMAs per SM per microsecond, 1..16 warps per SM, 1..8 accumulator chains each */
        unsigned *sink;
        CK(cudaMalloc(&sink, 4));
        int khz = 0, dev = 0;
        CK(cudaGetDevice(&dev));
        CK(cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, dev));
        const double ghz = khz / 1e6;
        for (int warps : {1, 4, 8, 16}) {
            mma_rate_row<true, 1>(s, prop, warps, ghz, sink);
            mma_rate_row<true, 2>(s, prop, warps, ghz, sink);
            mma_rate_row<true, 4>(s, prop, warps, ghz, sink);
            mma_rate_row<true, 8>(s, prop, warps, ghz, sink);
            mma_rate_row<false, 1>(s, prop, warps, ghz, sink);
            mma_rate_row<false, 4>(s, prop, warps, ghz, sink);
            mma_rate_row<false, 8>(s, prop, warps, ghz, sink);
        }
        CK(cudaFree(sink));
    }

    std::vector<int64_t> Ms = {1, 8, 16, 64, 256, 2048};
    if (quick) Ms = {1, 16, 2048};
    if (ms_arg) { /* --ms 1,16 (none: the sweep alone) */
        Ms.clear();
        if (strcmp(ms_arg, "none") != 0)
            for (const char *q = ms_arg; *q;) {
                char *end;
                const long v = strtol(q, &end, 10);
                if (end == q || v < 1 || v > 65536 || (*end && *end != ','))
                    DIE("--ms %s: expected token counts 1..65536 separated by commas", ms_arg);
                Ms.push_back(v);
                q = *end ? end + 1 : end;
            }
    }
    std::vector<Row> rows;
    double rotated_min = INFINITY; /* the least weight bytes any timed graph rotated over */
    int calls_min = 1 << 30, calls_max = 0;

    for (auto &sh : shapes) {
        const int64_t N = sh.N, K = sh.K;
        /* random ternary weights, ~1/3 zeros, scales rounded to bf16 */
        TernaryMatrix W;
        {
            std::vector<int8_t> q((size_t)(N * K));
            for (auto &v : q) v = (int8_t)((int)(rnd() % 3) - 1);
            std::vector<float> sc((size_t)tern_n_scales(grp, N, K));
            for (auto &v : sc) v = 0.01f + 0.02f * (float)(rnd() & 0xffff) / 65536.0f;
            TL(tern_from_codes(q.data(), sc.data(), N, K, grp, DT_BF16, &W));
        }
        const int64_t wbytes = tern_bytes(&W) - W.n_scales * (int64_t)dtype_size(W.scale_dtype) +
                               W.n_scales * 4; /* f32 scales on the device */
        const int R = (int)std::min<double>(64, std::max<double>(1, ceil(ROTATE_BYTES / wbytes)));
        std::vector<TernCudaMatrix> dW((size_t)R);
        for (auto &m : dW) TL(tern_cuda_upload(&W, &m));
        tern_free(&W);
        const double dbytes = (double)N * K * 2;
        const int Rd = (int)std::max<double>(1, ceil(ROTATE_BYTES / dbytes));
        g_shape_calls = std::max({R, Rd, g_min_calls});
        /* --chain norm: the norm's input rows (16 x K) and weight; pair(M, xq, sx, fn) times
         * fwdc_norm into xq / sx followed by fn(i), with the engine's reserved SM */
        float *nx = nullptr, *nw = nullptr;
        if (chain_norm) {
            CK(cudaMalloc(&nx, (size_t)(16 * K) * 4));
            CK(cudaMalloc(&nw, (size_t)K * 4));
            fill_f32<<<1024, 256, 0, s>>>(nx, (size_t)(16 * K), 82u);
            fill_f32<<<1024, 256, 0, s>>>(nw, (size_t)K, 83u);
            CK(cudaGetLastError());
        }
        auto norm = [&](int64_t M, int8_t *xq_, float *sx_) {
            TL(fwdc_norm(nx, nullptr, nw, M, K, 1e-5f, nullptr, nullptr, xq_, sx_, s));
        };
        auto reserved = [&](int reps, const std::function<void(int)> &fn) { /* time_graph, one SM reserved */
            const int old = tern_cuda_tbm_reserve(1);
            const double t = time_graph(s, reps, fn);
            tern_cuda_tbm_reserve(old);
            return t;
        };
        auto pair = [&](int64_t M, int8_t *xq_, float *sx_, const std::function<void(int)> &fn) {
            return reserved(R, [&](int i) {
                norm(M, xq_, sx_);
                fn(i);
            });
        };
        calls_min = std::min(calls_min, g_shape_calls), calls_max = std::max(calls_max, g_shape_calls);
        rotated_min = std::min({rotated_min, R * (double)wbytes, Rd * dbytes});
        std::vector<uint16_t *> dWd((size_t)Rd);
        for (int i = 0; i < Rd; i++) {
            CK(cudaMalloc(&dWd[i], (size_t)dbytes));
            fill_bf16<<<4096, 256, 0, s>>>(dWd[i], (size_t)(N * K), 1234u + i, 0.05f);
            CK(cudaGetLastError());
        }
        if (sweep) { /* int8 decode GEMVs and their variants (tern_cuda_force_kernel,
                      * tern_cuda_decode_variant), M = 1 .. 16 as each entry says */
            struct SweepK {
                const char *name;
                int force, variant;
                int tokens; /* token counts timed: 1 (M = 1), 3 (1, 8, 16) or 5 (1, 2, 4, 8, 16) */
            };
            /* force -1: the read-only floors (the codes streamed, no math; plain launches) */
            static const SweepK ks[] = {
                {"read_floor", -1, 0, 1},   {"mm_gemv", 1, 0, 3},       {"warp_gemv", 4, 0, 1},
                {"rows", 3, 0, 1},          {"rows_30204", 3, 30204, 1}, {"rows_30244", 3, 30244, 1},
                {"rows_31204", 3, 31204, 1}, {"rows_31244", 3, 31244, 1}, {"rows_30206", 3, 30206, 1},
                {"rows_33204", 3, 33204, 1}, {"rows_33244", 3, 33244, 1},
                /* the GEMV on the binary tensor cores (tern_gemv_bmma.cu), variant 5UC00:
                 * U blocks in flight per warp, C CTAs per SM */
                {"bmma", 6, 0, 1},          {"bmma_51400", 6, 51400, 1}, {"bmma_54400", 6, 54400, 1},
                {"bmma_52200", 6, 52200, 1}, {"bmma_52800", 6, 52800, 1}, {"bmma_54200", 6, 54200, 1},
                /* its bulk-copy version, variant 6abcd: row tiles per unit, largest K slice
                 * (4 .. 64 blocks), stages, CTAs per SM at most */
                {"tbm_64520", 6, 64520, 1}, {"tbm_64620", 6, 64620, 1}, {"tbm_62520", 6, 62520, 1},
                {"tbm_62540", 6, 62540, 1}, {"tbm_62550", 6, 62550, 1}, {"tbm_64530", 6, 64530, 1},
                {"tbm_62740", 6, 62740, 1}, {"tbm_62940", 6, 62940, 1}, {"tbm_62330", 6, 62330, 1},
                {"tbm_64521", 6, 64521, 1}, {"tbm_62541", 6, 62541, 1},
                /* two consumer warps per tile (K halves; a = 3 / 6) */
                {"tbk_66520", 6, 66520, 1}, {"tbk_66521", 6, 66521, 1}, {"tbk_66420", 6, 66420, 1},
                {"tbk_63540", 6, 63540, 1}, {"tbk_63520", 6, 63520, 1}, {"tbk_63530", 6, 63530, 1},
                {"tbk_63340", 6, 63340, 1},
                /* force -2: the dispatch's one-token GEMV from f32 x coded in the kernel
                 * (tern_cuda_matmul_i8_f32x, the decode step's down / o projection), next
                 * to the same dispatch from int8 x ("auto") */
                {"auto", 0, 0, 5}, {"f32x", -2, 0, 1},
                /* 1 .. 16 tokens: the bulk-copy kernel on the int8 tensor cores (forced 7,
                 * tern_gemv_bmma.cu's gemv_i8_tbm_mt), variant 6abcd as above; with "auto"
                 * (the dispatch) also at M = 2 and 4 */
                {"mt_63520", 7, 63520, 5}, {"mt_64520", 7, 64520, 5}, {"mt_62520", 7, 62520, 5},
                {"mt_66520", 7, 66520, 5}, {"mt_63540", 7, 63540, 5}, {"mt_64540", 7, 64540, 5},
                {"mt_62540", 7, 62540, 5}, {"mt_63530", 7, 63530, 5}, {"mt_64530", 7, 64530, 5},
                {"mt_63330", 7, 63330, 5}, {"mt_64330", 7, 64330, 5}, {"mt_63521", 7, 63521, 5},
                {"mt_64420", 7, 64420, 5}, {"mt_63420", 7, 63420, 5},
                /* (four consumer warps per tile: a = 5 / 8) */
                {"mt_68520", 7, 68520, 5}, {"mt_65520", 7, 65520, 5}, {"mt_68420", 7, 68420, 5},
                {"mt_65420", 7, 65420, 5}, {"mt_68320", 7, 68320, 5}, {"mt_65320", 7, 65320, 5},
                {"mt_68530", 7, 68530, 5}, {"mt_65540", 7, 65540, 5},
            };
            unsigned *sink;
            CK(cudaMalloc(&sink, 4));
            int8_t *xq;
            float *sx, *y;
            CK(cudaMalloc(&xq, (size_t)(16 * K)));
            CK(cudaMalloc(&sx, 16 * 4));
            CK(cudaMalloc(&y, (size_t)(16 * N) * 4));
            fill_i8<<<1024, 256, 0, s>>>(xq, (size_t)(16 * K), 78u);
            fill_f32<<<1, 256, 0, s>>>(sx, 16, 80u);
            uint16_t *xb16; /* (forced 8: bf16 activations) */
            CK(cudaMalloc(&xb16, (size_t)(16 * K) * 2));
            fill_bf16<<<1024, 256, 0, s>>>(xb16, (size_t)(16 * K), 77u, 1.0f);
            /* --sweep-only var_V[,V..]: the one-token int8 GEMV on the binary tensor cores (forced
             * kernel 6) with decode variants V: 5UC00 or 6abcd, each timed as entry "var_V";
             * --sweep-only bf_V[,V..]: the bulk-copy GEMV of bf16 activations (forced 8) with
             * variants 6abcd at M = 1, 8, 16, entries "bf_V" */
            std::vector<SweepK> list(std::begin(ks), std::end(ks));
            bool vars_only = false;
            std::deque<std::string> var_names; /* the entries' names (a deque: pushing moves none) */
            const bool bf_list = sweep_only && !strncmp(sweep_only, "bf_", 3);
            if (sweep_only && (!strncmp(sweep_only, "var_", 4) || bf_list)) {
                list.clear();
                vars_only = true;
                for (const char *c = sweep_only + (bf_list ? 3 : 4);;) {
                    char *end = nullptr;
                    const long v = strtol(c, &end, 10);
                    if (end == c || (*end && *end != ',') || v < (bf_list ? 60000 : 50000) || v >= 70000)
                        DIE("--sweep-only %s: var_V[,V..] takes variants 5UC00 or 6abcd of the binary "
                            "tensor-core GEMV, bf_V[,V..] variants 6abcd of the bf16 bulk-copy GEMV",
                            sweep_only);
                    var_names.push_back((bf_list ? "bf_" : "var_") + std::to_string(v));
                    list.push_back({var_names.back().c_str(), bf_list ? 8 : 6, (int)v, bf_list ? 3 : 1});
                    if (!*end) break;
                    c = end + 1;
                }
            } else if (sweep_only) { /* a name that is not an entry would time nothing */
                bool known = false;
                for (const SweepK &k : list) known = known || !strcmp(sweep_only, k.name);
                if (!known) DIE("--sweep-only %s: not a sweep entry (see the list in experiments/bench_gpu.cu)",
                                sweep_only);
            }
            const int oldv = tern_cuda_decode_variant(0), oldf = tern_cuda_force_kernel(0);
            for (const SweepK &k : list)
                for (int64_t M : {1, 2, 4, 8, 16}) {
                    if ((k.tokens == 1 && M > 1) || (k.tokens == 3 && (M == 2 || M == 4))) continue;
                    if (sweep_only && !vars_only && strcmp(sweep_only, k.name)) continue;
                    if (k.force == -2) {
                        float *xf;
                        unsigned *xmax, one = 0x3f800000u; /* |x| <= ~1 (codes clamp past it) */
                        tern_cuda_force_kernel(0), tern_cuda_decode_variant(0); /* the dispatch's own */
                        CK(cudaMalloc(&xf, (size_t)K * 4));
                        CK(cudaMalloc(&xmax, 4));
                        fill_f32<<<1024, 256, 0, s>>>(xf, (size_t)K, 81u);
                        CK(cudaMemcpy(xmax, &one, 4, cudaMemcpyHostToDevice));
                        if (tern_cuda_matmul_i8_f32x(&dW[0], xf, xmax, y, s) < 0) {
                            fprintf(stderr, "sweep f32x: %s\n", err_msg());
                        } else {
                            const double t = time_graph(s, R, [&](int i) {
                                TL(tern_cuda_matmul_i8_f32x(&dW[i], xf, xmax, y, s));
                            });
                            rows.push_back({N, K, M, "sweep_f32x", t, wbytes + K * 4.0 + 4.0 + N * 4.0,
                                            2.0 * N * K, tern_cuda_last_config()});
                        }
                        CK(cudaFree(xf));
                        CK(cudaFree(xmax));
                        continue;
                    }
                    if (k.force < 0) {
                        /* (these read the codes only: their bytes, not the scales') */
                        const double cbytes = (double)(dW[0].rows * dW[0].row_bytes);
                        double t = time_graph(s, R, [&](int i) {
                            read_kernel<<<prop.multiProcessorCount * 8, 256, 0, s>>>(
                                (const uint4 *)dW[i].d_codes, (size_t)(dW[i].rows * dW[i].row_bytes / 16),
                                sink);
                        });
                        rows.push_back({N, K, M, "sweep_read_floor", t, cbytes, 0.0});
                        t = time_graph(s, R, [&](int i) {
                            TL(tern_launch_ex("read_pdl", read_pdl<8>, dim3(prop.multiProcessorCount), dim3(512), 0,
                                              s, true, (const uint4 *)dW[i].d_codes,
                                              (size_t)(dW[i].rows * dW[i].row_bytes / 16), sink));
                        });
                        rows.push_back({N, K, M, "sweep_read_pdl", t, cbytes, 0.0});
                        t = time_graph(s, R, [&](int i) {
                            read_rows_warp<<<prop.multiProcessorCount * 8, 256, 0, s>>>(
                                dW[i].d_codes, dW[i].rows, dW[i].row_bytes, sink);
                        });
                        rows.push_back({N, K, M, "sweep_read_rows_warp", t, cbytes, 0.0});
                        for (int rpi : {8, 4}) {
                            const int64_t tiles = (N + 15) / 16, kb = dW[0].kblocks;
                            int64_t S = std::max<int64_t>(1, (int64_t)prop.multiProcessorCount * 32 / tiles);
                            S = std::min<int64_t>(S, std::max<int64_t>(1, kb / 4));
                            const int64_t bps = (kb + S - 1) / S;
                            S = (kb + bps - 1) / bps;
                            const dim3 grid((unsigned)((tiles + 3) / 4), (unsigned)S);
                            t = time_graph(s, R, [&](int i) {
                                if (rpi == 8)
                                    read_tiles<8><<<grid, 128, 0, s>>>(dW[i].d_codes, N, dW[i].row_bytes, bps, sink);
                                else
                                    read_tiles<4><<<grid, 128, 0, s>>>(dW[i].d_codes, N, dW[i].row_bytes, bps, sink);
                            });
                            rows.push_back({N, K, M, rpi == 8 ? "sweep_read_tile64" : "sweep_read_tile128", t,
                                            cbytes, 0.0});
                        }
                        continue;
                    }
                    tern_cuda_force_kernel(k.force);
                    tern_cuda_decode_variant(k.variant);
                    /* forced 8: bf16 activations (never after the norm, which codes int8) */
                    const bool bf = k.force == 8, nrm = chain_norm && !bf;
                    auto call = [&](int i) {
                        return bf ? tern_cuda_matmul_bf16(&dW[i], xb16, M, y, s)
                                  : tern_cuda_matmul_i8(&dW[i], xq, sx, M, y, s);
                    };
                    if (call(0) < 0) { /* variant refused */
                        fprintf(stderr, "sweep %s M=%lld: %s\n", k.name, (long long)M, err_msg());
                        continue;
                    }
                    auto gemv = [&](int i) { TL(call(i)); };
                    const double t = nrm ? pair(M, xq, sx, gemv) : time_graph(s, R, gemv);
                    rows.push_back({N, K, M, std::string("sweep_") + k.name + (bf ? "_bf16" : nrm ? "_i8_norm" : "_i8"),
                                    t, wbytes + M * K * (bf ? 2.0 : 1.0) + (bf ? 0.0 : M * 4.0) + M * N * 4.0,
                                    2.0 * M * N * K, tern_cuda_last_config()});
                }
            tern_cuda_decode_variant(oldv);
            tern_cuda_force_kernel(oldf);
            CK(cudaFree(sink));
            CK(cudaFree(xb16));
            CK(cudaFree(xq));
            CK(cudaFree(sx));
            CK(cudaFree(y));
        }
        for (int64_t M : Ms) {
            uint16_t *xb;
            int8_t *xq;
            float *xf, *sx, *y;
            uint16_t *y16;
            CK(cudaMalloc(&xb, (size_t)(M * K) * 2));
            CK(cudaMalloc(&xq, (size_t)(M * K)));
            CK(cudaMalloc(&xf, (size_t)(M * K) * 4));
            CK(cudaMalloc(&sx, (size_t)M * 4));
            CK(cudaMalloc(&y, (size_t)(M * N) * 4));
            CK(cudaMalloc(&y16, (size_t)(M * N) * 2));
            fill_bf16<<<1024, 256, 0, s>>>(xb, (size_t)(M * K), 77u, 1.0f);
            fill_i8<<<1024, 256, 0, s>>>(xq, (size_t)(M * K), 78u);
            fill_f32<<<1024, 256, 0, s>>>(xf, (size_t)(M * K), 79u);
            fill_f32<<<1, 256, 0, s>>>(sx, (size_t)M, 80u); /* any nonzero values */
            CK(cudaGetLastError());
            CK(cudaStreamSynchronize(s));
            const double flops = 2.0 * M * N * K, yb = (double)M * N * 4;
            /* --force-kernel 3 / 4 / 6 name one-token int8 kernels, 7 the int8 and 8 the
             * bf16 bulk-copy GEMV of <= 16 tokens: the rows they cannot run (other
             * activations, more tokens) take the automatic choice (the config column
             * says which kernel ran) */
            const int forced = tern_cuda_force_kernel(0), other = forced >= 3 && forced != 5 ? 0 : forced;
            const int f_bf16 = forced == 8 && M <= 16 ? 8 : other,
                      f_i8 = forced == 8 || (forced == 7 && M > 16) || (forced != 7 && M > 1) ? other : forced;
            double t;
            tern_cuda_force_kernel(f_bf16);
            t = time_graph(s, R, [&](int i) { TL(tern_cuda_matmul_bf16(&dW[i], xb, M, y, s)); });
            rows.push_back({N, K, M, "tern_bf16", t, wbytes + M * K * 2.0 + yb, flops, tern_cuda_last_config()});
            tern_cuda_force_kernel(f_i8);
            t = time_graph(s, R, [&](int i) { TL(tern_cuda_matmul_i8(&dW[i], xq, sx, M, y, s)); });
            rows.push_back({N, K, M, "tern_i8", t, wbytes + M * K * 1.0 + M * 4.0 + yb, flops,
                            tern_cuda_last_config()});
            if (chain_norm && M <= 16) { /* the norm alone, then the norm and the GEMV */
                t = reserved(1, [&](int) { norm(M, xq, sx); });
                rows.push_back({N, K, M, "norm", t, M * K * 4.0 + K * 4.0 + M * K * 1.0 + M * 4.0, 0.0});
                t = pair(M, xq, sx, [&](int i) { TL(tern_cuda_matmul_i8(&dW[i], xq, sx, M, y, s)); });
                rows.push_back({N, K, M, "tern_i8_norm", t, wbytes + M * K * 1.0 + M * 4.0 + yb, flops,
                                tern_cuda_last_config()});
            }
            tern_cuda_force_kernel(other);
            if (M <= 16) {
                t = time_graph(s, R, [&](int i) { TL(tern_cuda_matmul_f32(&dW[i], xf, M, y, s)); });
                rows.push_back({N, K, M, "tern_f32", t, wbytes + M * K * 4.0 + yb, flops,
                                tern_cuda_last_config()});
            }
            tern_cuda_force_kernel(forced);
            t = time_graph(s, Rd, [&](int i) { TL(tern_cuda_dense_bf16(h, dWd[i], N, K, xb, M, y, 1, s)); });
            rows.push_back({N, K, M, "cublas_bf16", t, dbytes + M * K * 2.0 + yb, flops});
            if (tern_cuda_gemv_bf16_ok(N, K, M)) { /* ternlab's dense GEMV (a ternary model's LM head) */
                t = time_graph(s, Rd, [&](int i) { TL(tern_cuda_gemv_bf16(dWd[i], N, K, xb, M, y, s)); });
                rows.push_back({N, K, M, "dense_gemv_bf16", t, dbytes + M * K * 2.0 + yb, flops});
                /* the same launched plainly (as cuBLAS's kernels are): no call's weights read
                 * while the one before still runs */
                const int old_pdl = tern_cuda_pdl(0);
                t = time_graph(s, Rd, [&](int i) { TL(tern_cuda_gemv_bf16(dWd[i], N, K, xb, M, y, s)); });
                tern_cuda_pdl(old_pdl);
                rows.push_back({N, K, M, "dense_gemv_bf16_plain", t, dbytes + M * K * 2.0 + yb, flops});
            }
            t = time_graph(s, Rd, [&](int i) { TL(tern_cuda_dense_bf16(h, dWd[i], N, K, xb, M, y16, 0, s)); });
            rows.push_back({N, K, M, "cublas_bf16_o16", t, dbytes + M * K * 2.0 + M * N * 2.0, flops});
            CK(cudaFree(xb));
            CK(cudaFree(xq));
            CK(cudaFree(xf));
            CK(cudaFree(sx));
            CK(cudaFree(y));
            CK(cudaFree(y16));
            fprintf(stderr, "  %lldx%lld M=%lld done\n", (long long)N, (long long)K, (long long)M);
        }
        for (auto &m : dW) tern_cuda_free(&m);
        for (auto p : dWd) CK(cudaFree(p));
        if (nx) CK(cudaFree(nx));
        if (nw) CK(cudaFree(nw));
    }

    /* outputs: each file whole or not at all (built in memory, then
     * file_write_atomic); the markdown to stdout too */
    if (mkdir(out, 0755) != 0 && errno != EEXIST) DIE("cannot create %s: %s", out, strerror(errno));
    char path[1024];
    char *csv_buf = nullptr, *md_buf = nullptr;
    size_t csv_len = 0, md_len = 0;
    FILE *f = open_memstream(&csv_buf, &csv_len);
    FILE *md = open_memstream(&md_buf, &md_len);
    if (!f || !md) DIE("open_memstream: %s", strerror(errno));
    char utc[32];
    const time_t now = time(nullptr);
    strftime(utc, sizeof utc, "%Y-%m-%dT%H:%M:%SZ", gmtime(&now));
    char host[256] = "unknown";
    if (gethostname(host, sizeof host - 1) != 0) snprintf(host, sizeof host, "unknown");
    host[strcspn(host, ";\n")] = 0;
    fprintf(f, "# device=%s;sms=%d;copy_bw_gbs=%.1f;memcpy_bw_gbs=%.1f;kernel_copy_bw_gbs=%.1f;group=%s;"
               "utc=%s;reps=%d;calls_min=%d;calls_max=%d;rotated_min_mb=%.0f;commit=%s;host=%s\n",
            prop.name, prop.multiProcessorCount, copy_bw / 1e9, memcpy_bw / 1e9, kernel_bw / 1e9,
            quant_group_name(grp), utc, REPS, calls_min, calls_max, rotated_min / 1e6, build_commit().c_str(),
            host);
    fprintf(f, "N,K,M,kernel,time_us,gbs,frac_copy,tflops,speedup_vs_cublas,config\n");
    auto base = [&](const Row &r) -> double {
        for (auto &b : rows)
            if (b.N == r.N && b.K == r.K && b.M == r.M && b.kernel == "cublas_bf16") return b.t;
        return NAN;
    };
    for (auto &r : rows)
        fprintf(f, "%lld,%lld,%lld,%s,%.3f,%.1f,%.4f,%.2f,%.3f,%s\n", (long long)r.N, (long long)r.K,
                (long long)r.M, r.kernel.c_str(), r.t * 1e6, r.bytes / r.t / 1e9, r.bytes / r.t / copy_bw,
                r.flops / r.t / 1e12, base(r) / r.t, r.config.c_str());

    FILE *outs[2] = {stdout, md};
    for (FILE *o : outs) {
        fprintf(o, "\n<!-- generated by build/gpu/bench_gpu (experiments/bench_gpu.cu); do not edit -->\n");
        fprintf(o, "GPU: %s (%d SMs). D2D copy bandwidth %.0f GB/s (read + write, 1 GiB, same run; "
                   "max of cudaMemcpyAsync %.0f and a copy kernel %.0f). "
                   "Ternary weights: 2-bit codes + f32 scales (group %s). Times: median of %d CUDA-graph "
                   "replays, every kernel of a shape the same number of calls a replay (%d .. %d), "
                   "weights rotated over >= %.0f MB. x = speedup over cuBLAS BF16 "
                   "(cublasGemmEx, fp32 accumulate, f32 out). int8: activations quantised beforehand (the "
                   "per-token quantisation, which the engine does in the kernel before each linear, is "
                   "not timed). GB/s: the bytes each call must move (weights, scales, activations in, "
                   "outputs out) over its time; at large M the kernels are compute-bound and it is not "
                   "a bandwidth efficiency.\n\n",
                prop.name, prop.multiProcessorCount, copy_bw / 1e9, memcpy_bw / 1e9, kernel_bw / 1e9,
                quant_group_name(grp), REPS, calls_min, calls_max, rotated_min / 1e6);
        fprintf(o, "| N x K | M | cuBLAS bf16 us | cuBLAS TFLOP/s | tern bf16 us | bf16 GB/s | bf16 %% copy | "
                   "bf16 x cuBLAS | tern int8 us | int8 GB/s | int8 %% copy | int8 x cuBLAS | int8 TOP/s |\n");
        fprintf(o, "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n");
        for (auto &r : rows) {
            if (r.kernel != "cublas_bf16") continue;
            const Row *tb = nullptr, *ti = nullptr;
            for (auto &q : rows)
                if (q.N == r.N && q.K == r.K && q.M == r.M) {
                    if (q.kernel == "tern_bf16") tb = &q;
                    if (q.kernel == "tern_i8") ti = &q;
                }
            fprintf(o,
                    "| %lldx%lld | %lld | %.1f | %.0f | %.1f | %.0f | %.0f%% | %.2f | %.1f | %.0f | "
                    "%.0f%% | %.2f | %.0f |\n",
                    (long long)r.N, (long long)r.K, (long long)r.M, r.t * 1e6, r.flops / r.t / 1e12,
                    tb->t * 1e6, tb->bytes / tb->t / 1e9, 100 * tb->bytes / tb->t / copy_bw,
                    r.t / tb->t, ti->t * 1e6, ti->bytes / ti->t / 1e9,
                    100 * ti->bytes / ti->t / copy_bw, r.t / ti->t, ti->flops / ti->t / 1e12);
        }
        bool any = false; /* the dense bf16 GEMV of 1 .. 4 tokens against cuBLAS on the same weights */
        for (auto &r : rows) {
            if (r.kernel != "dense_gemv_bf16") continue;
            if (!any)
                fprintf(o, "\nDense bf16 weights at the token counts this run measured: ternlab's GEMV (tern_cuda_gemv_bf16, a "
                           "ternary model's LM head at 1 .. 4 tokens in the engine) against cuBLAS on the same weights; GEMV: its calls "
                           "launched as programmatic dependents (each reads its first weights while the call "
                           "before ends, as the engine launches it), plain: launched as cuBLAS's are.\n\n"
                           "| N x K | M | cuBLAS bf16 us | cuBLAS %% copy | GEMV us | GEMV %% copy | GEMV x cuBLAS | "
                           "plain us | plain x cuBLAS |\n"
                           "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n");
            any = true;
            const double tc = base(r);
            double tp = NAN;
            for (auto &q : rows)
                if (q.N == r.N && q.K == r.K && q.M == r.M && q.kernel == "dense_gemv_bf16_plain") tp = q.t;
            fprintf(o, "| %lldx%lld | %lld | %.1f | %.0f%% | %.1f | %.0f%% | %.2f | %.1f | %.2f |\n", (long long)r.N,
                    (long long)r.K, (long long)r.M, tc * 1e6, 100 * r.bytes / tc / copy_bw, r.t * 1e6,
                    100 * r.bytes / r.t / copy_bw, tc / r.t, tp * 1e6, tc / tp);
        }
    }
    if (fclose(f) != 0 || fclose(md) != 0) DIE("building the outputs: %s", strerror(errno));
    snprintf(path, sizeof path, "%s/bench_gpu.csv", out);
    if (file_write_atomic(path, csv_buf, csv_len) != 0) DIE("%s", err_msg());
    snprintf(path, sizeof path, "%s/bench_gpu.md", out);
    if (file_write_atomic(path, md_buf, md_len) != 0) DIE("%s", err_msg());
    free(csv_buf);
    free(md_buf);
    if (sweep) {
        printf("\ndecode sweep (us, GB/s, %% of copy):\n");
        for (auto &r : rows)
            if (r.kernel.compare(0, 6, "sweep_") == 0)
                printf("  %6lldx%-6lld M=%-3lld %-28s %8.2f us %6.0f GB/s %4.0f%%\n", (long long)r.N,
                       (long long)r.K, (long long)r.M, r.kernel.c_str(), r.t * 1e6, r.bytes / r.t / 1e9,
                       100 * r.bytes / r.t / copy_bw);
    }
    printf("\nwrote %s/bench_gpu.csv and %s/bench_gpu.md\n", out, out);
    cublasDestroy(h);
    CK(cudaFree(cublas_ws));
    return 0;
}
