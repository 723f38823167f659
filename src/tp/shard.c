#include "tp/shard.h"
#include "core/err.h"
#include "core/mem.h"
#include "runtime/linear.h"
#include "ternary_format.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int tp_plan_check(const ModelConfig *c, int tp, const char *name) {
    if (tp < 1) return err_set("--tp %d: the TP degree must be >= 1", tp);
    if (c->n_kv_heads % tp != 0 || c->n_heads % tp != 0)
        return err_set("model %s: %d attention heads and %d KV heads do not split over tp = %d: "
                       "every rank must own whole KV heads (ternlab does not replicate KV heads); "
                       "use a TP degree that divides %d",
                       name, c->n_heads, c->n_kv_heads, tp, c->n_kv_heads);
    if (c->inter % tp != 0)
        return err_set("model %s: intermediate_size %d does not split over tp = %d", name, c->inter,
                       tp);
    return 0;
}

void tp_range(int64_t total, int tp, int rank, int64_t *lo, int64_t *hi) {
    *lo = total * rank / tp;
    *hi = total * (rank + 1) / tp;
}

/* Sub-block rows [r0, r1) x columns [a, b) of `full` as a new Linear.
 * partial: [a, b) lies inside one scale group that starts before a — the
 * piece becomes a "row"-group matrix carrying that group's scale per row. */
static int make_piece(const Linear *full, int64_t r0, int64_t r1, int64_t a, int64_t b,
                      int partial, int act_int8, Linear *out) {
    memset(out, 0, sizeof *out);
    int64_t rows = r1 - r0, cols = b - a;
    snprintf(out->name, sizeof out->name, "%.60s[%lld:%lld,%lld:%lld]", full->name,
             (long long)r0, (long long)r1, (long long)a, (long long)b);
    out->out = rows;
    out->in = cols;
    out->act_int8 = act_int8;
    if (!full->t) { /* dense f32 */
        out->w = mem_alloc(sizeof(float) * (size_t)(rows * cols), out->name);
        if (!out->w) return -1;
        for (int64_t i = 0; i < rows; i++)
            memcpy(out->w + i * cols, full->w + (r0 + i) * full->in + a, sizeof(float) * (size_t)cols);
        return 0;
    }
    const TernaryMatrix *T = full->t;
    int8_t *q = xmalloc((size_t)(rows * cols));
    for (int64_t i = 0; i < rows; i++) {
        const uint8_t *row = T->codes + (r0 + i) * T->row_bytes;
        for (int64_t j = 0; j < cols; j++) q[i * cols + j] = (int8_t)tern_get(row, a + j);
    }
    QuantGroup g = T->group;
    int64_t ns, gfirst = a / T->group_cols, per_row;
    if (g == QG_TENSOR) {
        ns = 1;
        per_row = 0;
    } else if (partial) {
        g = QG_ROW;
        per_row = 1;
        ns = rows;
    } else {
        per_row = (cols + T->group_cols - 1) / T->group_cols;
        ns = rows * per_row;
        if (g == QG_ROW) per_row = ns / rows; /* 1: the row's one group */
    }
    float *sc = xmalloc(sizeof(float) * (size_t)ns);
    if (per_row == 0) sc[0] = T->scales[0];
    for (int64_t i = 0; i < rows && per_row; i++)
        for (int64_t j = 0; j < per_row; j++)
            sc[i * per_row + j] = T->scales[(r0 + i) * T->scale_stride + gfirst + j];
    out->t = xcalloc(1, sizeof(TernaryMatrix));
    int rc = tern_from_codes(q, sc, rows, cols, g, T->scale_dtype, out->t);
    free(sc);
    if (rc != 0) {
        free(out->t);
        out->t = NULL;
        free(q);
        return err_prefix("%s: ", out->name);
    }
    if (full->twin) { /* the dense reference twin, rebuilt from the shard's own codes */
        out->twin = 1;
        out->w = mem_alloc(sizeof(float) * (size_t)(rows * cols), out->name);
        if (out->w) tern_dequant(out->t, out->w);
        if (out->w && act_int8) {
            out->qf = mem_alloc(sizeof(float) * (size_t)(rows * cols), out->name);
            for (int64_t i = 0; out->qf && i < rows * cols; i++) out->qf[i] = (float)q[i];
        }
        if (!out->w || (act_int8 && !out->qf)) {
            free(q);
            linear_free(out);
            return -1;
        }
    }
    free(q);
    return 0;
}

