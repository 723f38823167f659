#include "tp/tp_linear.h"
#include "core/err.h"
#include "core/mem.h"
#include "cpu/tern_kernels.h"
#include "runtime/linear.h"
#include "ternary_format.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static int grow(void **p, size_t *cap, size_t bytes) {
    if (bytes <= *cap) return 0;
    mem_free(*p);
    *p = mem_alloc(bytes, "tp scratch");
    *cap = *p ? bytes : 0;
    return *p ? 0 : -1;
}

void tp_scratch_free(TpScratch *s) {
    mem_free(s->xq);
    mem_free(s->sx);
    mem_free(s->xp);
    mem_free(s->yp);
    mem_free(s->d);
    mem_free(s->ones);
    memset(s, 0, sizeof *s);
}

int tp_linear_reserve(const TpLinear *t, int64_t n, TpScratch *s) {
    int64_t ng = 0, ns = n;
    for (int p = 0; p < t->n_pieces; p++)
        if (t->pieces[p].lin.t) {
            ng += t->pieces[p].lin.t->n_groups;
            if (t->pieces[p].lin.t->n_scales > ns) ns = t->pieces[p].lin.t->n_scales;
        }
    size_t xp = sizeof(float) * (size_t)(n * t->in) + 64;
    if (grow((void **)&s->sx, &s->cap_sx, sizeof(float) * (size_t)(n + 1)) != 0 ||
        grow((void **)&s->xq, &s->cap_xq, (size_t)(n * t->in) + 64) != 0 ||
        grow((void **)&s->xp, &s->cap_xp, xp) != 0 ||
        grow((void **)&s->yp, &s->cap_yp, sizeof(float) * (size_t)(n * t->out) + 64) != 0 ||
        grow((void **)&s->ones, &s->cap_ones, sizeof(float) * (size_t)ns) != 0 ||
        grow((void **)&s->d, &s->cap_d, sizeof(int32_t) * (size_t)(n * t->out * (ng ? ng : 1))) != 0)
        return err_prefix("tp scratch for %lld tokens: ", (long long)n);
    return 0;
}

int tp_linear_col(const TpLinear *t, const float *x, int64_t n, float *y, void *lin_scratch) {
    return linear_forward(&t->pieces[0].lin, x, n, y, lin_scratch);
}

/* Columns [c0, c0+pc) of x (n, in) into a contiguous (n, pc). */
static void gather_cols(const void *x, size_t esize, int64_t n, int64_t in, int64_t c0, int64_t pc,
                        void *out) {
    for (int64_t i = 0; i < n; i++)
        memcpy((char *)out + (size_t)(i * pc) * esize, (const char *)x + (size_t)(i * in + c0) * esize,
               esize * (size_t)pc);
}

/* Integer group dots of one piece: d (n, rows, n_groups) with
 * d[t][r][g] = sum_{k in g} q[r][k] * xq[t][k] — exact. */
static int piece_group_dots(const TernaryMatrix *P, const int8_t *xq, int64_t n, int32_t *d,
                            TpScratch *s) {
    const int64_t R = P->rows, C = P->cols, G = P->n_groups;
    if (G == 1) {
        /* one group per row: the packed kernel with unit scales returns D itself
         * ((0 + 1*D) / 1; |D| <= 128*C < 2^24 is exact in f32) */
        size_t need = sizeof(float) * (size_t)(P->n_scales > n ? P->n_scales : n);
        if (grow((void **)&s->ones, &s->cap_ones, need) != 0) return -1;
        for (size_t i = 0; i < need / sizeof(float); i++) s->ones[i] = 1.0f;
        TernaryMatrix unit = *P;
        unit.scales = s->ones;
        if (grow((void **)&s->yp, &s->cap_yp, sizeof(float) * (size_t)(n * R)) != 0) return -1;
        if (tern_matmul_i8(&unit, xq, s->ones, n, s->yp) != 0) return -1;
        for (int64_t i = 0; i < n * R; i++) d[i] = (int32_t)s->yp[i];
        return 0;
    }
    int fail = 0;
#pragma omp parallel if (tern_par((double)n * R * C, TERN_PAR_WORK))
    {
        int8_t *q = malloc((size_t)C);
        if (!q) fail = 1;
#pragma omp for schedule(static)
        for (int64_t r = 0; r < R; r++) {
            if (!q) continue;
            const uint8_t *row = P->codes + r * P->row_bytes;
            for (int64_t k = 0; k < C; k++) q[k] = (int8_t)tern_get(row, k);
            for (int64_t t = 0; t < n; t++) {
                const int8_t *xt = xq + t * C;
                int32_t *dt = d + (t * R + r) * G;
                for (int64_t g = 0; g < G; g++) {
                    int64_t k0 = g * P->group_cols;
                    int64_t k1 = k0 + P->group_cols < C ? k0 + P->group_cols : C;
                    int32_t acc = 0;
                    for (int64_t k = k0; k < k1; k++) acc += q[k] * xt[k];
                    dt[g] = acc;
                }
            }
        }
        free(q);
    }
    return fail ? err_set("tp: out of memory decoding a ternary row") : 0;
}

static const char *row_name(const TpLinear *t) {
    return t->n_pieces > 0 && t->pieces[0].lin.name[0] ? t->pieces[0].lin.name : "linear";
}

