/* glu_planes_bench.cu — the one-token fused GLU GEMV (7B gate|up, 22016 x
 * 4096) alone, by its input (a development probe, not part of the build):
 *   glu_i8   int8 codes and their scale (tern_cuda_glu_i8);
 *   norm     the folded norm's residual x' and weight w (tern_cuda_glu_i8_norm);
 *   o, o_norm: a 4096 x 4096 o projection from f32, plain or the folded norm's
 *            producer, alone;
 *   o+glu_i8 / o_norm+norm: each GLU after its o projection, as in the step;
 *   linked: o_norm+norm with the GLU reading what the producer wrote.
 * R calls on R copies of the weights (>= 256 MB: from HBM) in one CUDA graph,
 * median of 21 replays / R.  Timing only (the inputs are not a real step's).
 * --once: each form called once, no graph, on a 2048 x 4096 GLU and the
 * bulk-copy f32 form on 8192 x 4096, under the bulk-copy variants 63520,
 * 64520, 65520, 66521, 62330 and the dispatch's (for compute-sanitizer).
 * Build (after make): nvcc -O3 -arch=sm_90a -std=c++17 -Isrc -Ikernels -I.
 *   kernels/cuda/dev/glu_planes_bench.cu build/libternlab.a -lcudart -lcublas
 *   -lnccl -lgomp -o build/glu_planes_bench */
#include <cuda_runtime.h>

#include <algorithm>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <vector>

#include "dev_util.cuh"
#include "cuda/tern_cuda.h"
extern "C" {
#include "core/dtype.h"
#include "core/err.h"
#include "quant/quant.h"
}

#define TL(x)                                                                  \
    do {                                                                       \
        if ((x) < 0) {                                                         \
            fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, err_msg()); \
            exit(1);                                                           \
        }                                                                      \
    } while (0)

static uint64_t g_rng = 88172645463325252ull;
static uint64_t rnd(void) {
    g_rng ^= g_rng << 13, g_rng ^= g_rng >> 7, g_rng ^= g_rng << 17;
    return g_rng;
}

static void make(int64_t rows, int64_t cols, TernaryMatrix *W) {
    std::vector<int8_t> q((size_t)(rows * cols));
    for (auto &e : q) e = (int8_t)((int)(rnd() % 3) - 1);
    std::vector<float> s((size_t)rows);
    for (auto &e : s) e = 0.25f + (float)(rnd() % 1000) / 1000.0f;
    TL(tern_from_codes(q.data(), s.data(), rows, cols, QG_ROW, DT_BF16, W));
}

template <typename F>
static double time_graph(cudaStream_t s, int R, F fn) {
    for (int i = 0; i < R; i++) fn(i);
    CK(cudaStreamSynchronize(s));
    cudaGraph_t g;
    cudaGraphExec_t ge;
    CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    for (int i = 0; i < R; i++) fn(i);
    CK(cudaStreamEndCapture(s, &g));
    CK(cudaGraphInstantiate(&ge, g, 0));
    for (int i = 0; i < 3; i++) CK(cudaGraphLaunch(ge, s));
    cudaEvent_t a, b;
    CK(cudaEventCreate(&a));
    CK(cudaEventCreate(&b));
    std::vector<double> t;
    for (int i = 0; i < 21; i++) {
        CK(cudaEventRecord(a, s));
        CK(cudaGraphLaunch(ge, s));
        CK(cudaEventRecord(b, s));
        CK(cudaEventSynchronize(b));
        float ms;
        CK(cudaEventElapsedTime(&ms, a, b));
        t.push_back(ms * 1e3 / R);
    }
    std::sort(t.begin(), t.end());
    cudaGraphExecDestroy(ge);
    cudaGraphDestroy(g);
    return t[t.size() / 2];
}

