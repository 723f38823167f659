/* cuda_engine.cu — the CUDA backend (cuda_engine.h): weights on the device,
 * the paged KV cache on the device, the forward pass as a sequence of kernel
 * launches on one stream, decode steps replayed from a CUDA graph. */
#include <cuda_runtime.h>
#ifdef TL_HAVE_NCCL
#include <nccl.h>
#endif
#include <pthread.h>
#include <sched.h>
#include <stdint.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <condition_variable>
#include <initializer_list>
#include <mutex>
#include <new>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <stdio.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <vector>

#include "cuda/cuda_util.h"
#include "cuda/fwd_cuda.h"
#include "cuda/tern_cuda.h"
#ifdef TERN_TRACE
#include "cuda/tern_trace.cuh"
#endif

extern "C" {
#include "core/err.h"
#include "core/mem.h"
#include "core/strnum.h"
#include "core/timer.h"
#include "ternary_format.h"
#include "runtime/cuda_engine.h"
#include "runtime/forward_internal.h"
#include "tp/shard.h"
}

namespace {

enum LinKind { LIN_NONE = 0, LIN_TERN, LIN_DENSE32, LIN_DENSE16 };

struct DLin {
    LinKind kind = LIN_NONE;
    int act_int8 = 0;
    int64_t out = 0, in = 0;
    TernCudaMatrix tm = {};
    float *w32 = nullptr;
    uint16_t *w16 = nullptr;
};

struct DLayer {
    float *attn_norm = nullptr, *ffn_norm = nullptr, *attn_sub = nullptr, *ffn_sub = nullptr;
    DLin q, k, v, o, gate, up, down;
    /* q|k|v and gate|up with their rows concatenated into one matrix (one
     * launch, one pass over the activations) where their formats allow */
    bool fqkv = false, fgu = false;
    DLin qkv, gu;
    /* tp > 1, int8 activations: o / down hold unit scales on the device (their
     * outputs are exact integer sums, all-reduced); the true scales are here */
    float *o_scale = nullptr, *down_scale = nullptr;
    int64_t o_sstride = 0, down_sstride = 0;
    /* every linear the layer may hold, separate or fused */
    std::array<DLin *, 9> lins() { return {&q, &k, &v, &o, &gate, &up, &down, &qkv, &gu}; }
    std::array<const DLin *, 9> lins() const { return {&q, &k, &v, &o, &gate, &up, &down, &qkv, &gu}; }
};

/* the most tokens of a call whose maxima have a word each (CE::hmax: a
 * layer's words of a kind), so the most that take o's int8 pass from the
 * attention's maxima (o_max_given) and the MLP's GLU form (mlp_mt) */
constexpr int kMtTok = 8;

struct CE {
    int gpu = 0, bf16 = 0, graphs = 1, synthetic = 0;
    cudaStream_t st = nullptr;
    cublasHandle_t cb = nullptr;
    void *cb_ws = nullptr;
    ModelConfig c = {};
    int64_t max_tok = 0;
    std::vector<DLayer> L;
    float *embed = nullptr, *final_norm = nullptr;
    DLin lm;
    /* KV pages of layer l: f32 K / V pages kp[l], vp[l] (layer_elems floats
     * each), or, in a layer whose tokens of both phases the KV policy stores
     * ternary, ternary pages tp_pages[l] (fwdc_kv_code_rows' format) and no
     * f32 pages (kv_pages_for_policy; TERNLAB_CUDA_KV_PAGES=f32 keeps f32
     * pages holding the ternary values there too); kv_bytes: all of them */
    std::vector<float *> kp, vp;
    std::vector<FwdcKvTern> tpages;
    size_t layer_elems = 0, kv_bytes = 0;
    int kv_f32_only = 0;
    int bs = 0, n_blocks = 0;
    /* device block tables (tab_rows, stride) and the host's copy of what they hold */
    int32_t *d_tab = nullptr;
    int tab_rows = 0, stride = 0;
    std::vector<int32_t> shadow;
    std::vector<uint32_t> seen;
    uint32_t stamp = 0;
    /* step inputs (pinned host, device): tok, pos, slot, row, lidx (n each),
     * count, the ids' host slot (h_map), then (index, value) pairs of table
     * updates */
    int32_t *h_in = nullptr, *d_in = nullptr;
    int64_t u_cap = 0;
    float *d_cos = nullptr, *d_sin = nullptr;
    int64_t rope_len = 0;
    /* activations */
    float *x = nullptr, *xb = nullptr, *q = nullptr, *k = nullptr, *v = nullptr, *att = nullptr,
          *hb = nullptr, *gu = nullptr, *hout = nullptr, *sx = nullptr, *logits = nullptr;
    uint16_t *x16 = nullptr;
    int8_t *xq = nullptr;
    int32_t *ids = nullptr; /* argmax of each logit row */
    /* one token: the GLU fused into the gate|up GEMV (TERNLAB_CUDA_GLU_FUSE=0
     * turns it off); decode steps: RoPE and the KV write in the attention
     * kernel (TERNLAB_CUDA_ATT_FUSE=0 turns it off), and at one token the o
     * projection's int8 pass in the o GEMV (o_fused: o_fuse 1 on the one-warp
     * GEMV, 2 on any, 0 off; TERNLAB_CUDA_O_FUSE, o_fuse_mode).
     * hmax: per layer, max|h| of the GLU output, then max|attention output|,
     * then the folded norm's max|x' w| (float bits), kMtTok words each (one a
     * token: hslot) */
    int glu_fuse = 1, att_fuse = 1, o_fuse = 1;
    /* 2 .. mt_fuse (<= kMtTok) tokens: the GLU in the gate|up GEMV where the
     * multi-token kernel's GLU form is taken (mlp_mt; TERNLAB_CUDA_MT_FUSE=N
     * sets the bound, 0 turns it off, as TERNLAB_CUDA_GLU_FUSE=0 does; unset,
     * the device's: mt_fuse_env, mt_fuse_default) */
    int mt_fuse = kMtTok;
    /* the KV policy of the cache (kv_set_policy) and the call's phase
     * (RunState.decode), as host_prepare found them: a layer whose tokens of
     * this phase are ternary codes them (fwdc_kv_code_rows into ternary pages,
     * fwdc_kv_ternarise into f32 ones; in a decode batch the fused kernel
     * fwdc_attention_rope_coded does it and scores the coded values) */
    KvPolicy pol = {KVP_NONE, -1, -1};
    int decode = 0;
    /* the fused MLP's down GEMV leaves its K split to the next layer's norm
     * (tern_cuda_matmul_i8_f32x_defer; TERNLAB_CUDA_DEFER=0 turns it off) */
    int defer = 1;
    /* one token with o not fused, or 2 .. kMtTok tokens: the int8 pass before o
     * takes the attention's max (o_max_given; TERNLAB_CUDA_OMAX=0 turns it off) */
    int omax_given = 1;
    /* one token, o on the one-warp f32 form and the MLP fused: the norm
     * between them folded into both (norm_folded; TERNLAB_CUDA_NORM_FOLD=0
     * turns it off); nss its producer's slots (TERN_NORM_SLOTS floats) */
    int norm_fold = 1;
    /* a ternary model's LM head at 1 .. 4 logit rows on ternlab's bf16 GEMV
     * (tern_cuda_gemv_bf16) instead of cuBLAS (lm_own_gemv;
     * TERNLAB_CUDA_LM_GEMV=0 turns it off); the BF16 reference stays on cuBLAS */
    int lm_gemv = 1;
    /* the last residual add in the final norm where the logit rows are the
     * tokens' (run_device's rows_ident; TERNLAB_CUDA_TAIL=0 turns it off) */
    int tail_norm = 1;
    bool tern_model = false; /* some decoder linear is ternary */
    float *nss = nullptr;
    unsigned *hmax = nullptr;
    int64_t n_fused[3] = {0, 0, 0}; /* layers enqueued fused: attention, o, MLP */
    int64_t n_mt = 0;               /* layers enqueued with the GLU form at 2 .. kMtTok tokens */
    int64_t n_deferred = 0;         /* down GEMVs whose K split the next norm finished */
    int scratch_dirty = 0;          /* a K split's sums could not be cleared after an error */
    int64_t n_omax = 0;             /* int8 passes before o that took the attention's max */
    int64_t n_norm_folded = 0;      /* MLP norms folded into the o and gate|up GEMVs */
    int64_t n_lm_gemv = 0;          /* LM heads enqueued on tern_cuda_gemv_bf16 */
    int64_t n_tail_fused = 0;       /* calls whose last residual add was the final norm's */
    int64_t n_kv_tern = 0;          /* layers whose K / V of a call were stored ternary */
    int64_t n_split = 0;            /* calls enqueued with the attention's keys split (splits > 1) */
    /* one decode graph at a time */
    cudaGraphExec_t exec = nullptr;
    int64_t exec_n = 0, exec_amax = 0, last_eager_n = 0;
    int exec_splits = 1;
    /* the argmax of a graph-replayed step inside its graph, its ids back
     * through pinned memory (TERNLAB_CUDA_ARGMAX_GRAPH=0 turns it off) */
    int argmax_graph = 0;
    int32_t *h_ids = nullptr;
    int64_t h_ids_cap = 0;
    int64_t n_graphs = 0, launches = 0, n_argmax_graph = 0;
    /* TERNLAB_CUDA_FAIL_LAUNCH (tests of the error paths): the fail_launch-th
     * step launch of this rank fails before it enqueues anything (0: none) */
    int64_t fail_launch = 0, n_step_launch = 0;
    /* TERNLAB_CUDA_FAULT_STEP (tests of the error paths): the fault_step-th step
     * launch of this rank enqueues, before the step, a kernel that writes to an
     * illegal address after ~0.5 s — a GPU fault that shows only after the
     * step is enqueued everywhere (0: none) */
    int64_t fault_step = 0;
    /* tensor parallelism: the rank that failed first in the current call (-1:
     * none), set by the first rank to fail (tp_fail), shared by the ranks */
    std::atomic<int> *tp_first_fail = nullptr;
    /* cuda_engine_decode_chain: a second pinned input buffer (a step's inputs
     * are prepared while the one before may still be uploading from the first),
     * two pinned slots of ids and their events; steps enqueued chained */
    int32_t *h_in2 = nullptr, *h_chain = nullptr;
    int64_t h_chain_cap = 0;
    /* every argmax also writes its ids into pinned host memory the device
     * maps (h_map, its device address d_map: two slots of max_tok ids), at the
     * slot the step's inputs name (ids_slot: the chain's step parity, else 0),
     * so that a chained step's ids need no copy back on the stream
     * (TERNLAB_CUDA_IDS_MAPPED=0: the copy, as before) */
    int32_t *h_map = nullptr, *d_map = nullptr;
    int ids_mapped = 1, ids_slot = 0;
    cudaEvent_t chain_ev[2] = {nullptr, nullptr};
    int64_t n_chained = 0;
    /* TERNLAB_CUDA_STEP_TIME=1 (measurement, one GPU): per graph replay of a
     * forward() call (not the chain's steps: time those with
     * TERNLAB_CUDA_CHAIN=0 or bench-e2e --sync-steps), the host's time in the
     * forward call and the device's from the inputs' upload to the ids (or
     * logits) back (events), medians printed at close; ev[3] after the inputs'
     * upload (time_up: the step being timed records it) */
    cudaEvent_t ev[4] = {nullptr, nullptr, nullptr, nullptr};
    bool time_up = false;
    std::vector<float> t_dev, t_graph, t_up;
    std::vector<double> t_wall, t_prep;
    size_t weight_bytes = 0, step_bytes = 0;
    std::vector<void *> allocs; /* every cudaMalloc of weights/buffers, freed at close */
    /* tensor parallelism (tp > 1): this rank's heads / MLP slice; o_proj and
     * down_proj are row-parallel (input columns [att_lo, +qd) and [inter_lo,
     * +inter) of the full vectors), followed by an all-reduce */
    int tp = 1, rank = 0;
#ifdef TL_HAVE_NCCL
    ncclComm_t comm = nullptr;
#endif
    /* a warm-up pass (tensor parallelism): the collectives are left out */
    bool dry = false;
    int64_t qd_full = 0, inter_full = 0, att_lo = 0, inter_lo = 0;
    float *gath = nullptr, *full = nullptr, *ones = nullptr, *amax = nullptr;
    int8_t *xq_full = nullptr;
    char name[128] = {0};
};

/* token 0's word of kind k (0: max|h| of the GLU, 1: max|attention output|, 2:
 * the folded norm's max|x' w|) of layer l in CE::hmax; token t's at + t */
unsigned *hslot(const CE *g, int k, int l) { return g->hmax + ((size_t)k * g->c.n_layers + l) * kMtTok; }

int dmalloc(CE *g, void **p, size_t bytes, const char *what) {
    *p = nullptr;
    if (bytes == 0) bytes = 16;
    cudaError_t e = cudaMalloc(p, bytes);
    if (e != cudaSuccess) {
        (void)cudaGetLastError(); /* (not left for the next launch check) */
        size_t fr = 0, tot = 0;
        cudaMemGetInfo(&fr, &tot);
        *p = nullptr;
        return err_set("cuda: %s needs %zu bytes of device memory, %zu of %zu free (%s); use fewer "
                       "sequences or tokens (generate's --batch, --kv-blocks, a shorter --window) or another model",
                       what, bytes, fr, tot, cudaGetErrorString(e));
    }
    g->allocs.push_back(*p);
    return 0;
}

template <typename T> int dalloc(CE *g, T **p, size_t count, const char *what) {
    void *v = nullptr;
    if (dmalloc(g, &v, count * sizeof(T), what) != 0) return -1;
    *p = static_cast<T *>(v);
    return 0;
}

/* Frees one of g's allocations before close (NULL: nothing). */
void dfree(CE *g, void *p) {
    if (!p) return;
    for (size_t i = 0; i < g->allocs.size(); i++)
        if (g->allocs[i] == p) {
            g->allocs.erase(g->allocs.begin() + (ptrdiff_t)i);
            break;
        }
    cudaFree(p);
}

uint16_t f32_to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40); /* quiet NaN */
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

int upload_f32(CE *g, float **d, const float *h, size_t count, const char *what) {
    if (dalloc(g, d, count, what) != 0) return -1;
    CUDA_CHECK(cudaMemcpy(*d, h, count * sizeof(float), cudaMemcpyHostToDevice));
    g->weight_bytes += count * sizeof(float);
    return 0;
}

size_t dlin_bytes(const DLin &d) {
    switch (d.kind) {
    case LIN_TERN: return (size_t)tern_cuda_weight_bytes(&d.tm);
    case LIN_DENSE32: return (size_t)(d.out * d.in) * 4;
    case LIN_DENSE16: return (size_t)(d.out * d.in) * 2;
    default: return 0;
    }
}

/* A model's Linear on the device: ternary as packed (unless it is the dense
 * twin of a ternary linear with f32 activations), dense in f32 or bf16. */
int dlin_upload(CE *g, const Linear *lin, DLin *d) {
    d->out = lin->out;
    d->in = lin->in;
    d->act_int8 = lin->act_int8;
    const bool tern = lin->t && !(lin->twin && !lin->act_int8);
    if (tern) {
        if (tern_cuda_upload(lin->t, &d->tm) != 0) return err_prefix("%s: ", lin->name);
        d->kind = LIN_TERN;
    } else {
        if (!lin->w) return err_set("%s: no dense weights to upload", lin->name);
        if (lin->act_int8)
            return err_set("%s: dense linear with int8 activations is not supported on CUDA",
                           lin->name);
        const size_t cnt = (size_t)(lin->out * lin->in);
        if (g->bf16) {
            std::vector<uint16_t> h(cnt);
            for (size_t i = 0; i < cnt; i++) h[i] = f32_to_bf16(lin->w[i]);
            if (dalloc(g, &d->w16, cnt, lin->name) != 0) return -1;
            CUDA_CHECK(cudaMemcpy(d->w16, h.data(), cnt * 2, cudaMemcpyHostToDevice));
            d->kind = LIN_DENSE16;
        } else {
            if (dalloc(g, &d->w32, cnt, lin->name) != 0) return -1;
            CUDA_CHECK(cudaMemcpy(d->w32, lin->w, cnt * 4, cudaMemcpyHostToDevice));
            d->kind = LIN_DENSE32;
        }
    }
    g->weight_bytes += dlin_bytes(*d);
    return 0;
}

/* A synthetic linear: random packed codes with one scale per row, or dense bf16. */
int dlin_synth(CE *g, int64_t out, int64_t in, const CudaSynthetic *syn, uint64_t seed, DLin *d) {
    d->out = out;
    d->in = in;
    const float amp = 1.0f / sqrtf((float)in);
    if (syn->ternary) {
        TernCudaMatrix &m = d->tm;
        m.rows = out;
        m.cols = in;
        m.row_bytes = tern_row_bytes(in);
        m.kblocks = tern_row_blocks(in);
        m.group_cols = in;
        m.n_groups = 1;
        m.scale_stride = 1;
        m.n_scales = out;
        if (dalloc(g, &m.d_codes, (size_t)(out * m.row_bytes), "synthetic codes") != 0 ||
            dalloc(g, &m.d_scales, (size_t)out, "synthetic scales") != 0)
            return -1;
        if (fwdc_fill(m.d_codes, out * m.row_bytes, 2, 0.0f, seed, g->st) != 0 ||
            fwdc_fill(m.d_scales, out, 3, amp, seed + 1, g->st) != 0)
            return -1;
        m.device_bytes = out * m.row_bytes + out * 4;
        d->kind = LIN_TERN;
        d->act_int8 = syn->act_int8;
    } else {
        if (dalloc(g, &d->w16, (size_t)(out * in), "synthetic dense weights") != 0 ||
            fwdc_fill(d->w16, out * in, 1, amp, seed, g->st) != 0)
            return -1;
        d->kind = LIN_DENSE16;
    }
    g->weight_bytes += dlin_bytes(*d);
    return 0;
}

/* y (n, out) = x (n, in) @ W^T; x32 / x16 / (xq, sx) are the same activations
 * in the forms the linear may need (prepared by the caller). */
