/* The load report (what was loaded, how each linear runs, which kernel runs each
 * op on this machine and every fallback taken, with the reason) and capacity at
 * a memory budget (how many KV tokens fit next to the weights).  For `ternlab
 * info` and the run files.  No silent fallback: anything that is not the fast
 * path the machine could take is listed under "fallbacks". */
#ifndef TL_REPORT_H
#define TL_REPORT_H

#include "log/h5log.h"
#include "runtime/model.h"

#include <stdint.h>
#include <stdio.h>

/* One weight matrix as loaded: the embedding, each decoder linear, lm_head. */
typedef struct {
    char name[96];
    int layer;        /* decoder layer, -1 for embedding / lm_head */
    char stored[300]; /* checkpoint format: "dense BF16", "native ternary packed (BitNet U8)", ... */
    char run_as[48];  /* "dense f32", "ternary packed (native)", "ternary packed (ternarised)",
                       * "dense twin of ternary", "tied to embedding" */
    char rule[40];    /* threshold/scale rule, "-" for dense */
    char group[16];   /* "tensor", "row", "128", ..., "-" */
    char scale[16];   /* scale dtype, "-" */
    char act[8];      /* activations into the linear: "f32", "int8" */
    double bits_per_weight; /* bytes * 8 / weights, as the forward reads them */
    int64_t bytes;          /* linear_bytes (the embedding: vocab*hidden*4; tied head: 0) */
} ReportRow;

/* Rows in order embedding, layer 0 q..down, ..., lm_head; n = 7*n_layers + 2.
 * The bytes column sums to model_weight_bytes(m).  *rows is heap (free). */
int report_rows(const Model *m, ReportRow **rows, int *n);

typedef struct {
    char ternary_gemm[64];  /* tern_kernel_name(), f32 and int8 activations */
    char act_quant[96];     /* int8 activation quantisation */
    char dense_gemm[224];   /* "OpenBLAS sgemm (core ...)" */
    char attention[96];
    char dense_layers[128]; /* decoder layers whose 7 linears are all dense: "0-2", "all", "none" */
    char fallbacks[2048];   /* "; "-separated, each with its reason; "none" */
    int n_fallbacks;
} ReportKernels;

void report_kernels(const Model *m, ReportKernels *k);

void report_print(const Model *m, FILE *f);
/* Writes the /load_report group: datasets name, stored, run_as, rule, group,
 * scale_dtype, act (strings), bits_per_weight (f64), bytes (i64); attributes
 * kernel_ternary_gemm, kernel_act_quant, kernel_dense_gemm, kernel_attention,
 * dense_layers, fallbacks, n_fallbacks, weight_bytes.  0 or -1 (err_set). */
int report_write_h5(H5Log *lg, const Model *m);

/* ---- capacity ------------------------------------------------------------- */

/* "24GiB", "24 GiB", "512MiB", "1.5G", "100000", "64KB", "2TiB", "0".  Binary
 * units KiB MiB GiB TiB PiB (and K M G T P, the same), decimal KB MB GB TB PB,
 * B or none for bytes; the unit letter is case-insensitive.  A fraction is
 * allowed with a unit (rounded down to whole bytes), not for bytes.  Returns 0,
 * or -1 with err_set (empty, negative, unknown unit, trailing text, overflow
 * of 64 bits). */
int parse_bytes(const char *s, uint64_t *out);

#define CAP_FORMATS 4  /* as loaded (measured), dense f32, dense bf16, ternary */
#define CAP_POLICIES 4 /* none, encoder, decoder, all */

typedef struct {
    uint64_t budget;
    char format[CAP_FORMATS][72];
    uint64_t weight_bytes[CAP_FORMATS];   /* [0] measured: model_weight_bytes */
    /* KV bytes per token over all layers, by policy and phase (0 = prompt token,
     * 1 = generated token): kv_bytes_per_token */
    uint64_t kv_bytes[CAP_POLICIES][2];
    /* tokens that fit: floor((budget - weights) / kv_bytes), 0 when the weights
     * alone do not fit */
    uint64_t tokens[CAP_FORMATS][CAP_POLICIES][2];
    /* what this runtime's paged pool actually allocates per token slot: the f32
     * K/V pool always, plus the ternary pages and format bytes when the policy is
     * not none (kv_set_policy); and the pool (kv_bytes_needed + ternary pools, in
     * whole blocks of block_size) that the budget allows next to the weights */
    uint64_t alloc_per_token[CAP_POLICIES];
    uint64_t pool_tokens[CAP_FORMATS][CAP_POLICIES];
    uint64_t pool_bytes[CAP_FORMATS][CAP_POLICIES];
    int block_size;
} Capacity;

/* block_size: the KV block size the engine would use (16 by default). */
int report_capacity_compute(const Model *m, uint64_t budget, int block_size, Capacity *c);
void report_capacity(const Model *m, uint64_t budget, FILE *f);
/* Writes `group` (e.g. "/capacity"): budget, format names, weight_bytes,
 * kv_bytes [4,2], tokens [4 formats, 4 policies x 2 phases], alloc_per_token,
 * pool_tokens, pool_bytes.  0 or -1 (err_set). */
int report_capacity_h5(H5Log *lg, const char *group, const Model *m, uint64_t budget);

#endif
