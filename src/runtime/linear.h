/* One linear layer on the CPU: dense f32 through OpenBLAS, ternary through the
 * packed kernels, with BitNet's per-token int8 activations where asked. */
#ifndef TL_LINEAR_H
#define TL_LINEAR_H

#include "runtime/model.h"

/* y (n, out) = x (n, in) @ W^T.  `scratch` holds at least n*in floats + n*in
 * bytes + n floats (see linear_scratch_bytes); x is not modified. */
void linear_forward(const Linear *lin, const float *x, int64_t n, float *y, void *scratch);
size_t linear_scratch_bytes(int64_t n, int64_t in);
void linear_free(Linear *lin);

#endif
