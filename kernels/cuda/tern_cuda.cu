/* tern_cuda.cu — the C API of tern_cuda.h: upload, argument checks, the
 * choice between the decode GEMV (n <= 16) and the prefill GEMM, activation
 * staging for the GEMM (f32 -> three bf16 planes; unaligned rows -> padded
 * copy) and the dense cuBLAS BF16 baseline. */
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <errno.h>
#include <mutex>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <vector>

#include "cuda/cuda_util.h"
#include "cuda/tern_cuda.h"
#include "cuda/tern_mma.cuh"

extern "C" {
#include "ternary_format.h"
}

#include "cuda/tern_mm.cuh"
#include "cuda/tern_wg_plan.h"

namespace {

std::atomic<int> g_force{0}; /* tern_cuda_force_kernel (run() reads it once a call) */

/* TERNLAB_CUDA_GEMV1: the one-token int8 GEMV for every such call (0: by
 * shape); anything else than bmma / rows / warp is an error (-1, err_set) */
int gemv1_pick(void) {
    const char *e = getenv("TERNLAB_CUDA_GEMV1");
    if (!e || !*e) return 0;
    if (!strcmp(e, "bmma")) return 6;
    if (!strcmp(e, "rows")) return 3;
    if (!strcmp(e, "warp")) return 4;
    return err_set("TERNLAB_CUDA_GEMV1=%s: expected bmma, rows or warp", e);
}

/* tern_cuda_tbm_override's list (TERNLAB_CUDA_TBM until set) */
struct TbmOverride {
    int64_t rows, cols;
    int v;
};
std::mutex g_tbm_mu;
std::vector<TbmOverride> g_tbm_list;
bool g_tbm_set = false;

/* spec "RxC:V[,RxC:V..]" into out (digits only, R and C >= 1, V a variant of
 * the bulk-copy kernel; a trailing comma allowed; the first entry of a shape
 * wins); -1 (err_set) when malformed */
int tbm_parse(const char *spec, std::vector<TbmOverride> &out) {
    out.clear();
    for (const char *c = spec; c && *c;) {
        const char *at = c;
        long long f[3] = {0, 0, 0};
        bool ok = true;
        for (int i = 0; i < 3 && ok; i++) {
            char *end = nullptr;
            errno = 0;
            if (*c >= '0' && *c <= '9') f[i] = strtoll(c, &end, 10);
            ok = end && errno == 0 && f[i] >= 1 && f[i] <= ((long long)1 << 40);
            if (!ok) break;
            c = end;
            if (i < 2) ok = *c++ == (i == 0 ? 'x' : ':');
        }
        ok = ok && (*c == ',' || *c == 0) && f[2] < 70000 && tern_tbm_variant_ok((int)f[2]);
        if (!ok)
            return err_set("bulk-copy GEMV variants '%s': expected ROWSxCOLS:V[,ROWSxCOLS:V..] with V a variant "
                           "6abcd of the bulk-copy kernel (a 2..6 or 8, c 2..8), at '%s'",
                           spec, at);
        out.push_back({(int64_t)f[0], (int64_t)f[1], (int)f[2]});
        if (*c == ',') c++;
    }
    return 0;
}

/* W's variant from the list (0: none; -1: TERNLAB_CUDA_TBM malformed, which
 * then fails every call that consults it) */
int tbm_override(const TernCudaMatrix *W) {
    std::lock_guard<std::mutex> lk(g_tbm_mu);
    if (!g_tbm_set) {
        std::vector<TbmOverride> l;
        if (tbm_parse(getenv("TERNLAB_CUDA_TBM"), l) < 0) return err_prefix("TERNLAB_CUDA_TBM: ");
        g_tbm_list.swap(l);
        g_tbm_set = true;
    }
    for (const TbmOverride &o : g_tbm_list)
        if (o.rows == W->rows && o.cols == W->cols) return o.v;
    return 0;
}

/* gemv1_rule below by the shape alone (no override; *tbm: set to 0 by the caller) */
int gemv1_shape(const TernCudaMatrix *W, int v, int *tbm) {
    const int64_t weights = W->rows * W->cols;
    if (W->cols >= 8192 && W->cols <= 4194304) {
        if (v == 0 && W->cols <= 65536 && W->rows >= 4096)
            *tbm = weights >= ((int64_t)128 << 20) && W->cols >= 32768 ? 63520 : 65820;
        return 6;
    }
    if (weights >= ((int64_t)32 << 20) && W->cols <= 131072) {
        if (v == 0 && W->cols <= 6144) *tbm = weights >= ((int64_t)40 << 20) ? 63520 : 64520;
        return *tbm ? 6 : 3;
    }
    if (v == 0 && W->cols <= 6144 && weights >= ((int64_t)18 << 20)) {
        *tbm = 64520;
        return 6;
    }
    return W->cols <= 16384 ? 4 : 0;
}

/* The default one-token int8 GEMV for W (the comment in run() has the
 * measurements): 6 binary tensor cores (*tbm: the bulk-copy kernel's
 * variant where that one is taken, else 0; only with no development variant
 * v set), 3 multi-row dp4a, 4 one warp per row, 0 none of them; -1 on a
 * malformed TERNLAB_CUDA_TBM.  With no v, an R x C variant from
 * tern_cuda_tbm_override comes first. */
int gemv1_rule(const TernCudaMatrix *W, int v, int *tbm) {
    *tbm = 0;
    if (v == 0) {
        const int o = tbm_override(W);
        if (o < 0) return -1;
        if (o > 0) {
            *tbm = o;
            return 6;
        }
    }
    return gemv1_shape(W, v, tbm);
}

std::atomic<int> g_pdl{-1}; /* -1: not yet read from TERNLAB_CUDA_PDL */
thread_local char g_config[96]; /* tern_cuda_last_config */

/* The binary tensor-core GEMV's config, variant v (form: NULL, or a fused
 * form's name): "gemv_tbm[ form] v=V" for the bulk-copy kernel (v >= 60000;
 * " l2ef=0" added where its copies go without the L2 hint), else
 * "gemv_bmma[ form]". */
void bmma_config(int v, const char *form) {
    char cfg[48];
    const char *sp = form ? " " : "", *f = form ? form : "";
    if (v >= 60000) snprintf(cfg, sizeof cfg, "gemv_tbm%s%s v=%d%s", sp, f, v, tern_cuda_l2ef_get() ? "" : " l2ef=0");
    else snprintf(cfg, sizeof cfg, "gemv_bmma%s%s", sp, f);
    tern_cuda_set_config(cfg);
}

/* Per-device workspaces.  Slot 0: staged activations; 1: split-K partials;
 * 2: split-K counters (zeroed when allocated; kernels leave them zero).
 * Growing allocates a larger buffer (twice the request) and RETIRES the old
 * one instead of freeing it: cudaFree waits for the whole device, and with
 * one thread per GPU (tensor parallelism) a rank waiting there for its own
 * all-reduce while another rank waits for this lock to launch its half would
 * never return.  Retired buffers stay valid (a CUDA graph that captured one
 * still runs) and are freed at exit.  Growing is still not allowed while a
 * stream is being captured: warm up with the largest call first. */
enum { WS_ACT = 0, WS_PART = 1, WS_CTR = 2, WS_SLOTS = 3 };
struct Workspace {
    void *p = nullptr;
    size_t bytes = 0;
};
struct DeviceWs {
    std::mutex mu;
    Workspace slot[WS_SLOTS];
    std::vector<void *> retired;
};
DeviceWs g_ws[64];

int ws_get(int slot, size_t bytes, void **out) {
    int dev;
    CUDA_CHECK(cudaGetDevice(&dev));
    if (dev < 0 || dev >= 64) return err_set("tern_cuda: device id %d out of range", dev);
    DeviceWs &d = g_ws[dev];
    std::lock_guard<std::mutex> lk(d.mu);
    Workspace &w = d.slot[slot];
    if (w.bytes < bytes) {
        const size_t want = bytes < ((size_t)1 << 40) ? 2 * bytes : bytes;
        void *p = nullptr;
        cudaError_t e = cudaMalloc(&p, want);
        if (e != cudaSuccess) {
            (void)cudaGetLastError(); /* (not left for the next launch check) */
            return err_set("tern_cuda: workspace of %zu bytes: %s (use fewer tokens per call)",
                           want, cudaGetErrorString(e));
        }
        if (slot == WS_CTR) {
            /* cudaMemset runs on the legacy stream, which does not order the
             * callers' non-blocking streams: wait for it here (growth only) */
            e = cudaMemset(p, 0, want);
            if (e == cudaSuccess) e = cudaDeviceSynchronize();
            if (e != cudaSuccess) {
                (void)cudaGetLastError(); /* (not left for the next launch check, as above) */
                cudaFree(p);
                return err_set("tern_cuda: zeroing the split-K counters: %s", cudaGetErrorString(e));
            }
        }
        if (w.p) d.retired.push_back(w.p);
        w.p = p;
        w.bytes = want;
    }
    *out = w.p;
    return 0;
}

/* x (n, cols) of esize-byte elements -> (n, kpad), zero beyond cols. */
template <typename T>
__global__ void pad_rows_kernel(const T *x, int64_t n, int64_t cols, int64_t ldx, T *out,
                                int64_t kpad) {
    const int64_t total = n * kpad;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total;
         i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t t = i / kpad, c = i % kpad;
        out[i] = c < cols ? x[t * ldx + c] : T(0);
    }
}