int tp_shard_linear(const Linear *full, TpSplit split, int64_t lo, int64_t hi, TpLinear *out) {
    memset(out, 0, sizeof *out);
    int64_t dim = split == TP_SPLIT_ROWS ? full->out : full->in;
    if (lo < 0 || hi > dim || lo >= hi)
        return err_set("%s: shard [%lld, %lld) of %lld %s is empty or out of range", full->name,
                       (long long)lo, (long long)hi, (long long)dim,
                       split == TP_SPLIT_ROWS ? "rows" : "columns");
    if (!full->t && !full->w) return err_set("%s: no weights to shard", full->name);
    out->split = split;
    out->lo = lo;
    out->hi = hi;
    out->act_int8 = full->act_int8;
    out->ternary = full->t != NULL;
    out->twin = full->twin;
    out->pieces = xcalloc(2, sizeof(TpPiece));
    int rc = 0;
    if (split == TP_SPLIT_ROWS) {
        out->out = hi - lo;
        out->in = full->in;
        out->n_pieces = 1;
        rc = make_piece(full, lo, hi, 0, full->in, 0, full->act_int8, &out->pieces[0].lin);
        if (full->t && full->t->group == QG_TENSOR && lo > 0) out->dup_scales = 1;
    } else {
        out->out = full->out;
        out->in = hi - lo;
        /* pieces: a partial head group (when lo is inside a group), then the rest */
        int64_t gc = full->t && full->t->group != QG_TENSOR ? full->t->group_cols : full->in;
        int64_t cut = lo;
        if (full->t && full->t->group != QG_TENSOR && lo % gc != 0) {
            cut = (lo / gc + 1) * gc;
            if (cut > hi) cut = hi;
            TpPiece *p = &out->pieces[out->n_pieces++];
            p->col0 = 0;
            p->cut_left = 1;
            rc = make_piece(full, 0, full->out, lo, cut, 1, 0, &p->lin);
            out->dup_scales += full->out;
        }
        if (rc == 0 && cut < hi) {
            TpPiece *p = &out->pieces[out->n_pieces++];
            p->col0 = cut - lo;
            p->cut_left = cut % gc != 0; /* only for a tensor scale (gc = in) */
            rc = make_piece(full, 0, full->out, cut, hi, 0, 0, &p->lin);
            if (full->t && full->t->group == QG_TENSOR && lo > 0) out->dup_scales = 1;
        }
        if (out->n_pieces > 0) out->pieces[out->n_pieces - 1].cut_right = hi % gc != 0 && hi != full->in;
    }
    if (rc != 0) {
        tp_linear_free(out);
        return -1;
    }
    return 0;
}

void tp_linear_free(TpLinear *t) {
    for (int i = 0; i < t->n_pieces; i++) linear_free(&t->pieces[i].lin);
    free(t->pieces);
    memset(t, 0, sizeof *t);
}

size_t tp_linear_bytes(const TpLinear *t) {
    size_t b = 0;
    for (int i = 0; i < t->n_pieces; i++) b += linear_bytes(&t->pieces[i].lin);
    return b;
}

int64_t tp_linear_payload_bits(const Linear *l) {
    int64_t w = l->out * l->in;
    if (l->twin || !l->t) return 32 * w;
    return 2 * w + l->t->n_scales * 8 * (int64_t)dtype_size(l->t->scale_dtype);
}

int64_t tp_shard_payload_bits(const TpLinear *t) {
    int64_t b = 0;
    for (int i = 0; i < t->n_pieces; i++) b += tp_linear_payload_bits(&t->pieces[i].lin);
    return b;
}

int64_t tp_shard_scale_bits(const TpLinear *t) {
    const Linear *l = t->n_pieces ? &t->pieces[0].lin : NULL;
    return l && l->t && !l->twin ? 8 * (int64_t)dtype_size(l->t->scale_dtype) : 0;
}
