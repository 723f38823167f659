/* persist_layer_bench.cu — a one-token decode step of a Llama-2-7B-shaped
 * ternary model (int8 activations) as ONE persistent kernel (a development
 * probe, not part of the build): whether a step whose weight stream never
 * stops at a kernel boundary beats the engine's kernel-per-op step (7B
 * tern-i8, batch 1: ~31 µs a layer).  Results: kernels/cuda/dev/NOTES.md
 * (forty-seventh to fifty-first sessions).
 *
 * One CTA per SM (cooperative launch), 16 consumer warps and one loader warp.
 * The loader streams every unit (16 rows of a 4096-column matrix, 8 rows of
 * the 11008-column down projection; 2-bit codes, 4 a byte) of every layer in
 * the step's order through a ring of shared-memory stages with 1-D bulk
 * copies; it waits for free stages (and, below, for its oldest copies and
 * through the round trips), never for the step's data, so the codes of the
 * next phases arrive while the current one computes.  The consumers run
 * five phases a layer (four with PLB_OFUSE, below), a grid barrier (a
 * counter in global memory) after each:
 *   qkv   x w -> RMSNorm -> int8 -> q | k | v (12288 rows)
 *   attn  the last 32 CTAs, a head each, over the prompt's keys (f32 pages;
 *         in the warp-rows form the first 32 keys' rows copied into shared
 *         memory during qkv, the rest fetched into L2) + the new one (its
 *         rows kept in shared memory too); the new K / V row written to the
 *         cache.  No RoPE (elementwise).
 *   o     att -> int8 -> x += o (4096 rows)
 *         PLB_OFUSE (the warp-rows form's default): no o phase; the
 *         attention on the last 128 CTAs, four a head (PLB_NQ), each then
 *         codes the head's output — with the token's max|att| over all
 *         heads (PLB_OEXACT, the default: each head's max in a word of its
 *         own, polled until all 32 are there), or with the head's own max
 *         (-DPLB_OEXACT=0: not act=int8's per-token scale) — and adds its
 *         o rows' partial sums over the head's 128 columns (1024 rows; o's
 *         codes stored by head) to x with float4 atomics; gu's norm stats
 *         come from x itself in every CTA.  Four phases a layer.
 *   gu    x w -> RMSNorm -> int8 -> h = silu(gate) * up (gate / up rows
 *         interleaved in blocks of 8, so one unit holds the pairs)
 *   down  h -> int8 -> x += down (4096 rows of 11008)
 * A phase's input is coded once a CTA into shared memory: its producers
 * (the o / down epilogues, the attention, the GLU) leave a slot each with
 * their rows' sum of x^2 and max |x w| (max |v| without a norm), and write
 * x w for the next norm, so the consumer's only round trip is the vector
 * and the slots.  The dot products: a code word holds 16 columns (byte b,
 * field f: column 16 j + 4 f + b; weight = code - 1), so (word >> 2f) &
 * 0x03030303 against x's four int8 of field f through dp4a, minus the sum of
 * x; in the default form a warp takes 32 words (x in registers) of 8 rows
 * (down: 96 words of 4), the 8 column groups' sums meet in shared memory (a
 * CTA barrier a unit), and a warp in turn does the unit's epilogue (row
 * scales, residual rows, next norm weights loaded with the phase's input).
 * Not in it (the engine's step has them): embedding, RoPE, the final norm,
 * the LM head, sampling, the KV split at long context, batch > 1.
 *
 * Modes (--mode): full; nomath (the units waited for and released, no dot
 * products); noweights (no units: barriers, the inputs' coding, the
 * attention); barriers (the grid barriers, five or four a layer, and nothing else);
 * stream (the units waited for and released, nothing else: the loader's pace);
 * release (a warp-rows build with -DPLB_RELEASE=1: the phases as in nomath, but
 * a unit released with no row sums or epilogue, so its outputs are stale).
 * --check L: L layers against a CPU twin of the same arithmetic (relative L2
 * of the final residual, q|k|v, the attention and the GLU of the last layer).
 * --trace 1 (a build with -DPLB_TRACE=1): one more launch with thread 0's
 * clock at each phase's points; with -DPLB_LTRACE=1 too (warp-rows form), each
 * unit's timeline (the loader's wait for its stage and the hold, the copy
 * issued, the group's wait, the codes there) for three CTAs and two layers, and each warp's
 * end of units.
 *
 * The loader keeps at most PLB_INFLIGHT copies in flight (3; 0: as many as
 * free stages) and, with PLB_HOLD (1), issues none from a phase's last unit
 * to the next phase's input: the copies in flight otherwise slow the stores,
 * the grid barrier and the input's loads of those round trips (forty-ninth
 * session: 0.5-3.7 µs from the warps' last unit to the phase's end in release
 * mode).
 *
 * -DPLB_WARP_ROWS=1: the units' rows a warp each, no CTA barrier a unit
 * (run_rows; -DPLB_GROUPS=G warp groups, 2 by default; -DPLB_KV_SMEM=0 the
 * attention's keys from L2 only; 2 and 4 groups are the usable counts, 4
 * with -DPLB_OFUSE=0 only, 8 spills).  Measured (H200, 32 keys, fifty-first
 * session): the default (o by head, coded per token) 28.8-29.1 µs a layer;
 * -DPLB_OEXACT=0 (a scale a head) 27.8-28.1; -DPLB_OFUSE=0 (five phases, o
 * coded per token) 29.3-29.7.
 *
 * Build: nvcc -O3 -arch=sm_90a -std=c++17 -Ikernels/cuda -Xcompiler -fopenmp
 *   [-DPLB_WARP_ROWS=1 [-DPLB_OFUSE=0 | -DPLB_OEXACT=0 | -DPLB_NQ=2]] [-DPLB_TRACE=1 [-DPLB_LTRACE=1]]
 *   kernels/cuda/dev/persist_layer_bench.cu
 *   -o build/persist_layer_bench */
#include <cuda_runtime.h>

#include <algorithm>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <vector>

#include "dev_util.cuh"
#include "tern_mbar.cuh"

#ifndef PLB_WARP_ROWS
#define PLB_WARP_ROWS 0
#endif
#ifndef PLB_KV_SMEM
#define PLB_KV_SMEM 1
#endif
#ifndef PLB_GROUPS /* warp-rows form: warp groups taking units in turn */
#define PLB_GROUPS 2
#endif
#ifndef PLB_RELEASE /* --mode release compiled in (a branch a unit: 2 registers more) */
#define PLB_RELEASE 0
#endif
#ifndef PLB_INFLIGHT /* the loader's copies in flight at most (0: as many as free stages) */
#define PLB_INFLIGHT 3
#endif
#ifndef PLB_HOLD /* the loader issues no copy from a phase's units' end to the next input's arrival */
#define PLB_HOLD 1
#endif
#ifndef PLB_OFUSE /* o split by head into the attention's phase: four phases a layer (the warp-rows form's default) */
#define PLB_OFUSE PLB_WARP_ROWS
#endif
#ifndef PLB_OEXACT /* PLB_OFUSE with o's input coded per token (one scale: the QuantSpec's act=int8) — the
                    * warp-rows form's default; 0: a scale a head (faster, but not that definition).  Each
                    * head's max|att| is stored into a word of its own (the layer's NH words set to a
                    * sentinel during q|k|v), and a warp of every head CTA reads the words until none is
                    * the sentinel: the maxima arrive with the poll, no grid barrier */
#define PLB_OEXACT PLB_OFUSE
#endif
#ifndef PLB_NQ /* PLB_OFUSE: CTAs a head (1, 2 or 4) */
#define PLB_NQ 4
#endif
#ifndef PLB_TRACE /* --trace's clocks compiled in (they cost registers: time without them) */
#define PLB_TRACE 0
#endif
#ifndef PLB_LTRACE /* with PLB_TRACE: --trace also records each unit's copy and wait (warp-rows form) */
#define PLB_LTRACE 0
#endif
static_assert(!PLB_LTRACE || (PLB_TRACE && PLB_WARP_ROWS), "the unit timeline: a traced warp-rows build");
static_assert(!PLB_OFUSE || (PLB_WARP_ROWS && PLB_GROUPS == 2), "o fused into the attention: the warp-rows form, two groups");
static_assert(!PLB_OEXACT || PLB_OFUSE, "PLB_OEXACT: o in the attention's phase");
constexpr unsigned NGB = PLB_OFUSE ? 4u : 5u; /* grid barriers a layer */
constexpr unsigned OSENT = 0xffffffffu; /* PLB_OEXACT: a head's word not yet written (a NaN's bits) */