/* f32 x (n, cols) -> planes hi, mid, lo (each (n, kpad) bf16) with
 * x = hi + mid + lo + O(2^-24 |x|). */
__global__ void split3_kernel(const float *x, int64_t n, int64_t cols, __nv_bfloat16 *out,
                              int64_t kpad) {
    const int64_t total = n * kpad;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total;
         i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t t = i / kpad, c = i % kpad;
        const float v = c < cols ? x[t * cols + c] : 0.0f;
        float hi, mid, lo;
        split3(v, hi, mid, lo);
        out[i] = __float2bfloat16_rn(hi);
        out[total + i] = __float2bfloat16_rn(mid);
        out[2 * total + i] = __float2bfloat16_rn(lo);
    }
}

int grid_for(int64_t total) {
    int64_t b = (total + 255) / 256;
    return (int)(b > 8192 ? 8192 : b < 1 ? 1 : b);
}

bool aligned16(const void *p) { return ((uintptr_t)p & 15u) == 0; }

int check_matrix(const TernCudaMatrix *W, const char *who) {
    if (!W || !W->d_codes || !W->d_scales || W->rows < 1 || W->cols < 1)
        return err_set("%s: empty or freed TernCudaMatrix (tern_cuda_upload first)", who);
    return 0;
}

int group_unit(const TernCudaMatrix *W, const char *who, int *gu) {
    if (W->n_groups == 1) {
        *gu = 0;
        return 0;
    }
    switch (W->group_cols) {
    case 32: *gu = 1; return 0;
    case 64: *gu = 2; return 0;
    case 128: *gu = 4; return 0;
    case 256: *gu = 8; return 0;
    default:
        return err_set("%s: group of %lld columns is not supported on CUDA (tensor, row, 32, 64, "
                       "128, 256)",
                       who, (long long)W->group_cols);
    }
}

TernKArgs base_args(const TernCudaMatrix *W, int gu) {
    TernKArgs a = {};
    tern_args_matrix(a, W);
    a.cols = W->cols;
    a.kblocks = W->kblocks;
    a.group_cols = W->group_cols;
    a.gu = gu;
    a.planes = 1;
    return a;
}

extern "C" int tern_gemv_i8_rowscale(const TernCudaMatrix *W, const int8_t *d_x, int64_t x_cols,
                                     const float *d_sx, float *d_y, cudaStream_t s);

/* The multi-token bulk-copy GEMV (tern_gemv_bmma.cu's gemv_i8_tbm_mt; 2 .. 16
 * tokens, int8, one scale per row or per tensor — measured with one per row)
 * where it beat the wgmma GEMM's 8- / 16-token
 * tiles (H200, bench_gpu --sweep-decode, us, mt / wgmma): 4096 x 4096 M = 2 4.7 /
 * 6.9, M = 8 5.1 / 7.2, M = 16 6.8 / 8.3; 14336 x 4096 M = 2 9.1 / 10.5, M = 8
 * 9.4 / 10.5 (M = 16 12.4 / 10.6: not taken); 4096 x 14336 M = 2 10.1 / 11.7,
 * M = 8 10.8 / 12.1 (M = 16 14.4 / 12.5); not at 170M weights (36864 x 4608
 * M = 8 19.7 / 18.9, 4608 x 36864 20.7 / 20.4, M = 16 29-34 / 21).  So: 2^24
 * to 2^27 weights for up to 8 tokens, to 24M weights for up to 16; with no
 * development variant set.  Since the wgmma GEMM's 16-token tiles run on
 * two warpgroup pairs for every grid of one wave (tern_wg_plan.c), 9 .. 16
 * tokens above 17.5M weights only where the row tiles are more than one
 * wave (M = 16, us, mt / wgmma: 4096 x 4096 7.1 / 7.4, 4608 x 4096 8.7 /
 * 7.5, 6144 x 4096 9.6 / 7.7); up to 8 tokens not where tern_wg_kw8 gives
 * the 8-token tiles to the same kernel (it wins at M = 2 .. 8 there: 14336
 * x 4096 M = 2 / 4 / 8 8.6 / 8.5 / 8.5 against 9.2 / 9.2 / 9.3 us).  Variant: 65540 (2 tiles per unit, 4 K parts,
 * slices up to 18 blocks, 4 stages) to 24M weights, 68520 (4 tiles, 4 parts,
 * slices up to 18 blocks) in rows of <= 6144 columns — the models' own
 * matrices at M = 8: 8192 x 4608 7.1 us against 10.6 with slices of 16 blocks
 * (68420: a K split), 12288 x 4096 9.2 either way, 73728 x 4608 33.3 (wgmma
 * 35.1, outside the rule) — else 65420. */