int dlin_run(CE *g, const DLin &d, const float *x32, const uint16_t *x16, int64_t n, float *y) {
    switch (d.kind) {
    case LIN_TERN:
        if (d.act_int8) return tern_cuda_matmul_i8(&d.tm, g->xq, g->sx, n, y, g->st);
        if (g->bf16) return tern_cuda_matmul_bf16(&d.tm, x16, n, y, g->st);
        return tern_cuda_matmul_f32(&d.tm, x32, n, y, g->st);
    case LIN_DENSE32: {
        const float one = 1.0f, zero = 0.0f;
        if (d.out > INT_MAX || d.in > INT_MAX || n > INT_MAX) /* (cuBLAS's int sizes, as the bf16 path checks) */
            return err_set("cuda: f32 linear %lld x %lld at %lld tokens: a size past cuBLAS's int", (long long)d.out,
                           (long long)d.in, (long long)n);
        CUBLAS_CHECK(cublasSgemm(g->cb, CUBLAS_OP_T, CUBLAS_OP_N, (int)d.out, (int)n, (int)d.in,
                                 &one, d.w32, (int)d.in, x32, (int)d.in, &zero, y, (int)d.out));
        return 0;
    }
    case LIN_DENSE16: return tern_cuda_dense_bf16(g->cb, d.w16, d.out, d.in, x16, n, y, 1, g->st);
    default: return err_set("cuda: linear without weights");
    }
}

struct Need {
    bool x16 = false, xq = false, f32 = false;
};
/* What the linears `ls` read: bf16, int8 and / or f32 activations (dlin_run's
 * x32: dense f32, or ternary with f32 activations). */
Need need_of(const CE *g, std::initializer_list<const DLin *> ls) {
    Need n;
    for (const DLin *d : ls) {
        n.xq = n.xq || (d->kind == LIN_TERN && d->act_int8);
        n.x16 = n.x16 || d->kind == LIN_DENSE16 || (d->kind == LIN_TERN && !d->act_int8 && g->bf16);
        n.f32 = n.f32 || d->kind == LIN_DENSE32 || (d->kind == LIN_TERN && !d->act_int8 && !g->bf16);
    }
    return n;
}

/* f32 activations x32 (n, cols) into the forms `nd` asks for (a plain tensor
 * that no fused kernel prepared: the attention output before o_proj). */
int prep_input(CE *g, const float *x32, int64_t n, int64_t cols, Need nd) {
    if (nd.xq && fwdc_act_quant_i8(x32, n, cols, g->xq, g->sx, g->st) != 0) return -1;
    if (nd.x16 && fwdc_to_bf16(x32, n * cols, g->x16, g->st) != 0) return -1;
    return 0;
}

/* RMSNorm (after the residual add x += h when h is non-NULL, or h still in a
 * deferred GEMV's K split: hd, one row) of x into the forms the consumers
 * need: f32 in g->xb, bf16 in g->x16, int8 in g->xq (f32 also where nothing
 * else is asked for). */
int norm_into(CE *g, float *x, const float *h, const float *w, int64_t n, int64_t dim, Need nd,
              const TernDeferred *hd = nullptr, bool x_ready = false) {
    float *o32 = nd.f32 || !(nd.x16 || nd.xq) ? g->xb : nullptr;
    uint16_t *o16 = nd.x16 ? g->x16 : nullptr;
    int8_t *xq = nd.xq ? g->xq : nullptr;
    float *sx = nd.xq ? g->sx : nullptr;
    if (hd) return fwdc_norm_deferred(x, hd, w, dim, g->c.eps, o32, o16, xq, sx, g->st);
    if (x_ready) return fwdc_norm_x_ready(x, h, w, n, dim, g->c.eps, o32, o16, xq, sx, g->st);
    return fwdc_norm(x, h, w, n, dim, g->c.eps, o32, o16, xq, sx, g->st);
}

#define TRY(call)                                                                           \
    do {                                                                                    \
        if ((call) != 0) return -1;                                                         \
    } while (0)

#ifdef TL_HAVE_NCCL
#define NCCL_TRY(call)                                                                      \
    do {                                                                                    \
        ncclResult_t r_ = (call);                                                           \
        if (r_ != ncclSuccess)                                                              \
            return err_set("%s:%d: %s failed: %s", __FILE__, __LINE__, #call,               \
                           ncclGetErrorString(r_));                                         \
    } while (0)
#endif

/* A row-parallel linear at tp > 1: y (n, out) on every rank = the full
 * product.  x_local (n, w) is this rank's slice (columns [lo, lo+w) of the
 * full vector of full_dim columns); `sub` the optional sub-norm over the full
 * vector (BitNet).
 *   int8 activations — exact: each rank quantises its slice with the full
 *   vector's scale, as on one GPU: without a sub-norm, the scale comes from
 *   the rows' max|x| all-reduced (max is exact; n floats, where gathering
 *   the slices moved n x full_dim: 33-90 MB per linear at a 2048-token
 *   prefill); with one, the full vector is all-gathered and normed.  Each
 *   rank multiplies its slice with unit scales (exact integer sums as
 *   floats), the sums are all-reduced (integers below 2^24: exact in any
 *   order) and scaled by the kernels' own formula.
 *   f32 / bf16 activations: each rank's partial product, summed by the
 *   all-reduce (float reassociation only). */
int row_parallel(CE *g, const DLin &d, const float *true_scale, int64_t sstride,
                 const float *x_local, int64_t n, int64_t w, int64_t full_dim, int64_t lo,
                 const float *sub, float *y) {
#ifdef TL_HAVE_NCCL
    if (d.act_int8) {
        if (sub) {
            if (!g->dry)
                NCCL_TRY(ncclAllGather(x_local, g->gath, (size_t)(n * w), ncclFloat, g->comm, g->st));
            TRY(fwdc_unshard(g->gath, g->tp, n, w, g->full, g->st));
            TRY(fwdc_norm(g->full, nullptr, sub, n, full_dim, g->c.eps, nullptr, nullptr,
                          g->xq_full, g->sx, g->st));
            TRY(fwdc_slice_i8(g->xq_full, n, full_dim, lo, w, g->xq, g->st));
        } else {
            TRY(fwdc_row_absmax(x_local, n, w, g->amax, g->st));
            if (!g->dry)
                NCCL_TRY(ncclAllReduce(g->amax, g->amax, (size_t)n, ncclFloat, ncclMax, g->comm, g->st));
            TRY(fwdc_act_quant_i8_max(x_local, n, w, g->amax, g->xq, g->sx, g->st));
        }
        TRY(tern_cuda_matmul_i8(&d.tm, g->xq, g->ones, n, y, g->st));
        if (!g->dry)
            NCCL_TRY(ncclAllReduce(y, y, (size_t)(n * d.out), ncclFloat, ncclSum, g->comm, g->st));
        return fwdc_scale_rows(y, n, d.out, true_scale, sstride, g->sx, g->st);
    }
    if (sub) return err_set("cuda --tp: a sub-norm with f32/bf16 activations is not supported");
    TRY(prep_input(g, x_local, n, w, need_of(g, {&d})));
    TRY(dlin_run(g, d, x_local, g->x16, n, y));
    if (!g->dry) NCCL_TRY(ncclAllReduce(y, y, (size_t)(n * d.out), ncclFloat, ncclSum, g->comm, g->st));
    return 0;
#else
    return err_set("cuda --tp: this build has no NCCL");
#endif
}

/* (the GLU forms' common ground, mlp_fused's and mlp_mt's: one GPU, gate|up
 * one ternary int8 matrix of 2 x inter rows, down ternary int8, no sub-norm) */
bool mlp_int8_pair(const CE *g, const DLayer &L) {
    return g->glu_fuse && g->tp == 1 && L.fgu && !L.ffn_sub && L.gu.kind == LIN_TERN && L.gu.act_int8 &&
           L.down.kind == LIN_TERN && L.down.act_int8 && L.gu.tm.rows == 2 * g->c.inter;
}

/* One token's MLP as two fused GEMVs (tern_cuda_glu_i8, then
 * tern_cuda_matmul_i8_f32x: the GLU kernel and its int8 pass gone, the same
 * bits): one GPU, gate|up as one ternary matrix of 2 x inter rows, int8
 * activations, no sub-norm, shapes both kernels take. */
bool mlp_fused(const CE *g, const DLayer &L, int64_t n) {
    return n == 1 && mlp_int8_pair(g, L) && tern_cuda_glu_i8_ok(&L.gu.tm) &&
           tern_cuda_matmul_i8_f32x_kernel(&L.down.tm) == 6;
}

/* The o projection's input as f32 with its max|x| raised by the attention
 * kernel (fwdc_attention_rope's d_omax; tern_cuda_matmul_i8_f32x forms the
 * int8 codes): one token, one GPU, int8 ternary o, no sub-norm; by default
 * (o_fuse 1) where o takes the one-warp GEMV (its f32 form codes x into
 * shared memory in every CTA), with TERNLAB_CUDA_O_FUSE=1 (o_fuse 2) on the
 * binary tensor-core GEMVs too. */
/* one GPU, o ternary with int8 activations and no sub-norm before it
 * (o_fused's and o_max_given's common ground; they take it at one token,
 * o_max_given at 2 .. kMtTok too) */
bool o_int8(const CE *g, const DLayer &L) {
    return g->tp == 1 && !L.attn_sub && L.o.kind == LIN_TERN && L.o.act_int8;
}
bool o_int8_one_token(const CE *g, const DLayer &L, int64_t n) { return n == 1 && o_int8(g, L); }

bool o_fused(const CE *g, const DLayer &L, int64_t n, bool att_fused) {
    if (!(att_fused && g->o_fuse && o_int8_one_token(g, L, n))) return false;
    const int k = tern_cuda_matmul_i8_f32x_kernel(&L.o.tm);
    return k == 4 || (k == 6 && g->o_fuse == 2);
}

/* One token with the o projection not fused, or 2 .. kMtTok tokens (a decode
 * batch), o int8: the fused attention raises each token's max|output| too,
 * and the int8 pass before o takes it instead of a block reduction of its own
 * (the same max, so the same codes; with the maxima given the pass spreads
 * each of two or more rows over several CTAs: fwdc_act_quant_i8_max).  H100, bench-e2e
 * tern-i8 at 2 / 4 / 8 sequences, ms a step: 7B 1.662 / 1.728 / 1.822
 * against 1.697 / 1.749 / 1.845, 27B 4.94 / 5.06 / 5.20 against 4.97 / 5.10 /
 * 5.25 (dev/NOTES.md, sixty-third session). */
bool o_max_given(const CE *g, const DLayer &L, int64_t n, bool att_fused, bool of) {
    if (n >= 2 && n <= kMtTok) /* (each token's max in its own word: hslot) */
        return att_fused && g->omax_given && o_int8(g, L);
    return att_fused && !of && g->omax_given && o_int8_one_token(g, L, n);
}

/* 2 .. mt_fuse tokens, one GPU: the gate|up GEMV with the GLU in it, each
 * token's max|h| raised (tern_cuda_glu_i8_mt, where its rule takes the
 * matrix), then h's int8 pass from those maxima (spread over the rows) and
 * the down GEMV: the GLU kernel gone.  The same bits as the separate kernels. */
bool mlp_mt(const CE *g, const DLayer &L, int64_t n) {
    return n >= 2 && n <= g->mt_fuse && mlp_int8_pair(g, L) && tern_cuda_glu_i8_mt_rule(&L.gu.tm, n);
}

/* One token, o fused on the one-warp f32 form and the MLP fused (mlp_fused:
 * no sub-norm): the norm between them folded into both GEMVs (TernNormOut /
 * TernNormIn, tern_cuda.h) — the norm kernel gone.  Not bit-identical to the
 * norm kernel (ulps of r, a code at a rounding tie); deterministic for a
 * step shape on one GPU model (tern_cuda.h).  H200, bench-e2e tern-i8 B = 1,
 * same run, three rounds: 7B 832-838 -> 852-858 tok/s; the 27B's o is not a
 * one-warp shape.  (The attention norm folded the same way into
 * the down and q|k|v GEMVs lost: dev/NOTES.md.) */
bool norm_folded(const CE *g, const DLayer &L, bool of, bool mf) {
    return of && mf && g->norm_fold && tern_cuda_matmul_i8_f32x_norm_ok(&L.o.tm);
}

/* The LM head (dense bf16: its input the final norm's bf16 rows) on
 * tern_cuda_gemv_bf16 where the model's linears are ternary and nl rows fit
 * it.  H200, 7B tern-i8 at batch 1: see dev/NOTES.md (sixtieth session). */
bool lm_own_gemv(const CE *g, int64_t nl) {
    return g->lm_gemv && g->tern_model && g->lm.kind == LIN_DENSE16 && tern_cuda_gemv_bf16_ok(g->lm.out, g->lm.in, nl);
}

/* The whole forward on the device for n tokens whose inputs are in d_in
 * (layout for n), logits of nl rows into g->logits; one_seq: every token
 * belongs to one sequence (the tiled prompt attention); distinct: no two
 * tokens of one sequence (a decode batch: RoPE and the KV write go into the
 * attention kernel); rows_ident: logit row j is token j's (nl == n, the
 * identity: StepPlan.tok_rows) — then the last layer's residual add is the
 * final norm's (its down GEMV's K split left to it, as every layer's is to the
 * next layer's norm), where otherwise the add, a gather of the logit rows and
 * the norm are three kernels; the same bits.  Shapes depend only on (n, nl,
 * one_seq, distinct, rows_ident): this is what a decode graph captures
 * (one_seq false, distinct and rows_ident true). */