int tp_linear_row(const TpLinear *t, TpComm *c, int rank, const float *x, int64_t n, float *y,
                  TpScratch *s, void *lin_scratch) {
    const int64_t in = t->in, out = t->out;
    int rc = 0;
    if (t->act_int8) {
        /* every buffer of this path before its first collective: a rank that
         * lacks one takes every rank out at the agreement below, instead of
         * offering the others a NULL or short buffer */
        int64_t ng = 0;
        for (int p = 0; t->ternary && p < t->n_pieces; p++) ng += t->pieces[p].lin.t->n_groups;
        if (grow((void **)&s->sx, &s->cap_sx, sizeof(float) * (size_t)(n > 0 ? n : 1)) != 0 ||
            grow((void **)&s->xq, &s->cap_xq, (size_t)(n * in) + 64) != 0 ||
            grow((void **)&s->xp, &s->cap_xp, sizeof(float) * (size_t)(n * in) + 64) != 0 ||
            (t->ternary && grow((void **)&s->d, &s->cap_d, sizeof(int32_t) * (size_t)(n * out * ng)) != 0))
            rc = -1;
        /* 1. per-token absmax of the FULL vector */
        for (int64_t i = 0; i < n && rc == 0; i++) {
            float m = 0.0f;
            for (int64_t k = 0; k < in; k++) m = fmaxf(m, fabsf(x[i * in + k]));
            s->sx[i] = m;
        }
        if (tp_allreduce_max_agree(c, rank, rc == 0 ? s->sx : NULL, n, rc == 0) != 0)
            return rc != 0 ? err_prefix("tp rank %d, row-parallel %s: ", rank, row_name(t))
                           : err_set("tp rank %d, row-parallel %s: another rank could not allocate its "
                                     "scratch for %lld tokens", rank, row_name(t), (long long)n);
        for (int64_t i = 0; i < n && rc == 0; i++) {
            float sc = 127.0f / (s->sx[i] > 1e-5f ? s->sx[i] : 1e-5f);
            for (int64_t k = 0; k < in; k++) {
                float r = rintf(x[i * in + k] * sc);
                s->xq[i * in + k] = (int8_t)(r > 127.0f ? 127 : r < -128.0f ? -128 : (int)r);
            }
            s->sx[i] = sc;
        }
        if (t->ternary) {
            /* 2. integer group dots of every piece, kept per piece */
            int64_t off = 0;
            for (int p = 0; p < t->n_pieces && rc == 0; p++) {
                const TpPiece *pc = &t->pieces[p];
                const int8_t *xq = s->xq;
                if (t->n_pieces > 1) {
                    gather_cols(s->xq, 1, n, in, pc->col0, pc->lin.in, s->xp);
                    xq = (const int8_t *)s->xp;
                }
                rc = piece_group_dots(pc->lin.t, xq, n, s->d + off, s);
                off += n * out * pc->lin.t->n_groups;
            }
            /* 3. the ordered chain, rank 0 first */
            double t0 = tp_comm_now();
            tp_comm_barrier(c);
            for (int step = 0; step < c->tp; step++) {
                if (rank == step) {
                    float *acc = c->acc;
                    int32_t *carry = c->carry;
                    if (rank == 0) {
                        memset(acc, 0, sizeof(float) * (size_t)(n * out));
                        memset(carry, 0, sizeof(int32_t) * (size_t)(n * out));
                    }
                    for (int64_t i = 0; i < n; i++)
                        for (int64_t r = 0; r < out; r++) {
                            float a = acc[i * out + r];
                            int32_t cr = carry[i * out + r];
                            int64_t po = 0;
                            for (int p = 0; p < t->n_pieces; p++) {
                                const TpPiece *pc = &t->pieces[p];
                                const TernaryMatrix *P = pc->lin.t;
                                const int64_t G = P->n_groups;
                                const int32_t *dd = s->d + po + (i * out + r) * G;
                                const float *sc = P->scales + r * P->scale_stride;
                                for (int64_t g = 0; g < G; g++) {
                                    int32_t D = dd[g];
                                    if (g == 0 && pc->cut_left) D += cr;
                                    if (g == G - 1 && pc->cut_right) cr = D;
                                    else a += sc[P->scale_stride ? g : 0] * (float)D;
                                }
                                po += n * out * G;
                            }
                            if (rank == c->tp - 1) a = a / s->sx[i];
                            acc[i * out + r] = a;
                            carry[i * out + r] = cr;
                        }
                }
                tp_comm_barrier(c);
            }
            memcpy(y, c->acc, sizeof(float) * (size_t)(n * out));
            tp_comm_account(c, rank, t0, n * out);
            return rc;
        }
        /* int8 into a dense linear: x' = xq / sx with the full-vector scale (as
         * linear_forward's dense int8 path), then the f32 path below */
        float *xd = s->xp;
        for (int64_t i = 0; i < n && rc == 0; i++)
            for (int64_t k = 0; k < in; k++) xd[i * in + k] = (float)s->xq[i * in + k] / s->sx[i];
        if (rc == 0) x = xd;
    }
    /* f32: partial y of this rank's columns, pieces in column order, then the sum */
    if (t->n_pieces == 1) {
        if (rc == 0) rc = linear_forward(&t->pieces[0].lin, x, n, y, lin_scratch);
    } else {
        float *xin = NULL;
        if (rc == 0 && (grow((void **)&s->yp, &s->cap_yp, sizeof(float) * (size_t)(n * out)) != 0))
            rc = -1;
        if (rc == 0) {
            xin = mem_alloc(sizeof(float) * (size_t)(n * in), "tp piece input");
            if (!xin) rc = -1;
        }
        for (int p = 0; p < t->n_pieces && rc == 0; p++) {
            const TpPiece *pc = &t->pieces[p];
            gather_cols(x, sizeof(float), n, in, pc->col0, pc->lin.in, xin);
            rc = linear_forward(&pc->lin, xin, n, p == 0 ? y : s->yp, lin_scratch);
            if (p > 0)
                for (int64_t i = 0; i < n * out; i++) y[i] += s->yp[i];
        }
        mem_free(xin);
    }
    tp_allreduce_sum(c, rank, y, n * out);
    return rc;
}