static bool mt_rule(const TernCudaMatrix *W, int64_t n) {
    const int64_t w = W->rows * W->cols;
    if (W->cols > 4194304) return false; /* the kernel's limit (exact int32 sums) */
    if (w < ((int64_t)1 << 24) || w > (n <= 8 ? ((int64_t)1 << 27) : ((int64_t)3 << 23))) return false;
    if (n > 8 && w <= ((int64_t)35 << 19)) return true;
    /* not where the wgmma GEMM's plan takes the KW kernel (tern_wg_tile) */
    int dev = 0, n_sm = 0;
    if (cudaGetDevice(&dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&n_sm, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess) {
        cudaGetLastError(); /* (no SM count: the GEMV, as before the KW rules) */
        return true;
    }
    TernWgPlan p;
    tern_wg_tile(1, W->rows, n, W->cols, W->kblocks, n_sm, 0, &p);
    return p.kw == 1;
}
/* The bf16 bulk-copy GEMV's variant for n tokens of W (6abcd).  H200,
 * bench_gpu --sweep-only bf_V (M = 1 / 8 / 16, us; 13 variants): 65520 (two
 * tiles a unit, four consumer warps per tile) best or within 2 % on most;
 * one CTA per SM (65521) at one token below 24M weights (4096 x 4096 3.96 vs
 * 4.76; 14336 x 4096 11.21 vs 10.84); four tiles a unit (68520) for 2 .. 8
 * tokens on rows of >= 32768 columns (4608 x 36864 M = 8 30.7 vs 34.6; 4096 x
 * 14336 14.0 vs 15.4 but M = 16 25.2 vs 21.3) and 9 .. 16 tokens from 128M
 * weights (36864 x 4608 43.7 vs 54.6, 4608 x 36864 47.2 vs 49.2; 14336 x
 * 4096 21.0 vs 17.5). */
static int bf_variant(const TernCudaMatrix *W, int64_t n) {
    const int64_t weights = W->rows * W->cols;
    if (n == 1) return weights < ((int64_t)24 << 20) ? 65521 : 65520;
    if (n <= 8) return W->cols >= 32768 ? 68520 : 65520;
    return weights >= ((int64_t)128 << 20) ? 68520 : 65520;
}

static int mt_variant(const TernCudaMatrix *W) {
    return W->rows * W->cols <= ((int64_t)3 << 23) ? 65540 : W->cols <= 6144 ? 68520 : 65420;
}

int run(int act, const TernCudaMatrix *W, const void *d_x, const float *d_sx, int64_t n,
        float *d_y, cudaStream_t s, const char *who) {
    tern_cuda_set_config(""); /* until a kernel is chosen */
    const int force = g_force.load(std::memory_order_relaxed);
    if (check_matrix(W, who) < 0) return -1;
    if (n < 0) return err_set("%s: negative token count %lld", who, (long long)n);
    if (n == 0) return 0;
    if (!d_x || !d_y) return err_set("%s: NULL activations or output", who);
    if (act == TACT_I8 && !d_sx) return err_set("%s: NULL per-token scales", who);
    int gu = 0;
    if (group_unit(W, who, &gu) < 0) return -1;
    /* The forced GEMVs refuse what they do not take here, before any staging
     * of x: 3 / 4 / 6 one token of int8 activations and one scale per row
     * (i8_one), 7 1 .. 16 int8 tokens (i8_mt), 8 1 .. 16 bf16 tokens, not
     * the f32 form's three planes (bf_mt); one scale per row or per tensor */
    const bool i8_one = act == TACT_I8 && n == 1 && W->n_groups == 1;
    const bool i8_mt = act == TACT_I8 && n <= 16 && W->n_groups == 1;
    const bool bf_mt = act == TACT_BF16 && n <= 16 && W->n_groups == 1;
    if ((force == 3 || force == 4 || force == 6) && !i8_one)
        return err_set("%s: the one-token GEMVs take one token of int8 activations and one "
                       "scale per row",
                       who);
    if (force == 7 && !i8_mt)
        return err_set("%s: the multi-token bulk-copy GEMV takes 1 .. 16 tokens of int8 activations and "
                       "one scale per row or per tensor",
                       who);
    if (force == 8 && !bf_mt)
        return err_set("%s: the bf16 bulk-copy GEMV takes 1 .. 16 tokens of bf16 activations and one scale per "
                       "row or per tensor",
                       who);
    TernKArgs a = base_args(W, gu);
    a.x = d_x;
    a.ldx = W->cols;
    a.sx = d_sx;
    a.n = n;
    a.y = d_y;
    const size_t esize = act == TACT_F32 ? 4 : act == TACT_BF16 ? 2 : 1;

    /* n <= 16: the mma.sync GEMV, except int8 with one scale per row, where
     * (unless mt_rule takes the multi-token bulk-copy GEMV, below)
     * the wgmma GEMM with 8- / 16-token tiles measured as fast or faster on
     * the bench shapes (H200, n = 8: 4096 x 4096 8.1 vs 19.4 us, 36864 x 4608
     * 28.1 vs 28.5) but one (4608 x 36864, n = 16: 34.4 vs 31.5 us) */
    const bool gemv = force == 1 || (force == 0 && n <= 16 && !(act == TACT_I8 && gu == 0));
    const int64_t kpad = W->kblocks * TERN_BLOCK;
    if (act == TACT_F32) { /* f32 = three exact bf16 planes (tern_mma.cuh) */
        void *ws;
        if (ws_get(WS_ACT, (size_t)(3 * n * kpad) * 2, &ws) < 0) return -1;
        split3_kernel<<<grid_for(n * kpad), 256, 0, s>>>(static_cast<const float *>(d_x), n,
                                                          W->cols, static_cast<__nv_bfloat16 *>(ws),
                                                          kpad);
        CUDA_CHECK_LAUNCH("split3_kernel");
        a.x = ws;
        a.ldx = kpad;
        a.planes = 3;
        a.plane_stride = n * kpad;
        a.x_vec = 1;
        act = TACT_BF16;
    } else {
        const int vec = act == TACT_I8 ? 16 : 8;
        a.x_vec = aligned16(d_x) && W->cols % vec == 0;
        if (!a.x_vec) { /* awkward shape: stage a padded copy (costs one pass over x) */
            void *ws;
            if (ws_get(WS_ACT, (size_t)(n * kpad) * esize, &ws) < 0) return -1;
            if (act == TACT_I8)
                pad_rows_kernel<int8_t><<<grid_for(n * kpad), 256, 0, s>>>(
                    static_cast<const int8_t *>(d_x), n, W->cols, W->cols,
                    static_cast<int8_t *>(ws), kpad);
            else
                pad_rows_kernel<uint16_t><<<grid_for(n * kpad), 256, 0, s>>>(
                    static_cast<const uint16_t *>(d_x), n, W->cols, W->cols,
                    static_cast<uint16_t *>(ws), kpad);
            CUDA_CHECK_LAUNCH("pad_rows_kernel");
            a.x = ws;
            a.ldx = kpad;
            a.x_vec = 1;
        }
    }
    const size_t xesize = act == TACT_I8 ? 1 : 2;
    /* one token, int8, one scale per row: rows of >= 8192 columns on the
     * binary tensor cores (tern_gemv_bmma.cu: 4096 x 14336 8.1 vs 9.4 us,
     * 4608 x 36864 16.8 vs 20.4 on the H200), shorter ones with dp4a — the
     * multi-row GEMV (tern_gemv_rows.cu) for >= 32M weights, where it was
     * faster, the one-warp-per-row one (tern_gemv_i8.cu) below (NOTES.md).
     * Of these, the large ones take the binary tensor cores fed by the bulk
     * copy engine (tern_gemv_bmma.cu's gemv_i8_tbm; H200, M = 1, us): rows of
     * <= 6144 columns with >= 32M weights variant 64520 (units of 4 tiles, 2
     * stages; 14336 x 4096 6.8 vs 7.2 multi-row; M = 2^20 weights here),
     * from 40M weights 63520 (units of 2 tiles, two consumer warps per tile;
     * 73728 x 4608 25.3 vs 26.1, 36864 x 4608 14.7 vs 15.4, 22016 x 4096 9.05
     * vs 9.2, 10240 .. 13568 rows of 4096 columns 5.56 .. 6.78 vs 6.40 ..
     * 7.00), and 64520 down to 18M weights (4608 x 4096 4.26 vs 4.61 one
     * warp per row; 4096 x 4096, 16M, stays with it: 3.5 vs 4.0); rows of
     * 8192 .. 65536 columns in >= 4096 rows 65820 (two tiles a unit, four
     * consumer warps per tile, slices to 48 blocks; 4096 x 8192 4.87 vs 6.36
     * bmma, 4096 x 11008 5.95 vs 7.54), from 128M weights in rows of >= 32768
     * columns 63520 (two consumer warps per tile; 4608 x 36864 15.35 vs 15.8;
     * thirty-seventh session, alone / behind the norm: 14.4 / 27.7 vs 14.7 /
     * 27.9, 4096 x 32768 12.2 / 24.3 vs 12.2 / 24.8, 5120 x 32768 14.4 / 26.0
     * vs 14.3 / 26.3).  In shorter rows 65820 from 128M too: 16384 x 8192
     * 12.2 / 15.5 -> 11.1 / 13.3, 28672 x 8192 18.3 / 20.9 -> 17.0 / 18.7, 12288
     * x 12288 13.8 / 17.3 -> 12.4 / 15.1, 5120 x 27648 14.7 / 25.3 -> 12.3 /
     * 23.6, 6144 x 24576 13.6 / 23.4 -> 13.0 / 23.5, 8192 x 22016 16.1 / 24.4 ->
     * 15.3 / 24.5, 8192 x 28672 18.3 / 29.2 -> 17.9 / 29.3 (H200, two rounds
     * within 1.2 %; NOTES.md).  (48M .. 128M had
     * 63530, 3 stages, until the thirty-fifth session: with the K split
     * through tbm_row_add 65820 was faster on 9 of 11 such shapes alone (<= 1 %
     * slower on the other two) and on all 11 behind the engine's norm, e.g.
     * 8192 x 11008 10.0 -> 9.1 / 12.8 -> 10.8 us, 6144 x 16384 10.8 -> 9.7 /
     * 15.4 -> 13.8, 4096 x 14336 7.15 -> 7.25 / 11.1 -> 10.1; NOTES.md.)  Chosen end to end (bench-e2e, B = 1, same runs): 63520 from 64M
     * weights took 7B 671-684 -> 699-707 tok/s, 27B 269-272 -> 273-274; then
     * 64520 from 18M and 63520 from 128M 27B 271-272 -> 276-278 (7B, which
     * has neither shape, 700-706 either way); the 7B's q|k|v 12288 x 4096
     * (48M) on 63520 rather than 63521 (one CTA per SM) 936-937 -> 945-946
     * (two rounds), and 63521 took 10.7-12.4 us alone at 10752 .. 11520 and
     * 12800 .. 13568 rows of 4096 columns (63520 5.6-6.8); not below 40M (the
     * 27B's 8192 x 4608, 36M, 64520: 326 tok/s, 320 on 63520 or 63531).
     * (Two consumer warps per tile had once
     * lost in the decode step where the bench said they win: the planner
     * had split 22016 x 4096 into K slices of 4 blocks, 19.4 us instead of
     * 9.4 — it no longer takes such splits, tern_gemv_bmma.cu.)
     * TERNLAB_CUDA_GEMV1 = bmma | rows | warp picks one for every such call
     * (comparisons); forced: 3 = rows, 4 = one warp per row, 6 = bmma */
    const int64_t xc = a.ldx; /* W->cols (aligned, % 16 int8 / % 8 bf16) or the padded copy's kpad */
    int k1 = force, tbm = 0; /* tbm: the bulk-copy kernel's variant, 0: not taken */
    const int v = tern_cuda_decode_variant_get();
    if (force == 0 && i8_one) {
        k1 = gemv1_pick();
        if (k1 < 0) return err_prefix("%s: ", who);
        if (k1 == 0) k1 = gemv1_rule(W, v, &tbm);
        if (k1 < 0) return err_prefix("%s: ", who);
    }
    if (k1 == 6) {
        const int bv = tbm ? tbm : v >= 50000 && v < 70000 ? v : 0; /* 6abcd: the bulk-copy kernel */
        bmma_config(bv, nullptr);
        if (tern_gemv_i8_bmma(W, static_cast<const int8_t *>(a.x), xc, d_sx, d_y, bv, s) < 0)
            return err_prefix("%s: ", who);
        return 0;
    }
    if (k1 == 3) {
        tern_cuda_set_config("gemv_rows");
        if (tern_gemv_i8_rows(W, static_cast<const int8_t *>(a.x), xc, d_sx, d_y,
                              v >= 30000 && v < 40000 ? v : 0, s) < 0)
            return err_prefix("%s: ", who);
        return 0;
    }
    if (k1 == 4) {
        tern_cuda_set_config("gemv_warp");
        if (tern_gemv_i8_rowscale(W, static_cast<const int8_t *>(a.x), xc, d_sx, d_y, s) < 0)
            return err_prefix("%s: ", who);
        return 0;
    }
    /* 1 .. 16 tokens of int8 activations, one scale per row or per tensor: the
     * bulk-copy kernel on the int8 tensor cores (tern_gemv_bmma.cu's
     * gemv_i8_tbm_mt), forced 7 (any such n, variant 6abcd or its own) or
     * where mt_rule takes it with no development variant set */
    if (force == 7 || (force == 0 && v == 0 && i8_mt && n >= 2 && mt_rule(W, n))) {
        const int mv = v >= 60000 && v < 70000 ? v : mt_variant(W);
        bmma_config(mv, "mt");
        if (tern_gemv_i8_mt(W, static_cast<const int8_t *>(a.x), xc, d_sx, n, d_y, mv, s) < 0)
            return err_prefix("%s: ", who);
        return 0;
    }
    /* bf_mt (above): the bulk-copy GEMV on the bf16 tensor cores
     * (tern_gemv_bmma.cu's gemv_bf16_tbm), forced 8 or by default, with
     * variant 6abcd where one is set, else its own; the mma GEMV below keeps
     * these calls only under its own development variants
     * (tern_gemv_own_variant; it refuses 6abcd) */
    if (force == 8 || (force == 0 && bf_mt && !tern_gemv_own_variant(v))) {
        const int bv = v >= 60000 && v < 70000 ? v : bf_variant(W, n);
        bmma_config(bv, "bf16");
        if (tern_gemv_bf16_mt(W, static_cast<const uint16_t *>(a.x), xc, n, d_y, bv, s) < 0)
            return err_prefix("%s: ", who);
        return 0;
    }
    if (gemv) { /* chunks of 16 tokens, ordered on the stream */
        tern_cuda_set_config("gemv_mma");
        for (int64_t c = 0; c < n; c += 16) {
            TernKArgs b = a;
            b.n = n - c < 16 ? n - c : 16;
            b.x = static_cast<const uint8_t *>(a.x) + (size_t)(c * a.ldx) * xesize;
            b.plane_stride = a.plane_stride; /* planes keep their full-n stride */
            b.y = a.y + c * a.rows;
            b.sx = a.sx ? a.sx + c : nullptr;
            b.l2ef = n > 16 ? -1 : 0;
            if (tern_gemv_launch(act, &b, s) < 0) return err_prefix("%s: ", who);
        }
        return 0;
    }
    /* n > 16 (or forced 5), one scale per row: the wgmma GEMM; grouped
     * scales (or forced 2): the mma.sync GEMM */
    if (force == 5 && gu != 0)
        return err_set("%s: the wgmma GEMM takes one scale per row (group of %lld columns)", who,
                       (long long)W->group_cols);
    if (force == 5 || (force == 0 && gu == 0)) {
        tern_cuda_set_config("wgmma"); /* the launch adds its tile, sets, split */
        if (tern_gemm_wg_launch(act, &a, s) < 0) return err_prefix("%s: ", who);
        return 0;
    }
    tern_cuda_set_config("gemm_mma");
    if (tern_gemm_launch(act, &a, s) < 0) return err_prefix("%s: ", who);
    return 0;
}

} // namespace