int run_device(CE *g, int64_t n, int64_t nl, bool one_seq, bool distinct, bool rows_ident, int splits) {
    g->n_split += splits > 1;
    const ModelConfig &c = g->c;
    const int64_t H = c.hidden, hd = c.head_dim, qd = (int64_t)c.n_heads * hd,
                  kvd = (int64_t)c.n_kv_heads * hd, I = c.inter;
    const int32_t *tok = g->d_in, *pos = g->d_in + n, *slot = g->d_in + 2 * n,
                  *row = g->d_in + 3 * n, *lidx = g->d_in + 4 * n, *cnt = g->d_in + 5 * n,
                  *pairs = g->d_in + 5 * n + 2; /* (5 n + 1: the ids' host slot, for the argmax) */
    const int act = c.act == ACT_SILU ? 0 : 1;
    const bool tail = c.n_layers > 0 && g->tail_norm && rows_ident && nl == n && nl > 0;
    /* each layer's fused forms, decided once per call (the rules read the environment) */
    std::vector<char> mfl((size_t)c.n_layers), ofl((size_t)c.n_layers), oml((size_t)c.n_layers),
        nfl((size_t)c.n_layers), tkv((size_t)c.n_layers), afl((size_t)c.n_layers), mtl((size_t)c.n_layers);
    bool fused = false; /* the fused GLUs and attentions raise g->hmax: zero before the first */
    for (int l = 0; l < c.n_layers; l++) {
        tkv[(size_t)l] = kv_policy_ternary(&g->pol, l, g->decode) != 0;
        /* (a layer whose tokens of this call the policy stores ternary takes the fused form
         * that codes them: fwdc_attention_rope_coded) */
        afl[(size_t)l] = g->att_fuse && distinct;
        mfl[(size_t)l] = mlp_fused(g, g->L[(size_t)l], n);
        ofl[(size_t)l] = o_fused(g, g->L[(size_t)l], n, afl[(size_t)l]);
        oml[(size_t)l] = o_max_given(g, g->L[(size_t)l], n, afl[(size_t)l], ofl[(size_t)l]);
        nfl[(size_t)l] = norm_folded(g, g->L[(size_t)l], ofl[(size_t)l], mfl[(size_t)l]);
        mtl[(size_t)l] = mlp_mt(g, g->L[(size_t)l], n);
        fused = fused || mfl[(size_t)l] || ofl[(size_t)l] || oml[(size_t)l] || mtl[(size_t)l];
    }
    TRY(fwdc_step_begin(g->d_tab, cnt, pairs, g->u_cap, fused ? g->hmax : nullptr, 3 * (int64_t)c.n_layers * kMtTok,
                        g->embed, tok, n, H, g->x, g->st));
    for (int l = 0; l < c.n_layers; l++) {
        const DLayer &L = g->L[(size_t)l];
        float *kp = g->kp[(size_t)l], *vp = g->vp[(size_t)l];
        const FwdcKvTern tpg = g->tpages[(size_t)l]; /* kc non-NULL: the layer's pages are ternary */
        TernDeferred hdef = {}; /* the down GEMV's output, where it is left in its K split */
        /* attention block (layer 0's norm here; later layers' is fused into
         * the previous layer's last residual add) */
        const Need nqkv = L.fqkv ? need_of(g, {&L.qkv}) : need_of(g, {&L.q, &L.k, &L.v});
        if (l == 0) TRY(norm_into(g, g->x, nullptr, L.attn_norm, n, H, nqkv));
        float *q, *k, *v;
        int64_t ldq, ldk, ldv;
        if (L.fqkv) {
            TRY(dlin_run(g, L.qkv, g->xb, g->x16, n, g->q));
            q = g->q, k = g->q + qd, v = g->q + qd + kvd;
            ldq = ldk = ldv = qd + 2 * kvd;
        } else {
            TRY(dlin_run(g, L.q, g->xb, g->x16, n, g->q));
            TRY(dlin_run(g, L.k, g->xb, g->x16, n, g->k));
            TRY(dlin_run(g, L.v, g->xb, g->x16, n, g->v));
            q = g->q, k = g->k, v = g->v;
            ldq = qd, ldk = ldv = kvd;
        }
        unsigned *omax = hslot(g, 1, l);
        const bool of = ofl[(size_t)l], om = oml[(size_t)l], att_fused = afl[(size_t)l];
        g->n_fused[0] += att_fused, g->n_fused[1] += of;
        if (att_fused && (tkv[(size_t)l] || tpg.kc)) { /* the token's K / V coded (into ternary pages where tpg.kc) */
            g->n_kv_tern++;
            TRY(fwdc_attention_rope_coded(q, ldq, k, ldk, v, ldv, pos, slot, g->d_cos, g->d_sin, kp, vp, tpg,
                                          g->d_tab, g->stride, row, n, c.n_heads, c.n_kv_heads, (int)hd, g->bs,
                                          c.n_heads * g->tp, g->att, of || om ? omax : nullptr, splits, g->st));
        } else if (att_fused) {
            TRY(fwdc_attention_rope(q, ldq, k, ldk, v, ldv, pos, slot, g->d_cos, g->d_sin, kp, vp,
                                    g->d_tab, g->stride, row, n, c.n_heads, c.n_kv_heads, (int)hd,
                                    g->bs, c.n_heads * g->tp, g->att, of || om ? omax : nullptr, splits, g->st));
        } else if (tpg.kc) { /* ternary pages: K rotated in place, both rows coded into the pages */
            g->n_kv_tern++;
            TRY(fwdc_rope_kv_write(q, ldq, k, ldk, v, ldv, pos, slot, n, c.n_heads, c.n_kv_heads, (int)hd,
                                   g->d_cos, g->d_sin, nullptr, nullptr, g->bs, g->st));
            TRY(fwdc_kv_code_rows(k, ldk, v, ldv, slot, n, c.n_kv_heads, (int)hd, g->bs, tpg, g->st));
            TRY(fwdc_attention_tern(q, ldq, tpg, pos, g->d_tab, g->stride, row, n, c.n_heads, c.n_kv_heads,
                                    (int)hd, g->bs, c.n_heads * g->tp, one_seq ? 1 : 0, g->att, splits, g->st));
        } else {
            TRY(fwdc_rope_kv_write(q, ldq, k, ldk, v, ldv, pos, slot, n, c.n_heads, c.n_kv_heads,
                                   (int)hd, g->d_cos, g->d_sin, kp, vp, g->bs, g->st));
            if (tkv[(size_t)l]) {
                g->n_kv_tern++;
                TRY(fwdc_kv_ternarise(kp, vp, slot, n, c.n_kv_heads, (int)hd, g->bs, g->st));
            }
            TRY(fwdc_attention(q, ldq, kp, vp, pos, g->d_tab, g->stride, row, n, c.n_heads,
                               c.n_kv_heads, (int)hd, g->bs, c.n_heads * g->tp, one_seq ? 1 : 0,
                               g->att, splits, g->st));
        }
        const Need no = need_of(g, {&L.o});
        const float *ao = g->att;
        const bool nf = nfl[(size_t)l];
        unsigned *nmax = hslot(g, 2, l);
        TernNormOut nout = {g->x, L.ffn_norm, nmax, g->nss, 0};
        if (nf) { /* one token: o from f32, its y added to x, the MLP norm's statistics raised */
            g->n_norm_folded++;
            TRY(tern_cuda_matmul_i8_f32x_norm(&L.o.tm, g->att, omax, &nout, g->st));
        } else if (of) { /* one token: the attention raised max|att|; the GEMV forms the int8 codes */
            TRY(tern_cuda_matmul_i8_f32x(&L.o.tm, g->att, omax, g->hout, g->st));
        } else if (g->tp > 1) {
            TRY(row_parallel(g, L.o, L.o_scale, L.o_sstride, g->att, n, qd, g->qd_full, g->att_lo,
                             L.attn_sub, g->hout));
        } else {
            if (L.attn_sub) {
                TRY(norm_into(g, g->att, nullptr, L.attn_sub, n, qd, no));
                ao = g->xb;
            } else if (om) { /* max|att| (float bits, >= 0: ordered as unsigned) from the attention; o is
                              * int8 (o_max_given), so no other form */
                g->n_omax++;
                TRY(fwdc_act_quant_i8_max(g->att, n, qd, reinterpret_cast<const float *>(omax), g->xq, g->sx,
                                          g->st));
            } else {
                TRY(prep_input(g, g->att, n, qd, no));
            }
            TRY(dlin_run(g, L.o, ao, g->x16, n, g->hout));
        }
        /* MLP block: x += o; norm; gate|up; act(gate) * up; down */
        const Need ngu = L.fgu ? need_of(g, {&L.gu}) : need_of(g, {&L.gate, &L.up});
        /* (x, the residual: last written before the o projection, whose kernels on one GPU wait
         * before they let the next one start — fwdc_norm_x_ready.  Here and after the down
         * projection below this holds while every linear ends in a ternary GEMV / GEMM, a
         * cuBLAS call or a plain launch: a row kernel launched as a dependent (they trigger
         * before they wait) at the end of a linear would make these reads early) */
        if (!nf) TRY(norm_into(g, g->x, g->hout, L.ffn_norm, n, H, ngu, nullptr, g->tp == 1));
        if (mfl[(size_t)l]) { /* one token: h = act(gate) * up in the gate|up GEMV, coded by down */
            g->n_fused[2]++;
            if (nf) {
                const TernNormIn nin = {g->x, L.ffn_norm, nmax, g->nss, nout.n_ss, c.eps};
                TRY(tern_cuda_glu_i8_norm(&L.gu.tm, &nin, act, g->hb, hslot(g, 0, l), g->st));
            } else {
                TRY(tern_cuda_glu_i8(&L.gu.tm, g->xq, g->sx, act, g->hb, hslot(g, 0, l), g->st));
            }
            /* the next layer's norm (the next kernel) finishes a K split */
            TRY(tern_cuda_matmul_i8_f32x_defer(&L.down.tm, g->hb, hslot(g, 0, l), g->hout,
                                               g->defer && (l + 1 < c.n_layers || tail) ? &hdef : nullptr,
                                               g->st));
        } else if (mtl[(size_t)l]) { /* 2 .. kMtTok tokens: h and each token's max|h| in the gate|up
                                      * GEMV, then h's int8 pass from those maxima */
            g->n_mt++;
            TRY(tern_cuda_glu_i8_mt(&L.gu.tm, g->xq, g->sx, n, act, g->hb, hslot(g, 0, l), g->st));
            TRY(fwdc_act_quant_i8_max(g->hb, n, I, reinterpret_cast<const float *>(hslot(g, 0, l)), g->xq, g->sx,
                                      g->st));
            TRY(dlin_run(g, L.down, g->hb, g->x16, n, g->hout));
        } else {
            const float *gp, *up;
            int64_t ldg;
            if (L.fgu) {
                TRY(dlin_run(g, L.gu, g->xb, g->x16, n, g->gu));
                gp = g->gu, up = g->gu + I, ldg = 2 * I;
            } else {
                TRY(dlin_run(g, L.gate, g->xb, g->x16, n, g->gu));
                TRY(dlin_run(g, L.up, g->xb, g->x16, n, g->gu + n * I));
                gp = g->gu, up = g->gu + n * I, ldg = I;
            }
            const Need nd = need_of(g, {&L.down});
            const float *mi = g->hb;
            if (g->tp > 1) {
                TRY(fwdc_glu_rows(act, gp, up, n, I, ldg, g->hb, nullptr, nullptr, nullptr, g->st));
                TRY(row_parallel(g, L.down, L.down_scale, L.down_sstride, g->hb, n, I, g->inter_full,
                                 g->inter_lo, L.ffn_sub, g->hout));
            } else if (L.ffn_sub) {
                TRY(fwdc_glu_rows(act, gp, up, n, I, ldg, g->hb, nullptr, nullptr, nullptr, g->st));
                TRY(norm_into(g, g->hb, nullptr, L.ffn_sub, n, I, nd));
                mi = g->xb;
            } else {
                TRY(fwdc_glu_rows(act, gp, up, n, I, ldg, g->hb, nd.x16 ? g->x16 : nullptr,
                                  nd.xq ? g->xq : nullptr, nd.xq ? g->sx : nullptr, g->st));
            }
            if (g->tp == 1) TRY(dlin_run(g, L.down, mi, g->x16, n, g->hout));
        }
        if (l + 1 < c.n_layers || tail) { /* x += down; the next layer's input norm, or the final norm */
            const float *nw = g->final_norm;
            Need nn = need_of(g, {&g->lm});
            if (l + 1 < c.n_layers) {
                const DLayer &N = g->L[(size_t)l + 1];
                nn = N.fqkv ? need_of(g, {&N.qkv}) : need_of(g, {&N.q, &N.k, &N.v});
                nw = N.attn_norm;
            } else {
                g->n_tail_fused++;
            }
            g->n_deferred += hdef.part != nullptr;
            if (norm_into(g, g->x, g->hout, nw, n, H, nn, hdef.part ? &hdef : nullptr, g->tp == 1) != 0) {
                /* the deferred K split's sums would stay in the split-K scratch, which
                 * every split GEMV takes as zero: cleared behind the GEMV */
                if (hdef.part && cudaMemsetAsync(hdef.part, 0, sizeof(int) * (size_t)hdef.rows, g->st) != cudaSuccess) {
                    (void)cudaGetLastError();
                    g->scratch_dirty = 1; /* (every later forward refuses: its split GEMVs would add them) */
                }
                return -1;
            }
        } else {
            TRY(fwdc_add(g->x, g->hout, n * H, g->st));
        }
    }
    if (nl > 0 && !tail) {
        TRY(fwdc_gather_rows(g->x, lidx, nl, H, g->hout, g->st));
        TRY(norm_into(g, g->hout, nullptr, g->final_norm, nl, H, need_of(g, {&g->lm})));
    }
    if (nl > 0) {
        if (lm_own_gemv(g, nl)) {
            g->n_lm_gemv++;
            TRY(tern_cuda_gemv_bf16(g->lm.w16, g->lm.out, g->lm.in, g->x16, nl, g->logits, g->st));
        } else {
            TRY(dlin_run(g, g->lm, g->xb, g->x16, nl, g->logits));
        }
    }
    return 0;
}

void drop_graph(CE *g) {
    if (g->exec) cudaGraphExecDestroy(g->exec);
    g->exec = nullptr;
    g->exec_n = 0;
}

/* RoPE tables on the device covering positions [0, len): the host tables
 * (transformers' arithmetic, forward.c) uploaded. */
int ensure_rope(CE *g, Model *m, int64_t len) {
    if (len <= g->rope_len) return 0;
    if (fwd_rope_ensure(m, len) != 0) return -1;
    drop_graph(g);
    g->last_eager_n = 0;
    const size_t cnt = (size_t)(m->rope_len * (m->cfg.head_dim / 2));
    cudaFree(g->d_cos);
    cudaFree(g->d_sin);
    g->d_cos = g->d_sin = nullptr;
    g->rope_len = 0; /* (until the new tables are whole) */
    CUDA_CHECK(cudaMalloc(&g->d_cos, cnt * 4));
    CUDA_CHECK(cudaMalloc(&g->d_sin, cnt * 4));
    /* (on the engine's stream: a blocking cudaMemcpy runs on the legacy stream, which
     * the non-blocking g->st is not ordered after, and from pageable memory it may
     * return before the last chunk lands) */
    CUDA_CHECK(cudaMemcpyAsync(g->d_cos, m->rope_cos, cnt * 4, cudaMemcpyHostToDevice, g->st));
    CUDA_CHECK(cudaMemcpyAsync(g->d_sin, m->rope_sin, cnt * 4, cudaMemcpyHostToDevice, g->st));
    g->rope_len = m->rope_len;
    return 0;
}

/* Device block-table rows for sequence ids [0, rows). */
int ensure_rows(CE *g, int rows) {
    if (rows <= g->tab_rows) return 0;
    /* (a table entry's index, sequence x stride + block, is an int32 on the device) */
    if ((int64_t)rows * g->stride > INT32_MAX)
        return err_set("cuda: block tables of %d sequences x %d blocks exceed 2^31 entries; use fewer "
                       "sequences or KV blocks",
                       rows, g->stride);
    const int nrows = (int)std::min<int64_t>(std::max<int64_t>(rows, 2 * (int64_t)g->tab_rows),
                                             INT32_MAX / std::max(g->stride, 1));
    drop_graph(g);
    g->last_eager_n = 0;
    int32_t *nt = nullptr;
    const size_t old = (size_t)g->tab_rows * (size_t)g->stride, now = (size_t)nrows * (size_t)g->stride;
    CUDA_CHECK(cudaMalloc(&nt, now * 4));
    /* on the engine's stream (non-blocking: the legacy stream's work would not be
     * ordered before the table updates enqueued there next), then waited for, so
     * that the old table is no longer read when it is freed */
    cudaError_t e = cudaMemsetAsync(nt, 0xff, now * 4, g->st);
    if (e == cudaSuccess && old) e = cudaMemcpyAsync(nt, g->d_tab, old * 4, cudaMemcpyDeviceToDevice, g->st);
    if (e == cudaSuccess) e = cudaStreamSynchronize(g->st);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        cudaFree(nt);
        return err_set("cuda: growing the block tables: %s", cudaGetErrorString(e));
    }
    cudaFree(g->d_tab);
    g->d_tab = nt;
    g->shadow.resize(now, -1);
    g->seen.resize((size_t)nrows, 0);
    g->tab_rows = nrows;
    return 0;
}

/* One forward call, host side: checks, KV reservation, RoPE tables and table
 * rows on the device, and the step's inputs in g->h_in. */
struct StepPlan {
    int64_t n = 0, nl = 0;
    int32_t cnt = 0;
    bool eligible = false;
    bool one_seq = false; /* every token of one sequence (a prompt), never in a decode graph */
    bool distinct = true; /* no two tokens of one sequence (every decode graph) */
    /* logit row j is token j's (nl == n, logit_idx the identity): the argmax
     * also writes the ids into the token inputs on the device, where a chained
     * next step (cuda_engine_decode_chain) takes them */
    bool tok_rows = false;
    /* the token inputs are on the device already (a chained step): not uploaded */
    bool skip_tok = false;
    /* the attention's key split (fwdc_attention_splits, from the call's largest position): a
     * decode graph holds one value */
    int splits = 1;
};

/* Table updates recorded in g->shadow (host_prepare) whose step never
 * reached the device: marked unsent, so the next step carries them again. */
void unsend_updates(CE *g, const int32_t *pairs, int32_t cnt) {
    for (int32_t j = 0; j < cnt; j++) g->shadow[(size_t)pairs[2 * j]] = INT32_MIN;
}
void unsend_updates(CE *g, const StepPlan *p) {
    if (p->n > 0) unsend_updates(g, g->h_in + 5 * p->n + 2, p->cnt);
}

/* Ternary KV pages over several GPUs are refused (one GPU or the CPU). */
int kv_tp_refused(const KvPolicy *p, int tp) {
    if (p->kind == KVP_NONE || tp <= 1) return 0;
    char pol[64];
    kv_policy_format(p, pol, sizeof pol);
    return err_set("--device cuda --tp %d: ternary KV pages (--kv %s) run on one GPU or on the CPU", tp, pol);
}

/* The pages the policy of kv needs (at open, from EngineOpts.kv, and in
 * host_prepare, where the engine first sees a policy set later): ternary
 * pages in the layers whose tokens of both phases it stores ternary (unless
 * TERNLAB_CUDA_KV_PAGES=f32), f32 pages in the others.  A layer changes its
 * pages only while no sequence holds tokens (their rows would be lost); what
 * can fail comes first, so a refused or failed change leaves the pages as
 * they were. */
int kv_pages_for_policy(CE *g, const KvCache *kv) {
    const int L = g->c.n_layers, hd = g->c.head_dim;
    std::vector<char> tern((size_t)L), change((size_t)L);
    bool any = false;
    for (int l = 0; l < L; l++) {
        tern[(size_t)l] = !g->kv_f32_only && kv_policy_all_ternary(&kv->policy, l);
        /* (at open a layer has no pages yet: either kind is a change) */
        change[(size_t)l] = tern[(size_t)l] ? !g->tpages[(size_t)l].kc : !g->kp[(size_t)l];
        any = any || change[(size_t)l];
    }
    if (!any) return 0;
    const int64_t held = kv_tokens_held(kv);
    if (held > 0) {
        char pol[64];
        kv_policy_format(&kv->policy, pol, sizeof pol);
        return err_set("--kv %s on the GPU changes layers' KV pages between f32 and ternary while the cache "
                       "holds %lld tokens; set the policy on an empty cache", pol, (long long)held);
    }
    const int64_t rows = (int64_t)g->n_blocks * g->c.n_kv_heads * g->bs;
    const size_t cb = (size_t)tern_kv_code_bytes(hd), nks = (size_t)tern_kv_scales(hd, 1);
    std::vector<FwdcKvTern> fresh((size_t)L, FwdcKvTern{});
    std::vector<float *> fk((size_t)L, nullptr), fv((size_t)L, nullptr);
    int rc = 0;
    for (int l = 0; l < L && rc == 0; l++) {
        if (!change[(size_t)l]) continue;
        FwdcKvTern &t = fresh[(size_t)l];
        const bool ok = tern[(size_t)l] ? dalloc(g, &t.kc, (size_t)rows * cb, "ternary KV pages") == 0 &&
                                              dalloc(g, &t.vc, (size_t)rows * cb, "ternary KV pages") == 0 &&
                                              dalloc(g, &t.ks, (size_t)rows * nks, "ternary KV scales") == 0 &&
                                              dalloc(g, &t.vs, (size_t)rows, "ternary KV scales") == 0
                                        : dalloc(g, &fk[(size_t)l], g->layer_elems, "KV cache keys") == 0 &&
                                              dalloc(g, &fv[(size_t)l], g->layer_elems, "KV cache values") == 0;
        rc = ok ? 0 : -1;
    }
    /* the old pages of a changed layer go (or, on failure, the new ones) */
    for (int l = 0; l < L; l++) {
        if (!change[(size_t)l]) continue;
        FwdcKvTern &t = rc == 0 ? g->tpages[(size_t)l] : fresh[(size_t)l];
        dfree(g, t.kc), dfree(g, t.vc), dfree(g, t.ks), dfree(g, t.vs);
        dfree(g, rc == 0 ? g->kp[(size_t)l] : fk[(size_t)l]);
        dfree(g, rc == 0 ? g->vp[(size_t)l] : fv[(size_t)l]);
        if (rc == 0) g->tpages[(size_t)l] = fresh[(size_t)l], g->kp[(size_t)l] = fk[(size_t)l], g->vp[(size_t)l] = fv[(size_t)l];
    }
    if (rc != 0) return -1;
    g->kv_bytes = 0;
    for (int l = 0; l < L; l++)
        g->kv_bytes += g->tpages[(size_t)l].kc ? (size_t)rows * kvt_bytes_per_token_head(hd, 1)
                                               : 2 * g->layer_elems * sizeof(float);
    return 0;
}

