/* tern_mbar.cuh — mbarriers and the bulk copy engine (TMA), shared by the
 * kernels that stream through shared memory (tern_gemm_wg.cu: 2-D tensor
 * copies; tern_gemv_tma.cu: 1-D bulk copies).  sm_90. */
#ifndef TL_TERN_MBAR_CUH
#define TL_TERN_MBAR_CUH

#include <stdint.h>

namespace tern_mbar {

__device__ __forceinline__ uint32_t saddr(const void *p) {
    return (uint32_t)__cvta_generic_to_shared(p);
}
__device__ __forceinline__ void init(uint32_t bar, int count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
/* makes the initialised barriers visible to the copy engine */
__device__ __forceinline__ void init_fence() {
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}
/* one arrival that also expects `bytes` of transactions (the copies) */
__device__ __forceinline__ void expect_tx(uint32_t bar, int bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes)
                 : "memory");
}
__device__ __forceinline__ void arrive(uint32_t bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
/* waits until the phase of the given parity has completed */
__device__ __forceinline__ void wait(uint32_t bar, uint32_t parity) {
    asm volatile("{\n"
                 ".reg .pred p;\n"
                 "WAIT:\n"
                 "mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n"
                 "@!p bra WAIT;\n"
                 "}\n" ::"r"(bar),
                 "r"(parity)
                 : "memory");
}
/* box at (c0 inner, c1 outer) of a 2-D tensor map into shared memory,
 * completing on bar */
__device__ __forceinline__ void tma_load_2d(uint32_t dst, const void *map, int c0, int c1,
                                            uint32_t bar) {
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes "
                 "[%0], [%1, {%2, %3}], [%4];\n" ::"r"(dst),
                 "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(bar)
                 : "memory");
}
/* tma_load_2d into the same shared-memory offset of every CTA of the
 * cluster in ctamask, each completing on its own barrier at offset bar */
__device__ __forceinline__ void tma_load_2d_mc(uint32_t dst, const void *map, int c0, int c1, uint32_t bar,
                                               uint16_t ctamask) {
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster "
                 "[%0], [%1, {%2, %3}], [%4], %5;\n" ::"r"(dst),
                 "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(bar), "h"(ctamask)
                 : "memory");
}
/* this CTA's rank in its cluster */
__device__ __forceinline__ uint32_t cluster_rank() {
    uint32_t r;
    asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(r));
    return r;
}
/* one arrival on the barrier at offset bar of cluster CTA `rank` (the default
 * semantics, release at CTA scope, as CUTLASS's cluster barriers; a first
 * multicast GEMM with .release.cluster, and multicast on more tile shapes,
 * ran up to 1.6x slower — kernels/cuda/dev/NOTES.md) */
__device__ __forceinline__ void arrive_cluster(uint32_t bar, uint32_t rank) {
    asm volatile("{\n"
                 ".reg .b32 ra;\n"
                 "mapa.shared::cluster.u32 ra, %0, %1;\n"
                 "mbarrier.arrive.shared::cluster.b64 _, [ra];\n"
                 "}\n" ::"r"(bar),
                 "r"(rank)
                 : "memory");
}
/* every thread of the cluster's CTAs meets here (release / acquire at cluster scope) */
__device__ __forceinline__ void cluster_sync() {
    asm volatile("barrier.cluster.arrive.release;\n"
                 "barrier.cluster.wait.acquire;\n" ::
                     : "memory");
}

/* `bytes` contiguous bytes (a multiple of 16, both addresses 16-byte
 * aligned) from global memory into shared memory, completing on bar */
__device__ __forceinline__ void bulk_load(uint32_t dst, const void *src, uint32_t bytes,
                                          uint32_t bar) {
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes "
                 "[%0], [%1], %2, [%3];\n" ::"r"(dst),
                 "l"(src), "r"(bytes), "r"(bar)
                 : "memory");
}

/* bulk_load, with the L2 eviction policy `policy` where hint (evict_first_policy) */
__device__ __forceinline__ void bulk_load(uint32_t dst, const void *src, uint32_t bytes, uint32_t bar, bool hint,
                                          uint64_t policy) {
    if (!hint) return bulk_load(dst, src, bytes, bar);
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint "
                 "[%0], [%1], %2, [%3], %4;\n" ::"r"(dst),
                 "l"(src), "r"(bytes), "r"(bar), "l"(policy)
                 : "memory");
}
/* an L2 policy under which the lines read are the first evicted (a stream read once) */
__device__ __forceinline__ uint64_t evict_first_policy() {
    uint64_t p;
    asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;\n" : "=l"(p));
    return p;
}

/* shared-memory writes of this thread made visible to the copy engine (before
 * a barrier and a tma_store_2d of them) */
__device__ __forceinline__ void fence_async_smem() {
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}
/* box at (c0 inner, c1 outer) of a 2-D tensor map from shared memory (the
 * parts outside the tensor are not written); a bulk group per store_commit */
__device__ __forceinline__ void tma_store_2d(const void *map, int c0, int c1, uint32_t src) {
    asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%1, %2}], [%3];\n" ::"l"(
                     reinterpret_cast<uint64_t>(map)),
                 "r"(c0), "r"(c1), "r"(src)
                 : "memory");
}
__device__ __forceinline__ void store_commit() { asm volatile("cp.async.bulk.commit_group;\n" ::: "memory"); }
/* waits until the committed stores have read their shared memory */
__device__ __forceinline__ void store_wait_read() {
    asm volatile("cp.async.bulk.wait_group.read 0;\n" ::: "memory");
}

} // namespace tern_mbar

#endif