int tern_ws_zeroed(size_t bytes, void **out) { return ws_get(WS_CTR, bytes, out); }

int tern_mm::scratch(int64_t floats, int64_t counters, float **partial, int **ctr) {
    void *p = nullptr, *c = nullptr;
    if (ws_get(WS_PART, (size_t)floats * 4, &p) < 0 || ws_get(WS_CTR, (size_t)counters * 4, &c) < 0)
        return -1;
    *partial = static_cast<float *>(p);
    *ctr = static_cast<int *>(c);
    return 0;
}

extern "C" {

int tern_cuda_upload(const TernaryMatrix *W, TernCudaMatrix *out) {
    memset(out, 0, sizeof *out);
    if (!W || !W->codes || !W->scales || W->rows < 1 || W->cols < 1)
        return err_set("tern_cuda_upload: empty or freed ternary matrix");
    if (W->row_bytes != tern_row_bytes(W->cols))
        return err_set("tern_cuda_upload: row stride %lld does not match the packed layout (%lld)",
                       (long long)W->row_bytes, (long long)tern_row_bytes(W->cols));
    TernCudaMatrix m = {};
    m.rows = W->rows;
    m.cols = W->cols;
    m.row_bytes = W->row_bytes;
    m.kblocks = tern_row_blocks(W->cols);
    m.group_cols = W->group_cols;
    m.n_groups = W->n_groups;
    m.scale_stride = W->scale_stride;
    m.n_scales = W->n_scales;
    int gu = 0;
    if (group_unit(&m, "tern_cuda_upload", &gu) < 0) return -1;
    const size_t code_bytes = (size_t)(m.rows * m.row_bytes);
    const size_t scale_bytes = (size_t)m.n_scales * sizeof(float);
    cudaError_t e;
    if ((e = cudaMalloc(&m.d_codes, code_bytes)) != cudaSuccess ||
        (e = cudaMalloc(&m.d_scales, scale_bytes)) != cudaSuccess) {
        (void)cudaGetLastError(); /* (not left for the next launch check) */
        tern_cuda_free(&m);
        return err_set("tern_cuda_upload: %lld x %lld matrix needs %zu device bytes: %s",
                       (long long)m.rows, (long long)m.cols,
                       code_bytes + scale_bytes, cudaGetErrorString(e));
    }
    if ((e = cudaMemcpy(m.d_codes, W->codes, code_bytes, cudaMemcpyHostToDevice)) != cudaSuccess ||
        (e = cudaMemcpy(m.d_scales, W->scales, scale_bytes, cudaMemcpyHostToDevice)) !=
            cudaSuccess) {
        (void)cudaGetLastError(); /* (not left for the next launch check) */
        tern_cuda_free(&m);
        return err_set("tern_cuda_upload: copy to device: %s", cudaGetErrorString(e));
    }
    m.device_bytes = (int64_t)(code_bytes + scale_bytes);
    *out = m;
    return 0;
}

void tern_cuda_free(TernCudaMatrix *m) {
    if (!m) return;
    cudaFree(m->d_codes);
    cudaFree(m->d_scales);
    memset(m, 0, sizeof *m);
}

int64_t tern_cuda_weight_bytes(const TernCudaMatrix *m) {
    return m->rows * m->row_bytes + m->n_scales * (int64_t)sizeof(float);
}

const char *tern_cuda_last_config(void) { return g_config; }
void tern_cuda_set_config(const char *cfg) {
    snprintf(g_config, sizeof g_config, "%s", cfg ? cfg : "");
}

/* An on-by-default switch cached from the environment (off where `name` is
 * "0"), and its setter returning the previous value; atomic (rank threads of
 * the tensor-parallel engine launch at once). */
static int env_switch(std::atomic<int> *cache, const char *name) {
    int v = cache->load(std::memory_order_relaxed);
    if (v < 0) {
        const char *e = getenv(name);
        int want = !(e && strcmp(e, "0") == 0), expect = -1;
        cache->compare_exchange_strong(expect, want, std::memory_order_relaxed);
        v = cache->load(std::memory_order_relaxed);
    }
    return v;
}
static int env_switch_set(std::atomic<int> *cache, const char *name, int on) {
    const int old = env_switch(cache, name);
    cache->store(on != 0, std::memory_order_relaxed);
    return old;
}

int tern_cuda_pdl_get(void) { return env_switch(&g_pdl, "TERNLAB_CUDA_PDL"); }
int tern_cuda_pdl(int on) { return env_switch_set(&g_pdl, "TERNLAB_CUDA_PDL", on); }

static std::atomic<int> g_tbm_reserve{0};
int tern_cuda_tbm_reserve(int n) { return g_tbm_reserve.exchange(n < 0 ? 0 : n, std::memory_order_relaxed); }
int tern_cuda_tbm_reserve_get(void) { return g_tbm_reserve.load(std::memory_order_relaxed); }

static std::atomic<int> g_l2ef{-1}; /* -1: not yet read from TERNLAB_CUDA_L2EF */
int tern_cuda_l2ef_get(void) { return env_switch(&g_l2ef, "TERNLAB_CUDA_L2EF"); }
int tern_cuda_l2ef(int on) { return env_switch_set(&g_l2ef, "TERNLAB_CUDA_L2EF", on); }

int tern_cuda_force_kernel(int which) { return g_force.exchange(which, std::memory_order_relaxed); }

int tern_cuda_tbm_override(const char *spec) {
    std::vector<TbmOverride> l;
    if (tbm_parse(spec, l) < 0) return err_prefix("tern_cuda_tbm_override: ");
    std::lock_guard<std::mutex> lk(g_tbm_mu);
    g_tbm_list.swap(l);
    g_tbm_set = true;
    return 0;
}

int tern_cuda_matmul_f32(const TernCudaMatrix *W, const float *d_x, int64_t n, float *d_y,
                         cudaStream_t stream) {
    return run(TACT_F32, W, d_x, nullptr, n, d_y, stream, "tern_cuda_matmul_f32");
}

int tern_cuda_matmul_bf16(const TernCudaMatrix *W, const uint16_t *d_x, int64_t n, float *d_y,
                          cudaStream_t stream) {
    return run(TACT_BF16, W, d_x, nullptr, n, d_y, stream, "tern_cuda_matmul_bf16");
}

int tern_cuda_matmul_i8(const TernCudaMatrix *W, const int8_t *d_xq, const float *d_sx,
                        int64_t n, float *d_y, cudaStream_t stream) {
    return run(TACT_I8, W, d_xq, d_sx, n, d_y, stream, "tern_cuda_matmul_i8");
}

/* Whether the fused forms are off whatever the matrix: 1 where a kernel is
 * forced for every one-token GEMV (tern_cuda_force_kernel, TERNLAB_CUDA_GEMV1:
 * the separate kernels stay, so comparisons measure it), -1 (err_set) on a
 * malformed TERNLAB_CUDA_GEMV1, else 0. */
static int fused_off(void) {
    if (g_force.load(std::memory_order_relaxed) != 0) return 1;
    const int k = gemv1_pick();
    return k < 0 ? -1 : k != 0;
}

/* a fused form's refusal for fused_off()'s reason (off != 0) */
static int fused_off_err(int off, const char *who) {
    if (off < 0) return err_prefix("%s: ", who);
    return err_set("%s: a kernel is forced for every one-token GEMV (tern_cuda_force_kernel or "
                   "TERNLAB_CUDA_GEMV1): the fused form is off", who);
}

/* W's shape and format allow the GLU form */
static bool glu_shape_ok(const TernCudaMatrix *W) {
    return W && W->d_codes && W->n_groups == 1 && W->rows >= 32 && W->rows % 32 == 0 && W->cols % 16 == 0 &&
           W->cols <= 4194304 && W->row_bytes % 64 == 0;
}

/* (the shape rule consulted as the call consults it: 0 under a malformed
 * TERNLAB_CUDA_TBM, as for the f32-input form) */
int tern_cuda_glu_i8_ok(const TernCudaMatrix *W) {
    int tbm;
    return fused_off() == 0 && glu_shape_ok(W) && gemv1_rule(W, 0, &tbm) >= 0;
}

/* A fused form's binary tensor-core variant for W: a development variant in
 * [lo, 70000) (tern_cuda_decode_variant), else the dispatch's bulk-copy one
 * (tbm, from gemv1_rule), else `other`; recorded by bmma_config. */
static int fused_variant(int tbm, int lo, int other, const char *form) {
    const int dv = tern_cuda_decode_variant_get();
    const int v = dv >= lo && dv < 70000 ? dv : tbm ? tbm : other;
    bmma_config(v, form);
    return v;
}

/* The GLU forms' start (tern_cuda_glu_i8 and its folded-norm form): the
 * checks and the bulk-copy variant into *v (the GLU form exists only there:
 * 64520 where the dispatch would not take it), recorded as `form`. */
static int glu_start(const TernCudaMatrix *W, const char *who, const char *form, int *v) {
    const int off = fused_off();
    if (off) return fused_off_err(off, who);
    if (!glu_shape_ok(W))
        return err_set("%s: %lld x %lld (%lld scale groups per row): not a gate|up matrix of whole 16-row tiles "
                       "with one scale per row",
                       who, W ? (long long)W->rows : 0LL, W ? (long long)W->cols : 0LL,
                       W ? (long long)W->n_groups : 0LL);
    int tbm = 0;
    if (gemv1_rule(W, 0, &tbm) < 0) return err_prefix("%s: ", who);
    *v = fused_variant(tbm, 60000, 64520, form);
    return 0;
}

int tern_cuda_glu_i8(const TernCudaMatrix *W, const int8_t *d_xq, const float *d_sx, int act, float *d_h,
                     unsigned *d_hmax, cudaStream_t stream) {
    int v = 0;
    if (glu_start(W, "tern_cuda_glu_i8", "glu", &v) < 0) return -1;
    if (tern_gemv_i8_glu(W, d_xq, W->cols, d_sx, act, d_h, d_hmax, v, stream) < 0)
        return err_prefix("tern_cuda_glu_i8: ");
    return 0;
}

/* The f32-input GEMV's variant in rows of >= 8192 columns (the int8
 * one-token dispatch's class of the binary GEMVs; an R x C override of
 * TERNLAB_CUDA_TBM still comes first): the bulk-copy kernel 65520 (four
 * consumer warps per tile) in >= 4096 rows of <= 65536 columns, else the
 * register-fed kernel (0).  The 7B's 4096 x 11008 down projection in the
 * decode step (H200, same runs): the register-fed kernel 743-746 tok/s,
 * 63540 784-788 (63530 768-773, 64540 723-727, 63560 740-745); later 63540
 * 792-798, 65520 801-804 (five rounds); 936-938 against 928-929 on 65820,
 * the int8 form's variant there.  The 27B's 4608 x 36864 (bench-e2e B = 1,
 * two rounds): 326 tok/s against 322-323 on 63520, the int8 form's. */
static int f32x_variant(const TernCudaMatrix *W) { return W->rows >= 4096 && W->cols <= 65536 ? 65520 : 0; }

/* The kernel of W's f32-input form, by the int8 one-token dispatch
 * (gemv1_rule): 6 the binary tensor-core GEMVs (*tbm: the bulk-copy variant,
 * the dispatch's in rows of <= 6144 columns or an override's, else
 * f32x_variant's; 0 for the register-fed kernel), 4 one warp per row (its
 * f32 form, tern_gemv_i8_rowscale_f32x), 0 none (the format, or the
 * multi-row dp4a GEMV's shapes); -1 (err_set) on a malformed
 * TERNLAB_CUDA_TBM.  (fused_off() is the caller's.) */
static int f32x_kernel(const TernCudaMatrix *W, int *tbm) {
    *tbm = 0;
    if (!W || !W->d_codes || W->n_groups != 1 || W->cols % 16 != 0 || W->row_bytes % 64 != 0) return 0;
    const int o = tbm_override(W);
    if (o < 0) return -1;
    int k = 6;
    if (o > 0) {
        *tbm = o;
    } else {
        k = gemv1_shape(W, 0, tbm);
        if (k == 6 && W->cols >= 8192) *tbm = f32x_variant(W);
    }
    return k == 6 || (k == 4 && W->row_bytes <= kTernWarpF32xRowBytes) ? k : 0;
}

int tern_cuda_matmul_i8_f32x_kernel(const TernCudaMatrix *W) {
    int tbm;
    if (fused_off() != 0) return 0;
    const int k = f32x_kernel(W, &tbm);
    return k > 0 ? k : 0;
}

int tern_cuda_matmul_i8_f32x_ok(const TernCudaMatrix *W) { return tern_cuda_matmul_i8_f32x_kernel(W) != 0; }

/* The f32-input GEMV (tern_cuda_matmul_i8_f32x) and its two variations: a
 * K split left to the next kernel (def) or the folded norm's producer (no:
 * the one-warp form only — whole rows per warp, so y is final where it is
 * added to the residual). */
static int f32x_run(const TernCudaMatrix *W, const float *d_x, const unsigned *d_xmax, float *d_y,
                    TernDeferred *def, TernNormOut *no, cudaStream_t stream) {
    const char *who = no ? "tern_cuda_matmul_i8_f32x_norm" : "tern_cuda_matmul_i8_f32x";
    const int off = fused_off();
    if (off) return fused_off_err(off, who);
    if (!d_x || !d_xmax || (!no && !d_y)) return err_set("%s: NULL argument", who);
    int tbm;
    const int k = f32x_kernel(W, &tbm);
    if (k < 0) return err_prefix("%s: ", who);
    if (!k || (no && k != 4))
        return err_set("%s: %lld x %lld: not a shape of the %sone-warp GEMV%s with one scale per row", who,
                       W ? (long long)W->rows : 0LL, W ? (long long)W->cols : 0LL,
                       no ? "" : "binary tensor-core or the ", no ? "" : "s");
    if (k == 4) { /* one warp per row: no K split to leave */
        if (def) *def = {};
        tern_cuda_set_config(no ? "gemv_warp f32x norm" : "gemv_warp f32x");
        if (tern_gemv_i8_rowscale_f32x(W, d_x, d_xmax, d_y, no, stream) < 0) return err_prefix("%s: ", who);
        return 0;
    }
    const int v = fused_variant(tbm, 50000, 0, "f32x");
    if (tern_gemv_i8_bmma_f32x(W, d_x, d_xmax, d_y, v, stream, def) < 0) return err_prefix("%s: ", who);
    return 0;
}

int tern_cuda_matmul_i8_f32x_defer(const TernCudaMatrix *W, const float *d_x, const unsigned *d_xmax,
                                   float *d_y, TernDeferred *def, cudaStream_t stream) {
    return f32x_run(W, d_x, d_xmax, d_y, def, nullptr, stream);
}

int tern_cuda_matmul_i8_f32x(const TernCudaMatrix *W, const float *d_x, const unsigned *d_xmax, float *d_y,
                             cudaStream_t stream) {
    return f32x_run(W, d_x, d_xmax, d_y, nullptr, nullptr, stream);
}

/* The folded norm (TernNormOut / TernNormIn, tern_cuda.h): its producer is
 * f32x_run's one-warp form, where its grid (tern_gemv_i8_rowscale_f32x_ctas)
 * has no more CTAs than slots; its consumer the bulk-copy GLU form. */
int tern_cuda_matmul_i8_f32x_norm_ok(const TernCudaMatrix *W) {
    unsigned ctas = 0;
    if (tern_cuda_matmul_i8_f32x_kernel(W) != 4) return 0;
    if (tern_gemv_i8_rowscale_f32x_ctas(W, &ctas) < 0) {
        (void)cudaGetLastError(); /* (not left pending for the next call) */
        return 0;
    }
    return ctas <= TERN_NORM_SLOTS;
}

int tern_cuda_matmul_i8_f32x_norm(const TernCudaMatrix *W, const float *d_x, const unsigned *d_xmax,
                                  TernNormOut *no, cudaStream_t stream) {
    if (!no) return err_set("tern_cuda_matmul_i8_f32x_norm: NULL argument");
    return f32x_run(W, d_x, d_xmax, nullptr, nullptr, no, stream);
}

int tern_cuda_glu_i8_norm(const TernCudaMatrix *W, const TernNormIn *ni, int act, float *d_h, unsigned *d_hmax,
                          cudaStream_t stream) {
    int v = 0;
    if (glu_start(W, "tern_cuda_glu_i8_norm", "glu norm", &v) < 0) return -1;
    if (tern_gemv_i8_glu_norm(W, ni, act, d_h, d_hmax, v, stream) < 0) return err_prefix("tern_cuda_glu_i8_norm: ");
    return 0;
}

/* The GLU form of a decode step of 2 .. 8 tokens on the multi-token
 * bulk-copy kernel (tern_cuda.h): its variant by mt_variant (a development
 * variant 6abcd where one is set), recorded as "gemv_tbm mt glu v=V". */
static bool glu_mt_shape_ok(const TernCudaMatrix *W, int64_t n) { return glu_shape_ok(W) && n >= 1 && n <= 8; }

int tern_cuda_glu_i8_mt_ok(const TernCudaMatrix *W, int64_t n) { return fused_off() == 0 && glu_mt_shape_ok(W, n); }

/* Where the engine takes it (tern_cuda.h): where the int8 dispatch would not
 * put the gate|up matrix on the multi-token GEMV itself (mt_rule), i.e. on
 * the wgmma GEMM.  H100, bench-e2e tern-i8, ms a step, the GLU form (with
 * h's int8 pass spread over its rows) against the GEMV / GEMM and the GLU
 * kernel (one CTA a row) at 2 / 4 / 8 sequences: 27B (73728 x 4608, the
 * wgmma GEMM) 4.80 / 4.90 / 5.04 against 4.94 / 5.06 / 5.20; 7B (22016 x
 * 4096, the multi-token GEMV) 1.667 / 1.772 / 1.857 against 1.662 / 1.728 /
 * 1.822 (dev/NOTES.md, sixty-third session).  On an H200 the 27B is faster
 * without it: the engine's bound there is 0 (cuda_mt_fuse_for). */
int tern_cuda_glu_i8_mt_rule(const TernCudaMatrix *W, int64_t n) {
    return tern_cuda_glu_i8_mt_ok(W, n) && n >= 2 && !mt_rule(W, n);
}

int tern_cuda_glu_i8_mt(const TernCudaMatrix *W, const int8_t *d_xq, const float *d_sx, int64_t n, int act,
                        float *d_h, unsigned *d_hmax, cudaStream_t stream) {
    const char *who = "tern_cuda_glu_i8_mt";
    const int off = fused_off();
    if (off) return fused_off_err(off, who);
    if (n < 1 || n > 8) return err_set("%s: %lld tokens (1 .. 8)", who, (long long)n);
    if (!glu_mt_shape_ok(W, n))
        return err_set("%s: %lld x %lld (%lld scale groups per row): not a gate|up matrix of whole 16-row tiles "
                       "with one scale per row",
                       who, W ? (long long)W->rows : 0LL, W ? (long long)W->cols : 0LL,
                       W ? (long long)W->n_groups : 0LL);
    const int dv = tern_cuda_decode_variant_get();
    const int v = dv >= 60000 && dv < 70000 ? dv : mt_variant(W);
    bmma_config(v, "mt glu");
    if (tern_gemv_i8_glu_mt(W, d_xq, W->cols, d_sx, n, act, d_h, d_hmax, v, stream) < 0)
        return err_prefix("%s: ", who);
    return 0;
}

} /* extern "C" */