int host_prepare(CE *g, const Model *m, KvCache *kv, RunState *s, const int *tok, const int *seq,
                 const int64_t *pos, int64_t n, const int64_t *logit_idx, int64_t n_logits,
                 float *logits, StepPlan *p) {
    if (n > g->max_tok)
        return err_set("forward: %lld tokens but the CUDA engine holds %lld", (long long)n,
                       (long long)g->max_tok);
    if (g->scratch_dirty)
        return err_set("forward: the CUDA engine's split-K scratch could not be cleared after an earlier "
                       "error (its sums would be added to the next results): start the program again (the scratch is "
                       "the process's, which another engine on this GPU would share)");
    if (kv_tp_refused(&kv->policy, g->tp) != 0) return -1;
    if (memcmp(&kv->policy, &g->pol, sizeof g->pol) != 0) { /* (a graph holds the old policy's kernels) */
        if (kv_pages_for_policy(g, kv) != 0) return -1;
        drop_graph(g);
        g->last_eager_n = 0;
        g->pol = kv->policy;
    }
    g->decode = s->decode;
    if (s->dump) return err_set("--device cuda: --dump-layers runs on the CPU only");
    p->n = n;
    if (n <= 0) return 0;
    int64_t max_pos = 0;
    if (fwd_prepare_tokens(m, kv, tok, seq, pos, n, &max_pos) != 0) return -1;
    if (max_pos >= INT32_MAX / 2) return err_set("forward: position %lld too large", (long long)max_pos);
    if (ensure_rope(g, const_cast<Model *>(m), max_pos + 1) != 0) return -1;
    bool tern_pages = false; /* (the key lanes hold fewer CTAs an SM: fewer splits may fit) */
    for (const FwdcKvTern &tp : g->tpages) tern_pages = tern_pages || tp.kc != nullptr;
    p->splits = fwdc_attention_splits(n, g->c.n_heads, g->c.n_heads * g->tp, max_pos + 1, (int)g->c.head_dim,
                                      tern_pages);
    if (ensure_rows(g, kv->n_seqs) != 0) return -1;
    const int64_t nl = logits || s->argmax_out ? (logit_idx ? n_logits : n) : 0;
    if (nl > n) return err_set("forward: %lld logit rows for %lld tokens", (long long)nl, (long long)n);
    int32_t *in = g->h_in, *pairs = g->h_in + 5 * n + 2;
    int32_t cnt = 0;
    g->stamp++;
    const int bs = g->bs;
    for (int64_t i = 0; i < n; i++) {
        const KvSeq *sq = &kv->seqs[seq[i]];
        in[i] = tok[i];
        in[n + i] = (int32_t)pos[i];
        in[2 * n + i] = sq->blocks[pos[i] / bs] * bs + (int32_t)(pos[i] % bs);
        in[3 * n + i] = seq[i];
        if (g->seen[(size_t)seq[i]] == g->stamp) {
            p->distinct = false;
        } else { /* table row of this sequence: changed entries */
            g->seen[(size_t)seq[i]] = g->stamp;
            int32_t *sh = g->shadow.data() + (size_t)seq[i] * (size_t)g->stride;
            for (int b = 0; b < sq->n_blocks; b++) {
                if (sh[b] == sq->blocks[b]) continue;
                if (cnt == g->u_cap) {
                    unsend_updates(g, pairs, cnt);
                    return err_set("cuda: block-table update overflow");
                }
                pairs[2 * cnt] = seq[i] * g->stride + b;
                pairs[2 * cnt + 1] = sq->blocks[b];
                sh[b] = sq->blocks[b];
                cnt++;
            }
        }
    }
    bool ident = true;
    for (int64_t j = 0; j < nl; j++) {
        in[4 * n + j] = (int32_t)(logit_idx ? logit_idx[j] : j);
        ident = ident && in[4 * n + j] == j;
    }
    in[5 * n] = cnt;
    in[5 * n + 1] = g->ids_slot;
    p->nl = nl;
    p->cnt = cnt;
    p->tok_rows = nl == n && ident;
    p->eligible = g->graphs && s->decode && nl == n && ident && p->distinct;
    bool one = true;
    for (int64_t i = 1; i < n && one; i++) one = seq[i] == seq[0];
    p->one_seq = one && !p->eligible;
    return 0;
}

/* int32 words of h_in / d_in: a step of max_tok tokens with every table entry updated */
size_t input_count(const CE *g) { return (size_t)(5 * g->max_tok + 2 + 2 * g->u_cap); }

/* The bytes of a step's inputs in h_in / d_in */
size_t input_bytes(const StepPlan *p) { return sizeof(int32_t) * (size_t)(5 * p->n + 2 + 2 * p->cnt); }

/* The step's inputs up (all but the tokens where skip_tok) */
int upload_inputs(CE *g, const StepPlan *p) {
    const size_t skip = p->skip_tok ? (size_t)p->n : 0;
    CUDA_CHECK(cudaMemcpyAsync(g->d_in + skip, g->h_in + skip, input_bytes(p) - sizeof(int32_t) * skip,
                               cudaMemcpyHostToDevice, g->st));
    return 0;
}

/* The step's device work: inputs up, then a graph replay, a capture (the
 * second time the same eligible shape comes) or eager launches.  amax > 0:
 * the argmax of the first amax logit rows into g->ids is part of the graph
 * (argmax_graph), and *in_graph says whether it was. */
/* Whether step p, wanting the argmax of amax rows in its graph, replays the
 * graph held: one of its shape, with the argmax where amax > 0 (a graph
 * without it is captured again once, with it: the upgrade in step_enqueue) */
/* The graph held is one of step p's shape: its tokens and its attention's key split */
bool graph_fits(const CE *g, const StepPlan *p) {
    return g->exec && g->exec_n == p->n && g->exec_splits == p->splits;
}
bool replays(const CE *g, const StepPlan *p, int64_t amax) {
    return p->eligible && graph_fits(g, p) && !(amax > 0 && g->exec_amax == 0);
}

bool untimed();

int step_enqueue(CE *g, const StepPlan *p, int64_t amax, bool *in_graph) {
    const int64_t n = p->n, nl = p->nl;
    *in_graph = false;
    TRY(upload_inputs(g, p));
    if (g->time_up && cudaEventRecord(g->ev[3], g->st) != cudaSuccess) g->time_up = untimed();
    const bool replay = replays(g, p, amax);
    const bool upgrade = !replay && p->eligible && graph_fits(g, p);
    if (replay) {
        /* (a graph whose argmax the call does not want replays with it unused: callers that
         * alternate logits and ids do not capture per call) */
        *in_graph = amax > 0 && g->exec_amax == amax;
        CUDA_CHECK(cudaGraphLaunch(g->exec, g->st));
        g->launches++;
    } else if (p->eligible && (g->last_eager_n == n || upgrade)) {
        /* the same step shape ran eagerly last time (or replayed): workspaces are grown, the
         * argmax's here (the last eager step may not have taken one) */
        drop_graph(g);
        if (amax > 0 && fwdc_argmax_reserve(amax, g->c.vocab) != 0) return -1;
        if (fwdc_attention_reserve(n, g->c.n_heads, g->c.head_dim, p->splits) != 0) return -1;
        cudaGraph_t graph = nullptr;
        CUDA_CHECK(cudaStreamBeginCapture(g->st, cudaStreamCaptureModeThreadLocal));
        int rc = run_device(g, n, nl, false, true, true, p->splits);
        if (rc == 0 && amax > 0) /* (eligible: the logit rows are the tokens') */
            rc = fwdc_argmax_rows_to(g->logits, amax, g->c.vocab, g->ids, g->d_in, g->d_map, g->d_in + 5 * n + 1,
                                     g->max_tok, g->st);
        cudaError_t e = cudaStreamEndCapture(g->st, &graph);
        const char *stage = "capturing";
        if (rc == 0 && e == cudaSuccess) {
            stage = "instantiating";
            e = cudaGraphInstantiate(&g->exec, graph, 0);
            if (e != cudaSuccess) g->exec = nullptr;
        }
        if (graph) cudaGraphDestroy(graph);
        if (rc != 0 || e != cudaSuccess) { /* eager launches next time, not the capture again */
            g->last_eager_n = 0;
            (void)cudaGetLastError();
            if (rc != 0) return err_prefix("capturing the decode step: ");
            return err_set("cuda: %s the decode step: %s", stage, cudaGetErrorString(e));
        }
        g->exec_n = n;
        g->exec_splits = p->splits;
        g->exec_amax = amax;
        g->n_graphs++;
        *in_graph = amax > 0;
        CUDA_CHECK(cudaGraphLaunch(g->exec, g->st));
        g->launches++;
    } else {
        drop_graph(g);
        if (run_device(g, n, nl, p->one_seq, p->distinct, p->tok_rows, p->splits) != 0) return -1;
        g->last_eager_n = p->eligible ? n : 0;
    }
    return 0;
}

/* TERNLAB_CUDA_FAULT_STEP's kernel: spins for `cycles`, then writes to an
 * address no allocation holds (cudaErrorIllegalAddress, sticky) */
__global__ void fault_after_kernel(long long cycles) {
    const long long t0 = clock64();
    while (clock64() - t0 < cycles) {
    }
    *(volatile int *)(uintptr_t)16 = 1;
}

/* step_enqueue; where it fails, the step's table updates are marked unsent
 * (they reach the device only through its work) */
int step_launch(CE *g, const StepPlan *p, int64_t amax, bool *in_graph) {
    const bool fail = ++g->n_step_launch == g->fail_launch;
    if (fail) err_set("step launch %lld failed on purpose (TERNLAB_CUDA_FAIL_LAUNCH)", (long long)g->fail_launch);
    if (!fail && g->n_step_launch == g->fault_step) { /* (~0.5 s at 2 GHz: the step enqueued by then) */
        fault_after_kernel<<<1, 1, 0, g->st>>>(1000000000ll);
        CUDA_CHECK_LAUNCH("the TERNLAB_CUDA_FAULT_STEP kernel");
    }
    if (!fail && step_enqueue(g, p, amax, in_graph) == 0) return 0;
    unsend_updates(g, p);
    return -1;
}

#ifdef TERN_TRACE
/* The timing probe's dump (kernels/cuda/tern_trace.cuh; development builds
 * only): the TERNLAB_TRACE_STEP-th (default 5) replay of each decode graph,
 * appended to the file TERNLAB_TRACE as "file line grid cta sm t0 t1 kind". */
struct TraceState {
    TernTraceRec *buf = nullptr;
    unsigned *n = nullptr;
    int64_t exec_n = -1;
    int replays = 0;
};
TraceState g_trace;
const unsigned kTraceCap = 1u << 20;

bool trace_begin(CE *g, const StepPlan *p) {
    if (!getenv("TERNLAB_TRACE") || !(p->eligible && graph_fits(g, p))) return false;
    if (g_trace.exec_n != p->n) g_trace.exec_n = p->n, g_trace.replays = 0;
    const char *k = getenv("TERNLAB_TRACE_STEP");
    if (++g_trace.replays != (k ? atoi(k) : 5)) return false;
    if (!g_trace.buf && (cudaMalloc(&g_trace.buf, sizeof(TernTraceRec) * kTraceCap) != cudaSuccess ||
                         cudaMalloc(&g_trace.n, sizeof(unsigned)) != cudaSuccess))
        return false;
    /* (a chained step comes while the one before still runs: the probe's symbols are set with
     * copies not ordered on the stream, so nothing of the step before may see them half set) */
    cudaStreamSynchronize(g->st);
    cudaMemsetAsync(g_trace.n, 0, sizeof(unsigned), g->st);
    tern_trace_setup(g_trace.buf, g_trace.n, kTraceCap);
    return true;
}

void trace_end(CE *g, const StepPlan *p) {
    cudaStreamSynchronize(g->st);
    unsigned n = 0;
    cudaMemcpy(&n, g_trace.n, sizeof n, cudaMemcpyDeviceToHost);
    if (n > kTraceCap) n = kTraceCap;
    std::vector<TernTraceRec> r(n);
    cudaMemcpy(r.data(), g_trace.buf, sizeof(TernTraceRec) * n, cudaMemcpyDeviceToHost);
    tern_trace_setup(nullptr, nullptr, 0);
    FILE *f = fopen(getenv("TERNLAB_TRACE"), "a");
    if (!f) return;
    fprintf(f, "# step tokens=%lld records=%u\n", (long long)p->n, n);
    for (const TernTraceRec &x : r)
        fprintf(f, "%u %u %u %u %u %llu %llu %u\n", x.file, x.line, x.grid, x.cta, x.sm, x.t0, x.t1, x.pad);
    fclose(f);
}
#endif

/* The argmax of a step's first `rows` logit rows into g->ids after its
 * launch, where the graph did not take it (in_graph: counted); where the
 * logit rows are the tokens' (tok_rows), also into the token inputs, for a
 * chained next step. */
int step_argmax(CE *g, const StepPlan *p, int64_t rows, bool in_graph) {
    if (in_graph) {
        g->n_argmax_graph++;
        return 0;
    }
    return fwdc_argmax_rows_to(g->logits, rows, g->c.vocab, g->ids, p->tok_rows ? g->d_in : nullptr, g->d_map,
                               g->d_in + 5 * p->n + 1, g->max_tok, g->st);
}

/* A rank's end after some rank failed to enqueue its step or failed in it
 * (tensor parallelism): its communicator aborted (which ends collectives waiting for
 * the missing rank), its stream drained; the engine refuses later steps
 * (ce_tp_forward).  own_rc: this rank's launch (its message kept). */
const char kPeerFailed[] = "another rank failed in its step; the communicators were aborted";
int tp_abort_rank(CE *g, int own_rc) {
    /* the graph first: NCCL's last abort in the process waits until no graph
     * holds a captured collective (a running one is destroyed when it ends,
     * which the abort lets it do) — see tp_destroy */
    drop_graph(g);
#ifdef TL_HAVE_NCCL
    if (g->comm) ncclCommAbort(g->comm);
    g->comm = nullptr;
#endif
    cudaStreamSynchronize(g->st);
    (void)cudaGetLastError();
    return own_rc != 0 ? -1 : err_set("%s", kPeerFailed);
}

/* One forward call, device side: step_launch, argmax / logits back (only
 * where nl_out > 0), synchronised at the end.  launched (tensor parallelism):
 * every rank meets there once its whole step is enqueued, before any rank
 * blocks in a copy or a synchronisation — a rank waiting in a device-to-host
 * copy while another is still capturing or instantiating the graph that holds
 * the matching collectives can stall both (NCCL's notes on several GPUs per
 * process with CUDA graphs). */
/* A timing event that failed: its error cleared (false, for `timed`). */
bool untimed() {
    (void)cudaGetLastError();
    return false;
}

/* device_step's argmax and copies back (enqueued, not waited for). */
int step_copies_back(CE *g, const StepPlan *p, int64_t nl_out, int32_t *argmax_out, float *logits, int64_t amax,
                     bool amax_done, int32_t **ids_to) {
    if (nl_out > 0 && argmax_out) { /* (amax_done only here: amax > 0 asks for both) */
        if (step_argmax(g, p, nl_out, amax_done) != 0) return -1;
        if (amax > 0 && nl_out <= g->h_ids_cap) *ids_to = g->h_ids;
        CUDA_CHECK(cudaMemcpyAsync(*ids_to, g->ids, sizeof(int32_t) * (size_t)nl_out, cudaMemcpyDeviceToHost,
                                   g->st));
    }
    if (nl_out > 0 && logits)
        CUDA_CHECK(cudaMemcpyAsync(logits, g->logits, sizeof(float) * (size_t)(nl_out * g->c.vocab),
                                   cudaMemcpyDeviceToHost, g->st));
    return 0;
}

/* Tensor parallelism: this rank failed after every rank enqueued its step —
 * the others told (failed), this rank's communicator aborted; own_rc's message
 * kept. */
int tp_fail(CE *g, std::atomic<bool> *failed, int own_rc) {
    int none = -1;
    if (g->tp_first_fail) g->tp_first_fail->compare_exchange_strong(none, g->rank);
    failed->store(true);
    return tp_abort_rank(g, own_rc != 0 ? own_rc : -1);
}

/* Tensor parallelism: the step's end, waited for by polling this rank's
 * stream, NCCL's asynchronous error and the other ranks' flag.  A rank whose
 * GPU faulted (an illegal address) stops before its part of an all-reduce, and
 * a peer in cudaStreamSynchronize waited for ever; here a failure anywhere
 * aborts every rank's communicator, which ends the collectives waiting on it,
 * and the call returns the error (the engine refuses later steps). */
int tp_wait_step(CE *g, std::atomic<bool> *failed) {
    for (unsigned spin = 0;; spin++) {
        const cudaError_t e = cudaStreamQuery(g->st);
        if (e == cudaSuccess) return 0;
        if (e != cudaErrorNotReady) {
            (void)cudaGetLastError();
            return tp_fail(g, failed,
                           err_set("cuda: the step failed on GPU %d: %s (%s)", g->gpu, cudaGetErrorString(e),
                                   cudaGetErrorName(e)));
        }
#ifdef TL_HAVE_NCCL
        ncclResult_t ar = ncclSuccess;
        if (g->comm && ncclCommGetAsyncError(g->comm, &ar) == ncclSuccess && ar != ncclSuccess &&
            ar != ncclInProgress)
            return tp_fail(g, failed, err_set("nccl: the step's collectives failed: %s", ncclGetErrorString(ar)));
#endif
        if (failed->load()) return tp_abort_rank(g, 0);
        if (spin >= 256) sched_yield();
    }
}

