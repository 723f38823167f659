/* Forward of a rank's shard (shard.h) on the `threads` communicator.
 *
 * Column-parallel: the single-rank linear_forward on the shard's rows — each
 * output element is computed exactly as at tp = 1 (same input, same columns).
 *
 * Row-parallel, f32 activations: each rank computes its partial y (n, out)
 * (pieces summed in column order), then tp_allreduce_sum (fixed rank order).
 * Not bit-identical to tp = 1 (the dot products are cut at shard boundaries);
 * the difference is float reassociation, ~1e-7 relative.
 *
 * Row-parallel, int8 activations — EXACT, bit for bit equal to tp = 1:
 *   1. the per-token scale comes from the FULL vector: local absmax, then
 *      tp_allreduce_max (max is exact in any order); every rank quantises its
 *      columns with sx = 127 / max(absmax, 1e-5), as act_quant_int8_ref;
 *   2. each rank computes the integer group dots D (n, out, groups) of its
 *      columns — exact;
 *   3. an ordered chain over ranks rebuilds the kernels' own formula
 *      y = (sum_g s_g * (float)D_g) / sx in group order from 0.0f: rank 0
 *      accumulates its groups, hands (acc, integer carry of a group cut at
 *      its right edge) to rank 1, ..., the last rank divides by sx; the
 *      result is shared with every rank.
 *   A plain float all-reduce would move last bits, and BitNet's int8 rounding
 *   turns last-bit differences into code flips that cascade to ~1e-2 in the
 *   logits (tests/test_ternary_model.c), so int8 needs the exact chain.  Cost:
 *   tp sequential steps of O(n*out*groups) work, and D kept per group. */
#ifndef TL_TP_LINEAR_H
#define TL_TP_LINEAR_H

#include "tp/comm.h"
#include "tp/shard.h"

/* Per-rank scratch, grown on demand (tp_scratch_free). */
typedef struct {
    int8_t *xq;      /* (n, in) quantised activations of this rank's columns */
    float *sx;       /* (n) per-token scales */
    float *xp;       /* (n, piece cols) gathered piece input */
    float *yp;       /* (n, out) piece output */
    int32_t *d;      /* (n, out, groups) integer group dots */
    float *ones;     /* scales of 1 for the single-group kernel path */
    size_t cap_xq, cap_sx, cap_xp, cap_yp, cap_d, cap_ones;
} TpScratch;

void tp_scratch_free(TpScratch *s);
/* Grows s for row-parallel calls of t with up to n tokens, so that the
 * collective calls below never fail half-way on memory.  0 or -1 (err_set). */
int tp_linear_reserve(const TpLinear *t, int64_t n, TpScratch *s);

/* Column-parallel: y (n, t->out) = x (n, t->in) @ W_shard^T.  lin_scratch holds
 * linear_scratch_bytes(n, in).  Returns 0 or -1 (err_set). */
int tp_linear_col(const TpLinear *t, const float *x, int64_t n, float *y, void *lin_scratch);

/* Row-parallel: x (n, t->in) is this rank's slice of the input; y (n, t->out)
 * receives the FULL result (reduced over ranks) on every rank.  Collective:
 * every rank calls it.  Returns 0 or -1 (err_set); on error the rank still
 * took part in the collectives. */
int tp_linear_row(const TpLinear *t, TpComm *c, int rank, const float *x, int64_t n, float *y,
                  TpScratch *s, void *lin_scratch);

#endif