namespace {
__global__ void copy16_kernel(const uint4 *__restrict__ src, uint4 *__restrict__ dst, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        dst[i] = src[i];
}

/* median ms of reps runs of fn() on s, timed with events (after one warm-up) */
template <typename F>
int median_ms(cudaStream_t s, int reps, F fn, float *out) {
    cudaEvent_t e0, e1;
    CUDA_CHECK(cudaEventCreate(&e0));
    if (cudaEventCreate(&e1) != cudaSuccess) {
        cudaEventDestroy(e0);
        return err_set("tern_cuda_copy_bandwidth: cudaEventCreate failed");
    }
    std::vector<float> ms;
    cudaError_t err = fn();
    if (err == cudaSuccess) err = cudaStreamSynchronize(s);
    for (int r = 0; r < reps && err == cudaSuccess; r++) {
        float t = 0;
        if ((err = cudaEventRecord(e0, s)) != cudaSuccess || (err = fn()) != cudaSuccess ||
            (err = cudaEventRecord(e1, s)) != cudaSuccess || (err = cudaEventSynchronize(e1)) != cudaSuccess ||
            (err = cudaEventElapsedTime(&t, e0, e1)) != cudaSuccess)
            break;
        ms.push_back(t);
    }
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    if (err != cudaSuccess) return err_set("tern_cuda_copy_bandwidth: %s", cudaGetErrorString(err));
    std::sort(ms.begin(), ms.end());
    const size_t h = ms.size() / 2;
    *out = ms.size() % 2 ? ms[h] : 0.5f * (ms[h - 1] + ms[h]);
    return 0;
}
} // namespace