int device_step(CE *g, const StepPlan *p, int64_t nl_out, int32_t *argmax_out, float *logits,
                pthread_barrier_t *launched = nullptr, std::atomic<bool> *launch_failed = nullptr) {
    if (p->n <= 0) return 0;
#ifdef TERN_TRACE
    const bool traced = trace_begin(g, p);
#endif
    const int64_t amax = g->argmax_graph && !launched && nl_out > 0 && argmax_out ? nl_out : 0;
    /* (the timing events checked: a failure, cleared, drops the timing, not the step —
     * unchecked, it had been left for the next launch check to report) */
    bool timed = g->ev[0] && !launched && p->eligible && graph_fits(g, p); /* (one GPU) */
    if (timed && cudaEventRecord(g->ev[0], g->st) != cudaSuccess) timed = untimed();
    bool amax_done = false;
    g->time_up = timed;
    const int rc = step_launch(g, p, amax, &amax_done);
    timed = timed && g->time_up;
    g->time_up = false;
    if (timed && cudaEventRecord(g->ev[1], g->st) != cudaSuccess) timed = untimed();
    if (launched) {
        if (rc != 0) {
            int none = -1;
            if (g->tp_first_fail) g->tp_first_fail->compare_exchange_strong(none, g->rank);
            launch_failed->store(true);
        }
        pthread_barrier_wait(launched);
        /* a rank that did not enqueue its whole step leaves the others' collectives
         * waiting for it on their GPUs: every rank aborts its communicator */
        if (launch_failed->load()) return tp_abort_rank(g, rc);
    }
    if (rc != 0) return -1;
    int32_t *ids_to = argmax_out; /* (amax: through the pinned copy) */
    if (launched) {
        /* tensor parallelism: the step waited for (tp_wait_step) before anything that
         * can block the host — a copy to pageable memory returns only when done, the
         * argmax's workspace may grow with a device synchronisation — so that this
         * rank sees another's failure; then the argmax and the copies back, on an idle
         * stream whose collectives are done.  A failure is every rank's. */
        TRY(tp_wait_step(g, launch_failed));
        const int crc = step_copies_back(g, p, nl_out, argmax_out, logits, 0, false, &ids_to);
        if (crc != 0) return tp_fail(g, launch_failed, crc);
        const cudaError_t e = cudaStreamSynchronize(g->st);
        if (e != cudaSuccess) {
            (void)cudaGetLastError();
            return tp_fail(g, launch_failed,
                           err_set("cuda: the step's copies back failed on GPU %d: %s (%s)", g->gpu,
                                   cudaGetErrorString(e), cudaGetErrorName(e)));
        }
    } else {
        if (step_copies_back(g, p, nl_out, argmax_out, logits, amax, amax_done, &ids_to) != 0) return -1;
        if (timed && cudaEventRecord(g->ev[2], g->st) != cudaSuccess) timed = untimed();
        CUDA_CHECK(cudaStreamSynchronize(g->st));
    }
    if (timed) {
        float a = 0, b = 0, u = 0;
        if (cudaEventElapsedTime(&a, g->ev[0], g->ev[2]) == cudaSuccess &&
            cudaEventElapsedTime(&b, g->ev[0], g->ev[1]) == cudaSuccess &&
            cudaEventElapsedTime(&u, g->ev[0], g->ev[3]) == cudaSuccess)
            g->t_dev.push_back(a), g->t_graph.push_back(b), g->t_up.push_back(u);
        else
            (void)untimed();
    }
    if (ids_to != argmax_out) memcpy(argmax_out, ids_to, sizeof(int32_t) * (size_t)nl_out);
#ifdef TERN_TRACE
    if (traced) trace_end(g, p);
#endif
    return 0;
}

void update_lens(KvCache *kv, const int *seq, const int64_t *pos, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        KvSeq *sq = &kv->seqs[seq[i]];
        if (pos[i] + 1 > sq->len) sq->len = pos[i] + 1;
    }
}

int ce_forward(void *ctx, const Model *m, KvCache *kv, RunState *s, const int *tok, const int *seq,
               const int64_t *pos, int64_t n, const int64_t *logit_idx, int64_t n_logits,
               float *logits) {
    CE *g = static_cast<CE *>(ctx);
    StepPlan p;
    const double t0 = g->ev[0] ? time_now() : 0.0;
    if (host_prepare(g, m, kv, s, tok, seq, pos, n, logit_idx, n_logits, logits, &p) != 0) return -1;
    const double t1 = g->ev[0] ? time_now() : 0.0;
    const size_t nd = g->t_dev.size();
    if (device_step(g, &p, p.nl, s->argmax_out, logits) != 0) return -1;
    if (g->t_dev.size() > nd) g->t_wall.push_back(time_now() - t0), g->t_prep.push_back(t1 - t0);
    update_lens(kv, seq, pos, n);
    return 0;
}

/* The chain's ids come through h_map (written by the argmax kernels), not a copy */
bool chain_mapped(const CE *g) { return g->ids_mapped && g->d_map; }

/* cuda_engine_decode_chain's buffers: h_in2 as h_in, two slots of B ids */
int chain_buffers(CE *g, int64_t B) {
    if (!g->h_in2) CUDA_CHECK(cudaMallocHost(&g->h_in2, input_count(g) * 4));
    if (g->h_chain_cap < B) {
        if (g->h_chain) cudaFreeHost(g->h_chain);
        g->h_chain = nullptr;
        g->h_chain_cap = 0;
        CUDA_CHECK(cudaMallocHost(&g->h_chain, sizeof(int32_t) * 2 * (size_t)B));
        g->h_chain_cap = B;
    }
    for (cudaEvent_t &ev : g->chain_ev)
        if (!ev) CUDA_CHECK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
    return 0;
}

/* One step of the chain enqueued: inputs up (the tokens too unless the plan
 * skips them), the graph (or a capture, or eager launches), the argmax into
 * g->ids and the token inputs where it is not in the graph, the ids into
 * slot t % 2, its event.  Nothing waited for. */
int chain_enqueue(CE *g, KvCache *kv, const StepPlan *p, int64_t t, const int *seq, const int64_t *pos) {
    const int64_t B = p->n;
    bool in_graph = false;
#ifdef TERN_TRACE
    const bool traced = trace_begin(g, p); /* (that step is waited for: its records read back) */
#endif
    TRY(step_launch(g, p, g->argmax_graph ? B : 0, &in_graph));
#ifdef TERN_TRACE
    if (traced) trace_end(g, p);
#endif
    TRY(step_argmax(g, p, B, in_graph)); /* (the chain's plans: tok_rows) */
    if (!chain_mapped(g)) { /* (mapped: the argmax wrote them into h_map's slot t % 2) */
        int32_t *slot = g->h_chain + (size_t)(t & 1) * (size_t)g->h_chain_cap;
        CUDA_CHECK(cudaMemcpyAsync(slot, g->ids, sizeof(int32_t) * (size_t)B, cudaMemcpyDeviceToHost, g->st));
    }
    CUDA_CHECK(cudaEventRecord(g->chain_ev[t & 1], g->st));
    update_lens(kv, seq, pos, B);
    return 0;
}

/* Step t's ids, once its event has passed, into ids + t B; t_done[t] the host clock then */
int chain_collect(CE *g, int64_t B, int64_t t, int32_t *ids, double *t_done) {
    CUDA_CHECK(cudaEventSynchronize(g->chain_ev[t & 1]));
    if (t_done) t_done[t] = time_now();
    if (chain_mapped(g)) { /* (written by the step's argmax kernel, which its event follows) */
        const volatile int32_t *src = g->h_map + (size_t)(t & 1) * (size_t)g->max_tok;
        for (int64_t b = 0; b < B; b++) ids[t * B + b] = src[b];
    } else {
        memcpy(ids + t * B, g->h_chain + (size_t)(t & 1) * (size_t)g->h_chain_cap, sizeof(int32_t) * (size_t)B);
    }
    return 0;
}

/* The loop of cuda_engine_decode_chain (cuda_engine.h).  Step t + 1 is
 * prepared on the host (KV blocks, table updates, positions; its tokens left
 * 0) while step t runs; where it replays the graph that holds the argmax, it
 * is enqueued at once with its tokens left to the device (skip_tok); else
 * (warm-up: eager, then the capture) step t is waited for first and its ids
 * uploaded as the tokens, as forward() does.  Input buffers alternate: step
 * t + 1's h_in was step t - 1's, whose upload has run by then (step t - 1 was
 * collected). */
int chain_run(Engine *e, CE *g, const int *seq, const int64_t *pos0, const int32_t *tok0, int64_t B,
              int64_t steps, int32_t *ids, double *t_done) {
    const Model *m = e->m;
    RunState *s = &e->rs;
    int64_t max_pos = 0;
    for (int64_t b = 0; b < B; b++) max_pos = std::max(max_pos, pos0[b] + steps - 1);
    if (rope_positions_check(&m->cfg, max_pos) != 0) return err_prefix("decode: ");
    if (ensure_rope(g, const_cast<Model *>(m), max_pos + 1) != 0) return -1; /* none inside the chain */
    TRY(chain_buffers(g, B));
    std::vector<int> tok((size_t)B);
    std::vector<int64_t> pos((size_t)B), lidx((size_t)B);
    int32_t *hin[2] = {g->h_in, g->h_in2};
    for (int64_t b = 0; b < B; b++) lidx[(size_t)b] = b;
    /* host_prepare for step t into hin[t % 2] with the given tokens */
    auto prepare = [&](int64_t t, const int32_t *tk, StepPlan *p) -> int {
        *p = StepPlan();
        g->h_in = hin[t & 1];
        g->ids_slot = (int)(t & 1);
        for (int64_t b = 0; b < B; b++) tok[(size_t)b] = tk ? tk[b] : 0, pos[(size_t)b] = pos0[b] + t;
        return host_prepare(g, m, &e->kv, s, tok.data(), seq, pos.data(), B, lidx.data(), B, nullptr, p);
    };
    std::set<int> ids_seen(seq, seq + B); /* before anything is reserved */
    if ((int64_t)ids_seen.size() != B)
        return err_set("decode chain: the %lld sequences must be distinct", (long long)B);
    StepPlan p;
    if (prepare(0, tok0, &p) != 0) return -1;
    TRY(chain_enqueue(g, &e->kv, &p, 0, seq, pos.data()));
    for (int64_t t = 0; t < steps; t++) {
        bool collected = false;
        if (t + 1 < steps) {
            TRY(prepare(t + 1, nullptr, &p));
            if (replays(g, &p, g->argmax_graph ? B : 0)) { /* (as step_enqueue decides it) */
                p.skip_tok = true;
                g->n_chained++;
            } else { /* warm-up: the tokens from the host, as forward() */
                if (chain_collect(g, B, t, ids, t_done) != 0) {
                    unsend_updates(g, &p); /* (step t + 1 prepared, never enqueued) */
                    return -1;
                }
                collected = true;
                for (int64_t b = 0; b < B; b++) g->h_in[b] = ids[t * B + b];
            }
            TRY(chain_enqueue(g, &e->kv, &p, t + 1, seq, pos.data()));
        }
        if (!collected) TRY(chain_collect(g, B, t, ids, t_done));
    }
    return 0;
}

template <class T>
double median_of(std::vector<T> v) {
    if (v.empty()) return 0.0;
    std::sort(v.begin(), v.end());
    const size_t n = v.size();
    return n % 2 ? (double)v[n / 2] : 0.5 * ((double)v[n / 2 - 1] + (double)v[n / 2]);
}

/* TERNLAB_CUDA_STEP_TIME's medians (µs) on stderr */
void step_time_report(CE *g) {
    if (!g->ev[0]) return;
    if (!g->t_dev.empty())
        fprintf(stderr,
                "cuda step time: %zu graph replays, median us: forward call %.1f (host prepare %.1f), "
                "device upload..ids %.1f, upload+graph %.1f, upload %.1f\n",
                g->t_dev.size(), 1e6 * median_of(g->t_wall), 1e6 * median_of(g->t_prep),
                1e3 * median_of(g->t_dev), 1e3 * median_of(g->t_graph), 1e3 * median_of(g->t_up));
    for (cudaEvent_t &e : g->ev)
        if (e) cudaEventDestroy(e), e = nullptr;
}

void ce_destroy(CE *g) {
    if (!g) return;
    int dev = 0;
    cudaGetDevice(&dev);
    cudaSetDevice(g->gpu);
    if (g->st) cudaStreamSynchronize(g->st);
    step_time_report(g);
    drop_graph(g);
    for (DLayer &L : g->L)
        for (DLin *d : L.lins())
            if (d->kind == LIN_TERN && !g->synthetic) tern_cuda_free(&d->tm);
    if (g->lm.kind == LIN_TERN && !g->synthetic) tern_cuda_free(&g->lm.tm);
    for (void *p : g->allocs) cudaFree(p);
    cudaFree(g->d_tab);
    cudaFree(g->d_cos);
    cudaFree(g->d_sin);
    if (g->h_in) cudaFreeHost(g->h_in);
    if (g->h_in2) cudaFreeHost(g->h_in2);
    if (g->h_chain) cudaFreeHost(g->h_chain);
    if (g->h_map) cudaFreeHost(g->h_map);
    for (cudaEvent_t ev : g->chain_ev)
        if (ev) cudaEventDestroy(ev);
    if (g->h_ids) cudaFreeHost(g->h_ids);
    if (g->cb) cublasDestroy(g->cb);
    if (g->st) cudaStreamDestroy(g->st);
    cudaSetDevice(dev);
    delete g;
}

void ce_engine_free(Engine *e) {
    ce_destroy(static_cast<CE *>(e->rs.hook_ctx));
    kv_free(&e->kv);
    memset(e, 0, sizeof *e);
}

bool env_on(const char *name);

/* Stream, cuBLAS, KV pages, tables, step inputs, activations. */
/* NAME=K[:R] (tests of the error paths): rank R's (default 0) K-th step launch,
 * into *field where R is g's rank (0: none) — TERNLAB_CUDA_FAIL_LAUNCH (the launch
 * fails) and TERNLAB_CUDA_FAULT_STEP (the GPU faults in that step). */
int step_rank_env(CE *g, const char *name, const char *what, int64_t *field) {
    const char *v = getenv(name);
    *field = 0;
    if (!v || !*v) return 0;
    int64_t k = 0, r = 0;
    char kb[32];
    const char *colon = strchr(v, ':');
    const size_t kl = colon ? (size_t)(colon - v) : strlen(v);
    bool ok = kl < sizeof kb;
    if (ok) {
        memcpy(kb, v, kl);
        kb[kl] = 0;
    }
    ok = ok && str_to_i64(kb, 1, INT64_MAX, &k) == 0 && (!colon || str_to_i64(colon + 1, 0, 1024, &r) == 0);
    if (!ok) return err_set("%s=\"%s\": expected K[:RANK] (%s; K >= 1)", name, v, what);
    if (r == g->rank) *field = k;
    return 0;
}

int ce_common(CE *g, const Engine *e, const EngineOpts *o) {
    const ModelConfig &c = g->c;
    if (step_rank_env(g, "TERNLAB_CUDA_FAIL_LAUNCH", "the K-th step launch of that rank fails", &g->fail_launch) != 0 ||
        step_rank_env(g, "TERNLAB_CUDA_FAULT_STEP", "the GPU of that rank faults in its K-th step", &g->fault_step) != 0)
        return -1;
    if (c.head_dim < 2 || c.head_dim > 256 || c.head_dim % 2)
        return err_set("--device cuda: head_dim %d is not supported (even, 2..256)", c.head_dim);
    if (c.n_kv_heads < 1 || c.n_heads % c.n_kv_heads)
        return err_set("--device cuda: %d heads over %d KV heads", c.n_heads, c.n_kv_heads);
    CUDA_CHECK(cudaSetDevice(g->gpu));
    cudaDeviceProp prop;
    CUDA_CHECK(cudaGetDeviceProperties(&prop, g->gpu));
    snprintf(g->name, sizeof g->name, "%.127s", prop.name);
    /* the kernels are built for sm_90a alone (Hopper's wgmma, TMA, clusters), which
     * runs on compute capability 9.0 only: another GPU had opened and then failed at
     * the first launch with "no kernel image" */
    if (prop.major != 9 || prop.minor != 0)
        return err_set("--device cuda: GPU %d (%s) is compute capability %d.%d; ternlab's CUDA kernels "
                       "are built for sm_90a (compute capability 9.0: H100, H200)", g->gpu, prop.name,
                       prop.major, prop.minor);
    CUDA_CHECK(cudaStreamCreateWithFlags(&g->st, cudaStreamNonBlocking));
    if (getenv("TERNLAB_CUDA_STEP_TIME") && strcmp(getenv("TERNLAB_CUDA_STEP_TIME"), "1") == 0)
        for (cudaEvent_t &ev : g->ev) CUDA_CHECK(cudaEventCreate(&ev));
    if (env_on("TERNLAB_CUDA_ARGMAX_GRAPH")) {
        g->argmax_graph = 1;
        g->h_ids_cap = 1024;
        CUDA_CHECK(cudaMallocHost(&g->h_ids, sizeof(int32_t) * (size_t)g->h_ids_cap));
    }
    CUBLAS_CHECK(cublasCreate(&g->cb));
    CUBLAS_CHECK(cublasSetStream(g->cb, g->st));
    CUBLAS_CHECK(cublasSetMathMode(g->cb, CUBLAS_PEDANTIC_MATH)); /* fp32 stays fp32 (no TF32) */
    const size_t cb_ws = 64u << 20;
    if (dmalloc(g, &g->cb_ws, cb_ws, "cuBLAS workspace") != 0) return -1;
    CUBLAS_CHECK(cublasSetWorkspace(g->cb, g->cb_ws, cb_ws));
    g->max_tok = o->max_tok > 0 ? o->max_tok : 256;
    g->bs = e->kv.block_size;
    g->n_blocks = e->kv.n_blocks;
    g->layer_elems = (size_t)g->n_blocks * (size_t)c.n_kv_heads * (size_t)g->bs * (size_t)c.head_dim;
    const char *kvp = getenv("TERNLAB_CUDA_KV_PAGES");
    if (kvp && *kvp && strcmp(kvp, "ternary") != 0 && strcmp(kvp, "f32") != 0)
        return err_set("TERNLAB_CUDA_KV_PAGES=\"%s\": expected ternary (the default: a layer whose every token "
                       "is stored ternary keeps ternary pages) or f32 (f32 pages holding the ternary values)",
                       kvp);
    g->kv_f32_only = kvp && strcmp(kvp, "f32") == 0;
    g->kp.assign((size_t)c.n_layers, nullptr);
    g->vp.assign((size_t)c.n_layers, nullptr);
    g->tpages.assign((size_t)c.n_layers, FwdcKvTern{});
    /* the pages the policy the cache opened with needs (none: f32 everywhere) */
    if (kv_tp_refused(&e->kv.policy, g->tp) != 0 || kv_pages_for_policy(g, &e->kv) != 0) return -1;
    g->pol = e->kv.policy;
    g->stride = g->n_blocks; /* one sequence may own every block */
    if (ensure_rows(g, std::max(e->kv.seq_cap, 16)) != 0) return -1;
    g->u_cap = g->n_blocks;
    const size_t in_cnt = input_count(g);
    CUDA_CHECK(cudaMallocHost(&g->h_in, in_cnt * 4));
    if (dalloc(g, &g->d_in, in_cnt, "step inputs") != 0) return -1;
    if (g->max_tok <= 65535) { /* (the argmax's host slots: fwdc_argmax_rows_to) */
        CUDA_CHECK(cudaMallocHost(&g->h_map, sizeof(int32_t) * 2 * (size_t)g->max_tok));
        memset(g->h_map, 0, sizeof(int32_t) * 2 * (size_t)g->max_tok);
        void *dm = nullptr; /* (no mapping on this system: the chain copies its ids back) */
        if (cudaHostGetDevicePointer(&dm, g->h_map, 0) == cudaSuccess) g->d_map = static_cast<int32_t *>(dm);
        else (void)cudaGetLastError();
    }
    const int64_t T = g->max_tok, qd = (int64_t)c.n_heads * c.head_dim,
                  kvd = (int64_t)c.n_kv_heads * c.head_dim;
    const int64_t wide = std::max(std::max((int64_t)c.hidden, qd), (int64_t)c.inter);
    if (dalloc(g, &g->x, (size_t)(T * c.hidden), "activations") != 0 ||
        dalloc(g, &g->xb, (size_t)(T * wide), "activations") != 0 ||
        dalloc(g, &g->x16, (size_t)(T * wide), "activations") != 0 ||
        dalloc(g, &g->xq, (size_t)(T * wide), "activations") != 0 ||
        dalloc(g, &g->sx, (size_t)T, "activations") != 0 ||
        dalloc(g, &g->q, (size_t)(T * (qd + 2 * kvd)), "activations") != 0 ||
        dalloc(g, &g->k, (size_t)(T * kvd), "activations") != 0 ||
        dalloc(g, &g->v, (size_t)(T * kvd), "activations") != 0 ||
        dalloc(g, &g->att, (size_t)(T * qd), "activations") != 0 ||
        dalloc(g, &g->hb, (size_t)(T * c.inter), "activations") != 0 ||
        dalloc(g, &g->gu, (size_t)(2 * T * c.inter), "activations") != 0 ||
        dalloc(g, &g->hout, (size_t)(T * c.hidden), "activations") != 0 ||
        dalloc(g, &g->logits, (size_t)(T * c.vocab), "logits") != 0 ||
        dalloc(g, &g->ids, (size_t)T, "argmax ids") != 0 ||
        dalloc(g, &g->hmax, (size_t)(3 * c.n_layers * kMtTok), "GLU / attention / norm maxima") != 0 ||
        dalloc(g, &g->nss, (size_t)TERN_NORM_SLOTS, "norm slots") != 0)
        return -1;
    return 0;
}

