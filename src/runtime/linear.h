/* One linear layer on the CPU: dense f32 through OpenBLAS, ternary through the
 * packed kernels (kernels/cpu), with BitNet's per-token int8 activations where
 * asked.  Also how a checkpoint's linear becomes a Linear (dense, native BitNet
 * packed, or ternarised under a QuantSpec). */
#ifndef TL_LINEAR_H
#define TL_LINEAR_H

#include "runtime/model.h"

/* y (n, out) = x (n, in) @ W^T.  `scratch` holds linear_scratch_bytes(n, in);
 * x is not modified.  Returns 0, or -1 (err_set) on a kernel error. */
int linear_forward(const Linear *lin, const float *x, int64_t n, float *y, void *scratch);
size_t linear_scratch_bytes(int64_t n, int64_t in);
void linear_free(Linear *lin);
/* Bytes the forward reads for this linear's weights (packed codes + scales, or f32). */
size_t linear_bytes(const Linear *lin);

/* How many decoder linears an act-only --quant (QuantSpec.act_only) kept as
 * loaded (ternary already: their activations alone changed); 7 x n_layers when
 * the weights are all the checkpoint's own, 0 when every one was dense and got
 * ternarised with the defaults. */
int model_act_only_kept(const Model *m);
/* "dense f32", "ternary (rule=..., act int8)", ... for load reports. */
void linear_describe(const Linear *lin, char *buf, size_t n);

#endif
