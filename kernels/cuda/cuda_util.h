/* cuda_util.h — checked CUDA / cuBLAS calls for code that returns errors
 * (STYLE.md rule 5): a failed call records what failed, where, and the CUDA
 * reason through err_set, then `return -1` from the enclosing function.
 * Only main() decides to exit.
 *
 *   CUDA_CHECK(cudaMalloc(&p, n));            // returns -1 from the caller
 *   CUDA_CHECK_LAUNCH("tern_gemv");           // after a <<<>>> launch
 *   CUBLAS_CHECK(cublasGemmEx(...));
 *
 * Usable from .cu files (C++) and from C files that include the CUDA runtime
 * headers (CFLAGS carry -I$(CUDA_HOME)/include when nvcc exists). */
#ifndef TL_CUDA_UTIL_H
#define TL_CUDA_UTIL_H

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#ifdef __cplusplus
extern "C" {
#endif
#include "core/err.h"
#ifdef __cplusplus
}
#endif

/* cuBLAS has no status-to-string in older toolkits' C API; this one is ours. */
static inline const char *tl_cublas_status_name(cublasStatus_t s) {
    switch (s) {
    case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED (no GPU or driver?)";
    case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED (out of device memory)";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE (bad shape or leading dimension)";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "CUBLAS_STATUS_ARCH_MISMATCH";
    case CUBLAS_STATUS_MAPPING_ERROR: return "CUBLAS_STATUS_MAPPING_ERROR";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_INTERNAL_ERROR: return "CUBLAS_STATUS_INTERNAL_ERROR";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED (dtype/compute combination)";
    default: return "unknown cuBLAS status";
    }
}

/* A failed call also clears the runtime's last error (where it is not sticky):
 * left set, a refused call (e.g. an attribute out of range) made the next
 * unrelated launch check report it. */
#define CUDA_CHECK(call)                                                                   \
    do {                                                                                   \
        cudaError_t tl_e_ = (call);                                                        \
        if (tl_e_ != cudaSuccess) {                                                        \
            (void)cudaGetLastError();                                                      \
            return err_set("%s:%d: %s failed: %s (%s)", __FILE__, __LINE__, #call,         \
                           cudaGetErrorString(tl_e_), cudaGetErrorName(tl_e_));            \
        }                                                                                  \
    } while (0)

/* After a kernel launch: catches bad launch configurations at once (and, in
 * a synchronous context, errors of earlier asynchronous work). */
#define CUDA_CHECK_LAUNCH(what)                                                            \
    do {                                                                                   \
        cudaError_t tl_e_ = cudaGetLastError();                                            \
        if (tl_e_ != cudaSuccess)                                                          \
            return err_set("%s:%d: launching %s failed: %s (%s)", __FILE__, __LINE__,      \
                           (what), cudaGetErrorString(tl_e_), cudaGetErrorName(tl_e_));    \
    } while (0)

#define CUBLAS_CHECK(call)                                                                 \
    do {                                                                                   \
        cublasStatus_t tl_s_ = (call);                                                     \
        if (tl_s_ != CUBLAS_STATUS_SUCCESS)                                                \
            return err_set("%s:%d: %s failed: %s", __FILE__, __LINE__, #call,              \
                           tl_cublas_status_name(tl_s_));                                  \
    } while (0)

#endif