/* Device bytes of one layer's linears (separate or fused, whichever it holds). */
size_t layer_linear_bytes(const DLayer &L) {
    size_t b = 0;
    for (const DLin *d : L.lins()) b += dlin_bytes(*d);
    return b;
}

/* Decoder-linear bytes of all layers (what a rank holds). */
size_t decoder_linear_bytes(const CE *g) {
    size_t b = 0;
    for (const DLayer &L : g->L) b += layer_linear_bytes(L);
    return b;
}

void step_bytes(CE *g) {
    size_t b = decoder_linear_bytes(g);
    for (const DLayer &L : g->L) {
        for (const DLin *d : L.lins()) g->tern_model = g->tern_model || d->kind == LIN_TERN;
        b += sizeof(float) * (size_t)(2 * g->c.hidden);
        if (L.attn_sub)
            b += sizeof(float) * (g->tp > 1 ? (size_t)g->qd_full : (size_t)g->c.n_heads * (size_t)g->c.head_dim);
        if (L.ffn_sub) b += sizeof(float) * (g->tp > 1 ? (size_t)g->inter_full : (size_t)g->c.inter);
    }
    b += dlin_bytes(g->lm) + sizeof(float) * (size_t)g->c.hidden; /* + final norm */
    g->step_bytes = b;
}

int engine_finish(Engine *e, CE *g) {
    step_bytes(g);
    e->rs.max_tok = g->max_tok;
    e->rs.hook = ce_forward;
    e->rs.hook_ctx = g;
    e->backend_free = ce_engine_free;
    e->rs.argmax_capable = 1;
    return 0;
}

/* The front Engine of a GPU engine: the model and the host block tables (the
 * allocator every rank shares; no host pages). */
int open_front(Engine *e, Model *m, const EngineOpts *o) {
    memset(e, 0, sizeof *e);
    e->m = m;
    const int bs = o->block_size > 0 ? o->block_size : 16;
    if (o->n_blocks < 1 || o->n_blocks > (int64_t)1 << 30)
        return err_set("KV cache: %lld blocks is out of range", (long long)o->n_blocks);
    if (kv_init_tables(&e->kv, m->cfg.n_layers, m->cfg.n_kv_heads, m->cfg.head_dim, bs, (int)o->n_blocks) != 0)
        return -1;
    /* (the tables-only cache takes the policy alone; ce_common allocates the pages it needs) */
    if (o->kv && kv_set_policy(&e->kv, o->kv) != 0) {
        kv_free(&e->kv);
        return -1;
    }
    return 0;
}

/* An on-by-default switch: false only where `name` is "0" in the environment.
 * TERNLAB_CUDA_GRAPHS=0: every decode step launched eagerly (profilers that
 * time kernels one by one, e.g. Nsight Compute); TERNLAB_CUDA_GLU_FUSE=0: the
 * one-token MLP as separate kernels (mlp_fused); TERNLAB_CUDA_ATT_FUSE=0: RoPE
 * + KV write and the attention as separate kernels; TERNLAB_CUDA_DEFER=0: the
 * fused MLP's down GEMV finishes its own K split; TERNLAB_CUDA_OMAX=0: the
 * int8 pass before an unfused o projection forms its own max;
 * TERNLAB_CUDA_NORM_FOLD=0: the norm between a one-warp o and the fused MLP
 * as its own kernel (norm_folded); TERNLAB_CUDA_LM_GEMV=0: a ternary model's
 * LM head on cuBLAS too (lm_own_gemv); TERNLAB_CUDA_TAIL=0: the last layer's
 * residual add, the logit rows' gather and the final norm as three kernels
 * (run_device's rows_ident); TERNLAB_CUDA_IDS_MAPPED=0: a chained step's ids
 * copied back on the stream instead of read where its argmax wrote them. */
bool env_on(const char *name) {
    const char *v = getenv(name);
    return !(v && strcmp(v, "0") == 0);
}

int mt_fuse_env(int *out);
int tbm_reserve_env(int64_t *out);

/* The engine's on/off switches (env_on's above, TERNLAB_CUDA_ARGMAX_GRAPH,
 * TERNLAB_CUDA_STEP_TIME, TERNLAB_CUDA_O_FUSE, and tern_cuda's
 * TERNLAB_CUDA_PDL / TERNLAB_CUDA_L2EF) take 0 or 1 where set (empty: the
 * default): any other value (off, no, false) is refused when an engine
 * opens, where it would otherwise have meant the default; so are a malformed
 * TERNLAB_CUDA_MT_FUSE and TERNLAB_CUDA_TBM_RESERVE (mt_fuse_env,
 * tbm_reserve_env). */
int env_switches_check(void) {
    static const char *const names[] = {"TERNLAB_CUDA_GRAPHS",   "TERNLAB_CUDA_GLU_FUSE",  "TERNLAB_CUDA_ATT_FUSE",
                                        "TERNLAB_CUDA_DEFER",    "TERNLAB_CUDA_OMAX",      "TERNLAB_CUDA_NORM_FOLD",
                                        "TERNLAB_CUDA_CHAIN",    "TERNLAB_CUDA_ARGMAX_GRAPH", "TERNLAB_CUDA_STEP_TIME",
                                        "TERNLAB_CUDA_O_FUSE",   "TERNLAB_CUDA_PDL",       "TERNLAB_CUDA_L2EF",
                                        "TERNLAB_CUDA_LM_GEMV",  "TERNLAB_CUDA_TAIL",     "TERNLAB_CUDA_IDS_MAPPED"};
    for (const char *n : names) {
        const char *v = getenv(n);
        if (v && *v && strcmp(v, "0") != 0 && strcmp(v, "1") != 0)
            return err_set("%s=\"%s\": expected 0 or 1", n, v);
    }
    /* the numeric settings too, so that every open (one GPU, synthetic, --tp N)
     * refuses a malformed one before the device, whether or not it reads it */
    int mt = 0;
    int64_t reserve = 0;
    return mt_fuse_env(&mt) != 0 || tbm_reserve_env(&reserve) != 0 ? -1 : 0;
}

/* TERNLAB_CUDA_O_FUSE: where the o projection codes its f32 input itself
 * (o_fused) instead of an int8 pass — by default (1) only on the one-warp
 * GEMV; "1" (2) on the binary tensor-core GEMVs too, off there by default
 * since the attention reads before its wait (same run, three rounds, H200,
 * bench-e2e tern-i8 B = 1: 27B 283-284 tok/s with it against 292-294
 * without; the 7B's o then had a binary f32 form too, since removed); "0"
 * (0) nowhere. */
int o_fuse_mode(void) {
    const char *v = getenv("TERNLAB_CUDA_O_FUSE");
    return v && strcmp(v, "0") == 0 ? 0 : v && strcmp(v, "1") == 0 ? 2 : 1;
}

/* The SM the one-token int8 GEMVs leave to the one-CTA row kernel before
 * them (tern_cuda_tbm_reserve): 1, or TERNLAB_CUDA_TBM_RESERVE=N.  H200,
 * same binary, three rounds, tok/s at batch 1: 27B 312-316 with 0, 320-323
 * with 1; the 7B (its q|k|v CTA fits beside its norm) 922-931 / 917-933. */
int tbm_reserve_env(int64_t *out) {
    const char *v = getenv("TERNLAB_CUDA_TBM_RESERVE");
    int64_t n = 1;
    if (v && str_to_i64(v, 0, 1024, &n) < 0)
        return err_set("TERNLAB_CUDA_TBM_RESERVE=\"%s\": expected the number of SMs to leave out, 0 .. 1024", v);
    *out = n;
    return 0;
}
int engine_tbm_reserve(void) {
    int64_t n = 1;
    if (tbm_reserve_env(&n) != 0) return -1;
    tern_cuda_tbm_reserve((int)n);
    return 0;
}

/* TERNLAB_CUDA_MT_FUSE=N: the most tokens of a call whose MLP takes the
 * multi-token GLU form (mlp_mt), 0 .. kMtTok (0: none); unset, -1: the
 * device's (mt_fuse_default).  (o's int8 pass from the attention's maxima at
 * 2 .. kMtTok tokens follows TERNLAB_CUDA_OMAX.) */
int mt_fuse_env(int *out) {
    const char *v = getenv("TERNLAB_CUDA_MT_FUSE");
    int64_t n = -1;
    if (v && str_to_i64(v, 0, kMtTok, &n) < 0)
        return err_set("TERNLAB_CUDA_MT_FUSE=\"%s\": expected the most tokens of a call on the fused multi-token "
                       "forms, 0 .. %d",
                       v, kMtTok);
    *out = (int)n;
    return 0;
}

/* The GLU form's bound where TERNLAB_CUDA_MT_FUSE is unset: the device's
 * figures through cuda_mt_fuse_for (cuda_engine.h).  The form takes the
 * 27B's gate|up (73 728 x 4608, on the wgmma GEMM otherwise) at 2 .. 8
 * tokens; ms a step at 2 / 4 / 8 sequences, form on / off (o's maxima on),
 * three rounds: H100 4.634-4.654 / 4.796-4.826 / 4.917-4.986 against
 * 4.869-4.879 / 4.978-4.985 / 5.124-5.130; H200 4.288-4.299 / 4.478-4.504 /
 * 4.536-4.538 against 4.162-4.166 / 4.360-4.365 / 4.425-4.429
 * (dev/NOTES.md, sixty-seventh and sixty-eighth sessions).  A device whose
 * figures cannot be read keeps kMtTok (cuda_mt_fuse_for's bound for a figure
 * that is not positive). */
int mt_fuse_default(int gpu) {
    static_assert(kMtTok == 8, "cuda_mt_fuse_for's bound");
    int mem_khz = 0, bus_bits = 0, sm_khz = 0, sms = 0;
    if (cudaDeviceGetAttribute(&mem_khz, cudaDevAttrMemoryClockRate, gpu) != cudaSuccess ||
        cudaDeviceGetAttribute(&bus_bits, cudaDevAttrGlobalMemoryBusWidth, gpu) != cudaSuccess ||
        cudaDeviceGetAttribute(&sm_khz, cudaDevAttrClockRate, gpu) != cudaSuccess ||
        cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, gpu) != cudaSuccess) {
        (void)cudaGetLastError();
        sms = 0; /* (a figure not read: cuda_mt_fuse_for's 8) */
    }
    return cuda_mt_fuse_for(mem_khz, bus_bits, sm_khz, sms);
}

/* The switches a tp rank's step reads too (tp_open sets no others: the rest apply at tp 1
 * alone); the ranks had kept these at their defaults, whatever the environment said. */
void rank_switches(CE *g) {
    g->att_fuse = env_on("TERNLAB_CUDA_ATT_FUSE");
    g->lm_gemv = env_on("TERNLAB_CUDA_LM_GEMV");
    g->tail_norm = env_on("TERNLAB_CUDA_TAIL");
}

int open_begin(Engine *e, Model *m, const EngineOpts *o, CE **out) {
    int mt_fuse = 0;
    if (mt_fuse_env(&mt_fuse) != 0 || engine_tbm_reserve() != 0 || open_front(e, m, o) != 0) return -1;
    if (mt_fuse < 0) mt_fuse = mt_fuse_default(o->gpu);
    CE *g = new CE();
    g->gpu = o->gpu;
    g->bf16 = o->bf16;
    g->graphs = !o->no_graphs && env_on("TERNLAB_CUDA_GRAPHS");
    g->glu_fuse = env_on("TERNLAB_CUDA_GLU_FUSE");
    g->o_fuse = o_fuse_mode();
    g->mt_fuse = mt_fuse;
    g->defer = env_on("TERNLAB_CUDA_DEFER");
    g->omax_given = env_on("TERNLAB_CUDA_OMAX");
    g->norm_fold = env_on("TERNLAB_CUDA_NORM_FOLD");
    rank_switches(g);
    g->ids_mapped = env_on("TERNLAB_CUDA_IDS_MAPPED");
    g->c = m->cfg;
    g->L.resize((size_t)m->cfg.n_layers);
    *out = g;
    return 0;
}

/* A failed open: frees the backend (destroy(ptr)) and the front, keeps the message. */
template <typename T> int open_fail(Engine *e, T *ptr, void (*destroy)(T *)) {
    char msg[2048];
    snprintf(msg, sizeof msg, "%s", err_msg());
    destroy(ptr);
    kv_free(&e->kv);
    memset(e, 0, sizeof *e);
    return err_set("%s", msg);
}

/* Linears reading the same input, uploaded as one matrix with their rows
 * concatenated: ternary ones when they share cols, group width and activation
 * mode (scales expanded to one per (row, group), the same values), dense ones
 * always.  Returns 1 (fused into *d), 0 (formats differ: upload them apart) or
 * -1 (err_set). */
int fuse_upload(CE *g, const Linear *const *ls, int k, DLin *d) {
    bool tern = true, dense = true;
    int64_t rows = 0;
    for (int i = 0; i < k; i++) {
        const Linear *L = ls[i];
        const bool t = L->t && !(L->twin && !L->act_int8);
        tern = tern && t && ls[0]->t && L->t->cols == ls[0]->t->cols &&
               L->t->group_cols == ls[0]->t->group_cols && L->act_int8 == ls[0]->act_int8;
        dense = dense && !t && L->w && !L->act_int8 && L->in == ls[0]->in;
        rows += L->out;
    }
    if (!tern && !dense) return 0;
    Linear f;
    memset(&f, 0, sizeof f);
    snprintf(f.name, sizeof f.name, "%.80s (fused)", ls[0]->name);
    f.out = rows;
    f.in = ls[0]->in;
    f.act_int8 = ls[0]->act_int8;
    std::vector<uint8_t> codes;
    std::vector<float> scales, w;
    TernaryMatrix tm;
    if (tern) {
        const TernaryMatrix *t0 = ls[0]->t;
        tm = *t0;
        tm.rows = rows;
        tm.scale_stride = t0->n_groups;
        tm.n_scales = rows * t0->n_groups;
        codes.resize((size_t)(rows * t0->row_bytes));
        scales.resize((size_t)tm.n_scales);
        int64_t r0 = 0;
        for (int i = 0; i < k; i++) {
            const TernaryMatrix *t = ls[i]->t;
            memcpy(codes.data() + (size_t)(r0 * t->row_bytes), t->codes, (size_t)(t->rows * t->row_bytes));
            for (int64_t r = 0; r < t->rows; r++)
                for (int64_t gi = 0; gi < t->n_groups; gi++)
                    scales[(size_t)((r0 + r) * t0->n_groups + gi)] = t->scales[r * t->scale_stride + gi];
            r0 += t->rows;
        }
        tm.codes = codes.data();
        tm.scales = scales.data();
        f.t = &tm;
    } else {
        w.resize((size_t)(rows * f.in));
        int64_t r0 = 0;
        for (int i = 0; i < k; i++) {
            memcpy(w.data() + (size_t)(r0 * f.in), ls[i]->w, sizeof(float) * (size_t)(ls[i]->out * f.in));
            r0 += ls[i]->out;
        }
        f.w = w.data();
    }
    return dlin_upload(g, &f, d) == 0 ? 1 : -1;
}