extern "C" {

int tern_cuda_copy_bandwidth(size_t bytes, int reps, double *memcpy_bps, double *kernel_bps) {
    if (bytes < 16 || bytes % 16 != 0 || reps < 1)
        return err_set("tern_cuda_copy_bandwidth: %zu bytes (a multiple of 16), %d repetitions (>= 1)", bytes, reps);
    int dev = 0, sms = 0;
    CUDA_CHECK(cudaGetDevice(&dev));
    CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    void *a = nullptr, *b = nullptr;
    cudaStream_t s = nullptr;
    int rc = 0;
    float t_mem = 0, t_ker = 0;
    if (cudaMalloc(&a, bytes) != cudaSuccess || cudaMalloc(&b, bytes) != cudaSuccess) {
        cudaGetLastError(); /* (the failed allocation's error, not left for the next check) */
        rc = err_set("tern_cuda_copy_bandwidth: no device memory for 2 x %zu bytes", bytes);
    } else if (cudaMemset(a, 1, bytes) != cudaSuccess || cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) != cudaSuccess ||
               cudaDeviceSynchronize() != cudaSuccess) {
        rc = err_set("tern_cuda_copy_bandwidth: setting up: %s", cudaGetErrorString(cudaGetLastError()));
    } else {
        rc = median_ms(s, reps, [&] { return cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice, s); }, &t_mem);
        if (rc == 0)
            rc = median_ms(
                s, reps,
                [&] {
                    copy16_kernel<<<sms * 8, 512, 0, s>>>((const uint4 *)a, (uint4 *)b, bytes / 16);
                    return cudaGetLastError();
                },
                &t_ker);
    }
    if (s) cudaStreamDestroy(s);
    cudaFree(a);
    cudaFree(b);
    if (rc < 0) return -1;
    *memcpy_bps = 2.0 * (double)bytes / (1e-3 * (double)t_mem);
    *kernel_bps = 2.0 * (double)bytes / (1e-3 * (double)t_ker);
    return 0;
}