namespace {

constexpr int H = 4096, NH = 32, HD = 128, I = 11008;
static_assert(!PLB_OEXACT || NH == 32, "PLB_OEXACT: the heads' maxima polled a lane a head");
constexpr int QKV = H + 2 * NH * HD; /* 12288 (32 KV heads) */
constexpr int KW_I = I / 16; /* code words (16 weights) of a down row */
constexpr int NCW = 16;                     /* consumer warps */
constexpr int NCT = NCW * 32;
constexpr int NTHR = NCT + 32;
/* ring stages; in the warp-rows form a multiple of its groups, so that a stage always
 * serves the same group (else a group's next wait on a stage could skip another
 * group's phase of it, and pass on a copy not yet complete) */
constexpr int NST = PLB_WARP_ROWS ? 8 : 9;
constexpr int NG = PLB_GROUPS, WPG = NCW / NG; /* warp-rows form: groups, warps a group */
static_assert(!PLB_WARP_ROWS || NST % NG == 0, "a stage serves one group");
static_assert(PLB_INFLIGHT >= 0 && PLB_INFLIGHT <= NST, "the oldest copy waited for before its stage's parity flips twice");
static_assert(!PLB_WARP_ROWS || (NG >= 2 && NCW % NG == 0 && 8 % (NCW / NG) == 0),
              "warp groups: a whole number of rows a warp in 16- and 8-row units, gate / up pairs in one warp");
constexpr int STAGE = 8 * KW_I * 4;             /* 22016 bytes: 8 down rows */
constexpr int UNIT_H = 16, UNIT_I = 8;          /* rows a unit */
constexpr int MAXKEYS = 256;
/* PLB_KV_SMEM: the prompt's first KRES keys' K / V rows of the CTA's head copied into
 * shared memory during q|k|v (32 KB), the rest from L2 */
constexpr int KRES = PLB_KV_SMEM && PLB_WARP_ROWS ? 32 : 0; /* the other form's 9 stages leave no room */
/* dynamic shared memory: the ring, the coded input, the ring's mbarriers, the attention's keys */
constexpr int OFF_XQ = NST * STAGE, OFF_MB = OFF_XQ + I, OFF_KVS = OFF_MB + 2 * NST * 8;
constexpr int SMEM_DYN = OFF_KVS + 2 * KRES * HD * 4;
static_assert(OFF_MB % 8 == 0 && OFF_KVS % 16 == 0, "mbarriers 8-byte, the keys' cp.async 16-byte aligned");
constexpr int MAXU = 12; /* units of a phase a CTA takes, at most (gate|up: 1376 over >= 115 CTAs) */
constexpr float EPS = 1e-5f;

/* matrices of a layer, in the order of the step */
enum { M_QKV, M_O, M_GU, M_DOWN, NMAT };
/* PLB_OFUSE: o's codes by head, [head][row][HD / 4 bytes] (a code row is a head's 128
 * columns of a row), in units of OU rows.  The heads on the last NQ NH CTAs: head CTA hc
 * (c - (G - NQ NH)) takes UPC units from UPC hc (head hc / NQ, rows RQ (hc % NQ) ..), the
 * head's attention computed by all NQ of them */
constexpr int NQ = PLB_NQ, OU = 512, RQ = H / NQ, UPC = RQ / OU;
static_assert(NQ == 1 || NQ == 2 || NQ == 4, "NQ: 1, 2 or 4");
static_assert(RQ * 4 <= (KRES ? 2 * KRES * HD * 4 : I), "o's partial sums in the keys' (or the coded input's) space");
/* code rows, their bytes, rows a unit; row scales a matrix */
__host__ __device__ constexpr int64_t mat_rows(int m) {
    return m == M_QKV ? QKV : m == M_GU ? 2 * I : PLB_OFUSE && m == M_O ? (int64_t)NH * H : H;
}
__host__ __device__ constexpr int64_t mat_rowb(int m) { return m == M_DOWN ? I / 4 : PLB_OFUSE && m == M_O ? HD / 4 : H / 4; }
__host__ __device__ constexpr int mat_unit(int m) { return m == M_DOWN ? UNIT_I : PLB_OFUSE && m == M_O ? OU : UNIT_H; }
__host__ __device__ constexpr int64_t mat_srows(int m) { return m == M_QKV ? QKV : m == M_GU ? 2 * I : H; }

struct Dims {
    int64_t off[NMAT + 1]; /* byte offsets of the matrices in a layer's codes; off[NMAT] = layer bytes */
    int64_t soff[NMAT + 1];
};

__host__ __device__ inline uint64_t mix(uint64_t z) {
    z += 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}
/* uniform in [-1, 1) */
__host__ __device__ inline float unif(uint64_t seed, uint64_t i) {
    return (float)((mix(seed * 0x100000001b3ull + i) >> 40) * (1.0 / 8388608.0)) - 1.0f;
}
__host__ __device__ inline uint8_t code_byte(uint64_t i) {
    const uint64_t h = mix(0xc0de0000ull + i);
    uint8_t b = 0;
    for (int q = 0; q < 4; q++) b |= (uint8_t)(((h >> (8 * q)) % 3) << (2 * q));
    return b;
}
__host__ __device__ inline int code_val(int c) { return c - 1; } /* codes 0, 1, 2 */

__global__ void fill_codes(uint8_t *c, int64_t n) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        c[i] = code_byte(i);
}

struct Args {
    const uint8_t *codes; /* layer-major: qkv | o | gu | down */
    const float *ws;      /* row scales, same order */
    const float *nw;      /* norm weights: [layer][2][H] (attention, MLP) */
    float *x;             /* residual [H] */
    float *xw;            /* x times the next norm's weight [H] */
    float *qkv, *att, *hb;
    float *kc, *vc;  /* [layer][MAXKEYS][NH][HD] */
    float *slot;     /* [2 buffers][2: sum x^2, max|x w| or max|v|][NSLOT] */
    unsigned *ctr;
    unsigned *omax; /* PLB_OEXACT: [head] max|att| of the layer as float bits */
    unsigned base; /* the counter's value at this launch's start */
    int *err;
    Dims d;
    int layers, keys; /* keys before the new token */
    int mode;         /* 0 full, 1 nomath, 2 noweights, 3 barriers, 4 stream, 5 release */
    long long *trace; /* --trace: thread 0's clock at the points below and its cycles
                       * waiting for units, [CTA][phase][NTP] */
    long long *wtr;   /* PLB_LTRACE: [CTA][phase][NCW] each consumer warp's clock as its units end */
    long long *ltr;   /* PLB_LTRACE: [CTA][unit of the step][LTP]: the loader's wait for the
                       * stage (and the hold) began, the copy issued, the group's wait began,
                       * the codes there; ltu units a CTA and layer at most */
    int ltu;
};
/* trace points: 0 the phase's start (the barrier before it left), 1 its units'
 * start (input coded, x in registers), 2 its units done, 3 the barrier after it
 * left, 4 (cycles waiting for units), 5 the input and its stats arrived (cta_code's
 * first barrier left), 6 the codes stored (cta_code's end), 8 .. 12 (warp-rows form:
 * cycles in the dot products, the row sums and release, the epilogue, before the first
 * unit's wait, between a unit's end and the next one's wait); the attention:
 * 5 the new token's q / k / v arrived (and the keys' copies into shared memory),
 * 6 the scores, 7 the softmax's max and sum.  A traced build spills a little at the
 * 96-register cap: its times run above the untraced build's */
constexpr int NTP = 13;
constexpr int LTP = 4; /* timeline fields */
__device__ __forceinline__ void ltr(const Args &a, int k, int f, long long c) {
    if (PLB_LTRACE && a.ltr && k < a.ltu * a.layers) a.ltr[((int64_t)blockIdx.x * a.ltu * a.layers + k) * LTP + f] = c;
}
__device__ __forceinline__ void tr(const Args &a, unsigned ph, int pt) {
    if (PLB_TRACE && a.trace && threadIdx.x == 0) a.trace[((int64_t)blockIdx.x * 5 * a.layers + ph) * NTP + pt] = clock64();
}
constexpr int NSLOT = 1024;

__device__ __forceinline__ void cbar() { asm volatile("bar.sync 1, %0;" ::"n"(NCT) : "memory"); }
__device__ void fail(int *err, int code) {
    atomicExch(err, code);
    __trap();
}
/* mbarrier wait with a bound: a stuck ring traps instead of hanging (the launch then
 * fails, and main() exits on it before the error code could be read) */
__device__ __forceinline__ void mwait(uint32_t bar, uint32_t parity, int *err) {
    for (long it = 0;; it++) {
        uint32_t ok;
        asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
                     : "=r"(ok)
                     : "r"(bar), "r"(parity)
                     : "memory");
        if (ok) return;
        if (it > (1l << 26)) fail(err, 2);
    }
}
/* every consumer thread of every CTA meets here; k-th barrier of the launch */
__device__ void grid_barrier(const Args &a, unsigned k, volatile int *hold = nullptr) {
    cbar();
    if (threadIdx.x == 0) {
        if (PLB_HOLD && hold) *hold = 1; /* every unit of the phase consumed (PLB_HOLD) */
        red_release(a.ctr, 1);
        const unsigned target = a.base + (k + 1) * gridDim.x;
        const long long t0 = clock64();
        while ((int)(ld_acquire(a.ctr) - target) < 0)
            if (clock64() - t0 > 4000000000ll) fail(a.err, 1);
    }
    cbar();
}