int upload_model(CE *g, const Model *m) {
    const ModelConfig &c = m->cfg;
    const size_t H = (size_t)c.hidden;
    if (upload_f32(g, &g->embed, m->embed, (size_t)c.vocab * H, "embedding") != 0 ||
        upload_f32(g, &g->final_norm, m->final_norm, H, "final norm") != 0)
        return -1;
    if (m->lm_head_tied && !g->bf16 && m->lm_head.w == m->embed && !m->lm_head.t && !m->lm_head.act_int8) {
        /* a tied head reads the embedding's copy (it had been uploaded a second time: 4.7 GB
         * more for a 256000 x 4608 vocabulary in f32); bf16 holds its own bf16 form */
        g->lm.out = m->lm_head.out;
        g->lm.in = m->lm_head.in;
        g->lm.act_int8 = 0;
        g->lm.w32 = g->embed;
        g->lm.kind = LIN_DENSE32;
    } else if (dlin_upload(g, &m->lm_head, &g->lm) != 0) {
        return -1;
    }
    for (int l = 0; l < c.n_layers; l++) {
        const Layer *S = &m->layers[l];
        DLayer &D = g->L[(size_t)l];
        if (upload_f32(g, &D.attn_norm, S->attn_norm, H, "norm") != 0 ||
            upload_f32(g, &D.ffn_norm, S->ffn_norm, H, "norm") != 0)
            return -1;
        /* sub-norms act on the full vectors (at tp > 1 too: gathered first) */
        const size_t qd_sub = g->tp > 1 ? (size_t)g->qd_full : (size_t)c.n_heads * (size_t)c.head_dim;
        const size_t in_sub = g->tp > 1 ? (size_t)g->inter_full : (size_t)c.inter;
        if (S->attn_sub_norm && upload_f32(g, &D.attn_sub, S->attn_sub_norm, qd_sub, "norm") != 0)
            return -1;
        if (S->ffn_sub_norm && upload_f32(g, &D.ffn_sub, S->ffn_sub_norm, in_sub, "norm") != 0)
            return -1;
        const Linear *qkv[] = {&S->q, &S->k, &S->v}, *gu[] = {&S->gate, &S->up};
        int f1 = fuse_upload(g, qkv, 3, &D.qkv), f2 = f1 < 0 ? -1 : fuse_upload(g, gu, 2, &D.gu);
        if (f1 < 0 || f2 < 0) return -1;
        D.fqkv = f1 == 1;
        D.fgu = f2 == 1;
        if (!D.fqkv && (dlin_upload(g, &S->q, &D.q) != 0 || dlin_upload(g, &S->k, &D.k) != 0 ||
                        dlin_upload(g, &S->v, &D.v) != 0))
            return -1;
        if (!D.fgu && (dlin_upload(g, &S->gate, &D.gate) != 0 || dlin_upload(g, &S->up, &D.up) != 0))
            return -1;
        if (dlin_upload(g, &S->o, &D.o) != 0 || dlin_upload(g, &S->down, &D.down) != 0) return -1;
    }
    /* the weights went up with blocking cudaMemcpy calls on the legacy stream, which
     * the engine's non-blocking stream is not ordered after (and from pageable memory
     * such a copy may return before it lands): wait for them before anything on g->st
     * reads them (unit_scales' saved copy, the first step) */
    CUDA_CHECK(cudaDeviceSynchronize());
    return 0;
}

int synth_model(CE *g, const CudaSynthetic *syn) {
    const ModelConfig &c = g->c;
    const int64_t H = c.hidden, qd = (int64_t)c.n_heads * c.head_dim,
                  kvd = (int64_t)c.n_kv_heads * c.head_dim, I = c.inter;
    uint64_t seed = syn->seed * 1000003ull + 17;
    if (dalloc(g, &g->embed, (size_t)(c.vocab * H), "synthetic embedding") != 0 ||
        fwdc_fill(g->embed, (int64_t)c.vocab * H, 0, 1.0f, seed++, g->st) != 0 ||
        dalloc(g, &g->final_norm, (size_t)H, "norm") != 0 ||
        fwdc_fill(g->final_norm, H, 4, 0.5f, seed ^ 0x5eedull, g->st) != 0)
        return -1;
    g->weight_bytes += (size_t)(c.vocab * H + H) * 4;
    CudaSynthetic dense = *syn;
    dense.ternary = 0; /* lm_head stays dense (bf16) */
    if (dlin_synth(g, c.vocab, H, &dense, seed++, &g->lm) != 0) return -1;
    for (int l = 0; l < c.n_layers; l++) {
        DLayer &D = g->L[(size_t)l];
        if (dalloc(g, &D.attn_norm, (size_t)H, "norm") != 0 ||
            dalloc(g, &D.ffn_norm, (size_t)H, "norm") != 0 ||
            /* norm weights 1 +- 0.5 (their own seeds: the matrices' are as before) */
            fwdc_fill(D.attn_norm, H, 4, 0.5f, seed ^ (0x5eedull + 2 * (uint64_t)l + 1), g->st) != 0 ||
            fwdc_fill(D.ffn_norm, H, 4, 0.5f, seed ^ (0x5eedull + 2 * (uint64_t)l + 2), g->st) != 0)
            return -1;
        g->weight_bytes += (size_t)(2 * H) * 4;
        const int64_t shp[4][2] = {{qd + 2 * kvd, H}, {H, qd}, {2 * I, H}, {H, I}};
        DLin *dst[] = {&D.qkv, &D.o, &D.gu, &D.down};
        D.fqkv = D.fgu = true;
        for (int i = 0; i < 4; i++)
            if (dlin_synth(g, shp[i][0], shp[i][1], syn, seed++, dst[i]) != 0) return -1;
    }
    CUDA_CHECK(cudaStreamSynchronize(g->st));
    return 0;
}

/* ---- tensor parallelism over GPUs: one rank per GPU, NCCL -------------- */

struct TpGpu {
    int tp = 0;
    std::vector<CE *> ce;
    std::atomic<int> first_fail{-1}; /* (CE::tp_first_fail) */
    std::vector<Model> rm;                 /* rank models: cfg with this rank's heads/MLP */
    std::vector<std::vector<TpLinear>> sh; /* the shards the rank models' linears point into */
    /* workers: ranks 1.. on their own threads, rank 0 on the caller's */
    std::vector<pthread_t> th;
    pthread_barrier_t go, done, launched, warmed;
    bool barriers = false, quit = false;
    /* start gate: workers wait here until every one was started (gate 1) or a
     * start failed (gate -1: they leave without touching the barriers) */
    std::mutex gate_mu;
    std::condition_variable gate_cv;
    int gate = 0;
    StepPlan plan;
    /* step shapes (n, logits, one sequence, distinct, graph-eligible) run before; a new
     * one gets a warm-up pass on every rank first (tp_rank_step) */
    std::set<std::tuple<int64_t, int64_t, bool, bool, bool, int>> shapes;
    bool warm = false;
    std::atomic<bool> warm_failed{false};
    /* a rank failed to enqueue its step or failed in it (device_step): every rank aborted its
     * communicator, and the engine refuses further steps */
    std::atomic<bool> launch_failed{false};
    int32_t *argmax_out = nullptr;
    float *logits = nullptr;
    std::vector<int> rc;
    std::vector<std::string> msg;
    int pdl_saved = -1; /* tern_cuda_pdl before this engine turned it off */
};

/* The warm-up pass of a new step shape on rank g: the whole forward without
 * its collectives (results discarded; the K/V rows it writes are those the
 * real pass writes again), then the stream drained.  Its purpose is what
 * the first call of a shape does besides computing: the first launch of a
 * kernel and the first cuBLAS call of a shape load code (cuBLASLt holds a
 * process-wide lock while it loads a kernel library, and the load waits for
 * the GPU), and workspaces grow (cudaMalloc, cudaDeviceSynchronize).  With
 * the ranks' collectives in flight that deadlocked: one rank loading, its
 * GPU inside an all-reduce that waits for a rank blocked on the lock
 * (H200 x 2: `bench-e2e --tp 2` stopped in 2 of 4 runs, both ranks inside
 * cublasGemmEx, one in cuLibraryLoadData).  Every rank finishes its warm-up
 * before any rank starts the real pass (the `warmed` barrier).  The cost: a
 * forward shape (tokens, logits, one sequence, distinct, graph-eligible) seen
 * for the first time runs twice — once per prompt length when prompts vary. */
int tp_warm(CE *g, const StepPlan &p) {
    TRY(upload_inputs(g, &p));
    g->dry = true;
    const int rc = run_device(g, p.n, p.nl, p.one_seq, p.distinct, p.tok_rows, p.splits);
    g->dry = false;
    if (rc != 0) return err_prefix("warm-up pass: ");
    CUDA_CHECK(cudaStreamSynchronize(g->st));
    return 0;
}

/* What rank r does for one forward call (inputs already in rank 0's h_in). */
int tp_rank_step(TpGpu *t, int r) {
    CE *g = t->ce[(size_t)r];
    if (cudaSetDevice(g->gpu) != cudaSuccess) {
        if (t->warm) {
            t->warm_failed = true;
            pthread_barrier_wait(&t->warmed);
        }
        t->launch_failed.store(true); /* (the others' collectives would wait for this rank) */
        pthread_barrier_wait(&t->launched); /* the others wait there for every rank */
        return tp_abort_rank(g, err_set("cuda: cannot select GPU %d", g->gpu));
    }
    if (r > 0) /* (its RoPE table and block-table rows were grown before the step) */
        memcpy(g->h_in, t->ce[0]->h_in, input_bytes(&t->plan));
    StepPlan p = t->plan;
    if (r > 0) p.nl = 0; /* logits on rank 0 only */
    if (t->warm) { /* a failed warm-up on any rank: no rank starts the real pass */
        const int rc = tp_warm(g, p);
        if (rc != 0) t->warm_failed = true;
        pthread_barrier_wait(&t->warmed);
        if (t->warm_failed) {
            pthread_barrier_wait(&t->launched);
            return rc != 0 ? -1 : err_set("another rank's warm-up pass failed");
        }
    }
    return device_step(g, &p, r == 0 ? t->plan.nl : 0, r == 0 ? t->argmax_out : nullptr,
                       r == 0 ? t->logits : nullptr, &t->launched, &t->launch_failed);
}

void *tp_worker(void *arg) {
    std::pair<TpGpu *, int> *a = static_cast<std::pair<TpGpu *, int> *>(arg);
    TpGpu *t = a->first;
    const int r = a->second;
    delete a;
    {
        std::unique_lock<std::mutex> lk(t->gate_mu);
        t->gate_cv.wait(lk, [t] { return t->gate != 0; });
        if (t->gate < 0) return nullptr;
    }
    for (;;) {
        pthread_barrier_wait(&t->go);
        if (t->quit) break;
        t->rc[(size_t)r] = tp_rank_step(t, r);
        if (t->rc[(size_t)r] != 0) t->msg[(size_t)r] = err_msg();
        pthread_barrier_wait(&t->done);
    }
    return nullptr;
}

int ce_tp_forward(void *ctx, const Model *m, KvCache *kv, RunState *s, const int *tok,
                  const int *seq, const int64_t *pos, int64_t n, const int64_t *logit_idx,
                  int64_t n_logits, float *logits) {
    TpGpu *t = static_cast<TpGpu *>(ctx);
    CE *g0 = t->ce[0];
    if (t->launch_failed.load())
        return err_set("tp: an earlier step failed on a rank and the communicators were aborted; open the "
                       "engine again");
    if (cudaSetDevice(g0->gpu) != cudaSuccess) return err_set("cuda: cannot select GPU %d", g0->gpu);
    StepPlan p;
    if (host_prepare(g0, m, kv, s, tok, seq, pos, n, logit_idx, n_logits, logits, &p) != 0) return -1;
    if (p.n <= 0) return 0;
    t->plan = p;
    t->argmax_out = s->argmax_out;
    t->logits = logits;
    /* the other ranks' RoPE tables and block-table rows grow like rank 0's,
     * here, while every GPU is idle: these use synchronous CUDA calls
     * (cudaFree waits for the whole device), which must not run on one rank
     * while another's collectives are in flight */
    for (int r = 1; r < t->tp; r++) {
        CE *g = t->ce[(size_t)r];
        const int rc = cudaSetDevice(g->gpu) != cudaSuccess ? err_set("cuda: cannot select GPU %d", g->gpu)
                       : ensure_rope(g, const_cast<Model *>(m), g0->rope_len) != 0 ||
                               ensure_rows(g, g0->tab_rows) != 0
                           ? err_prefix("tp rank %d: ", r)
                           : 0;
        if (rc != 0) {
            unsend_updates(g0, &p);
            return -1;
        }
    }
    if (cudaSetDevice(g0->gpu) != cudaSuccess) {
        unsend_updates(g0, &p);
        return err_set("cuda: cannot select GPU %d", g0->gpu);
    }
    const auto shape = std::make_tuple(p.n, p.nl, p.one_seq, p.distinct, p.eligible, p.splits);
    t->warm = t->shapes.insert(shape).second;
    t->warm_failed = false;
    pthread_barrier_wait(&t->go);
    t->rc[0] = tp_rank_step(t, 0);
    if (t->rc[0] != 0) t->msg[0] = err_msg();
    pthread_barrier_wait(&t->done);
    /* the rank that failed first (tp_fail), else the first that failed itself, else the
     * first that failed (a peer's NCCL error after the failed rank's abort had been
     * reported as that peer's own) */
    int failed = t->first_fail.load();
    if (failed >= 0 && t->rc[(size_t)failed] == 0) failed = -1;
    for (int r = 0; r < t->tp && failed < 0; r++)
        if (t->rc[(size_t)r] != 0 && t->msg[(size_t)r] != kPeerFailed) failed = r;
    for (int r = 0; r < t->tp && failed < 0; r++)
        if (t->rc[(size_t)r] != 0) failed = r;
    if (failed >= 0) {
        if (t->warm) t->shapes.erase(shape); /* warm up again next time */
        unsend_updates(g0, &p);               /* (every rank's tables take rank 0's updates) */
        return err_set("tp rank %d: %s", failed, t->msg[(size_t)failed].c_str());
    }
    update_lens(kv, seq, pos, n);
    return 0;
}

void tp_destroy(TpGpu *t) {
    if (!t) return;
    if (t->barriers) {
        t->quit = true;
        pthread_barrier_wait(&t->go);
        for (pthread_t &h : t->th) pthread_join(h, nullptr);
        pthread_barrier_destroy(&t->go);
        pthread_barrier_destroy(&t->done);
        pthread_barrier_destroy(&t->launched);
        pthread_barrier_destroy(&t->warmed);
    }
    /* A captured collective keeps its communicator referenced until the graph
     * is destroyed, and NCCL's last ncclCommDestroy polls until no graph holds
     * such a reference: with rank 1's decode graph still alive (it went only
     * in ce_destroy, after the destroy) that wait cannot end — read from
     * NCCL's source, the likely reason the tp 2 decode tests never finished
     * while tp 2 perplexity (no graphs) did.  Drop every graph first. */
    for (CE *g : t->ce)
        if (g) {
            cudaSetDevice(g->gpu);
            if (g->st) cudaStreamSynchronize(g->st);
            drop_graph(g);
        }
    for (CE *g : t->ce) {
#ifdef TL_HAVE_NCCL
        if (g && g->comm) { /* (after a failed step a peer's communicator is gone: abort, not destroy) */
            if (t->launch_failed.load()) ncclCommAbort(g->comm);
            else ncclCommDestroy(g->comm);
        }
#endif
        ce_destroy(g);
    }
    for (auto &v : t->sh)
        for (TpLinear &l : v) tp_linear_free(&l);
    for (Model &rm : t->rm) delete[] rm.layers;
    if (t->pdl_saved >= 0) tern_cuda_pdl(t->pdl_saved);
    delete t;
}

void ce_tp_engine_free(Engine *e) {
    tp_destroy(static_cast<TpGpu *>(e->rs.hook_ctx));
    kv_free(&e->kv);
    memset(e, 0, sizeof *e);
}

/* Rank r's model: the full model's norms and embedding, its shards of every
 * decoder linear (column-parallel q, k, v, gate, up; row-parallel o, down). */
int tp_rank_model(TpGpu *t, const Model *m, int r, Model *rm, std::vector<TpLinear> &sh) {
    const int tp = t->tp;
    const ModelConfig &c = m->cfg;
    *rm = *m;
    rm->cfg.n_heads = c.n_heads / tp;
    rm->cfg.n_kv_heads = c.n_kv_heads / tp;
    rm->cfg.inter = c.inter / tp;
    rm->layers = new Layer[(size_t)c.n_layers];
    sh.assign((size_t)c.n_layers * 7, TpLinear());
    const int64_t qd = (int64_t)c.n_heads * c.head_dim, kvd = (int64_t)c.n_kv_heads * c.head_dim;
    for (int l = 0; l < c.n_layers; l++) {
        const Layer *S = &m->layers[l];
        Layer *D = &rm->layers[l];
        *D = *S;
        const Linear *src[7] = {&S->q, &S->k, &S->v, &S->gate, &S->up, &S->o, &S->down};
        Linear *dst[7] = {&D->q, &D->k, &D->v, &D->gate, &D->up, &D->o, &D->down};
        const int64_t total[7] = {qd, kvd, kvd, c.inter, c.inter, qd, c.inter};
        for (int i = 0; i < 7; i++) {
            int64_t lo, hi;
            tp_range(total[i], tp, r, &lo, &hi);
            TpLinear &tl = sh[(size_t)l * 7 + (size_t)i];
            if (tp_shard_linear(src[i], i < 5 ? TP_SPLIT_ROWS : TP_SPLIT_COLS, lo, hi, &tl) != 0)
                return -1;
            /* a shard boundary inside a scale group (sub-row groups only: a tensor
             * scale is replicated, dense weights have none) */
            const int64_t gc = src[i]->t && src[i]->t->n_groups > 1 ? src[i]->t->group_cols : 0;
            const bool cut = i >= 5 && gc > 0 && (lo % gc != 0 || (hi % gc != 0 && hi != total[i]));
            if (tl.n_pieces != 1 || cut)
                return err_set("--tp %d on cuda: the shard boundary of %s cuts a scale group "
                               "(group of %lld columns, %lld columns per rank); use --device cpu "
                               "(which keeps such groups exact) or a group that divides the shard",
                               tp, src[i]->name,
                               (long long)(src[i]->t ? src[i]->t->group_cols : 0),
                               (long long)(hi - lo));
            *dst[i] = tl.pieces[0].lin;
            dst[i]->act_int8 = src[i]->act_int8;
        }
    }
    return 0;
}

