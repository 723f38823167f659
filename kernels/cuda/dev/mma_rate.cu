/* mma_rate.cu — issue rate of the binary tensor-core MMA (mma.m16n8k256
 * .b1 AND.POPC, the one-token GEMV's instruction) and of the int8 MMA
 * (m16n8k32 .s8) on this GPU, for W warps per SM and CH independent
 * accumulator chains per warp: is the one-token GEMV's consumer loop bound by
 * the MMA pipe (rate) or by its latency?
 *   nvcc -O3 -arch=sm_90a -o mma_rate kernels/cuda/dev/mma_rate.cu && ./mma_rate
 * Prints ns and SM cycles per MMA per SM (all warps together) and per warp. */
#include <cuda_runtime.h>

#include <stdint.h>
#include <stdio.h>

#define CK(x)                                                                                  \
    do {                                                                                       \
        cudaError_t e_ = (x);                                                                  \
        if (e_ != cudaSuccess) {                                                               \
            fprintf(stderr, "%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(e_));         \
            return 1;                                                                          \
        }                                                                                      \
    } while (0)

template <int CH, int KIND>
__global__ void rate_kernel(int iters, uint32_t seed, int *out) {
    int d[CH][4] = {};
    uint32_t a0 = seed ^ threadIdx.x, a1 = a0 * 3u, a2 = a0 * 5u, a3 = a0 * 7u, b0 = a0 * 11u, b1 = a0 * 13u;
    for (int i = 0; i < iters; i++) {
#pragma unroll
        for (int c = 0; c < CH; c++) {
            if (KIND == 0)
                asm volatile("mma.sync.aligned.m16n8k256.row.col.s32.b1.b1.s32.and.popc "
                             "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                             : "+r"(d[c][0]), "+r"(d[c][1]), "+r"(d[c][2]), "+r"(d[c][3])
                             : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
            else
                asm volatile("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 "
                             "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                             : "+r"(d[c][0]), "+r"(d[c][1]), "+r"(d[c][2]), "+r"(d[c][3])
                             : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
        }
    }
    int s = 0;
#pragma unroll
    for (int c = 0; c < CH; c++) s += d[c][0] + d[c][1] + d[c][2] + d[c][3];
    if (s == 0x7fffffff) out[0] = s; /* keeps the MMAs */
}

template <int CH, int KIND>
int run(int sms, double clk_ghz, int warps) {
    int *out;
    CK(cudaMalloc(&out, 4));
    const int iters = 4096;
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    rate_kernel<CH, KIND><<<sms, 32 * warps>>>(16, 1u, out);
    CK(cudaGetLastError());
    float best = 1e30f;
    for (int r = 0; r < 5; r++) {
        CK(cudaEventRecord(e0));
        rate_kernel<CH, KIND><<<sms, 32 * warps>>>(iters, (uint32_t)r, out);
        CK(cudaEventRecord(e1));
        CK(cudaEventSynchronize(e1));
        float ms;
        CK(cudaEventElapsedTime(&ms, e0, e1));
        if (ms < best) best = ms;
    }
    const double per_sm = (double)iters * CH * warps; /* MMAs per SM */
    const double ns = best * 1e6 / per_sm;
    printf("%-5s warps/SM %2d chains %d: %7.3f ns per MMA per SM (%6.2f cycles at %.2f GHz), %7.2f cycles "
           "per MMA per warp\n",
           KIND == 0 ? "b1" : "s8", warps, CH, ns, ns * clk_ghz, clk_ghz, ns * clk_ghz * warps);
    cudaFree(out);
    return 0;
}

int main() {
    int dev = 0, sms = 0, khz = 0;
    CK(cudaSetDevice(dev));
    CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    CK(cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, dev));
    const double ghz = khz / 1e6;
    const int ws[] = {1, 4, 8, 16};
    for (int w : ws) {
        if (run<1, 0>(sms, ghz, w) || run<2, 0>(sms, ghz, w) || run<4, 0>(sms, ghz, w) || run<8, 0>(sms, ghz, w))
            return 1;
    }
    for (int w : ws)
        if (run<1, 1>(sms, ghz, w) || run<4, 1>(sms, ghz, w) || run<8, 1>(sms, ghz, w)) return 1;
    return 0;
}
