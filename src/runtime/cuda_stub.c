/* The CUDA backend's functions in a build without CUDA (no nvcc at build
 * time): each says so.  With CUDA, src/runtime/cuda_engine.cu defines them. */
#ifndef TL_HAVE_CUDA
#include "runtime/cuda_engine.h"
#include "core/err.h"

#include <stdio.h>
#include <string.h>

#define NO_CUDA "this build has no CUDA backend (built with HAVE_CUDA=0, or nvcc was not found then)"

int cuda_backend_available(char *why, size_t n) {
    if (why && n) snprintf(why, n, "%s", NO_CUDA);
    return 0;
}
int cuda_engine_open(Engine *e, Model *m, const EngineOpts *o) {
    memset(e, 0, sizeof *e);
    return err_set("--device cuda: %s", NO_CUDA);
}
int cuda_engine_open_synthetic(Engine *e, Model *m, const EngineOpts *o, const CudaSynthetic *syn) {
    memset(e, 0, sizeof *e);
    return err_set("--device cuda: %s", NO_CUDA);
}
int cuda_engine_open_tp(Engine *e, Model *m, const EngineOpts *o, int tp) {
    memset(e, 0, sizeof *e);
    return err_set("--device cuda: %s", NO_CUDA);
}
int cuda_engine_precheck(int tp) { return err_set("--device cuda: %s", NO_CUDA); }
int cuda_engine_is(const Engine *e) { return 0; }
int cuda_device_count(void) { return 0; }
void cuda_prepare_multi_gpu(void) {}
int cuda_engine_info(const Engine *e, CudaEngineInfo *info) {
    memset(info, 0, sizeof *info);
    return err_set("%s", NO_CUDA);
}
int cuda_engine_sync(const Engine *e) { return 0; }
int cuda_engine_chain_ok(const Engine *e) { return 0; }
int cuda_engine_decode_chain(Engine *e, const int *seq, const int64_t *pos0, const int32_t *tok0, int B,
                             int64_t steps, int32_t *ids, double *t_done) {
    return err_set("%s", NO_CUDA);
}
int cuda_copy_bandwidth(int gpu, size_t bytes, int reps, double *bytes_per_s) {
    return err_set("%s", NO_CUDA);
}
#else
typedef int tl_cuda_stub_unused; /* ISO C: a translation unit is not empty */
#endif
