/* tern_trace.cuh — a timing probe for development builds only (nvcc
 * -DTERN_TRACE=1; never in the default build): every kernel's pdl_wait()
 * records, from thread 0 of each CTA, the global timer before and after
 * griddepcontrol.wait, its SM, CTA, grid size and the call site (a hash of
 * the file name and the line).  Sorted by the time after the wait, the
 * records of one stream fall into launches in order (a launch's CTAs all pass
 * the wait before the next launch's can), so a decode step's critical path
 * splits into each kernel's share: from its wait's release to the next
 * kernel's.  The engine dumps one graph replay (TERNLAB_TRACE=FILE,
 * src/runtime/cuda_engine.cu); scripts/trace_step.py sums it up. */
#ifndef TL_TERN_TRACE_CUH
#define TL_TERN_TRACE_CUH
#ifdef TERN_TRACE

#include <cuda_runtime.h>
#include <vector>

struct TernTraceRec {
    unsigned long long t0, t1; /* global timer (ns) before and after the wait */
    unsigned file, line, cta, sm, grid, pad; /* pad: the kind, 0 a wait, 1 a mark */
};

/* FNV-1a of the call site's file name, evaluated by the compiler */
__host__ __device__ constexpr unsigned tern_trace_hash(const char *s, unsigned h = 2166136261u) {
    return *s ? tern_trace_hash(s + 1, (h ^ (unsigned char)*s) * 16777619u) : h;
}

/* each translation unit has its own copy of the device variables (no
 * relocatable device code): every copy registers a setter, and
 * tern_trace_setup sets them all */
static __device__ TernTraceRec *g_tr_buf;
static __device__ unsigned *g_tr_n;
static __device__ unsigned g_tr_cap;

typedef void (*TernTraceSetter)(TernTraceRec *, unsigned *, unsigned);
inline std::vector<TernTraceSetter> &tern_trace_setters() {
    static std::vector<TernTraceSetter> v;
    return v;
}
static void tern_trace_set_tu(TernTraceRec *b, unsigned *n, unsigned cap) {
    cudaMemcpyToSymbol(g_tr_buf, &b, sizeof b);
    cudaMemcpyToSymbol(g_tr_n, &n, sizeof n);
    cudaMemcpyToSymbol(g_tr_cap, &cap, sizeof cap);
}
static const int g_tr_registered = (tern_trace_setters().push_back(&tern_trace_set_tu), 0);
inline void tern_trace_setup(TernTraceRec *b, unsigned *n, unsigned cap) {
    (void)g_tr_registered;
    for (TernTraceSetter f : tern_trace_setters()) f(b, n, cap);
}

__device__ __forceinline__ unsigned long long tern_gtimer() {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

/* one record from thread 0 of the CTA: t0, now, kind (0: a wait, 1: a mark) */
__device__ __forceinline__ void tern_trace_put(unsigned file, unsigned line, unsigned long long t0,
                                               unsigned kind) {
    if (threadIdx.x == 0 && threadIdx.y == 0 && g_tr_buf) {
        const unsigned long long b = tern_gtimer();
        unsigned sm;
        asm volatile("mov.u32 %0, %%smid;" : "=r"(sm));
        const unsigned i = atomicAdd(g_tr_n, 1u);
        if (i < g_tr_cap)
            g_tr_buf[i] = {t0, b, file, line, blockIdx.x + blockIdx.y * gridDim.x, sm, gridDim.x * gridDim.y, kind};
    }
}

__device__ __forceinline__ void tern_pdl_wait_traced(unsigned file, unsigned line) {
    const unsigned long long a = tern_gtimer();
    asm volatile("griddepcontrol.wait;" ::: "memory");
    tern_trace_put(file, line, a, 0);
}

/* a second record of the CTA (kind 1): t0 = tmid (a point the kernel took
 * with TERN_TRACE_NOW), t1 = now */
__device__ __forceinline__ void tern_trace_mark(unsigned file, unsigned line, unsigned long long tmid) {
    tern_trace_put(file, line, tmid, 1);
}

#endif
#endif
