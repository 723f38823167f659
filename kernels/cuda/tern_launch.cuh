/* tern_launch.cuh — launching a kernel as a programmatic dependent of the
 * previous kernel on its stream (tern_cuda_pdl): its blocks may start while
 * that kernel still runs, so the kernel must execute pdl_wait() before it
 * reads or writes anything earlier kernels touch (what it reads that no
 * kernel writes, such as weights, it may fetch before).  The wait returns
 * once the previous grid has completed and its writes are visible; since
 * that grid waited for its own predecessor, the order is transitive.  A
 * kernel launched without the attribute starts after the previous one
 * completes, and pdl_wait() costs it nothing. */
#ifndef TL_TERN_LAUNCH_CUH
#define TL_TERN_LAUNCH_CUH

#include <cuda_runtime.h>
#include <stddef.h>

#include "cuda/cuda_util.h"
#include "cuda/tern_cuda.h"

#ifdef TERN_TRACE /* the timing probe (tern_trace.cuh): the wait, timed at every call site */
#include "cuda/tern_trace.cuh"
template <unsigned F>
struct TernTraceFile {
    static constexpr unsigned v = F;
};
#define pdl_wait() tern_pdl_wait_traced(TernTraceFile<tern_trace_hash(__FILE__)>::v, __LINE__)
#define TERN_TRACE_NOW(tvar) const unsigned long long tvar = tern_gtimer()
#define TERN_TRACE_END(tvar) tern_trace_mark(TernTraceFile<tern_trace_hash(__FILE__)>::v, __LINE__, tvar)
#else
#define TERN_TRACE_NOW(tvar)
#define TERN_TRACE_END(tvar)
__device__ __forceinline__ void pdl_wait() { asm volatile("griddepcontrol.wait;" ::: "memory"); }
#endif

/* Lets the next kernel on the stream, when it is launched as a programmatic
 * dependent, start its blocks now; it still waits (pdl_wait) for this whole
 * grid before touching what this grid writes. */
__device__ __forceinline__ void pdl_trigger() {
    asm volatile("griddepcontrol.launch_dependents;");
}

/* kernel<<<grid, block, smem, s>>>(args...) in clusters of cluster_x CTAs
 * along x (1: none), a programmatic dependent of the previous kernel on s
 * when pdl; `what` names it in errors. */
template <typename... P, typename... A>
int tern_launch_cl(const char *what, void (*kernel)(P...), dim3 grid, dim3 block, size_t smem,
                   cudaStream_t s, bool pdl, unsigned cluster_x, A &&...args) {
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = grid;
    cfg.blockDim = block;
    cfg.dynamicSmemBytes = smem;
    cfg.stream = s;
    cudaLaunchAttribute attr[2];
    unsigned na = 0;
    if (pdl) {
        attr[na].id = cudaLaunchAttributeProgrammaticStreamSerialization;
        attr[na++].val.programmaticStreamSerializationAllowed = 1;
    }
    if (cluster_x > 1) {
        attr[na].id = cudaLaunchAttributeClusterDimension;
        attr[na].val.clusterDim.x = cluster_x;
        attr[na].val.clusterDim.y = 1;
        attr[na++].val.clusterDim.z = 1;
    }
    cfg.attrs = attr;
    cfg.numAttrs = na;
    const cudaError_t e = cudaLaunchKernelEx(&cfg, kernel, static_cast<P>(args)...);
    if (e != cudaSuccess) {
        (void)cudaGetLastError(); /* (not left for the next launch check to report) */
        return err_set("launching %s failed: %s (%s)", what, cudaGetErrorString(e),
                       cudaGetErrorName(e));
    }
    return 0;
}
/* the same without clusters */
template <typename... P, typename... A>
int tern_launch_ex(const char *what, void (*kernel)(P...), dim3 grid, dim3 block, size_t smem,
                   cudaStream_t s, bool pdl, A &&...args) {
    return tern_launch_cl(what, kernel, grid, block, smem, s, pdl, 1u, static_cast<A &&>(args)...);
}
/* the same, a programmatic dependent when tern_cuda_pdl_get() */
template <typename... P, typename... A>
int tern_launch_pdl_smem(const char *what, void (*kernel)(P...), dim3 grid, dim3 block,
                         size_t smem, cudaStream_t s, A &&...args) {
    return tern_launch_ex(what, kernel, grid, block, smem, s, tern_cuda_pdl_get() != 0,
                          static_cast<A &&>(args)...);
}
template <typename... P, typename... A>
int tern_launch_pdl(const char *what, void (*kernel)(P...), dim3 grid, dim3 block, cudaStream_t s,
                    A &&...args) {
    return tern_launch_pdl_smem(what, kernel, grid, block, 0, s, static_cast<A &&>(args)...);
}

#endif