/* After upload: row-parallel int8 linears get unit scales on the device (the
 * true ones kept aside for fwdc_scale_rows). */
int unit_scales(CE *g, DLin *d, float **keep, int64_t *stride) {
    if (d->kind != LIN_TERN || !d->act_int8) return 0;
    if (d->tm.n_groups != 1)
        return err_set("--tp on cuda: int8 activations with %lld scale groups per row are not "
                       "supported (one scale per row or tensor; use --device cpu)",
                       (long long)d->tm.n_groups);
    /* the ranks' integer sums go through an f32 all-reduce, exact (bit for bit one GPU's)
     * while |sum| <= 127 x the full row's inputs stays under 2^24 */
    const int64_t full_in = d->tm.cols * g->tp;
    if (127 * full_in >= ((int64_t)1 << 24))
        return err_set("--tp on cuda: int8 activations over rows of %lld inputs: their integer sums could pass "
                       "2^24, past which the f32 all-reduce is not exact (at most %lld inputs; use --device cpu)",
                       (long long)full_in, (long long)((((int64_t)1 << 24) - 1) / 127));
    if (dalloc(g, keep, (size_t)d->tm.n_scales, "tp scales") != 0) return -1;
    /* (on g->st, ordered before the fill: a cudaMemcpy on the legacy stream was not,
     * and the kept scales could have been the fill's ones) */
    CUDA_CHECK(cudaMemcpyAsync(*keep, d->tm.d_scales, sizeof(float) * (size_t)d->tm.n_scales,
                               cudaMemcpyDeviceToDevice, g->st));
    if (fwdc_fill(d->tm.d_scales, d->tm.n_scales, 3, 1.0f, 0, g->st) != 0) return -1;
    *stride = d->tm.scale_stride;
    CUDA_CHECK(cudaStreamSynchronize(g->st));
    return 0;
}

int tp_open(Engine *e, Model *m, const EngineOpts *o, int tp, const CudaSynthetic *syn) {
#ifndef TL_HAVE_NCCL
    return err_set("--tp %d with --device cuda: this build has no NCCL", tp);
#else
    if (cuda_engine_precheck(tp) != 0) return -1;
    if (tp_plan_check(&m->cfg, tp, m->path ? m->path : "(unnamed)") != 0) return -1;
    if (!syn && (!m->layers || !m->embed))
        return err_set("--device cuda: the model has no weights loaded");
    if (open_front(e, m, o) != 0) return -1;
    TpGpu *t = new TpGpu();
    t->tp = tp;
    t->ce.assign((size_t)tp, nullptr);
    t->rm.assign((size_t)tp, Model());
    t->sh.resize((size_t)tp);
    t->rc.assign((size_t)tp, 0);
    t->msg.assign((size_t)tp, std::string());
    int rc = 0;
    const int64_t qd = (int64_t)m->cfg.n_heads * m->cfg.head_dim;
    for (int r = 0; r < tp && rc == 0; r++) {
        memset(&t->rm[(size_t)r], 0, sizeof(Model));
        if (syn) { /* synthetic: the rank's shapes only; weights generated on its GPU */
            t->rm[(size_t)r].cfg = m->cfg;
            t->rm[(size_t)r].cfg.n_heads /= tp;
            t->rm[(size_t)r].cfg.n_kv_heads /= tp;
            t->rm[(size_t)r].cfg.inter /= tp;
        } else {
            rc = tp_rank_model(t, m, r, &t->rm[(size_t)r], t->sh[(size_t)r]);
        }
        if (rc != 0) break;
        EngineOpts ro = *o;
        ro.gpu = r;
        CE *g = new CE();
        t->ce[(size_t)r] = g;
        g->gpu = r;
        g->bf16 = o->bf16;
        g->graphs = !o->no_graphs && env_on("TERNLAB_CUDA_GRAPHS");
        rank_switches(g);
        if (r == 0 && (rc = engine_tbm_reserve()) != 0) break;
        g->c = t->rm[(size_t)r].cfg;
        g->L.resize((size_t)m->cfg.n_layers);
        g->tp = tp;
        g->rank = r;
        g->tp_first_fail = &t->first_fail;
        g->qd_full = qd;
        g->inter_full = m->cfg.inter;
        g->att_lo = r * (qd / tp);
        g->inter_lo = r * (m->cfg.inter / tp);
        rc = ce_common(g, e, &ro);
        if (rc == 0 && syn) {
            CudaSynthetic rs = *syn;
            rs.seed = syn->seed * 131 + (uint64_t)r; /* each rank its own slice */
            g->synthetic = 1;
            rc = synth_model(g, &rs);
        } else if (rc == 0) {
            rc = upload_model(g, &t->rm[(size_t)r]);
        }
        for (int l = 0; l < m->cfg.n_layers && rc == 0; l++) {
            DLayer &D = g->L[(size_t)l];
            rc = unit_scales(g, &D.o, &D.o_scale, &D.o_sstride);
            if (rc == 0) rc = unit_scales(g, &D.down, &D.down_scale, &D.down_sstride);
        }
        const int64_t T = g->max_tok, wmax = std::max(qd, (int64_t)m->cfg.inter);
        bool sub = false; /* only sub-norms gather the full vectors (row_parallel) */
        for (int l = 0; l < m->cfg.n_layers && rc == 0; l++)
            sub = sub || g->L[(size_t)l].attn_sub || g->L[(size_t)l].ffn_sub;
        if (rc == 0 && sub)
            rc = dalloc(g, &g->gath, (size_t)(T * wmax), "tp gather") ||
                 dalloc(g, &g->full, (size_t)(T * wmax), "tp gather") ||
                 dalloc(g, &g->xq_full, (size_t)(T * wmax), "tp gather");
        if (rc == 0)
            rc = dalloc(g, &g->ones, (size_t)T, "tp ones") ||
                 dalloc(g, &g->amax, (size_t)T, "tp row maxima") ||
                 fwdc_fill(g->ones, T, 3, 1.0f, 0, g->st);
        if (rc == 0) {
            const cudaError_t se = cudaStreamSynchronize(g->st);
            if (se != cudaSuccess) rc = err_set("cuda: setting up rank %d: %s", r, cudaGetErrorString(se));
        }
        if (rc == 0) step_bytes(g);
    }
    if (rc == 0) { /* NCCL: one communicator per GPU, NVLink multicast off */
        setenv("NCCL_NVLS_ENABLE", "0", 1);
        /* programmatic dependent launch of the int8 GEMVs has not been run
         * next to NCCL collectives on a multi-GPU machine: off while a tp > 1
         * engine is open (restored by tp_destroy) */
        t->pdl_saved = tern_cuda_pdl(0);
        ncclUniqueId id;
        cudaError_t de = cudaSuccess;
        for (int r = 0; r < tp && de == cudaSuccess; r++) /* (every GPU selectable before the group) */
            de = cudaSetDevice(t->ce[(size_t)r]->gpu);
        ncclResult_t nr = de == cudaSuccess ? ncclGetUniqueId(&id) : ncclSuccess;
        if (de == cudaSuccess && nr == ncclSuccess && (nr = ncclGroupStart()) == ncclSuccess) {
            for (int r = 0; r < tp && nr == ncclSuccess; r++) {
                cudaSetDevice(t->ce[(size_t)r]->gpu); /* (checked above) */
                nr = ncclCommInitRank(&t->ce[(size_t)r]->comm, tp, id, r);
            }
            const ncclResult_t ne = ncclGroupEnd(); /* (always, once the group is open) */
            if (nr == ncclSuccess) nr = ne;
        }
        if (nr != ncclSuccess || de != cudaSuccess) {
            for (CE *g : t->ce) /* (half-made communicators: aborted, not destroyed) */
                if (g->comm) ncclCommAbort(g->comm), g->comm = nullptr;
            rc = de != cudaSuccess ? err_set("NCCL initialisation: cannot select a GPU: %s", cudaGetErrorString(de))
                                   : err_set("NCCL initialisation failed: %s", ncclGetErrorString(nr));
        }
    }
    if (rc == 0) {
        pthread_barrier_init(&t->go, nullptr, (unsigned)tp);
        pthread_barrier_init(&t->done, nullptr, (unsigned)tp);
        pthread_barrier_init(&t->launched, nullptr, (unsigned)tp);
        pthread_barrier_init(&t->warmed, nullptr, (unsigned)tp);
        for (int r = 1; r < tp; r++) {
            pthread_t h;
            auto *arg = new std::pair<TpGpu *, int>(t, r);
            if (pthread_create(&h, nullptr, tp_worker, arg) != 0) {
                delete arg;
                rc = err_set("tp: could not start the thread of rank %d", r);
                break;
            }
            t->th.push_back(h);
        }
        { /* open the gate: run, or (a start failed) let the started ones leave */
            std::lock_guard<std::mutex> lk(t->gate_mu);
            t->gate = rc == 0 ? 1 : -1;
        }
        t->gate_cv.notify_all();
        if (rc == 0) {
            t->barriers = true;
        } else {
            for (pthread_t &h : t->th) pthread_join(h, nullptr);
            t->th.clear();
            pthread_barrier_destroy(&t->go);
            pthread_barrier_destroy(&t->done);
            pthread_barrier_destroy(&t->launched);
            pthread_barrier_destroy(&t->warmed);
        }
    }
    if (rc != 0) return open_fail(e, t, tp_destroy);
    cudaSetDevice(0);
    e->rs.max_tok = t->ce[0]->max_tok;
    e->rs.hook = ce_tp_forward;
    e->rs.hook_ctx = t;
    e->backend_free = ce_tp_engine_free;
    e->rs.argmax_capable = 1;
    return 0;
#endif
}

} // namespace

/* An open's body: host memory that runs out in it (a std::vector the size of a matrix, e.g. a
 * 256000 x 4608 head's bf16 form) is an error, not std::terminate across the C callers' frames.
 * (What the open had taken stays taken: the program ends on the error.) */
template <typename F> int host_guard(F &&f) {
    try {
        return f();
    } catch (const std::bad_alloc &) {
        return err_set("--device cuda: host memory ran out while opening the engine");
    }
}

extern "C" {

int cuda_backend_available(char *why, size_t n) {
    int cnt = 0;
    cudaError_t e = cudaGetDeviceCount(&cnt);
    if (e != cudaSuccess || cnt < 1) {
        if (why)
            snprintf(why, n, "no CUDA device (%s%s)", e != cudaSuccess ? cudaGetErrorString(e) : "0 devices",
                     e == cudaErrorInsufficientDriver ? ": no NVIDIA driver here, or one older than this build's CUDA "
                                                        "runtime"
                                                      : "");
        return 0;
    }
    return 1;
}

int cuda_engine_open(Engine *e, Model *m, const EngineOpts *o) {
    return host_guard([&] {
        if (cuda_engine_precheck(1) != 0) return -1;
        if (!m->layers || !m->embed) return err_set("--device cuda: the model has no weights loaded");
        CE *g = nullptr;
        if (open_begin(e, m, o, &g) != 0) return -1;
        if (ce_common(g, e, o) != 0 || upload_model(g, m) != 0) return open_fail(e, g, ce_destroy);
        return engine_finish(e, g);
    });
}

int cuda_engine_open_synthetic(Engine *e, Model *m, const EngineOpts *o, const CudaSynthetic *syn) {
    return host_guard([&] {
        if (cuda_engine_precheck(1) != 0) return -1;
        if (!o->bf16) return err_set("synthetic CUDA models run with bf16 activations (EngineOpts.bf16)");
        if (syn->tp > 1) return tp_open(e, m, o, syn->tp, syn);
        CE *g = nullptr;
        if (open_begin(e, m, o, &g) != 0) return -1;
        g->synthetic = 1;
        if (ce_common(g, e, o) != 0 || synth_model(g, syn) != 0) return open_fail(e, g, ce_destroy);
        return engine_finish(e, g);
    });
}

int cuda_engine_is(const Engine *e) { return e->rs.hook == ce_forward || e->rs.hook == ce_tp_forward; }

int cuda_engine_precheck(int tp) {
    char why[256];
    if (env_switches_check() != 0) return -1; /* (before the device: a setting's error first) */
    if (!cuda_backend_available(why, sizeof why)) return err_set("--device cuda: %s", why);
    const int ngpu = cuda_device_count();
    if (tp > 1 && ngpu < tp)
        return err_set("--tp %d with --device cuda needs %d GPUs; %d visible (one rank per GPU; "
                       "use --tp %d or fewer, or --device cpu)",
                       tp, tp, ngpu, ngpu > 0 ? ngpu : 1);
    return 0;
}

int cuda_engine_open_tp(Engine *e, Model *m, const EngineOpts *o, int tp) {
    if (tp == 1) return cuda_engine_open(e, m, o); /* (each open makes cuda_engine_precheck's checks) */
    if (cuda_engine_precheck(tp) != 0) return -1;  /* (before a build without NCCL says so, as before) */
    return host_guard([&] { return tp_open(e, m, o, tp, nullptr); });
}

void cuda_prepare_multi_gpu(void) { setenv("CUDA_MODULE_LOADING", "EAGER", 0); }

int cuda_device_count(void) {
    int n = 0;
    return cudaGetDeviceCount(&n) == cudaSuccess ? n : 0;
}

int cuda_engine_info(const Engine *e, CudaEngineInfo *info) {
    memset(info, 0, sizeof *info);
    if (!cuda_engine_is(e)) return err_set("not a CUDA engine");
    const TpGpu *t = e->rs.hook == ce_tp_forward ? static_cast<const TpGpu *>(e->rs.hook_ctx) : nullptr;
    /* one GPU, or rank 0 of tp: the step, the KV pool, the graphs and the counters */
    const CE *g = t ? t->ce[0] : static_cast<const CE *>(e->rs.hook_ctx);
    info->tp = t ? t->tp : 1;
    for (int r = 0; r < info->tp && r < 16; r++) {
        const CE *gr = t ? t->ce[(size_t)r] : g;
        info->rank_layer_bytes[r] = decoder_linear_bytes(gr);
        info->rank_fused_att[r] = gr->n_fused[0];
        info->rank_tail_fused[r] = gr->n_tail_fused;
        info->weight_bytes += gr->weight_bytes;
    }
    info->step_bytes = g->step_bytes;
    info->kv_bytes = g->kv_bytes;
    for (const FwdcKvTern &tp : g->tpages) info->kv_ternary_pages += tp.kc != nullptr;
    info->graphs = g->n_graphs;
    info->graph_launches = g->launches;
    info->argmax_in_graph = g->n_argmax_graph;
    info->fused_att = g->n_fused[0], info->fused_o = g->n_fused[1], info->fused_mlp = g->n_fused[2];
    info->mt_mlp = g->n_mt;
    info->mt_fuse = g->mt_fuse;
    info->deferred = g->n_deferred, info->omax_given = g->n_omax, info->norm_folded = g->n_norm_folded;
    info->lm_gemv = g->n_lm_gemv, info->tail_fused = g->n_tail_fused, info->ids_mapped = chain_mapped(g);
    info->chained = g->n_chained;
    info->kv_ternary = g->n_kv_tern;
    info->attn_split = g->n_split;
    if (t) snprintf(info->device_name, sizeof info->device_name, "%d x %.100s", t->tp, g->name);
    else snprintf(info->device_name, sizeof info->device_name, "%s", g->name);
    return 0;
}

int cuda_engine_chain_ok(const Engine *e) {
    return e->rs.hook == ce_forward && static_cast<const CE *>(e->rs.hook_ctx)->graphs &&
           env_on("TERNLAB_CUDA_CHAIN");
}

int cuda_engine_decode_chain(Engine *e, const int *seq, const int64_t *pos0, const int32_t *tok0, int B,
                             int64_t steps, int32_t *ids, double *t_done) {
    if (e->rs.hook != ce_forward) return err_set("decode chain: one GPU's engine only (cuda_engine_open)");
    CE *g = static_cast<CE *>(e->rs.hook_ctx);
    if (B < 1 || B > g->max_tok)
        return err_set("decode chain: batch %d outside 1 .. %lld", B, (long long)g->max_tok);
    if (steps < 1) return 0;
    /* (positions in the KV cache's reach before anything is sized by them) */
    const int64_t cap = (int64_t)e->kv.n_blocks * e->kv.block_size;
    for (int b = 0; b < B; b++)
        if (pos0[b] < 0 || steps > cap || pos0[b] > cap - steps)
            return err_set("decode chain: sequence %d from position %lld for %lld steps: outside the KV "
                           "cache's %lld positions",
                           b, (long long)pos0[b], (long long)steps, (long long)cap);
    CUDA_CHECK(cudaSetDevice(g->gpu));
    int32_t *const h_in = g->h_in;
    int32_t *const argmax_out = e->rs.argmax_out;
    const int decode = e->rs.decode;
    e->rs.argmax_out = ids; /* (host_prepare: logit rows wanted) */
    e->rs.decode = 1;
    int rc = chain_run(e, g, seq, pos0, tok0, B, steps, ids, t_done);
    if (rc != 0) cudaStreamSynchronize(g->st); /* nothing left in flight on an error */
    g->h_in = h_in;
    g->ids_slot = 0;
    e->rs.argmax_out = argmax_out;
    e->rs.decode = decode;
    return rc;
}

int cuda_engine_sync(const Engine *e) {
    if (!cuda_engine_is(e) || e->rs.hook == ce_tp_forward) return 0;
    CUDA_CHECK(cudaStreamSynchronize(static_cast<const CE *>(e->rs.hook_ctx)->st));
    return 0;
}

int cuda_copy_bandwidth(int gpu, size_t bytes, int reps, double *bytes_per_s) {
    CUDA_CHECK(cudaSetDevice(gpu));
    double mem = 0, ker = 0;
    if (tern_cuda_copy_bandwidth(bytes, reps, &mem, &ker) < 0) return -1;
    *bytes_per_s = mem > ker ? mem : ker;
    return 0;
}

} /* extern "C" */
