/* Layer-by-layer divergence between two runs of one model on the same tokens
 * (ternlab diff): where does a ternary run leave the reference?
 *
 * Both sides run window 0 (tokens [0, T)) as one sequence.  Per row of the
 * residual stream (embedding output, after each layer, after the final norm —
 * the rows of --dump-layers and the fixtures' ref_layers.f32), per sub-block
 * (attention output = o_proj output, MLP output = down_proj output) and per
 * linear, it reports the relative L2 error ||A - B|| / ||B|| (B is the
 * reference side), max |A - B| and the NaN/Inf counts of each side.
 *
 * How sub-blocks are obtained without touching forward.c: the full forward is
 * run once with RunState.dump (the residual stream per layer).  Then, for each
 * layer l, a one-layer view of the model (cfg.n_layers = 1, layers =
 * &layers[l], embedding table = the dumped residual rows x_l, token ids
 * 0..T-1) is run through the same forward() with the same KV protocol; after
 * each call RunState.att (attention output before o_proj) and RunState.hb
 * (act(gate) * up, before down_proj) still hold that layer's values — forward
 * writes nothing into them after the last layer (a property of forward.c this
 * module relies on; a RunState tap pointer would make it a contract).  From
 * those, o_proj and down_proj are re-applied with linear_forward, giving the
 * attention and MLP contributions and the input of every linear.  Cost: about
 * one extra forward per side.
 *
 * Per-linear error: the same input (side A's activations at that linear)
 * through A's and B's version of the linear, so that the error of a linear is
 * seen alone, without what upstream layers did.
 *
 * KV policy: when either side stores KV ternary, both sides use the
 * split-window protocol of perplexity (first T/2 tokens prefilled, the rest fed
 * one by one through the decode path), so that encoder and decoder policies
 * both act. */
#ifndef TL_DIFF_H
#define TL_DIFF_H

#include "kv/kv_ternary.h"
#include "log/h5log.h"
#include "runtime/model.h"

#include <stdint.h>
#include <stdio.h>

#define DIFF_DEFAULT_THRESHOLD 1e-2

/* One side's settings: "quant=SPEC|loaded,kv=POLICY,dense=0|1" (any subset, any
 * order; commas inside the quant spec stay with it: a comma-separated item that
 * does not start with a known key continues the previous value; ';' also
 * separates).  device=cpu and tp=1 are accepted (the only values this build
 * runs). */
typedef struct {
    char quant[256]; /* "" = weights as loaded */
    int dense;       /* ModelLoadOpts.dense: the reference twin */
    KvPolicy kv;
    char desc[384];  /* canonical text for tables and HDF5 */
} DiffSide;

/* Returns 0, or -1 with err_set naming the bad item and the valid keys. */
int diff_side_parse(const char *s, DiffSide *out);
/* Loads the model at `path` with the side's quant/dense settings. */
int diff_side_load(const char *path, const DiffSide *s, Model *m);

typedef struct {
    double rel_l2;          /* ||A-B||/||B|| (0 when both are 0, inf when only B is); NaN
                             * when any element of either side is not finite */
    double max_abs;         /* max |A-B| over elements finite on both sides */
    int64_t nonfinite_a, nonfinite_b;
} DiffStat;

typedef struct {
    int n_layers, T, hidden;
    double threshold;
    int have_blocks;  /* attn/mlp/lin are valid (both sides are model runs, not a dump) */
    DiffStat *resid;  /* n_layers + 2 rows: embedding, after each layer, final norm */
    DiffStat *attn;   /* n_layers */
    DiffStat *mlp;    /* n_layers */
    int n_lin;        /* 7 * n_layers (q k v o gate up down per layer) */
    char (*lin_name)[96];
    DiffStat *lin;
    /* first row (in forward order: attn_l, mlp_l, residual after l) whose rel_l2
     * exceeds threshold or is NaN; first_layer -1 when none; the embedding row is
     * layer -1 only if it crosses (then first_layer = -1 and first_block
     * "embed"), the final norm is layer n_layers */
    int first_layer;
    char first_block[16]; /* "attn", "mlp", "resid", "embed", "final_norm", "" */
    double first_value;
} DiffResult;

/* Compares model runs A (model a, KV policy pa) and B (model b, policy pb) on
 * tok[0..T), or A against a raw dump b_dump (n_layers+2, T, hidden) when b is
 * NULL (then only residual rows are compared: have_blocks = 0).  A and B must
 * have the same configuration.  The models' RoPE tables may grow (as in any
 * forward).  Returns 0, or -1 with err_set; r is filled on success and owns
 * its arrays (diff_result_free). */
int diff_compare(Model *a, const KvPolicy *pa, Model *b, const KvPolicy *pb, const float *b_dump,
                 const int32_t *tok, int T, double threshold, DiffResult *r);
void diff_result_free(DiffResult *r);

/* The table (residual rows, sub-blocks, first crossing, per-linear errors). */
void diff_print(const DiffResult *r, const char *a_desc, const char *b_desc, FILE *f);
/* Writes `group` (e.g. "/diff"): datasets row_name, resid_{rel_l2,max_abs,
 * nonfinite_a,nonfinite_b}, and when have_blocks attn_*, mlp_*, linear/name,
 * linear/out_{rel_l2,max_abs,nonfinite_a,nonfinite_b}; attributes a, b,
 * threshold, window, have_blocks, first_layer, first_block, first_value.  Returns 0 or -1 (err_set). */
int diff_write_h5(H5Log *lg, const char *group, const DiffResult *r, const char *a_desc,
                  const char *b_desc);

/* The statistic of one pair of arrays (exposed for tests). */
DiffStat diff_stat(const float *a, const float *b, int64_t n);

#endif