__device__ __forceinline__ float warp_sum(float v) {
    for (int o = 16; o; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
__device__ __forceinline__ float warp_max(float v) {
    for (int o = 16; o; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}
__device__ __forceinline__ int warp_isum(int v) {
    for (int o = 16; o; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
/* v as an int8 code, round to nearest even, |c| <= 127 (the CPU twin: h_prep) */
__device__ __forceinline__ int code8(float v) { return max(-127, min(127, __float2int_rn(v))); }
/* a head's max over its four attention warps' maxima (pr[1][0 .. 3]) */
__device__ __forceinline__ float max4(const float *m) { return fmaxf(fmaxf(m[0], m[1]), fmaxf(m[2], m[3])); }

/* The consumers' tiling of a unit: warp w takes the code words j = 32 (w % 8)
 * + lane + 256 i (i < NWL) of the unit's rows RPW (w / 8) .. + RPW - 1.  A
 * word holds 16 columns: byte b, field f (bits 2f, 2f + 1) is column 16 j + 4 f
 * + b; the weight is code - 1 (codes 0, 1, 2).  So (word >> 2f) & 0x03030303
 * are the codes of x's float4 f of the word, as four bytes, and
 * sum (c - 1) x = dp4a(c, x) - sum x. */
constexpr int CG = 8; /* column groups */
static_assert(NCW == 2 * CG, "two row halves");

/* A phase input's stats, summed over its producers' slots (a warp; every lane gets them) */
__device__ __forceinline__ void slot_stats(const float *sl, int n, bool sum, float *ss, float *mx) {
    const int lane = threadIdx.x & 31;
    float a = 0.f, m = 0.f, va[NSLOT / 32], vm[NSLOT / 32];
#pragma unroll
    for (int k = 0; k < 5; k++) { /* n <= 160: the loads issued together */
        const int i = lane + 32 * k;
        va[k] = sum && i < n ? __ldcg(sl + i) : 0.f;
        vm[k] = i < n ? __ldcg(sl + NSLOT + i) : 0.f;
    }
#pragma unroll
    for (int k = 0; k < 5; k++) a += va[k], m = fmaxf(m, vm[k]);
    *ss = sum ? warp_sum(a) : 0.f;
    *mx = warp_max(m);
}

/* The phase's input coded once a CTA: v (global, written by other CTAs:
 * x w where a norm follows, else the attention's or the GLU's output), its
 * stats from the producers' slots (warp 0, while the others' loads are in
 * flight), then int8 codes round(v rs s) into xq (shared) for every lane.
 * With selfw (PLB_OFUSE's gate|up: x summed by atomics, no producer's slots)
 * v is x, times selfw here, and the stats are the CTA's own over all of it
 * (pr: a warp's partials). */
template <int NV4>
__device__ __forceinline__ void cta_code(const Args &a, unsigned ph, const float *v, int n, bool norm, const float *sl,
                                         int nsl, int8_t *xq, float *sh, int *xsum, volatile int *hold,
                                         const float *selfw = nullptr, float (*pr)[NCW] = nullptr) {
    const int tid = threadIdx.x;
    if (tid == 0) *xsum = 0; /* its last reader ran before the grid barrier */
    float4 r[NV4];
#pragma unroll
    for (int i = 0; i < NV4; i++) {
        const int j = tid + i * NCT;
        r[i] = j < n / 4 ? __ldcg(reinterpret_cast<const float4 *>(v) + j) : make_float4(0.f, 0.f, 0.f, 0.f);
    }
    if (selfw) {
        float4 w[NV4];
#pragma unroll
        for (int i = 0; i < NV4; i++) {
            const int j = tid + i * NCT;
            w[i] = j < n / 4 ? __ldg(reinterpret_cast<const float4 *>(selfw) + j) : make_float4(0.f, 0.f, 0.f, 0.f);
        }
        float pss = 0.f, pmx = 0.f;
#pragma unroll
        for (int i = 0; i < NV4; i++) {
            pss += r[i].x * r[i].x + r[i].y * r[i].y + r[i].z * r[i].z + r[i].w * r[i].w;
            r[i].x *= w[i].x, r[i].y *= w[i].y, r[i].z *= w[i].z, r[i].w *= w[i].w;
            pmx = fmaxf(fmaxf(pmx, fmaxf(fabsf(r[i].x), fabsf(r[i].y))), fmaxf(fabsf(r[i].z), fabsf(r[i].w)));
        }
        pss = warp_sum(pss), pmx = warp_max(pmx);
        if ((tid & 31) == 0) pr[0][tid >> 5] = pss, pr[1][tid >> 5] = pmx;
    } else if (tid < 32) {
        float tss, tmx;
        slot_stats(sl, nsl, norm, &tss, &tmx);
        const float rs = norm ? rsqrtf(tss / n + EPS) : 1.f;
        if (tid == 0) sh[0] = rs, sh[1] = 127.f / fmaxf(tmx * rs, 1e-5f);
    }
    cbar();
    if (PLB_HOLD && tid == 0) *hold = 0; /* the input is here: the loader goes on */
    tr(a, ph, 5);
    float rs = sh[0], s = sh[1];
    if (selfw) {
        const int lane = tid & 31; /* the warps' partials a lane each */
        const float tss = warp_sum(lane < NCW ? pr[0][lane] : 0.f), tmx = warp_max(lane < NCW ? pr[1][lane] : 0.f);
        rs = rsqrtf(tss / n + EPS), s = 127.f / fmaxf(tmx * rs, 1e-5f);
        if (tid == 0) sh[0] = rs, sh[1] = s; /* the units' scale (read after the last barrier below) */
    }
    int cs = 0; /* the codes' sum, for sum (c - 1) x = sum c x - sum x */
#pragma unroll
    for (int i = 0; i < NV4; i++) {
        const int j = tid + i * NCT;
        if (j < n / 4) {
            const int c0 = code8(r[i].x * rs * s), c1 = code8(r[i].y * rs * s), c2 = code8(r[i].z * rs * s),
                      c3 = code8(r[i].w * rs * s);
            reinterpret_cast<uint32_t *>(xq)[j] = (uint32_t)(c0 & 0xff) | (uint32_t)(c1 & 0xff) << 8 |
                                                  (uint32_t)(c2 & 0xff) << 16 | (uint32_t)(c3 & 0xff) << 24;
            cs += c0 + c1 + c2 + c3;
        }
    }
    cs = warp_isum(cs);
    if ((tid & 31) == 0) atomicAdd(xsum, cs);
    cbar();
    tr(a, ph, 6);
}

/* N row sums over the warp's lanes, transposed: lane ends with the sum of row
 * *idx; the lanes with (lane & (32 / N - 1)) == 0 hold distinct rows */
template <int N>
__device__ __forceinline__ int warp_rows(int (&a)[N], int lane, int *idx) {
    int id = 0, off = 16;
#pragma unroll
    for (int n = N; n > 1; n /= 2, off /= 2) {
        const bool hi = lane & off;
#pragma unroll
        for (int k = 0; k < n / 2; k++) {
            const int send = hi ? a[k] : a[k + n / 2], keep = hi ? a[k + n / 2] : a[k];
            a[k] = keep + __shfl_xor_sync(0xffffffffu, send, off);
        }
        if (hi) id += n / 2;
    }
    int v = a[0];
    for (; off; off /= 2) v += __shfl_xor_sync(0xffffffffu, v, off);
    *idx = id;
    return v;
}

struct Ring {
    uint32_t full0, empty0, base;
    int slot;
    uint32_t ph;
    __device__ void next() {
        if (++slot == NST) slot = 0, ph ^= 1u;
    }
};

__host__ __device__ __forceinline__ int n_units(int m) { return (int)(mat_rows(m) / mat_unit(m)); }

/* PLB_OFUSE: CTA c's place among the heads' of a grid of G (negative: none) */
__host__ __device__ __forceinline__ int head_cta_c(int c, int G) { return c - (G - NQ * NH); }
__device__ __forceinline__ int head_cta() { return head_cta_c(blockIdx.x, gridDim.x); }
/* CTA c's k-th unit of matrix m in a grid of G (n_units(m): none): units c, c + G, ..;
 * PLB_OFUSE's o: UPC hc + k on head CTA hc */
__host__ __device__ inline int unit_of_c(int m, int k, int c, int G) {
    const int hc = head_cta_c(c, G);
    if (PLB_OFUSE && m == M_O) return hc >= 0 && k < UPC ? UPC * hc + k : n_units(m);
    const int u = c + k * G;
    return u < n_units(m) ? u : n_units(m);
}
__device__ __forceinline__ int unit_of(int m, int k) { return unit_of_c(m, k, blockIdx.x, gridDim.x); }

/* the CTA's units in the step's order: layer l, matrix m, unit u */
struct Cursor {
    int l, m, k, u; /* layer, matrix, the CTA's unit k of it, its index */
    __device__ void first(int layers) {
        l = 0, m = 0, k = 0, u = unit_of(m, 0);
        settle(layers);
    }
    __device__ void settle(int layers) { /* past the matrix's last unit: the next matrix's first */
        while (l < layers && u >= n_units(m)) {
            if (++m == NMAT) m = 0, l++;
            k = 0, u = unit_of(m, 0);
        }
    }
    __device__ void next(int layers) {
        u = unit_of(m, ++k);
        settle(layers);
    }
    __device__ int64_t bytes() const { return mat_unit(m) * mat_rowb(m); }
    __device__ const uint8_t *src(const Args &a) const { return a.codes + l * a.d.off[NMAT] + a.d.off[m] + u * bytes(); }
};

/* A row's output y (row t of unit u): q|k|v stored, or (o, down) added to the
 * residual, with x w for the next norm (where one follows) and this thread's
 * stats raised */
__device__ __forceinline__ void row_out(const Args &a, int m, int u, int t, float y, const float (*ep)[MAXU][UNIT_H],
                                        int ui, bool wnext, float &ss, float &mx) {
    const int64_t row = (int64_t)u * mat_unit(m) + t;
    if (m == M_QKV) {
        a.qkv[row] = y;
        return;
    }
    const float xn = ep[1][ui][t] + y;
    a.x[row] = xn;
    ss += xn * xn;
    if (wnext) {
        const float xw = xn * ep[2][ui][t];
        a.xw[row] = xw;
        mx = fmaxf(mx, fabsf(xw));
    }
}
/* The GLU's output silu(gate) * up of unit u's pair t, and this thread's max raised */
__device__ __forceinline__ void glu_out(const Args &a, int u, int t, float g, float up, float &mx) {
    const float hv = __fdividef(g, 1.f + __expf(-g)) * up; /* (the IEEE division cost 0.05 µs a layer more) */
    a.hb[(int64_t)u * CG + t] = hv;
    mx = fmaxf(mx, fabsf(hv));
}

/* One phase's units of matrix m: codes from the ring, the rows' sums, the
 * epilogue by threads < unit rows.  Returns this thread's stats (sum x^2, max). */
template <int NWL, int RPW>
__device__ void run_units(const Args &a, int l, int m, Ring &rg, uint8_t *ring, int (*red2)[NCW][8], int &rb,
                          const int8_t *xq, const float (*ep)[MAXU][UNIT_H], const float *wnext, float s,
                          float &ss, float &mx, unsigned ph, long long &wait) {
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const bool trc = PLB_TRACE && a.trace && tid == 0; /* the thread whose clocks are kept */
    const int kw = (int)(mat_rowb(m) / 4), rows = mat_unit(m);
    const int j0 = 32 * (warp % CG) + lane, rh = warp / CG;
    uint32_t xr[NWL][4];
    int xs = 0;
#pragma unroll
    for (int i = 0; i < NWL; i++) {
        const uint4 q = j0 + 256 * i < kw ? reinterpret_cast<const uint4 *>(xq)[j0 + 256 * i] : make_uint4(0, 0, 0, 0);
        xr[i][0] = q.x, xr[i][1] = q.y, xr[i][2] = q.z, xr[i][3] = q.w;
#pragma unroll
        for (int f = 0; f < 4; f++) xs = __dp4a((int)xr[i][f], 0x01010101, xs);
    }
    tr(a, ph, 1);
    if (a.mode == 2) { /* no units: keep the coding alive */
        ss += (float)xs * 1e-30f;
        return;
    }
    const float inv = 1.f / s;
    int ui = 0;
    for (int u = blockIdx.x; u < n_units(m); u += gridDim.x) {
        const long long w0 = trc ? clock64() : 0;
        mwait(rg.full0 + 8 * rg.slot, rg.ph, a.err);
        if (trc) wait += clock64() - w0;
        const uint32_t *cw = reinterpret_cast<const uint32_t *>(ring + rg.slot * STAGE) + (rh * RPW) * kw;
        int acc[RPW];
#pragma unroll
        for (int r = 0; r < RPW; r++) acc[r] = -xs;
        if (a.mode == 0) {
#pragma unroll
            for (int i = 0; i < NWL; i++) {
                if (j0 + 256 * i >= kw) continue;
#pragma unroll
                for (int r = 0; r < RPW; r++) {
                    const uint32_t c = cw[r * kw + j0 + 256 * i];
                    int t = acc[r];
                    t = __dp4a((int)(c & 0x03030303u), (int)xr[i][0], t);
                    t = __dp4a((int)((c >> 2) & 0x03030303u), (int)xr[i][1], t);
                    t = __dp4a((int)((c >> 4) & 0x03030303u), (int)xr[i][2], t);
                    t = __dp4a((int)((c >> 6) & 0x03030303u), (int)xr[i][3], t);
                    acc[r] = t;
                }
            }
        }
        __syncwarp();
        if (lane == 0) tern_mbar::arrive(rg.empty0 + 8 * rg.slot);
        rg.next();
        int idx;
        const int v = warp_rows<RPW>(acc, lane, &idx);
        if ((lane & (32 / RPW - 1)) == 0) red2[rb][warp][idx] = v;
        cbar();
        if (warp == ui % NCW && lane < rows) { /* the epilogue: a warp in turn, off the next unit's path */
            const int t = lane, hh = t / RPW, r = t % RPW;
            int dot = 0;
#pragma unroll
            for (int g = 0; g < CG; g++) dot += red2[rb][g + CG * hh][r];
            const float y = (float)dot * ep[0][ui][t] * inv;
            if (m == M_GU) { /* rows 0-7 gate, 8-15 up: thread t < 8 pairs t and t + 8 */
                const float up = __shfl_down_sync(0x0000ffffu, y, 8);
                if (t < 8) glu_out(a, u, t, y, up, mx);
            } else {
                row_out(a, m, u, t, y, ep, ui, wnext != nullptr, ss, mx);
            }
        }
        rb ^= 1, ui++;
    }
}

/* unsigned bytes of a against signed bytes of b, summed into c */
__device__ __forceinline__ int dp4a_us(uint32_t a, uint32_t b, int c) {
    int d;
    asm("dp4a.u32.s32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
    return d;
}
/* code word c against x's four int8 words x[f] (columns 16 j + 4 f ..): field f masked in
 * place (codes times 4^f, unsigned bytes <= 128) into acc[f]; fields_dot scales them back
 * exactly to sum c x over the word's columns */
__device__ __forceinline__ void word_fields(uint32_t c, const uint32_t (&x)[4], int (&acc)[4]) {
#pragma unroll
    for (int f = 0; f < 4; f++) acc[f] = dp4a_us(c & (0x03030303u << (2 * f)), x[f], acc[f]);
}
__device__ __forceinline__ int fields_dot(const int (&acc)[4]) { return acc[0] + (acc[1] >> 2) + (acc[2] >> 4) + (acc[3] >> 6); }

/* PLB_WARP_ROWS: a warp owns whole rows, so a unit needs no CTA barrier: the
 * consumer warps form NG groups of WPG that take the CTA's units in turn (unit
 * k of the CTA's sequence to group k % NG, its stage released by the group's
 * warps); warp w of a group sums rows w + WPG r (r < RW) of a 16-row unit (the
 * gate / up pairs t, t + 8 in the same warp) with its 128 columns of x in
 * registers, or of an 8-row down unit with x from shared memory. */
template <bool DOWN>
__device__ void run_rows(const Args &a, int l, int m, Ring &rg, uint8_t *ring, int &kc, const int8_t *xq, int xs,
                         const float (*ep)[MAXU][UNIT_H], float s, float &ss, float &mx, unsigned ph, long long &wait,
                         const float *wnext, long long (&tt)[5]) {
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, grp = warp / WPG, wl = warp % WPG;
    const bool trc = PLB_TRACE && a.trace && tid == 0; /* the thread whose clocks are kept */
    constexpr int KW = DOWN ? KW_I : H / 16, NX = DOWN ? 1 : KW / 32;
    constexpr int RW = (DOWN ? UNIT_I : UNIT_H) / WPG; /* rows a warp */
    static_assert(RW >= 1 && (DOWN || RW % 2 == 0), "a gate / up pair in one warp");
    const uint4 *x4 = reinterpret_cast<const uint4 *>(xq);
    uint32_t xr[NX][4];
    if (!DOWN) {
#pragma unroll
        for (int i = 0; i < NX; i++) {
            const uint4 q = x4[lane + 32 * i];
            xr[i][0] = q.x, xr[i][1] = q.y, xr[i][2] = q.z, xr[i][3] = q.w;
        }
    }
    tr(a, ph, 1);
    if (a.mode == 2) {
        ss += (float)(DOWN ? xs : (int)xr[NX - 1][3]) * 1e-30f;
        return;
    }
    const float inv = 1.f / s;
    int ui = 0;
    long long we = trc ? clock64() : 0; /* the last unit's end (the entry at first) */
    for (int u = unit_of(m, 0); u < n_units(m); u = unit_of(m, ui + 1), ui++, kc++) {
        if (kc % NG != grp) {
            rg.next();
            continue;
        }
        const long long w0 = trc ? clock64() : 0;
        if (trc) { /* the entry (before the group's first unit), the gaps */
            if (ui < NG) tt[3] += w0 - we;
            else tt[4] += w0 - we;
        }
        const bool ltc = PLB_LTRACE && wl == 0 && lane == 0; /* the group's clocks */
        if (ltc) ltr(a, kc, 2, clock64());
        mwait(rg.full0 + 8 * rg.slot, rg.ph, a.err);
        if (ltc) ltr(a, kc, 3, clock64());
        long long w1 = trc ? clock64() : 0;
        if (trc) wait += w1 - w0;
        const uint32_t *cw = reinterpret_cast<const uint32_t *>(ring + rg.slot * STAGE) + wl * KW;
        /* a sum a field and row (word_fields), scaled back exactly at the end */
        int acc[RW][4];
#pragma unroll
        for (int r = 0; r < RW; r++) acc[r][0] = acc[r][1] = acc[r][2] = acc[r][3] = 0;
        if (a.mode == 0) {
            if (!DOWN) {
#pragma unroll
                for (int i = 0; i < NX; i++)
#pragma unroll
                    for (int r = 0; r < RW; r++) {
                        word_fields(cw[r * WPG * KW + lane + 32 * i], xr[i], acc[r]);
                    }
            } else {
#pragma unroll 4
                for (int j = lane; j < KW; j += 32) {
                    const uint4 q = x4[j];
#pragma unroll
                    for (int r = 0; r < RW; r++) { /* word_fields, written out: through the helper this
                                                     * loop compiled otherwise (PTX), 0.2 µs a layer apart */
                        const uint32_t c = cw[r * WPG * KW + j];
                        acc[r][0] = dp4a_us(c & 0x03030303u, q.x, acc[r][0]);
                        acc[r][1] = dp4a_us(c & 0x0c0c0c0cu, q.y, acc[r][1]);
                        acc[r][2] = dp4a_us(c & 0x30303030u, q.z, acc[r][2]);
                        acc[r][3] = dp4a_us(c & 0xc0c0c0c0u, q.w, acc[r][3]);
                    }
                }
            }
        }
        int d[RW];
#pragma unroll
        for (int r = 0; r < RW; r++) d[r] = fields_dot(acc[r]);
        if (trc) { /* the dot products' cycles (their sums in hand) */
            asm volatile("" ::"r"(d[0]), "r"(d[RW - 1]));
            const long long w2 = clock64();
            tt[0] += w2 - w1, w1 = w2;
        }
        __syncwarp();
        if (lane == 0) tern_mbar::arrive(rg.empty0 + 8 * rg.slot);
        rg.next();
        if (PLB_RELEASE && a.mode == 5) continue; /* release: no row sums, no epilogue */
        int r; /* lane (r-th of the lanes 32 / RW apart) ends with row wl + WPG r's sum */
        int v = warp_rows<RW>(d, lane, &r);
        /* gate|up: rows < 8 gate, >= 8 up; gate row t's up (t + 8: r + RW / 2) is 16 lanes on */
        const int up = !DOWN && m == M_GU ? __shfl_down_sync(0xffffffffu, v, 16) : 0; /* m: the warp's */
        if (trc) {
            asm volatile("" ::"r"(v));
            const long long w2 = clock64();
            tt[1] += w2 - w1, w1 = w2;
        }
        if ((lane & (32 / RW - 1)) == 0) {
            const int t = wl + WPG * r;
            const float y = (float)(v - xs) * ep[0][ui][t] * inv; /* sum x over the row (cta_code's) */
            if (!DOWN && m == M_GU) {
                if (t < CG) glu_out(a, u, t, y, (float)(up - xs) * ep[0][ui][t + CG] * inv, mx);
            } else {
                row_out(a, m, u, t, y, ep, ui, wnext != nullptr, ss, mx);
            }
        }
        if (trc) we = clock64(), tt[2] += we - w1;
    }
}

/* PLB_OFUSE: o's partial sums over head h's 128 columns for the CTA's rows
 * hq RQ .. + RQ - 1 (its units kc .. kc + UPC - 1: group (kc + j) % 2 takes unit j,
 * so j = jm + 2 jj; this thread's rows j OU + t, t = 32 wl + lane and t + 256, their
 * scales osc[jj]), added to x by atomics.  o: the attention's output of column tid
 * (threads part_i == 0), coded here with the max in pr[1][0 .. 3]: the head's
 * warps' (-DPLB_OEXACT=0, a scale a head) or the token's over every head
 * (PLB_OEXACT: the caller's poll).  ys: shared, RQ floats (free in this phase). */
__device__ void o_units(const Args &a, int hq, int part_i, float o, const float (&osc)[UPC / 2][2], int jm, Ring &rg,
                        uint8_t *ring, int &kc, float *ys, float (*pr)[NCW], int8_t *oq, int *osum, volatile int *hold) {
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, wl = warp % WPG;
    cbar(); /* pr[1][0 .. 3] */
    const float s = 127.f / fmaxf(max4(pr[1]), 1e-5f);
    if (!part_i) {
        const int c = code8(o * s);
        oq[tid] = (int8_t)c;
        const int cs = warp_isum(c);
        if (lane == 0) osum[warp] = cs;
    }
    cbar();
    const int xs = osum[0] + osum[1] + osum[2] + osum[3];
    uint32_t xr[HD / 16][4]; /* [w][f]: columns 16 w + 4 f .. + 3, field f of code word w */
#pragma unroll
    for (int i = 0; i < HD / 16; i++) {
        const uint4 q = reinterpret_cast<const uint4 *>(oq)[i];
        xr[i][0] = q.x, xr[i][1] = q.y, xr[i][2] = q.z, xr[i][3] = q.w;
    }
    const float inv = 1.f / s;
    float y[UPC / 2][2] = {};
    if (a.mode != 2) { /* (noweights: no units) */
#pragma unroll
        for (int j = 0; j < UPC; j++) {
            if ((j & 1) == jm) {
                const bool ltc = PLB_LTRACE && wl == 0 && lane == 0; /* the group's clocks */
                if (ltc) ltr(a, kc + j, 2, clock64());
                mwait(rg.full0 + 8 * rg.slot, rg.ph, a.err);
                if (ltc) ltr(a, kc + j, 3, clock64());
                const uint4 *cw = reinterpret_cast<const uint4 *>(ring + rg.slot * STAGE);
                if (a.mode == 0) {
#pragma unroll
                    for (int i = 0; i < 2; i++) {
                        const int t = wl * 32 + lane + (OU / 2) * i; /* the row in the unit */
                        const uint4 c0 = cw[2 * t], c1 = cw[2 * t + 1];
                        const uint32_t cc[8] = {c0.x, c0.y, c0.z, c0.w, c1.x, c1.y, c1.z, c1.w};
                        int acc[4] = {0, 0, 0, 0};
#pragma unroll
                        for (int w = 0; w < 8; w++) word_fields(cc[w], xr[w], acc);
                        const int dd = fields_dot(acc);
                        y[j >> 1][i] = (float)(dd - xs) * osc[j >> 1][i] * inv;
                    }
                }
                __syncwarp();
                if (lane == 0) tern_mbar::arrive(rg.empty0 + 8 * rg.slot);
            }
            rg.next();
        }
        kc += UPC;
    }
#pragma unroll
    for (int jj = 0; jj < UPC / 2; jj++)
        ys[(jm + 2 * jj) * OU + wl * 32 + lane] = y[jj][0], ys[(jm + 2 * jj) * OU + wl * 32 + lane + OU / 2] = y[jj][1];
    cbar();
    if (PLB_HOLD && tid == 0) *hold = 1; /* every unit consumed: none in the round trip to the next input */
    for (int i = tid; i < RQ / 4; i += NCT)
        atomicAdd(reinterpret_cast<float4 *>(a.x + hq * RQ) + i, reinterpret_cast<const float4 *>(ys)[i]);
}

__global__ void __launch_bounds__(NTHR, 1) step_kernel(Args a) {
    extern __shared__ __align__(128) uint8_t smem[];
    uint8_t *ring = smem;
    int8_t *xq = reinterpret_cast<int8_t *>(smem + OFF_XQ);
    uint64_t *mb = reinterpret_cast<uint64_t *>(smem + OFF_MB);
    float *kvs = reinterpret_cast<float *>(smem + OFF_KVS); /* [2: K, V][KRES][HD] */
    __shared__ int red2[2][NCW][8];
    __shared__ float sh[2];
    __shared__ int xsum;
    __shared__ float ep[3][MAXU][UNIT_H];
    __shared__ float pr[2][NCW];
    __shared__ float sc[MAXKEYS + 1];
    __shared__ __align__(16) float qh[HD];
    __shared__ __align__(16) float kvn[2][HD]; /* the new token's K, V rows */
    __shared__ float part[(NCT / HD - 1) * HD];
    __shared__ volatile int hold; /* PLB_HOLD: set while the CTA's round trips run */
    __shared__ __align__(16) int8_t oq[HD]; /* PLB_OFUSE: the head's attention output coded */
    __shared__ int osum[HD / 32];

    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    Ring rg;
    rg.full0 = tern_mbar::saddr(mb), rg.empty0 = tern_mbar::saddr(mb + NST), rg.base = tern_mbar::saddr(ring);
    rg.slot = 0, rg.ph = 0;
    if (tid == 0) {
        hold = 0;
        for (int s = 0; s < NST; s++) /* a stage is released by the warps that read it */
            tern_mbar::init(rg.full0 + 8 * s, 1), tern_mbar::init(rg.empty0 + 8 * s, PLB_WARP_ROWS ? WPG : NCW);
        tern_mbar::init_fence();
    }
    __syncthreads();
    /* consumers below; the attention's heads on the last NH CTAs (the q|k|v units fall to
     * the first ones first, so these have the fewest); PLB_OFUSE: NQ a head, the
     * CTA's part hq of o's rows */
    const int hcta = PLB_OFUSE ? (head_cta() >= 0 ? head_cta() / NQ : -1) : (int)blockIdx.x - ((int)gridDim.x - NH);
    const int hq = PLB_OFUSE && head_cta() >= 0 ? head_cta() % NQ : 0;
    const int nres = min(a.keys, KRES); /* the keys whose rows are copied into shared memory */

    if (warp == NCW) { /* the loader: every unit of the step, in order */
        if (lane != 0 || a.mode == 2 || a.mode == 3) return;
        rg.ph = 1; /* the empty barriers' first wait passes */
        Cursor ld;
        /* PLB_INFLIGHT: the copies in flight, oldest first (stage, its full barrier's parity):
         * with the hold, few are left to slow a round trip that begins */
        int fs[PLB_INFLIGHT + 1], fp[PLB_INFLIGHT + 1], f0 = 0, fn = 0, k = 0;
        for (ld.first(a.layers); ld.l < a.layers; ld.next(a.layers), k++) {
            if (PLB_INFLIGHT && fn == PLB_INFLIGHT) { /* the oldest copy landed */
                mwait(rg.full0 + 8 * fs[f0], fp[f0], a.err);
                f0 = f0 == PLB_INFLIGHT ? 0 : f0 + 1, fn--;
            }
            if (PLB_INFLIGHT) {
                const int e = (f0 + fn) % (PLB_INFLIGHT + 1);
                fs[e] = rg.slot, fp[e] = rg.ph ^ 1u, fn++;
            }
            if (PLB_LTRACE) ltr(a, k, 0, clock64());
            mwait(rg.empty0 + 8 * rg.slot, rg.ph, a.err);
            if (PLB_HOLD)
                while (hold) __nanosleep(32);
            if (PLB_LTRACE) ltr(a, k, 1, clock64());
            tern_mbar::expect_tx(rg.full0 + 8 * rg.slot, (int)ld.bytes());
            tern_mbar::bulk_load(rg.base + rg.slot * STAGE, ld.src(a), (uint32_t)ld.bytes(), rg.full0 + 8 * rg.slot);
            rg.next();
        }
        return;
    }

    unsigned kb = 0; /* phases of the launch (the trace's index: five a layer) */
    unsigned kg = 0; /* grid barriers of the launch (NGB a layer) */
    int rb = 0, kc = 0;
    if (a.mode == 4) { /* the stream alone: every unit waited for and released, nothing else */
        Cursor c;
        c.first(a.layers);
        for (int k = 0; c.l < a.layers; c.next(a.layers), k++) {
            if (!PLB_WARP_ROWS || k % NG == warp / WPG) {
                mwait(rg.full0 + 8 * rg.slot, rg.ph, a.err);
                __syncwarp();
                if (lane == 0) tern_mbar::arrive(rg.empty0 + 8 * rg.slot);
            }
            rg.next();
        }
        return;
    }
    for (int l = 0; l < a.layers; l++) {
        const float *nw = a.nw + (int64_t)l * 2 * H;
        float *kl = a.kc + (int64_t)l * MAXKEYS * NH * HD, *vl = a.vc + (int64_t)l * MAXKEYS * NH * HD;
        /* the head's K / V pages for the attention, during q|k|v (PLB_OFUSE: after its input,
         * which the 128 CTAs' copies would delay) */
        auto stage_kv = [&](int m) {
            if (m != M_QKV || hcta < 0) return;
            if (KRES) { /* the first nres keys into shared memory, 16 bytes a copy (a bulk copy a
                         * row from warp 0 ran 1.1 µs a layer slower: behind the ring's copies) */
                for (int e = tid; e < 2 * nres * (HD / 4); e += NCT) {
                    const int kv = e / (nres * (HD / 4)), r = e % (nres * (HD / 4)), j = r / (HD / 4), c = r % (HD / 4);
                    const float *src = (kv ? vl : kl) + ((int64_t)j * NH + hcta) * HD + 4 * c;
                    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(
                                     tern_mbar::saddr(kvs + (kv * KRES + j) * HD + 4 * c)),
                                 "l"(src)
                                 : "memory");
                }
                asm volatile("cp.async.commit_group;" ::: "memory");
            }
            for (int e = tid + 2 * nres * (HD / 32); e < 2 * a.keys * (HD / 32); e += NCT) { /* the rest into L2 */
                const int j = e / (2 * (HD / 32)), c = e % (2 * (HD / 32));
                const float *p = (c < HD / 32 ? kl : vl) + ((int64_t)j * NH + hcta) * HD + 32 * (c % (HD / 32));
                asm volatile("prefetch.global.L2 [%0];" ::"l"(p));
            }
        };
        for (int m = 0; m < NMAT; m++) {
            if (m == M_O) { /* the attention, then o */
                tr(a, kb, 0);
                tr(a, kb, 1);
                if (hcta >= 0 && a.mode != 3) {
                    const int h = hcta, T = a.keys + 1;
                    const float *qn = a.qkv + h * HD, *kn = a.qkv + H + h * HD, *vn = a.qkv + H + NH * HD + h * HD;
                    /* PLB_OFUSE: this thread's o rows' scales (its group's unit of the CTA's two, kc
                     * and kc + 1 of its sequence: group (kc + j) % 2 takes unit j), loaded early */
                    const int jm = (warp / WPG + kc) & 1;
                    float osc[UPC / 2][2] = {};
                    if (PLB_OFUSE) {
                        const float *wso = a.ws + l * a.d.soff[NMAT] + a.d.soff[M_O] + hq * RQ + (warp % WPG) * 32 + lane;
#pragma unroll
                        for (int jj = 0; jj < UPC / 2; jj++)
                            osc[jj][0] = __ldg(wso + (jm + 2 * jj) * OU), osc[jj][1] = __ldg(wso + (jm + 2 * jj) * OU + OU / 2);
                    }
                    if (tid < HD) {
                        qh[tid] = __ldcg(qn + tid) * rsqrtf((float)HD);
                        const float kv = __ldcg(kn + tid);
                        if (hq == 0) kl[((int64_t)a.keys * NH + h) * HD + tid] = kv;
                        kvn[0][tid] = kv;
                    } else if (tid < 2 * HD) {
                        const float vv = __ldcg(vn + tid - HD);
                        if (hq == 0) vl[((int64_t)a.keys * NH + h) * HD + tid - HD] = vv;
                        kvn[1][tid - HD] = vv;
                    }
                    if (KRES) asm volatile("cp.async.wait_all;" ::: "memory");
                    cbar();
                    if (PLB_OFUSE && PLB_HOLD && tid == 0) hold = 0; /* the input is here; o's units follow */
                    tr(a, kb, 5);
                    const float4 q4 = reinterpret_cast<const float4 *>(qh)[lane];
#pragma unroll 4
                    for (int j = warp; j < T; j += NCW) {
                        const float *kr = kl + ((int64_t)j * NH + h) * HD; /* read for nres <= j < keys */
                        const float4 k4 = j < nres                  ? reinterpret_cast<const float4 *>(kvs + j * HD)[lane]
                                          : j == a.keys             ? reinterpret_cast<const float4 *>(kvn[0])[lane]
                                                                    : __ldcg(reinterpret_cast<const float4 *>(kr) + lane);
                        const float sj = warp_sum(q4.x * k4.x + q4.y * k4.y + q4.z * k4.z + q4.w * k4.w);
                        if (lane == 0) sc[j] = sj;
                    }
                    cbar();
                    tr(a, kb, 6);
                    /* the softmax's max and sum, the same in every warp (no barrier after them) */
                    float smax = -INFINITY, den = 0.f;
                    for (int j = lane; j < T; j += 32) smax = fmaxf(smax, sc[j]);
                    smax = warp_max(smax);
                    for (int j = lane; j < T; j += 32) den += __expf(sc[j] - smax);
                    den = warp_sum(den);
                    tr(a, kb, 7);
                    const int d = tid % HD, part_i = tid / HD; /* NCT / HD key parts */
                    float o = 0.f;
#pragma unroll 8
                    for (int j = part_i; j < T; j += NCT / HD) {
                        const float *vr = vl + ((int64_t)j * NH + h) * HD;
                        o += __expf(sc[j] - smax) * (j < nres       ? kvs[(KRES + j) * HD + d]
                                                     : j == a.keys ? kvn[1][d]
                                                                   : __ldcg(vr + d));
                    }
                    if (part_i) part[(part_i - 1) * HD + d] = o;
                    cbar();
                    if (!part_i) {
                        for (int p = 1; p < NCT / HD; p++) o += part[(p - 1) * HD + d];
                        o /= den;
                        if (hq == 0) a.att[h * HD + d] = o;
                        const float om = warp_max(fabsf(o));
                        if (PLB_OFUSE) {
                            if (lane == 0) pr[1][warp] = om;
                        } else if (lane == 0) {
                            a.slot[(kb & 1) * 2 * NSLOT + NSLOT + h * (HD / 32) + warp] = om;
                        }
                    }
                    if (PLB_OEXACT) { /* the token's max|att|: the heads' words, then o_units codes with it */
                        cbar(); /* pr[1] */
                        unsigned *ow = a.omax;
                        if (tid == 0 && hq == 0) /* (one CTA a head: all NQ storing ran 0.5 µs a layer slower) */
                            st_relaxed(ow + h, __float_as_uint(max4(pr[1])));
                        if (warp == 0) {
                            unsigned v;
                            const long long t0 = clock64();
                            for (;;) {
                                v = ld_relaxed(ow + lane);
                                if (__all_sync(0xffffffffu, v != OSENT)) break;
                                if (clock64() - t0 > 4000000000ll) fail(a.err, 3);
                            }
                            const float mxa = warp_max(__uint_as_float(v));
                            __syncwarp(); /* (lane 0 read pr[1][0 .. 3] for its store above) */
                            if (lane < 4) pr[1][lane] = mxa;
                        }
                    }
                    if (PLB_OFUSE)
                        o_units(a, hq, part_i, o, osc, jm, rg, ring, kc, KRES ? kvs : reinterpret_cast<float *>(xq), pr, oq,
                                osum, &hold);
                }
                tr(a, kb, 2);
                grid_barrier(a, kg++);
                tr(a, kb++, 3);
                if (PLB_OFUSE) { /* o done: its phase's trace points stay empty */
                    kb++;
                    continue;
                }
            }
            if (a.mode == 3) {
                grid_barrier(a, kg++);
                kb++;
                continue;
            }
            tr(a, kb, 0);
            if (!PLB_OFUSE) stage_kv(m);
            const float *sl = a.slot + ((kb - 1) & 1) * 2 * NSLOT;
            const int nsl = m == M_O ? NH * (HD / 32) : (int)gridDim.x;
            const float *in = m == M_QKV || (m == M_GU && !PLB_OFUSE) ? a.xw : m == M_GU ? a.x : m == M_O ? a.att : a.hb;
            const bool normed = m == M_QKV || m == M_GU;
            const float *wnext = m == M_O ? nw + H : m == M_DOWN && l + 1 < a.layers ? nw + 2 * H : nullptr;
            /* the epilogues' row scales, residual rows and next norm weights: loaded with the
             * input (<= MAXU x 16 < NCT values: one a thread), stored after its coding; read
             * after the first unit's barrier, or (warp-rows form, no barrier a unit) after one
             * of their own */
            const int rows = mat_unit(m), ei = tid / rows, et = tid % rows, ue = unit_of(m, ei);
            float e0 = 0.f, e1 = 0.f, e2 = 0.f;
            if (ue < n_units(m)) {
                const int64_t row = (int64_t)ue * rows + et;
                e0 = __ldg(a.ws + l * a.d.soff[NMAT] + a.d.soff[m] + row);
                if (m == M_O || m == M_DOWN) e1 = __ldcg(a.x + row);
                if (wnext) e2 = __ldg(wnext + row);
            }
            if (m == M_DOWN)
                cta_code<(I / 4 + NCT - 1) / NCT>(a, kb, in, I, false, sl, nsl, xq, sh, &xsum, &hold);
            else
                cta_code<H / 4 / NCT>(a, kb, in, H, normed, sl, nsl, xq, sh, &xsum, &hold,
                                      PLB_OFUSE && m == M_GU ? nw + H : nullptr, pr);
            if (ue < n_units(m)) ep[0][ei][et] = e0, ep[1][ei][et] = e1, ep[2][ei][et] = e2;
            if (PLB_WARP_ROWS) cbar();
            if (PLB_OFUSE) stage_kv(m);
            float pss = 0.f, pmx = 0.f;
            long long wait = 0, tt[5] = {0, 0, 0, 0, 0};
            if (PLB_WARP_ROWS && m == M_DOWN)
                run_rows<true>(a, l, m, rg, ring, kc, xq, xsum, ep, sh[1], pss, pmx, kb, wait, wnext, tt);
            else if (PLB_WARP_ROWS)
                run_rows<false>(a, l, m, rg, ring, kc, xq, xsum, ep, sh[1], pss, pmx, kb, wait, wnext, tt);
            else if (m == M_DOWN)
                run_units<3, 4>(a, l, m, rg, ring, red2, rb, xq, ep, wnext, sh[1], pss, pmx, kb, wait);
            else
                run_units<1, 8>(a, l, m, rg, ring, red2, rb, xq, ep, wnext, sh[1], pss, pmx, kb, wait);
            if (PLB_LTRACE && a.wtr && lane == 0) a.wtr[((int64_t)blockIdx.x * 5 * a.layers + kb) * NCW + warp] = clock64();
            if (PLB_TRACE && a.trace && tid == 0) {
                long long *q = a.trace + ((int64_t)blockIdx.x * 5 * a.layers + kb) * NTP;
                q[4] = wait, q[8] = tt[0], q[9] = tt[1], q[10] = tt[2], q[11] = tt[3], q[12] = tt[4];
            }
            if (m != M_QKV) { /* this CTA's stats for the next phase's input (the epilogue warps') */
                pss = warp_sum(pss), pmx = warp_max(pmx);
                if (lane == 0) pr[0][warp] = pss, pr[1][warp] = pmx;
                cbar();
                if (tid == 0) {
                    if (PLB_HOLD) hold = 1; /* every unit consumed: no copies in the round trips to the next input
                                             * (the slots' stores below among them) */
                    float t0 = 0.f, t1 = 0.f;
                    for (int w = 0; w < NCW; w++) t0 += pr[0][w], t1 = fmaxf(t1, pr[1][w]);
                    a.slot[(kb & 1) * 2 * NSLOT + blockIdx.x] = t0;
                    a.slot[(kb & 1) * 2 * NSLOT + NSLOT + blockIdx.x] = t1;
                }
            }
            if (PLB_OEXACT && m == M_QKV && blockIdx.x == 0 && tid == 0) /* (last read before layer l - 1's attention
                                                                          * barrier, written after this one; thread 0,
                                                                          * whose release the barrier's is) */
                for (int i = 0; i < NH; i++) st_relaxed(a.omax + i, OSENT);
            tr(a, kb, 2);
            grid_barrier(a, kg++, &hold); /* (q|k|v's hold set there, after its CTA barrier) */
            tr(a, kb++, 3);
        }
    }
}

/* ---- the CPU twin ---- */
struct Host {
    std::vector<float> ws, nw, x, kc, vc;
    std::vector<float> qkv, att, hb; /* the last layer's */
};
/* the stats as the kernel forms them: sum x^2 and max|x w| (max|v| without
 * a norm); codes round(x rs w s), s = 127 / (max rs) */
static void h_stats(const float *v, int n, const float *w, float *ss, float *mx) {
    double a = 0;
    float m = 0;
    for (int i = 0; i < n; i++) a += (double)v[i] * v[i], m = fmaxf(m, fabsf(w ? v[i] * w[i] : v[i]));
    *ss = (float)a, *mx = m;
}
/* the twin's codings' value nearest a rounding tie: min |frac(|v s|) - 1/2| / max(|v s|, 1) over
 * every code formed (v s in double), and the coding's index, from 0 in the twin's order: a layer's
 * q|k|v, o (per-head form: one a head), gate|up, down.  A failed one-layer check with this below
 * ~1e-7 is a code moved across a tie by the kernel's ulps, not a wrong sum (fifty-first session:
 * the failures at <= 6e-8, the passes from 1.7e-7) */
static double g_tie = 1e30;
static int g_tie_at = -1, g_codings = 0;
static float h_prep(const float *v, int n, const float *w, std::vector<int8_t> &xq) {
    std::vector<float> r(v, v + n);
    float ss, m, rs = 1.f;
    h_stats(v, n, w, &ss, &m);
    if (w) {
        rs = 1.0f / sqrtf(ss / n + EPS);
        for (int i = 0; i < n; i++) r[i] = v[i] * w[i] * rs; /* the kernel's x w (from the producer) times rs */
    }
    const float s = 127.f / fmaxf(m * rs, 1e-5f);
    xq.resize(n);
    for (int i = 0; i < n; i++) {
        xq[i] = (int8_t)std::max(-127, std::min(127, (int)lrintf(r[i] * s)));
        const double t = fabs((double)r[i] * s), e = fabs(t - floor(t) - 0.5) / std::max(t, 1.0);
        if (e < g_tie) g_tie = e, g_tie_at = g_codings;
    }
    g_codings++;
    return s;
}
/* a code row of k columns against xq[x0 ..] */
static int64_t h_dot(int64_t byte0, int k, const std::vector<int8_t> &xq, int x0 = 0) {
    int64_t acc = 0;
    for (int i = 0; i < k / 4; i++) { /* byte b of word j, field f: column 16 j + 4 f + b */
        const uint8_t b = code_byte(byte0 + i);
        for (int f = 0; f < 4; f++) acc += code_val((b >> (2 * f)) & 3) * xq[x0 + 16 * (i / 4) + 4 * f + i % 4];
    }
    return acc;
}
static void h_step(Host &hs, const Dims &d, int layers, int keys) {
    std::vector<int8_t> xq;
    std::vector<float> qkv(QKV), att(H), hb(I);
    for (int l = 0; l < layers; l++) {
        const int64_t cb = l * d.off[NMAT], sb = l * d.soff[NMAT];
        const float *nw = hs.nw.data() + (int64_t)l * 2 * H;
        float s = h_prep(hs.x.data(), H, nw, xq);
#pragma omp parallel for
        for (int r = 0; r < QKV; r++)
            qkv[r] = (float)h_dot(cb + d.off[M_QKV] + (int64_t)r * H / 4, H, xq) * hs.ws[sb + d.soff[M_QKV] + r] / s;
        for (int h = 0; h < NH; h++) {
            float *kl = hs.kc.data() + (int64_t)l * MAXKEYS * NH * HD, *vl = hs.vc.data() + (int64_t)l * MAXKEYS * NH * HD;
            for (int t = 0; t < HD; t++)
                kl[((int64_t)keys * NH + h) * HD + t] = qkv[H + h * HD + t],
                                                 vl[((int64_t)keys * NH + h) * HD + t] = qkv[H + NH * HD + h * HD + t];
            std::vector<float> sc(keys + 1);
            float mx = -INFINITY;
            for (int j = 0; j <= keys; j++) {
                float a = 0;
                for (int t = 0; t < HD; t++) a += qkv[h * HD + t] / sqrtf((float)HD) * kl[((int64_t)j * NH + h) * HD + t];
                sc[j] = a, mx = fmaxf(mx, a);
            }
            float den = 0;
            for (int j = 0; j <= keys; j++) den += expf(sc[j] - mx);
            for (int t = 0; t < HD; t++) {
                float o = 0;
                for (int j = 0; j <= keys; j++) o += expf(sc[j] - mx) * vl[((int64_t)j * NH + h) * HD + t];
                att[h * HD + t] = o / den;
            }
        }
        if (PLB_OEXACT) { /* o's codes by head, the input coded per token */
            s = h_prep(att.data(), H, nullptr, xq);
            std::vector<int64_t> dsum(H, 0);
            for (int h = 0; h < NH; h++) {
#pragma omp parallel for
                for (int r = 0; r < H; r++) dsum[r] += h_dot(cb + d.off[M_O] + ((int64_t)h * H + r) * (HD / 4), HD, xq, h * HD);
            }
            for (int r = 0; r < H; r++) hs.x[r] += (float)dsum[r] * hs.ws[sb + d.soff[M_O] + r] / s;
        } else if (PLB_OFUSE) { /* a head's 128 columns at a time, coded with the head's own scale */
            std::vector<float> ysum(H, 0.f);
            for (int h = 0; h < NH; h++) {
                s = h_prep(att.data() + h * HD, HD, nullptr, xq);
#pragma omp parallel for
                for (int r = 0; r < H; r++)
                    ysum[r] += (float)h_dot(cb + d.off[M_O] + ((int64_t)h * H + r) * (HD / 4), HD, xq) *
                               hs.ws[sb + d.soff[M_O] + r] / s;
            }
            for (int r = 0; r < H; r++) hs.x[r] += ysum[r];
        } else {
            s = h_prep(att.data(), H, nullptr, xq);
            for (int r = 0; r < H; r++)
                hs.x[r] += (float)h_dot(cb + d.off[M_O] + (int64_t)r * H / 4, H, xq) * hs.ws[sb + d.soff[M_O] + r] / s;
        }
        s = h_prep(hs.x.data(), H, nw + H, xq);
#pragma omp parallel for
        for (int i = 0; i < I; i++) { /* unit u = i / 8: gate rows 16u + (i % 8), up rows 16u + 8 + (i % 8) */
            const int64_t rg = 16 * (i / 8) + i % 8, ru = rg + 8;
            const float g = (float)h_dot(cb + d.off[M_GU] + rg * H / 4, H, xq) * hs.ws[sb + d.soff[M_GU] + rg] / s;
            const float u = (float)h_dot(cb + d.off[M_GU] + ru * H / 4, H, xq) * hs.ws[sb + d.soff[M_GU] + ru] / s;
            hb[i] = g / (1.f + expf(-g)) * u;
        }
        hs.qkv = qkv, hs.att = att, hs.hb = hb;
        s = h_prep(hb.data(), I, nullptr, xq);
#pragma omp parallel for
        for (int r = 0; r < H; r++)
            hs.x[r] += (float)h_dot(cb + d.off[M_DOWN] + (int64_t)r * I / 4, I, xq) * hs.ws[sb + d.soff[M_DOWN] + r] / s;
    }
}

} // namespace

int main(int argc, char **argv) {
    int layers = 32, keys = 32, reps = 21, check = 1, trace = 0;
    const char *mode = "full";
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--layers")) layers = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--keys")) keys = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--reps")) reps = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--check")) check = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--mode")) mode = argv[i + 1];
        else if (!strcmp(argv[i], "--trace")) trace = atoi(argv[i + 1]);
        else {
            fprintf(stderr,
                    "usage: %s [--layers L] [--keys K] [--reps R] [--check L]\n"
                    "       [--mode full|nomath|noweights|barriers|stream|release] [--trace 0|1]\n",
                    argv[0]);
            return 2;
        }
    }
    const char *names[6] = {"full", "nomath", "noweights", "barriers", "stream", "release"};
    int imode = -1;
    for (int i = 0; i < 6; i++)
        if (!strcmp(mode, names[i])) imode = i;
    if (trace && !PLB_TRACE) {
        fprintf(stderr, "--trace needs a build with -DPLB_TRACE=1\n");
        return 2;
    }
    if (trace && (!strcmp(mode, "barriers") || !strcmp(mode, "stream"))) {
        fprintf(stderr, "--trace: barriers and stream record no phase points\n");
        return 2;
    }
    if (imode < 0 || (imode == 5 && !(PLB_WARP_ROWS && PLB_RELEASE)) || layers < 1 || keys < 0 || keys >= MAXKEYS || reps < 1 || check < 0 || check > layers) {
        fprintf(stderr, "bad arguments\n");
        return 2;
    }
    Dims d;
    d.off[0] = d.soff[0] = 0;
    for (int m = 0; m < NMAT; m++)
        d.off[m + 1] = d.off[m] + mat_rows(m) * mat_rowb(m), d.soff[m + 1] = d.soff[m] + mat_srows(m);

    cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, 0));
    const int G = prop.multiProcessorCount;
    for (int m = 0; m < NMAT; m++)
        if ((n_units(m) + G - 1) / G > MAXU) {
            fprintf(stderr, "%d SMs: more than %d units a CTA\n", G, MAXU);
            return 1;
        }
    if (G < (PLB_OFUSE ? NQ : 1) * NH || G > 160) { /* a head a CTA (NQ with PLB_OFUSE); slot_stats reads at most 160 slots */
        fprintf(stderr, "%d SMs: the probe takes %d .. 160\n", G, (PLB_OFUSE ? NQ : 1) * NH);
        return 1;
    }
    const size_t smem = SMEM_DYN;
    CK(cudaFuncSetAttribute(step_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));

    Host hs;
    const int64_t nws = (int64_t)layers * d.soff[NMAT], ncache = (int64_t)layers * MAXKEYS * NH * HD;
    hs.ws.resize(nws), hs.nw.resize((size_t)layers * 2 * H), hs.x.resize(H), hs.kc.assign(ncache, 0.f),
        hs.vc.assign(ncache, 0.f);
    for (int64_t i = 0; i < nws; i++) hs.ws[i] = 0.02f * (1.0f + 0.5f * unif(1, i));
    for (size_t i = 0; i < hs.nw.size(); i++) hs.nw[i] = 1.0f + 0.1f * unif(2, i);
    for (int i = 0; i < H; i++) hs.x[i] = unif(3, i);
    for (int l = 0; l < layers; l++)
        for (int64_t j = 0; j < (int64_t)keys * NH * HD; j++)
            hs.kc[(int64_t)l * MAXKEYS * NH * HD + j] = unif(4, l * 1000003 + j),
                                                 hs.vc[(int64_t)l * MAXKEYS * NH * HD + j] = unif(5, l * 1000003 + j);

    const int64_t ncodes = (int64_t)layers * d.off[NMAT];
    Args a;
    uint8_t *codes;
    float *ws, *nw, *x, *xw, *qkv, *att, *hb, *kc, *vc;
    unsigned *ctr;
    float *slot;
    int *err;
    CK(cudaMalloc(&codes, ncodes));
    CK(cudaMalloc(&ws, nws * 4));
    CK(cudaMalloc(&nw, hs.nw.size() * 4));
    CK(cudaMalloc(&x, H * 4));
    CK(cudaMalloc(&xw, H * 4));
    std::vector<float> xw0(H);
    for (int i = 0; i < H; i++) xw0[i] = hs.x[i] * hs.nw[i];
    CK(cudaMalloc(&qkv, QKV * 4));
    CK(cudaMalloc(&att, H * 4));
    CK(cudaMalloc(&hb, I * 4));
    CK(cudaMalloc(&kc, ncache * 4));
    CK(cudaMalloc(&vc, ncache * 4));
    CK(cudaMalloc(&ctr, 4));
    unsigned *omax;
    CK(cudaMalloc(&omax, NH * 4));
    CK(cudaMemset(omax, 0xff, NH * 4)); /* (the sentinel) */
    CK(cudaMalloc(&slot, 2 * 2 * NSLOT * 4));
    /* the first phase's stats (buffer 1: the one before barrier 0), as one producer's */
    std::vector<float> slot0(2 * 2 * NSLOT, 0.f);
    h_stats(hs.x.data(), H, hs.nw.data(), &slot0[2 * NSLOT], &slot0[3 * NSLOT]);
    CK(cudaMalloc(&err, 4));
    CK(cudaMemset(ctr, 0, 4));
    CK(cudaMemset(err, 0, 4));
    fill_codes<<<4 * G, 512>>>(codes, ncodes);
    CK(cudaGetLastError());
    CK(cudaMemcpy(ws, hs.ws.data(), nws * 4, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(nw, hs.nw.data(), hs.nw.size() * 4, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(kc, hs.kc.data(), ncache * 4, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(vc, hs.vc.data(), ncache * 4, cudaMemcpyHostToDevice));
    a.codes = codes, a.ws = ws, a.nw = nw, a.x = x, a.xw = xw, a.qkv = qkv, a.att = att, a.hb = hb, a.kc = kc, a.vc = vc;
    a.trace = nullptr, a.ltr = nullptr, a.wtr = nullptr;
    a.ltu = 0; /* the most units a CTA takes in a layer (the timeline's rows) */
    for (int m = 0; m < NMAT; m++) { /* the most any CTA takes */
        int most = 0;
        for (int c = 0; c < G; c++) {
            int k = 0;
            while (unit_of_c(m, k, c, G) < n_units(m)) k++;
            most = std::max(most, k);
        }
        a.ltu += most;
    }
    a.ctr = ctr, a.omax = omax, a.slot = slot, a.err = err, a.d = d, a.keys = keys, a.mode = imode;
    unsigned base = 0;
    auto launch = [&](int nl, int md) {
        a.layers = nl, a.mode = md, a.base = base;
        void *args[] = {&a};
        CK(cudaLaunchCooperativeKernel((void *)step_kernel, G, NTHR, args, smem, 0));
        if (md != 4) base += NGB * nl * G; /* the grid barriers (none streaming) */
    };
    auto reset = [&] { /* the step's input: x, x w and their stats */
        CK(cudaMemcpy(x, hs.x.data(), H * 4, cudaMemcpyHostToDevice));
        CK(cudaMemcpy(xw, xw0.data(), H * 4, cudaMemcpyHostToDevice));
        CK(cudaMemcpy(slot, slot0.data(), slot0.size() * 4, cudaMemcpyHostToDevice));
    };
    int rc = 0;
    if (check > 0) {
        reset();
        launch(check, 0);
        CK(cudaDeviceSynchronize());
        std::vector<float> gx(H);
        CK(cudaMemcpy(gx.data(), x, H * 4, cudaMemcpyDeviceToHost));
        Host hc = hs;
        h_step(hc, d, check, keys);
        auto rel_of = [](const float *g, const float *c, int n) {
            double nu = 0, de = 0;
            for (int i = 0; i < n; i++) nu += (double)(g[i] - c[i]) * (g[i] - c[i]), de += (double)c[i] * c[i];
            return sqrt(nu / de);
        };
        std::vector<float> gq(QKV), ga(H), gh(I);
        CK(cudaMemcpy(gq.data(), qkv, QKV * 4, cudaMemcpyDeviceToHost));
        CK(cudaMemcpy(ga.data(), att, H * 4, cudaMemcpyDeviceToHost));
        CK(cudaMemcpy(gh.data(), hb, I * 4, cudaMemcpyDeviceToHost));
        printf("last layer: q|k|v rel L2 %.3e, att %.3e, h %.3e\n", rel_of(gq.data(), hc.qkv.data(), QKV),
               rel_of(ga.data(), hc.att.data(), H), rel_of(gh.data(), hc.hb.data(), I));
        double num = 0, den = 0, mx = 0;
        for (int i = 0; i < H; i++) {
            num += (double)(gx[i] - hc.x[i]) * (gx[i] - hc.x[i]), den += (double)hc.x[i] * hc.x[i];
            mx = std::max(mx, (double)fabsf(gx[i] - hc.x[i]));
        }
        const double rel = sqrt(num / den);
        /* one layer: the same int8 codes but where a rounding moves one across a
         * tie (the twin sums the stats in double, not in float partials, and uses
         * 1 / sqrtf, expf and divisions where the kernel has rsqrtf, __expf, a
         * product by 1 / s and the GLU's __fdividef); over more layers a moved
         * code changes every output of the next linear by a step of its scale and
         * the differences compound */
        const double tol = check == 1 ? 1e-4 : 1e-1;
        printf("check %d layers: rel L2 %.3e, max abs %.3e, |x| rms %.3f -> %s (bound %.0e); nearest tie %.1e "
               "(coding %d of 0 .. %d)\n",
               check, rel, mx, sqrt(den / H), rel <= tol ? "ok" : "FAIL", tol, g_tie, g_tie_at, g_codings - 1);
        if (rel > tol) rc = 1;
    }
    const int modes[5] = {imode, imode == 0 ? 1 : -1, imode == 0 ? 2 : -1, imode == 0 ? 3 : -1, imode == 0 ? 4 : -1};
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    for (int mi = 0; mi < 5; mi++) {
        if (modes[mi] < 0) continue;
        std::vector<float> t;
        for (int r = 0; r < reps + 2; r++) {
            reset();
            CK(cudaEventRecord(e0));
            launch(layers, modes[mi]);
            CK(cudaEventRecord(e1));
            CK(cudaEventSynchronize(e1));
            float ms;
            CK(cudaEventElapsedTime(&ms, e0, e1));
            if (r >= 2) t.push_back(ms * 1000.f);
        }
        std::sort(t.begin(), t.end());
        const double med = t[t.size() / 2];
        const double bytes = (double)layers * d.off[NMAT];
        printf("%-9s %d layers, %d keys, %d CTAs: step %.1f us (min %.1f, max %.1f), %.2f us a layer, "
               "codes %.1f MB at %.0f GB/s\n",
               names[modes[mi]], layers, keys, G, med, t.front(), t.back(), med / layers, bytes / 1e6,
               bytes / med * 1e-3);
    }
    if (trace) { /* one more launch of the first mode, traced */
        const int nph = 5 * layers;
        long long *dtr;
        CK(cudaMalloc(&dtr, (size_t)G * nph * NTP * 8));
        CK(cudaMemset(dtr, 0, (size_t)G * nph * NTP * 8));
        long long *dlt = nullptr, *dwt = nullptr;
        const int LTU = a.ltu;
        /* (noweights: the loader issues nothing, no timeline) */
        const size_t nlt = PLB_LTRACE && imode != 2 ? (size_t)G * LTU * layers * LTP : 0,
                     nwt = nlt ? (size_t)G * nph * NCW : 0;
        if (nlt) {
            CK(cudaMalloc(&dlt, nlt * 8));
            CK(cudaMemset(dlt, 0, nlt * 8));
            CK(cudaMalloc(&dwt, nwt * 8));
            CK(cudaMemset(dwt, 0, nwt * 8));
        }
        reset();
        a.trace = dtr, a.ltr = dlt, a.wtr = dwt;
        launch(layers, imode);
        CK(cudaDeviceSynchronize());
        a.trace = nullptr, a.ltr = nullptr, a.wtr = nullptr;
        std::vector<long long> t((size_t)G * nph * NTP);
        CK(cudaMemcpy(t.data(), dtr, t.size() * 8, cudaMemcpyDeviceToHost));
        int khz = 0;
        CK(cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, 0));
        const double cyc_us = khz / 1000.0; /* kHz -> cycles a µs */
        auto med = [](std::vector<double> v) {
            std::sort(v.begin(), v.end());
            return v.empty() ? 0.0 : v[v.size() / 2];
        };
        const char *pn[5] = {"qkv", "attn", "o", "gu", "down"};
        /* the median over CTAs (the attention: its CTAs) and layers 1.. of q[j] - q[i] */
        auto span = [&](int p, int i, int j) {
            std::vector<double> v;
            for (int l = 1; l < layers; l++)
                for (int c = p == 1 ? G - (PLB_OFUSE ? NQ : 1) * NH : 0; c < G; c++) {
                    const long long *q = &t[((size_t)c * nph + 5 * l + p) * NTP];
                    v.push_back(j >= 8 || j == 4 ? q[j] / cyc_us : (q[j] - q[i]) / cyc_us);
                }
            return med(v);
        };
        printf("trace (µs; medians over CTAs and layers 1..%d; clock %.0f MHz)\n"
               "  phase  input+stats  coding  ->units  units (entry / waiting / dots / sums / epilogue / gaps)  "
               "barrier\n",
               layers - 1, cyc_us);
        for (int p = 0; p < 5; p++) {
            if (p == 1 || (PLB_OFUSE && p == 2)) continue; /* (PLB_OFUSE: o in the attention's phase) */
            printf("  %-5s  %6.2f      %6.2f  %6.2f   %6.2f (%5.2f / %5.2f / %5.2f / %5.2f / %5.2f / %5.2f)  %6.2f\n",
                   pn[p], span(p, 0, 5), span(p, 5, 6), span(p, 6, 1), span(p, 1, 2), span(p, 0, 11), span(p, 0, 4),
                   span(p, 0, 8), span(p, 0, 9), span(p, 0, 10), span(p, 0, 12), span(p, 2, 3));
        }
        printf("  attention (its %d CTAs): new q/k/v (+ the keys' copies) %.2f, scores %.2f, softmax %.2f, values+store%s %.2f; "
               "barrier %.2f\n",
               (PLB_OFUSE ? NQ : 1) * NH, PLB_OFUSE ? " + o" : "", span(1, 0, 5), span(1, 5, 6), span(1, 6, 7), span(1, 7, 2), span(1, 2, 3));
        if (nlt) { /* the units' timeline */
            std::vector<long long> lt(nlt);
            CK(cudaMemcpy(lt.data(), dlt, nlt * 8, cudaMemcpyDeviceToHost));
            CK(cudaFree(dlt));
            std::vector<long long> wt(nwt);
            CK(cudaMemcpy(wt.data(), dwt, nwt * 8, cudaMemcpyDeviceToHost));
            CK(cudaFree(dwt));
            /* unit k of CTA c: its matrix and its layer's phase, from the loader's order */
            auto unit_ph = [&](int c, int k, int *l, int *m, int *u) {
                int kk = 0;
                for (int ll = 0; ll < layers; ll++)
                    for (int mm = 0; mm < NMAT; mm++)
                        for (int ku = 0, uu; (uu = unit_of_c(mm, ku, c, G)) < n_units(mm); ku++, kk++)
                            if (kk == k) return *l = ll, *m = mm, *u = uu, true;
                return false;
            };
            const int pofm[NMAT] = {0, PLB_OFUSE ? 1 : 2, 3, 4}; /* the phase a matrix's units run in */
            const int lshow = layers / 2, cshow[3] = {0, G / 2, G - 1};
            for (int ci = 0; ci < 3; ci++) {
                const int c = cshow[ci];
                const long long t0 = t[((size_t)c * nph + 5 * lshow) * NTP + 0];
                printf("timeline CTA %d layer %d (µs from its q|k|v phase's start):\n  phases (start / input / units / done / left):", c, lshow);
                for (int p = 0; p < 10 && 5 * lshow + p < nph; p++) {
                    const long long *q = &t[((size_t)c * nph + 5 * lshow + p) * NTP];
                    if (PLB_OFUSE && p % 5 == 2) continue; /* no o phase */
                    char in[16] = "-"; /* the attention's point 5: on its CTAs only */
                    if (p % 5 != 1 || c >= G - (PLB_OFUSE ? NQ : 1) * NH) snprintf(in, sizeof in, "%.2f", (q[5] - t0) / cyc_us);
                    printf(" %s%s %.2f/%s/%.2f/%.2f/%.2f", p >= 5 ? "+" : "", pn[p % 5], (q[0] - t0) / cyc_us, in,
                           (q[1] - t0) / cyc_us, (q[2] - t0) / cyc_us, (q[3] - t0) / cyc_us);
                }
                printf("\n  the warps' ends of units:\n");
                for (int p = 0; p < 5; p++) {
                    if (p == 1 || (PLB_OFUSE && p == 2)) continue;
                    printf("    %-5s", pn[p]);
                    for (int w = 0; w < NCW; w++) printf(" %.2f", (wt[((size_t)c * nph + 5 * lshow + p) * NCW + w] - t0) / cyc_us);
                    printf("\n");
                }
                printf("  unit (layer matrix u): loader waits (stage, hold) / issues / group waits / codes there\n");
                for (int k = 0; k < LTU * layers; k++) {
                    int l, m, u;
                    if (!unit_ph(c, k, &l, &m, &u) || l < lshow || l > lshow + 1) continue;
                    const long long *q = &lt[((size_t)c * LTU * layers + k) * LTP];
                    printf("    %d %s %4d: %7.2f %7.2f %7.2f %7.2f\n", l, pn[pofm[m]], u, (q[0] - t0) / cyc_us,
                           (q[1] - t0) / cyc_us, (q[2] - t0) / cyc_us, (q[3] - t0) / cyc_us);
                }
            }
            /* medians over CTAs and layers 1..: the copy's issue from its phase's start, the group's
             * wait, the loader's wait for the stage */
            printf("units (medians over CTAs and layers 1..; µs): issue - its phase's start / group wait / loader wait "
                   "(stage, hold)\n");
            for (int m = 0; m < NMAT; m++) {
                std::vector<double> vi, vw, vl;
                for (int c = 0; c < G; c++) {
                    int k = 0;
                    for (int l = 0; l < layers; l++)
                        for (int mm = 0; mm < NMAT; mm++)
                            for (int ku = 0; unit_of_c(mm, ku, c, G) < n_units(mm); ku++, k++) {
                                if (mm != m || l < 1) continue;
                                const long long *q = &lt[((size_t)c * LTU * layers + k) * LTP];
                                const long long ps = t[((size_t)c * nph + 5 * l + pofm[m]) * NTP + 0];
                                vi.push_back((q[1] - ps) / cyc_us), vw.push_back((q[3] - q[2]) / cyc_us),
                                    vl.push_back((q[1] - q[0]) / cyc_us);
                            }
                }
                printf("  %-5s %7.2f / %5.2f / %5.2f\n", pn[pofm[m]], med(vi), med(vw), med(vl));
            }
        }
        CK(cudaFree(dtr));
    }
    int herr = 0;
    CK(cudaMemcpy(&herr, err, 4, cudaMemcpyDeviceToHost));
    if (herr) printf("device error flag %d\n", herr), rc = 1;
    return rc;
}