int main(int argc, char **argv) {
    const bool once = argc > 1 && !strcmp(argv[1], "--once");
    const int64_t N = once ? 2048 : 22016, K = 4096, H = 4096;
    const int R = once ? 1 : 12;
    TernaryMatrix W, O;
    make(N, K, &W);
    make(H, H, &O);
    std::vector<TernCudaMatrix> dW((size_t)R), dO((size_t)R);
    for (int i = 0; i < R; i++) {
        TL(tern_cuda_upload(&W, &dW[(size_t)i]));
        TL(tern_cuda_upload(&O, &dO[(size_t)i]));
    }
    cudaStream_t s;
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    int8_t *xq;
    float *sx, *x, *w, *h, *ss, *att;
    unsigned *mx;
    CK(cudaMalloc(&xq, K));
    CK(cudaMalloc(&sx, 4));
    CK(cudaMalloc(&x, K * 4));
    CK(cudaMalloc(&w, K * 4));
    CK(cudaMalloc(&att, H * 4));
    CK(cudaMalloc(&h, N / 2 * 4));
    CK(cudaMalloc(&ss, TERN_NORM_SLOTS * 4));
    CK(cudaMalloc(&mx, 16));
    std::vector<float> hx((size_t)K);
    for (auto &e : hx) e = (float)(rnd() % 2000) / 1000.0f - 1.0f;
    CK(cudaMemcpy(x, hx.data(), K * 4, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(w, hx.data(), K * 4, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(att, hx.data(), H * 4, cudaMemcpyHostToDevice));
    CK(cudaMemset(xq, 1, K));
    const float one = 1.0f, mxf = 1.0f;
    CK(cudaMemcpy(sx, &one, 4, cudaMemcpyHostToDevice));
    for (int i = 0; i < 4; i++) CK(cudaMemcpy(mx + i, &mxf, 4, cudaMemcpyHostToDevice));
    std::vector<float> hs(TERN_NORM_SLOTS, 4096.0f / 128);
    CK(cudaMemcpy(ss, hs.data(), TERN_NORM_SLOTS * 4, cudaMemcpyHostToDevice));
    const TernNormIn ni = {x, w, mx, ss, 128, 1e-5f};
    /* (the o projection's outputs go to spare buffers: the GLU's inputs stay as set) */
    float *res, *yo, *sso;
    unsigned *omax;
    CK(cudaMalloc(&res, H * 4));
    CK(cudaMalloc(&yo, H * 4));
    CK(cudaMalloc(&sso, TERN_NORM_SLOTS * 4));
    CK(cudaMalloc(&omax, 4));
    CK(cudaMemset(res, 0, H * 4));
    TernNormOut no = {res, w, omax, sso, 0};
    if (once) {
        TernaryMatrix F;
        TernCudaMatrix dF;
        make(8192, K, &F);
        TL(tern_cuda_upload(&F, &dF));
        float *yf;
        CK(cudaMalloc(&yf, 8192 * 4));
        for (int var : {0, 63520, 64520, 65520, 66521, 62330}) {
            const int old = tern_cuda_decode_variant(var);
            TL(tern_cuda_glu_i8(&dW[0], xq, sx, 0, h, mx + 1, s));
            printf("%d glu: %s\n", var, tern_cuda_last_config());
            TL(tern_cuda_glu_i8_norm(&dW[0], &ni, 0, h, mx + 1, s));
            printf("%d glu norm: %s\n", var, tern_cuda_last_config());
            TL(tern_cuda_matmul_i8_f32x(&dF, x, mx + 2, yf, s));
            printf("%d f32x: %s\n", var, tern_cuda_last_config());
            tern_cuda_decode_variant(old);
        }
        TL(tern_cuda_matmul_i8_f32x_norm(&dO[0], att, mx + 2, &no, s));
        CK(cudaStreamSynchronize(s));
        printf("once: done\n");
        return 0;
    }
    const double t_i8 = time_graph(s, R, [&](int i) { TL(tern_cuda_glu_i8(&dW[(size_t)i], xq, sx, 0, h, mx + 1, s)); });
    const double t_n = time_graph(s, R, [&](int i) { TL(tern_cuda_glu_i8_norm(&dW[(size_t)i], &ni, 0, h, mx + 1, s)); });
    const double t_o = time_graph(s, R, [&](int i) { TL(tern_cuda_matmul_i8_f32x(&dO[(size_t)i], att, mx + 2, yo, s)); });
    const double t_on = time_graph(s, R, [&](int i) { TL(tern_cuda_matmul_i8_f32x_norm(&dO[(size_t)i], att, mx + 2, &no, s)); });
    const double t_oi8 = time_graph(s, R, [&](int i) {
        TL(tern_cuda_matmul_i8_f32x(&dO[(size_t)i], att, mx + 2, yo, s));
        TL(tern_cuda_glu_i8(&dW[(size_t)i], xq, sx, 0, h, mx + 1, s));
    });
    const double t_ov = time_graph(s, R, [&](int i) {
        TL(tern_cuda_matmul_i8_f32x_norm(&dO[(size_t)i], att, mx + 2, &no, s));
        TL(tern_cuda_glu_i8_norm(&dW[(size_t)i], &ni, 0, h, mx + 1, s));
    });
    /* linked: the GLU reads what the o projection wrote (x', the slots, the max), as in the step */
    TernNormIn ni_l = {res, w, omax, sso, 0, 1e-5f};
    const double t_ol = time_graph(s, R, [&](int i) {
        TL(tern_cuda_matmul_i8_f32x_norm(&dO[(size_t)i], att, mx + 2, &no, s));
        ni_l.n_ss = no.n_ss;
        TL(tern_cuda_glu_i8_norm(&dW[(size_t)i], &ni_l, 0, h, mx + 1, s));
    });
    printf("us per call: glu_i8 %.2f norm %.2f | o %.2f o_norm %.2f | o+glu_i8 %.2f o_norm+norm %.2f linked %.2f\n",
           t_i8, t_n, t_o, t_on, t_oi8, t_ov, t_ol);
    return 0;
}
