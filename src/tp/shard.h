/* The shard plan: how a model's linears split over tp ranks (Megatron-style).
 *
 *   column-parallel  q, k, v, gate, up, lm_head: output rows [r0, r1) of W; the
 *                    input (the full normed hidden vector) is replicated, the
 *                    output is this rank's heads / inter slice / vocab slice.
 *   row-parallel     o, down: input columns [c0, c1) of W; every rank produces a
 *                    partial (n, out) that is summed over ranks (tp_linear.c).
 *   heads            rank r owns query heads [r*H/tp, (r+1)*H/tp) and KV heads
 *                    [r*KV/tp, ...): whole GQA groups, so attention is local.
 *
 * Scales follow their weights.  Column shards take their rows' scales (per-row,
 * per-group); a per-tensor scale is replicated.  A column shard whose start
 * c0 is not on a scale-group boundary holds a partial group: TernaryMatrix wants
 * groups that start at column 0, so the shard is cut into pieces at group
 * boundaries —
 *     head  [c0, next boundary)  a "row"-group piece whose one scale per row is
 *                                that group's scale (duplicated on this rank);
 *     rest  [boundary, c1)       the original group size, groups aligned.
 * Every piece is re-packed from its own codes (tern_from_codes), so no rank
 * reads another rank's packed bytes.  Dense (f32) linears are sliced the same way.
 *
 * Refused splits (tp_plan_check): KV heads are never replicated — a tp that does
 * not divide num_key_value_heads (e.g. 4 KV heads at tp = 8, 2 at tp = 4) is an
 * error naming the model, the head counts and tp; likewise intermediate_size. */
#ifndef TL_TP_SHARD_H
#define TL_TP_SHARD_H

#include "runtime/model.h"

typedef enum { TP_SPLIT_ROWS = 0, TP_SPLIT_COLS } TpSplit;

typedef struct {
    int64_t col0;   /* first column of the shard's input this piece reads */
    Linear lin;     /* (out, piece cols); owned */
    int cut_left;   /* its first scale group began on the previous rank */
    int cut_right;  /* its last scale group continues on the next rank */
} TpPiece;

typedef struct {
    TpSplit split;
    int64_t out, in;    /* shard shape: y (n, out) = x (n, in) @ W_shard^T */
    int64_t lo, hi;     /* rows (TP_SPLIT_ROWS) or columns (TP_SPLIT_COLS) of the full W */
    int act_int8;       /* per-token int8 activations (computed on the FULL vector) */
    int ternary;        /* pieces hold TernaryMatrix codes (packed or twin) */
    int twin;           /* dense reference twin of a ternary linear */
    int n_pieces;
    TpPiece *pieces;
    int64_t dup_scales; /* scales this rank holds that another rank holds too */
} TpLinear;

/* Checks that cfg splits over tp ranks.  Returns 0, or -1 with err_set naming
 * the model (`name`), the head counts and tp. */
int tp_plan_check(const ModelConfig *cfg, int tp, const char *name);

/* [lo, hi) of a dimension of `total` units split over tp ranks (rank's share;
 * units = heads for attention, rows/columns otherwise). */
void tp_range(int64_t total, int tp, int rank, int64_t *lo, int64_t *hi);

/* Builds rank's shard of `full`: rows [lo, hi) (TP_SPLIT_ROWS) or columns
 * [lo, hi) (TP_SPLIT_COLS).  The shard owns copies; `full` is only read.
 * Returns 0 or -1 (err_set). */
int tp_shard_linear(const Linear *full, TpSplit split, int64_t lo, int64_t hi, TpLinear *out);
void tp_linear_free(TpLinear *t);

/* Bytes the rank's forward reads for this shard (linear_bytes of its pieces:
 * packed codes with their row padding + scales, or f32). */
size_t tp_linear_bytes(const TpLinear *t);
/* Payload of a linear / a shard in bits: 2 per ternary weight + the scales'
 * bits, or 32 per f32 weight (for a twin: its f32 weights) — what the weights
 * are worth without the packed layout's row padding.  A shard's payload counts
 * its duplicated scales (dup_scales). */
int64_t tp_linear_payload_bits(const Linear *l);
int64_t tp_shard_payload_bits(const TpLinear *t);
/* Bits per scale of this shard (0 when dense). */
int64_t tp_shard_scale_bits(const TpLinear *t);

#endif
