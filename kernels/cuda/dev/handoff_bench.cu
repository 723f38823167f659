/* handoff_bench.cu — what one kernel boundary costs in a chain of dependent
 * kernels captured in a CUDA graph, by how the next kernel learns that the
 * previous one is done (a development probe, not part of the build):
 *   mode 0: plain launches (the graph's own ordering);
 *   mode 1: programmatic dependent launch, griddepcontrol.wait then
 *           launch_dependents (what the step's kernels do now);
 *   mode 2: programmatic dependent launch, a counter per hop: every CTA of
 *           kernel i adds 1 (release) after its work, kernel i + 1's CTAs
 *           poll it (acquire) until it reaches kernel i's grid, then trigger.
 * Each CTA reads 8 values of the previous kernel's output and writes one per
 * thread, so the chain's result checks the ordering (every value = hops).
 * Build: nvcc -O3 -arch=sm_90a -o handoff_bench handoff_bench.cu
 * (H200, nineteenth session: NOTES.md) */
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <algorithm>
#include <vector>

#include "dev_util.cuh"

template <int MODE>
__global__ void hop(const float *in, float *out, int n, unsigned *ctr, int hopi, unsigned expect,
                    int spin_ns) {
    extern __shared__ float sm[];
    if (MODE == 1) {
        asm volatile("griddepcontrol.wait;" ::: "memory");
        asm volatile("griddepcontrol.launch_dependents;");
    } else if (MODE == 2) {
        if (hopi > 0 && threadIdx.x == 0) {
            while (ld_acquire(ctr + hopi - 1) < expect)
                if (spin_ns) __nanosleep(spin_ns);
        }
        __syncthreads();
        asm volatile("griddepcontrol.launch_dependents;");
    }
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    float m = 0.f;
    for (int j = 0; j < 8; j++) m = fmaxf(m, in[(i * 7 + j * 977) % n]);
    sm[threadIdx.x] = m;
    __syncthreads();
    out[i] = sm[(threadIdx.x + 1) % blockDim.x] + 1.f;
    if (MODE == 2) {
        __syncthreads();
        if (threadIdx.x == 0) red_release(ctr + hopi, 1u);
    }
}

/* The chain's time per kernel (us, median of `reps` replays of one graph of
 * `hops` kernels of G CTAs of B threads, smem bytes of dynamic shared memory,
 * at least 4 B); *ok: every value of the result = hops. */
static float chain_us(cudaStream_t s, int hops, int reps, int G, int B, int smem, int mode, int spin, bool *ok) {
    const int n = G * B;
    float *b[2];
    unsigned *ctr;
    CK(cudaMalloc(&b[0], n * sizeof(float)));
    CK(cudaMalloc(&b[1], n * sizeof(float)));
    CK(cudaMalloc(&ctr, hops * sizeof(unsigned)));
    cudaGraph_t g;
    cudaGraphExec_t ge;
    CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    CK(cudaMemsetAsync(b[0], 0, n * sizeof(float), s));
    CK(cudaMemsetAsync(ctr, 0, hops * sizeof(unsigned), s));
    for (int h = 0; h < hops; h++) {
        cudaLaunchConfig_t cfg = {};
        cfg.gridDim = dim3(G);
        cfg.blockDim = dim3(B);
        cfg.dynamicSmemBytes = smem;
        cfg.stream = s;
        cudaLaunchAttribute at[1];
        at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
        at[0].val.programmaticStreamSerializationAllowed = 1;
        cfg.attrs = at;
        cfg.numAttrs = (mode > 0 && h > 0) ? 1 : 0;
        const float *in = b[h & 1];
        float *out = b[(h + 1) & 1];
        void (*k)(const float *, float *, int, unsigned *, int, unsigned, int) =
            mode == 0 ? hop<0> : mode == 1 ? hop<1> : hop<2>;
        CK(cudaLaunchKernelEx(&cfg, k, in, out, n, ctr, h, (unsigned)G, spin));
    }
    CK(cudaStreamEndCapture(s, &g));
    CK(cudaGraphInstantiate(&ge, g, 0));
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    std::vector<float> t;
    for (int r = 0; r < reps; r++) {
        CK(cudaEventRecord(e0, s));
        CK(cudaGraphLaunch(ge, s));
        CK(cudaEventRecord(e1, s));
        CK(cudaEventSynchronize(e1));
        float ms;
        CK(cudaEventElapsedTime(&ms, e0, e1));
        t.push_back(ms);
    }
    std::sort(t.begin(), t.end());
    std::vector<float> hv(n);
    CK(cudaMemcpy(hv.data(), b[hops & 1], n * sizeof(float), cudaMemcpyDeviceToHost));
    *ok = true;
    for (int i = 0; i < n; i++) *ok = *ok && hv[i] == (float)hops;
    CK(cudaEventDestroy(e0));
    CK(cudaEventDestroy(e1));
    CK(cudaGraphExecDestroy(ge));
    CK(cudaGraphDestroy(g));
    CK(cudaFree(b[0]));
    CK(cudaFree(b[1]));
    CK(cudaFree(ctr));
    return t[reps / 2] * 1000.f / hops;
}

/* handoff_bench: grids x shared memory x mode; handoff_bench b: the same
 * threads in fewer, larger CTAs (modes 0 and 1) */
int main(int argc, char **argv) {
    const int hops = 128, reps = 21;
    for (int m = 0; m < 3; m++) {
        void (*k)(const float *, float *, int, unsigned *, int, unsigned, int) = m == 0 ? hop<0> : m == 1 ? hop<1> : hop<2>;
        CK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, 220 * 1024));
    }
    cudaStream_t s;
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    bool ok;
    if (argc > 1) {
        const int bgrid[][2] = {{132, 1024}, {264, 512}, {528, 256}, {1056, 128}, {33, 1024}, {132, 256}};
        printf("grid block mode  us/hop\n");
        for (auto &gb : bgrid)
            for (int mode = 0; mode < 2; mode++) {
                const float us = chain_us(s, hops, reps, gb[0], gb[1], 4096, mode, 0, &ok);
                printf("%5d %5d %4d %7.3f %s\n", gb[0], gb[1], mode, us, ok ? "ok" : "WRONG");
            }
        return 0;
    }
    printf("grid smemKB mode spin  us/hop  check\n");
    for (int G : {132, 264, 528, 1056})
        for (int smem : {0, 100 * 1024, 200 * 1024})
            for (int mode = 0; mode < 3; mode++)
                for (int spin : {0, 32}) {
                    if (mode != 2 && spin) continue;
                    const float us = chain_us(s, hops, reps, G, 256, smem + 1024, mode, spin, &ok);
                    printf("%5d %6d %4d %4d %7.3f  %s\n", G, smem / 1024, mode, spin, us, ok ? "ok" : "WRONG");
                    fflush(stdout);
                }
    return 0;
}