int tern_cuda_dense_bf16(cublasHandle_t h, const uint16_t *d_w, int64_t rows, int64_t cols,
                         const uint16_t *d_x, int64_t n, void *d_y, int y_f32,
                         cudaStream_t stream) {
    if (!h || !d_w || !d_x || !d_y) return err_set("tern_cuda_dense_bf16: NULL argument");
    if (rows < 1 || cols < 1 || n < 0)
        return err_set("tern_cuda_dense_bf16: bad shape %lld x %lld, n = %lld", (long long)rows,
                       (long long)cols, (long long)n);
    if (rows > 0x7fffffff || cols > 0x7fffffff || n > 0x7fffffff)
        return err_set("tern_cuda_dense_bf16: shape exceeds cuBLAS's 32-bit dimensions");
    if (n == 0) return 0;
    const float alpha = 1.0f, beta = 0.0f;
    /* (only where it differs: cublasSetStream also resets the handle's
     * workspace to cuBLAS's default pool, dropping a cublasSetWorkspace) */
    cudaStream_t cur = nullptr;
    CUBLAS_CHECK(cublasGetStream(h, &cur));
    if (cur != stream) CUBLAS_CHECK(cublasSetStream(h, stream));
    /* column-major view: y^T (rows, n) = W (cols, rows)^T @ x^T (cols, n) */
    CUBLAS_CHECK(cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, (int)rows, (int)n, (int)cols, &alpha,
                              d_w, CUDA_R_16BF, (int)cols, d_x, CUDA_R_16BF, (int)cols, &beta, d_y,
                              y_f32 ? CUDA_R_32F : CUDA_R_16BF, (int)rows, CUBLAS_COMPUTE_32F,
                              CUBLAS_GEMM_DEFAULT));
    return 0;
}

} /* extern "C" */
