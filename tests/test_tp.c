/* Tensor parallelism (src/tp) on the `threads` communicator: logits and greedy
 * tokens at tp = 2 and 4 against tp = 1 for the dense reference and ternary
 * weights (group tensor, row, 64, 128), per-rank weight bytes, refused splits,
 * and the shard plan on matrices whose shards fill whole packed blocks. */
#include "test.h"
#include "fixtures.h"
#include "core/err.h"
#include "core/mem.h"
#include "cpu/tern_kernels.h"
#include "eval/ppl.h"
#include "load/tokens.h"
#include "runtime/linear.h"
#include "runtime/preflight.h"
#include "tp/comm.h"
#include "tp/shard.h"
#include "tp/tp_engine.h"
#include "tp/tp_linear.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

/* tp = N vs tp = 1.  int8 activations (BitNet, act=int8): every decoder layer
 * is exact by construction (tp_linear.h); only lm_head (f32, vocab rows split)
 * goes through OpenBLAS with a smaller N, and for a few rows (decode steps)
 * OpenBLAS may pick a kernel that rounds differently: measured 0 for
 * 64-token windows, 2.6e-7 for 2-row decode steps at tp = 4.  A single int8
 * code flip in a decoder layer shows as 1e-4..1e-2, so the bound 1e-6 (the
 * issue's) still proves the layers exact. */
#define TOL_TP_LOGITS_INT8 1e-6
/* f32 activations: the
 * row-parallel dot products are cut at shard boundaries and summed over ranks,
 * float reassociation that no fixed order removes (the kernels' own order
 * inside a dot product is not reproducible piecewise); measured 0.77-1.07e-6
 * on llama-tiny (2 windows of 64), the same size as tp = 1 against
 * transformers (1.2e-6, README) — the fp32 noise floor of this model.  The
 * issue's 1e-6 sits inside that noise, so the bound is 2e-6. */
#define TOL_TP_LOGITS_F32 2e-6

static const int T = 64, NW = 2;   /* 2 windows of 64 tokens: short on 2 cores */
static const int NP = 8, NNEW = 16; /* greedy: prompt tokens, new tokens */

typedef struct {
    float *logits;
    int32_t *greedy[2];
    TpStats st;
} TpRun;

static int run_tp(Model *m, int tp, TpRun *out) {
    memset(out, 0, sizeof *out);
    Engine e;
    EngineOpts eo = {.max_tok = NW * T, .block_size = 16, .n_blocks = NW * ((T + 15) / 16) + 8};
    if (tp_engine_open(&e, m, &eo, tp) != 0) {
        fprintf(stderr, "    tp %d: %s\n", tp, err_msg());
        return -1;
    }
    out->logits = fixture_window_logits(&e, T, 0, NW);
    /* greedy, batch 2: two different prompts from the token stream */
    int rc = out->logits ? 0 : -1;
    if (rc == 0) {
        const int32_t *pr[2] = {NULL, NULL};
        int32_t prompts[2][8];
        for (int b = 0; b < 2; b++) {
            for (int i = 0; i < NP; i++) {
                /* tokens of window 0, rows 0.. and 20..: in the vocabulary */
                int64_t r = b * 20 + i;
                prompts[b][i] = (int32_t)(argmax_f32(out->logits + r * m->cfg.vocab, m->cfg.vocab));
            }
            pr[b] = prompts[b];
            out->greedy[b] = xmalloc(sizeof(int32_t) * NNEW);
        }
        int64_t lens[2] = {NP, NP};
        rc = engine_generate(&e, pr, lens, 2, NNEW, out->greedy);
        if (rc) fprintf(stderr, "    generate tp %d: %s\n", tp, err_msg());
    }
    tp_engine_stats(&e, &out->st);
    tp_engine_close(&e);
    return rc;
}

static void run_free(TpRun *r) {
    free(r->logits);
    free(r->greedy[0]);
    free(r->greedy[1]);
}

/* Every rank holds 1/tp of the decoder weights: exactly for f32; for ternary
 * the payload (2 bits/weight + scales) is 1/tp plus the scales of groups that a
 * shard boundary cuts (held by both ranks), and the packed bytes are reported
 * (rows pad to 256 columns, so a 64-column shard of o_proj packs like 256). */
static void check_bytes(const TpStats *st, int ternary, const char *what) {
    int64_t sum_payload = 0, sum_dup = 0;
    for (int r = 0; r < st->tp; r++) {
        const TpRankStats *rs = &st->rank[r];
        sum_payload += rs->layer_payload_bits;
        sum_dup += rs->dup_scale_bits;
        CHECK_MSG(rs->layer_weights * st->tp == st->full_layer_weights,
                  "%s tp %d rank %d: %lld weights, full %lld", what, st->tp, r,
                  (long long)rs->layer_weights, (long long)st->full_layer_weights);
        if (!ternary)
            CHECK_MSG(rs->layer_bytes * (size_t)st->tp == st->full_layer_bytes,
                      "%s tp %d rank %d: %zu bytes, full %zu", what, st->tp, r, rs->layer_bytes,
                      st->full_layer_bytes);
        /* scales ride along: a shard boundary inside a scale group (every o/down
         * boundary for group=row, o at tp=4 for 128) gives both ranks that group's
         * scale — one f32 per row, up to 2.6 % of this tiny model's shard */
        double share = (double)st->full_layer_payload_bits / st->tp;
        CHECK_MSG(rs->layer_payload_bits <= share * 1.03,
                  "%s tp %d rank %d: payload %lld bits, 1/tp = %.0f", what, st->tp, r,
                  (long long)rs->layer_payload_bits, share);
    }
    /* every scale is held once, plus the copies counted as duplicated */
    CHECK_MSG(sum_payload - sum_dup == st->full_layer_payload_bits,
              "%s tp %d: ranks hold %lld bits - %lld duplicated != %lld", what, st->tp,
              (long long)sum_payload, (long long)sum_dup, (long long)st->full_layer_payload_bits);
    printf("    %-22s tp %d: rank 0 holds %zu B (payload %.0f B = %.4f of full) of %zu B; "
           "all-reduce %.1f us/token\n",
           what, st->tp, st->rank[0].layer_bytes, st->rank[0].layer_payload_bits / 8.0,
           (double)st->rank[0].layer_payload_bits / (double)st->full_layer_payload_bits,
           st->full_layer_bytes,
           st->tokens ? 1e6 * st->rank[0].comm_seconds / (double)st->tokens : 0.0);
}

static void compare_tp(const char *dir, const char *quant, int dense, int ternary, int exact,
                       const char *what) {
    Model m;
    ModelLoadOpts lo = {.quant = quant, .dense = dense};
    REQUIRE(model_load(test_path(dir), &lo, &m) == 0);
    TpRun base;
    REQUIRE(run_tp(&m, 1, &base) == 0);
    int64_t nlog = (int64_t)NW * T * m.cfg.vocab;
    for (int tp = 2; tp <= 4; tp *= 2) {
        TpRun r;
        if (run_tp(&m, tp, &r) != 0) {
            CHECK_MSG(0, "%s: tp %d failed", what, tp);
            run_free(&r);
            continue;
        }
        double rel = rel_l2(r.logits, base.logits, nlog);
        int same = memcmp(r.logits, base.logits, sizeof(float) * (size_t)nlog) == 0;
        printf("    %-22s tp %d: logits rel L2 %.3g vs tp 1%s\n", what, tp, rel,
               same ? " (bit-identical)" : "");
        if (exact)
            CHECK_MSG(rel <= TOL_TP_LOGITS_INT8, "%s tp %d: rel %.3g", what, tp, rel);
        else
            CHECK_MSG(rel <= TOL_TP_LOGITS_F32, "%s tp %d: rel %.3g", what, tp, rel);
        for (int b = 0; b < 2; b++)
            CHECK_MSG(memcmp(r.greedy[b], base.greedy[b], sizeof(int32_t) * NNEW) == 0,
                      "%s tp %d: greedy sequence %d differs", what, tp, b);
        check_bytes(&r.st, ternary, what);
        run_free(&r);
    }
    run_free(&base);
    model_free(&m);
}

TEST(tp_llama_dense) { compare_tp(LLAMA_DIR, NULL, 0, 0, 0, "llama dense"); }
TEST(tp_llama_tern_tensor) { compare_tp(LLAMA_DIR, "rule=absmean,group=tensor", 0, 1, 0, "llama group=tensor"); }
TEST(tp_llama_tern_row) { compare_tp(LLAMA_DIR, "rule=twn,group=row", 0, 1, 0, "llama group=row"); }
TEST(tp_llama_tern_g64) { compare_tp(LLAMA_DIR, "rule=absmean,group=64", 0, 1, 0, "llama group=64"); }
TEST(tp_llama_tern_g128) { compare_tp(LLAMA_DIR, "rule=absmean,group=128", 0, 1, 0, "llama group=128"); }
TEST(tp_llama_tern_g128_int8) {
    compare_tp(LLAMA_DIR, "rule=absmean,group=128,act=int8", 0, 1, 1, "llama g=128 int8");
}
TEST(tp_bitnet_native) { compare_tp(BITNET_DIR, NULL, 0, 1, 1, "bitnet packed"); }
TEST(tp_bitnet_dense_twin) { compare_tp(BITNET_DIR, NULL, 1, 0, 1, "bitnet dense twin"); }
TEST(tp_bitnet_tern_row) { compare_tp(BITNET_DIR, "rule=absmean,group=row", 0, 1, 1, "bitnet group=row"); }
TEST(tp_bitnet_tern_g64) { compare_tp(BITNET_DIR, "rule=absmean,group=64", 0, 1, 1, "bitnet group=64"); }
TEST(tp_bitnet_tern_g128) { compare_tp(BITNET_DIR, "rule=absmean,group=128", 0, 1, 1, "bitnet group=128"); }

/* A split that does not divide the KV heads is refused with the documented
 * message (model, head counts, tp), nothing left running. */
TEST(tp_invalid_split_refused) {
    Model m;
    REQUIRE(model_load(test_path(LLAMA_DIR), NULL, &m) == 0);
    EngineOpts eo = {.max_tok = 64, .block_size = 16, .n_blocks = 8};
    const int bad[] = {8, 3, 0, -2, 1000};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        Engine e;
        CHECK_MSG(tp_engine_open(&e, &m, &eo, bad[i]) != 0, "tp %d accepted", bad[i]);
        const char *msg = err_msg();
        printf("    tp %d: %s\n", bad[i], msg);
        if (bad[i] == 8 || bad[i] == 3) {
            char want[64];
            snprintf(want, sizeof want, "tp = %d", bad[i]);
            CHECK_MSG(strstr(msg, "llama-tiny") && strstr(msg, "8 attention heads") &&
                          strstr(msg, "4 KV heads") && strstr(msg, want),
                      "message: %s", msg);
        }
    }
    model_free(&m);
}

/* Two tp = 4 runs give the same bits (fixed-order reduction, no timing effects). */
TEST(tp_deterministic) {
    Model m;
    REQUIRE(model_load(test_path(LLAMA_DIR), NULL, &m) == 0);
    TpRun a, b;
    REQUIRE(run_tp(&m, 4, &a) == 0);
    REQUIRE(run_tp(&m, 4, &b) == 0);
    CHECK(memcmp(a.logits, b.logits, sizeof(float) * (size_t)NW * T * m.cfg.vocab) == 0);
    run_free(&a);
    run_free(&b);
    model_free(&m);
}

/* n weights of a fixed pseudo-random stream (seed), uniform in [-0.05, 0.05). */
static void lcg_weights(float *w, int64_t n, uint64_t seed) {
    for (int64_t i = 0; i < n; i++) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        w[i] = ((float)(seed >> 40) / (float)(1 << 24) - 0.5f) * 0.1f;
    }
}

/* The shard plan on a matrix whose shards fill whole 256-column blocks: packed
 * bytes split exactly 1/tp (a tensor scale, and with group=row the row's scale,
 * is held by every rank); a cut scale group
 * (256 columns, group 128, tp = 4) becomes pieces whose outputs sum to the full
 * product; no piece shares storage with the full matrix. */
TEST(tp_shard_plan_bytes_and_pieces) {
    const int64_t R = 12, C = 1024;
    float *w = xmalloc(sizeof(float) * (size_t)(R * C));
    lcg_weights(w, R * C, 7);
    const char *groups[] = {"group=tensor", "group=row", "group=64", "group=128"};
    for (int gi = 0; gi < 4; gi++) {
        QuantSpec sp;
        REQUIRE(quant_spec_parse(groups[gi], &sp) == 0);
        Linear full = {.out = R, .in = C};
        snprintf(full.name, sizeof full.name, "synthetic");
        full.t = xcalloc(1, sizeof(TernaryMatrix));
        REQUIRE(tern_from_dense(w, R, C, &sp, full.t) == 0);
        for (int tp = 2; tp <= 4; tp *= 2) {
            size_t sum = 0;
            for (int r = 0; r < tp; r++) {
                int64_t lo, hi;
                tp_range(C, tp, r, &lo, &hi);
                TpLinear sh;
                REQUIRE(tp_shard_linear(&full, TP_SPLIT_COLS, lo, hi, &sh) == 0);
                CHECK(sh.n_pieces == 1);
                CHECK(sh.pieces[0].lin.t->codes != full.t->codes);
                sum += tp_linear_bytes(&sh);
                tp_linear_free(&sh);
            }
            /* a tensor scale and a row's one scale are held by every rank */
            size_t want = linear_bytes(&full) + (gi == 0   ? (size_t)(tp - 1) * 4
                                                 : gi == 1 ? (size_t)((tp - 1) * R) * 4
                                                           : 0);
            CHECK_MSG(sum == want, "%s tp %d: shards hold %zu B, full %zu B", groups[gi], tp, sum,
                      want);
        }
        linear_free(&full);
    }
    /* cut groups: 256 columns, group 128, tp = 4 -> ranks 1 and 3 start mid-group */
    QuantSpec sp;
    REQUIRE(quant_spec_parse("group=128", &sp) == 0);
    Linear full = {.out = R, .in = 256};
    full.t = xcalloc(1, sizeof(TernaryMatrix));
    REQUIRE(tern_from_dense(w, R, 256, &sp, full.t) == 0);
    const int64_t n = 5;
    float *x = xmalloc(sizeof(float) * (size_t)(n * 256)), *yf = xmalloc(sizeof(float) * (size_t)(n * R));
    float *ys = xcalloc((size_t)(n * R), sizeof(float)), *yp = xmalloc(sizeof(float) * (size_t)(n * R));
    for (int64_t i = 0; i < n * 256; i++) x[i] = w[i + 17] * 10.0f;
    REQUIRE(tern_matmul_f32(full.t, x, n, yf) == 0);
    for (int r = 0; r < 4; r++) {
        TpLinear sh;
        REQUIRE(tp_shard_linear(&full, TP_SPLIT_COLS, r * 64, (r + 1) * 64, &sh) == 0);
        CHECK(sh.n_pieces == 1);
        CHECK(sh.pieces[0].cut_left == (r % 2 == 1) && sh.pieces[0].cut_right == (r % 2 == 0));
        CHECK(sh.dup_scales == (r % 2 == 1 ? R : 0));
        float *xs = xmalloc(sizeof(float) * (size_t)(n * 64));
        for (int64_t i = 0; i < n; i++) memcpy(xs + i * 64, x + i * 256 + r * 64, sizeof(float) * 64);
        REQUIRE(tern_matmul_f32(sh.pieces[0].lin.t, xs, n, yp) == 0);
        for (int64_t i = 0; i < n * R; i++) ys[i] += yp[i];
        free(xs);
        tp_linear_free(&sh);
    }
    double rel = rel_l2(ys, yf, n * R);
    CHECK_MSG(rel < 1e-6, "cut-group shards sum to rel %.3g of the full product", rel);
    linear_free(&full);
    free(x);
    free(yf);
    free(ys);
    free(yp);
    free(w);
}

/* Ternary KV pages and the split-window protocol (first half prefilled, the
 * rest decoded token by token): every rank stores its own heads under the
 * same policy; BitNet stays bit-identical at tp = 2 and 4. */
typedef struct {
    float *dst;
    int64_t V;
} KvCollect;

static int kv_collect(void *ctx, int64_t w, const float *logits, const int32_t *tokens, int Tw,
                      int V, int r0) {
    KvCollect *c = ctx;
    memcpy(c->dst + (size_t)w * (size_t)Tw * (size_t)V + (size_t)r0 * (size_t)V,
           logits + (size_t)r0 * (size_t)V, sizeof(float) * (size_t)(Tw - 1 - r0) * (size_t)V);
    return 0;
}

static float *kv_split_logits(Model *m, int tp, const int32_t *tok, int64_t n, const char *policy) {
    Engine e;
    EngineOpts eo = {.max_tok = NW * T, .block_size = 16, .n_blocks = NW * ((T + 15) / 16)};
    if (tp_engine_open(&e, m, &eo, tp) != 0) return NULL;
    KvPolicy pol;
    float *out = xcalloc((size_t)NW * T * (size_t)m->cfg.vocab, sizeof(float));
    KvCollect c = {out, m->cfg.vocab};
    PplOpts po = {.window = T, .max_windows = NW, .on_logits = kv_collect, .ctx = &c, .kv_split = 1};
    PplResult r;
    if (kv_policy_parse(policy, &pol) != 0 || kv_set_policy(&e.kv, &pol) != 0 ||
        eval_ppl(&e, tok, n, &po, &r) != 0) {
        fprintf(stderr, "    tp %d: %s\n", tp, err_msg());
        free(out);
        out = NULL;
    }
    tp_engine_close(&e);
    return out;
}

/* EngineOpts.kv at open, as with one rank: the front cache takes the policy
 * (its f32 pages of all-ternary layers given back, the ternary pools there)
 * and a layer range past the model is refused at open (it had been ignored:
 * the engine opened under none). */
TEST(tp_engine_open_takes_the_kv_policy) {
    Model m;
    REQUIRE(model_load(test_path(BITNET_DIR), NULL, &m) == 0);
    KvPolicy all, bad;
    REQUIRE(kv_policy_parse("all", &all) == 0 && kv_policy_parse("all@layers=1-9", &bad) == 0);
    Engine e;
    EngineOpts eo = {.max_tok = 64, .block_size = 16, .n_blocks = 8, .kv = &bad};
    err_clear();
    CHECK(tp_engine_open(&e, &m, &eo, 2) != 0 && strstr(err_msg(), "the model has 4 layers"));
    eo.kv = &all;
    REQUIRE(tp_engine_open(&e, &m, &eo, 2) == 0);
    CHECK(e.kv.policy.kind == KVP_ALL && !e.kv.k[0] && e.kv.fmt);
    tp_engine_close(&e);
    model_free(&m);
}

TEST(tp_bitnet_ternary_kv_split_window) {
    Model m;
    REQUIRE(model_load(test_path(BITNET_DIR), NULL, &m) == 0);
    int32_t *tok;
    int64_t n;
    REQUIRE(tokens_load(test_path(TOKENS_FILE), m.cfg.vocab, &tok, &n) == 0);
    /* every policy: encoder and decoder also need each rank to tell prompt from generated
     * tokens (a rank that took every token as prompt had passed under "all") */
    const char *policies[] = {"all", "decoder", "encoder"};
    float *ref_all = NULL;
    for (int pi = 0; pi < 3; pi++) {
        float *base = kv_split_logits(&m, 1, tok, n, policies[pi]);
        REQUIRE(base);
        const int64_t nlog = (int64_t)NW * T * m.cfg.vocab;
        if (pi == 0) ref_all = base;
        else /* (the policies differ: a test that cannot tell them apart proves nothing) */
            CHECK_MSG(rel_l2(base, ref_all, nlog) > 1e-4, "%s gives the logits of all", policies[pi]);
        for (int tp = 2; tp <= 4; tp *= 2) {
            float *got = kv_split_logits(&m, tp, tok, n, policies[pi]);
            REQUIRE(got);
            double rel = rel_l2(got, base, nlog);
            printf("    --kv %s, tp %d: split-window ternary-KV logits rel L2 %.3g vs tp 1\n", policies[pi], tp, rel);
            CHECK_MSG(rel <= TOL_TP_LOGITS_INT8, "--kv %s tp %d: ternary-KV split-window rel %.3g", policies[pi], tp, rel);
            free(got);
        }
        if (pi > 0) free(base);
    }
    free(ref_all);
    free(tok);
    model_free(&m);
}

/* A row-parallel int8 call where one rank cannot allocate its scratch (the
 * engine reserves it up front; a direct caller may not): every rank leaves the
 * call with -1 and a message, no rank reads the other's missing buffers (the
 * sanitized build would catch a NULL published buffer; here it crashed), and
 * the next call on the same scratch gives the tp = 1 result bit for bit. */
typedef struct {
    const TpLinear *sh;
    TpComm *c;
    int rank;
    const float *x;
    int64_t n;
    float *y;
    TpScratch s;
    int rc;
    char err[256];
} RowCall;

static void *row_call(void *arg) {
    RowCall *r = arg;
    r->rc = tp_linear_row(r->sh, r->c, r->rank, r->x, r->n, r->y, &r->s, NULL);
    snprintf(r->err, sizeof r->err, "%s", r->rc ? err_msg() : "");
    return NULL;
}

static void run_rows(RowCall *rc, int tp) {
    pthread_t th[4];
    for (int r = 1; r < tp; r++) REQUIRE(pthread_create(&th[r], NULL, row_call, &rc[r]) == 0);
    row_call(&rc[0]);
    for (int r = 1; r < tp; r++) pthread_join(th[r], NULL);
}

TEST(tp_row_scratch_failure_leaves_every_rank) {
    const int64_t R = 24, C = 512, n = 3;
    const int tp = 2;
    float *w = xmalloc(sizeof(float) * (size_t)(R * C)), *x = xmalloc(sizeof(float) * (size_t)(n * C));
    lcg_weights(w, R * C, 11);
    for (int64_t i = 0; i < n * C; i++) x[i] = w[(i * 7) % (R * C)] * 30.0f;
    QuantSpec sp;
    REQUIRE(quant_spec_parse("rule=absmean,group=row,act=int8", &sp) == 0);
    Linear full = {.out = R, .in = C, .act_int8 = 1};
    snprintf(full.name, sizeof full.name, "synthetic");
    full.t = xcalloc(1, sizeof(TernaryMatrix));
    REQUIRE(tern_from_dense(w, R, C, &sp, full.t) == 0);
    float *want = xmalloc(sizeof(float) * (size_t)(n * R));
    void *lin_scr = mem_alloc(linear_scratch_bytes(n, C), "test scratch");
    REQUIRE(linear_forward(&full, x, n, want, lin_scr) == 0);

    TpComm comm;
    REQUIRE(tp_comm_init(&comm, tp, n * R) == 0);
    TpLinear sh[2];
    RowCall rc[2];
    float *xs[2];
    for (int r = 0; r < tp; r++) {
        int64_t lo, hi;
        tp_range(C, tp, r, &lo, &hi);
        REQUIRE(tp_shard_linear(&full, TP_SPLIT_COLS, lo, hi, &sh[r]) == 0);
        xs[r] = xmalloc(sizeof(float) * (size_t)(n * (hi - lo)));
        for (int64_t i = 0; i < n; i++)
            memcpy(xs[r] + i * (hi - lo), x + i * C + lo, sizeof(float) * (size_t)(hi - lo));
        rc[r] = (RowCall){.sh = &sh[r], .c = &comm, .rank = r, .x = xs[r], .n = n,
                          .y = xmalloc(sizeof(float) * (size_t)(n * R))};
    }
    /* one of the two ranks' first scratch allocation fails (which one is a race) */
    mem_fail_next("tp scratch", 1);
    run_rows(rc, tp);
    CHECK_MSG(mem_fail_next(NULL, 0) == 0, "the injected failure was not reached");
    int failed_alloc = 0;
    for (int r = 0; r < tp; r++) {
        CHECK_MSG(rc[r].rc == -1, "rank %d returned %d", r, rc[r].rc);
        failed_alloc += strstr(rc[r].err, "cannot allocate") != NULL;
        CHECK_MSG(strstr(rc[r].err, "cannot allocate") || strstr(rc[r].err, "another rank"),
                  "rank %d: '%s'", r, rc[r].err);
    }
    CHECK_MSG(failed_alloc == 1, "%d ranks report their own allocation failure", failed_alloc);
    /* the same scratch, nothing injected: the exact tp = 1 result on every rank */
    run_rows(rc, tp);
    for (int r = 0; r < tp; r++) {
        CHECK_MSG(rc[r].rc == 0, "rank %d after the failure: %s", r, rc[r].err);
        if (rc[r].rc == 0)
            CHECK_MSG(memcmp(rc[r].y, want, sizeof(float) * (size_t)(n * R)) == 0,
                      "rank %d: not the tp = 1 bits", r);
    }
    for (int r = 0; r < tp; r++) {
        tp_scratch_free(&rc[r].s);
        tp_linear_free(&sh[r]);
        free(rc[r].y);
        free(xs[r]);
    }
    tp_comm_free(&comm);
    linear_free(&full);
    mem_free(lin_scr);
    free(want);
    free(x);
    free(w);
}

/* tp_linear_row over column shards of `full` (tp ranks, one thread each)
 * against linear_forward of the whole linear: the rel L2 of every rank's y
 * (the largest), -1 when a call fails; *same: every rank's y the tp = 1 bits. */
static double row_parallel_vs_full(const Linear *full, int tp, const float *x, int64_t n, int *same) {
    const int64_t R = full->out, C = full->in;
    float *want = xmalloc(sizeof(float) * (size_t)(n * R));
    void *lin_scr = mem_alloc(linear_scratch_bytes(n, C), "test scratch");
    double worst = linear_forward(full, x, n, want, lin_scr) == 0 ? 0.0 : -1.0;
    TpComm comm;
    TpLinear sh[4];
    RowCall rc[4];
    float *xs[4];
    if (tp > 4 || tp_comm_init(&comm, tp, n * R) != 0) abort();
    for (int r = 0; r < tp; r++) {
        int64_t lo, hi;
        tp_range(C, tp, r, &lo, &hi);
        if (tp_shard_linear(full, TP_SPLIT_COLS, lo, hi, &sh[r]) != 0) {
            fprintf(stderr, "    shard %d: %s\n", r, err_msg());
            abort(); /* (a test helper: the shard plan of these shapes is tested above) */
        }
        xs[r] = xmalloc(sizeof(float) * (size_t)(n * (hi - lo)));
        for (int64_t i = 0; i < n; i++)
            memcpy(xs[r] + i * (hi - lo), x + i * C + lo, sizeof(float) * (size_t)(hi - lo));
        rc[r] = (RowCall){.sh = &sh[r], .c = &comm, .rank = r, .x = xs[r], .n = n,
                          .y = xmalloc(sizeof(float) * (size_t)(n * R))};
    }
    run_rows(rc, tp);
    *same = worst == 0.0;
    for (int r = 0; r < tp; r++) {
        if (rc[r].rc != 0) {
            fprintf(stderr, "    rank %d: %s\n", r, rc[r].err);
            worst = -1.0;
            *same = 0;
        } else if (worst >= 0.0) {
            const double e = rel_l2(rc[r].y, want, n * R);
            worst = e > worst ? e : worst;
            *same &= memcmp(rc[r].y, want, sizeof(float) * (size_t)(n * R)) == 0;
        }
        tp_scratch_free(&rc[r].s);
        tp_linear_free(&sh[r]);
        free(rc[r].y);
        free(xs[r]);
    }
    tp_comm_free(&comm);
    mem_free(lin_scr);
    free(want);
    return worst;
}

/* Row-parallel linears the models do not reach, against the whole linear:
 * - an input width that is not a multiple of the group (320 columns, group
 *   128): the last rank's last group is short and must not go into the carry
 *   (a mutation carrying it dropped the term, unseen: every model width is a
 *   multiple of 128), int8 bit for bit and f32 within its noise;
 * - a token whose absmax is under the int8 quantiser's 1e-5 floor: the same
 *   codes as tern_act_quant_i8 (bit for bit);
 * - a dense linear with int8 activations (x' = xq / sx with the full vector's
 *   scale): within f32 noise (without the dequantised input, ~1e-2). */
TEST(tp_row_parallel_edge_linears) {
    const int64_t R = 24, C = 320, n = 3;
    float *w = xmalloc(sizeof(float) * (size_t)(R * C)), *x = xmalloc(sizeof(float) * (size_t)(n * C));
    lcg_weights(w, R * C, 5);
    for (int64_t i = 0; i < n * C; i++) x[i] = w[(i * 13) % (R * C)] * 30.0f;
    const char *specs[] = {"rule=absmean,group=128,act=int8", "rule=absmean,group=128", "rule=twn,group=64,act=int8"};
    for (int si = 0; si < 3; si++) {
        QuantSpec sp;
        REQUIRE(quant_spec_parse(specs[si], &sp) == 0);
        Linear full = {.out = R, .in = C, .act_int8 = sp.act == QA_INT8};
        snprintf(full.name, sizeof full.name, "synthetic");
        full.t = xcalloc(1, sizeof(TernaryMatrix));
        REQUIRE(tern_from_dense(w, R, C, &sp, full.t) == 0);
        for (int tp = 2; tp <= 4; tp *= 2) {
            int same = 0;
            const double e = row_parallel_vs_full(&full, tp, x, n, &same);
            printf("    %s, %lld columns, tp %d: rel L2 %.3g%s\n", specs[si], (long long)C, tp, e,
                   same ? " (same bits)" : "");
            if (full.act_int8) CHECK_MSG(same, "%s tp %d: rel L2 %g, not the tp = 1 bits", specs[si], tp, e);
            else CHECK_MSG(e >= 0 && e <= TOL_TP_LOGITS_F32, "%s tp %d: rel L2 %g", specs[si], tp, e);
        }
        if (si == 0) { /* a token of absmax 1e-7 */
            float *xt = xmalloc(sizeof(float) * (size_t)(n * C));
            memcpy(xt, x, sizeof(float) * (size_t)(n * C));
            for (int64_t k = 0; k < C; k++) xt[C + k] = x[C + k] * 1e-7f / 30.0f;
            int same = 0;
            const double e = row_parallel_vs_full(&full, 2, xt, n, &same);
            CHECK_MSG(same, "a token under the 1e-5 floor: rel L2 %g, not the tp = 1 bits", e);
            free(xt);
        }
        linear_free(&full);
    }
    /* dense, int8 activations */
    Linear dense = {.out = R, .in = C, .act_int8 = 1, .w = xmalloc(sizeof(float) * (size_t)(R * C))};
    snprintf(dense.name, sizeof dense.name, "synthetic dense");
    memcpy(dense.w, w, sizeof(float) * (size_t)(R * C));
    int same = 0;
    const double e = row_parallel_vs_full(&dense, 2, x, n, &same);
    printf("    dense, int8 activations, tp 2: rel L2 %.3g\n", e);
    CHECK_MSG(e >= 0 && e <= TOL_TP_LOGITS_F32, "dense int8 tp 2: rel L2 %g", e);
    linear_free(&dense);
    free(w);
    free(x);
}

/* One forward of tokens[0, n) at positions p0.. of sequence sid on engine e. */
static int tp_fwd(Engine *e, int sid, int64_t p0, int64_t n, float *logits) {
    int ids[16], seq[16];
    int64_t pos[16], li = n - 1;
    for (int64_t i = 0; i < n; i++) ids[i] = (int)(100 + 7 * (p0 + i)), seq[i] = sid, pos[i] = p0 + i;
    return forward(e->m, &e->kv, &e->rs, ids, seq, pos, n, &li, 1, logits);
}

/* What the CPU TP engine refuses or keeps that the models' runs do not show:
 * an intermediate size that does not split (the head check had refused every
 * degree the tiny models could be given first), a shard out of range or
 * empty, a degree above TP_MAX_RANKS (a model with 128 KV heads would pass
 * the head check and overflow TpStats), --dump-layers, a rank's failure
 * reported by the engine (only rank 0's had been checked: a failed piece
 * input on rank 1 or 3 returned 0), and the sequence's length after prefill
 * and decode (pos + 1, as on one rank). */
TEST(tp_engine_refusals_and_state) {
    Model m;
    REQUIRE(model_load(test_path(LLAMA_DIR), NULL, &m) == 0);
    ModelConfig c = m.cfg;
    c.inter = 770;
    CHECK(tp_plan_check(&c, 4, "x") != 0 && strstr(err_msg(), "intermediate_size 770 does not split over tp = 4"));
    /* shards out of range or empty */
    {
        Linear full = m.layers[0].q;
        TpLinear sh;
        CHECK(tp_shard_linear(&full, TP_SPLIT_COLS, 0, full.in + 1, &sh) != 0 && strstr(err_msg(), "out of range"));
        CHECK(tp_shard_linear(&full, TP_SPLIT_ROWS, full.out - 4, full.out + 1, &sh) != 0 &&
              strstr(err_msg(), "out of range"));
        CHECK(tp_shard_linear(&full, TP_SPLIT_COLS, 5, 5, &sh) != 0 && strstr(err_msg(), "is empty"));
        CHECK(tp_shard_linear(&full, TP_SPLIT_ROWS, -1, 4, &sh) != 0 && strstr(err_msg(), "out of range"));
    }
    Engine e;
    EngineOpts eo = {.max_tok = 16, .block_size = 16, .n_blocks = 8};
    {
        Model wide = m; /* (shallow: only the config is read before the refusal) */
        wide.cfg.n_heads = wide.cfg.n_kv_heads = 128;
        CHECK(tp_engine_open(&e, &wide, &eo, 128) != 0 && strstr(err_msg(), "between 1 and 64"));
    }
    /* engine_init's memory check at every tp (the ranks share the process; at tp > 1 it had
     * been skipped: a 64M-token pool opened under an 8 GiB budget) */
    {
        setenv("TERNLAB_MEM_LIMIT", "8G", 1);
        EngineOpts big = eo;
        big.n_blocks = 1 << 22;
        for (int tp = 1; tp <= 2; tp++) {
            const int rc = tp_engine_open(&e, &m, &big, tp);
            if (rc == 0) tp_engine_close(&e);
            CHECK_MSG(rc != 0 && strstr(err_msg(), "not enough memory") &&
                          (tp == 1 || strstr(err_msg(), "--tp 2: ")),
                      "tp %d: rc %d: %s", tp, rc, rc ? err_msg() : "");
        }
        unsetenv("TERNLAB_MEM_LIMIT");
    }
    /* the ranks' own run states, logits slices and communicator count too, not their shards
     * alone (those had been all it added: a tp 2 run over the budget passed): a budget that
     * holds the tp 1 engine, the shards and half the ranks' buffers opens tp 1, refuses tp 2 */
    {
        EngineOpts e2 = {.max_tok = 4096, .block_size = 16, .n_blocks = 64};
        const size_t shards = model_layer_linear_bytes(&m) + linear_bytes(&m.lm_head);
        const size_t ranks = preflight_tp_ranks_bytes(&m.cfg, 2, shards, e2.max_tok, 0, 64 * 16);
        REQUIRE(ranks > shards + ((size_t)64 << 20));
        setenv("TERNLAB_MEM_LIMIT", "1T", 1);
        PreflightPlan p;
        REQUIRE(preflight_plan(&m.cfg, 0, 0, 64 * 16, e2.max_tok, 16, &p) == 0);
        size_t rss_kb = 0;
        char line[256];
        FILE *f = fopen("/proc/self/status", "r");
        REQUIRE(f != NULL);
        while (fgets(line, sizeof line, f))
            if (sscanf(line, "VmRSS: %zu kB", &rss_kb) == 1) break;
        fclose(f);
        REQUIRE(rss_kb > 0);
        char lim[64];
        snprintf(lim, sizeof lim, "%zu", rss_kb * 1024 + p.needed + shards + (ranks - shards) / 2);
        setenv("TERNLAB_MEM_LIMIT", lim, 1);
        int rc = tp_engine_open(&e, &m, &e2, 2);
        if (rc == 0) tp_engine_close(&e);
        CHECK_MSG(rc != 0 && strstr(err_msg(), "--tp 2: not enough memory") &&
                      strstr(err_msg(), "the --tp ranks' shards and buffers") &&
                      strstr(err_msg(), "--tp 1 needs none of the ranks'"),
                  "tp 2: rc %d: %s", rc, rc ? err_msg() : "");
        rc = tp_engine_open(&e, &m, &e2, 1);
        CHECK_MSG(rc == 0, "tp 1: %s", err_msg());
        if (rc == 0) tp_engine_close(&e);
        unsetenv("TERNLAB_MEM_LIMIT");
    }
    float *logits = xmalloc(sizeof(float) * (size_t)m.cfg.vocab);
    REQUIRE(tp_engine_open(&e, &m, &eo, 2) == 0);
    int sid = kv_seq_new(&e.kv);
    REQUIRE(sid >= 0);
    float dump[4];
    e.rs.dump = dump;
    CHECK(tp_fwd(&e, sid, 0, 4, logits) != 0 && strstr(err_msg(), "--dump-layers is not available with --tp 2"));
    e.rs.dump = NULL;
    REQUIRE(tp_fwd(&e, sid, 0, 10, logits) == 0);
    CHECK_MSG(e.kv.seqs[sid].len == 10, "after 10 prompt tokens: length %lld", (long long)e.kv.seqs[sid].len);
    e.rs.decode = 1;
    REQUIRE(tp_fwd(&e, sid, 10, 1, logits) == 0);
    e.rs.decode = 0;
    CHECK_MSG(e.kv.seqs[sid].len == 11, "after a decode step: length %lld", (long long)e.kv.seqs[sid].len);
    tp_engine_close(&e);
    model_free(&m);
    /* a rank other than 0 fails: group 128 at tp 4 cuts down's 768 columns mid-group, so
     * ranks 1 and 3 hold two pieces and allocate their input; every rank's error is read */
    ModelLoadOpts lo = {.quant = "rule=absmean,group=128"};
    REQUIRE(model_load(test_path(LLAMA_DIR), &lo, &m) == 0);
    REQUIRE(tp_engine_open(&e, &m, &eo, 4) == 0);
    sid = kv_seq_new(&e.kv);
    mem_fail_next("tp piece input", 1);
    const int rc = tp_fwd(&e, sid, 0, 4, logits);
    CHECK_MSG(mem_fail_next(NULL, 0) == 0, "the injected failure was not reached");
    CHECK_MSG(rc != 0 && (strstr(err_msg(), "tp rank 1:") || strstr(err_msg(), "tp rank 3:")), "rc %d: %s", rc,
              rc ? err_msg() : "");
    tp_engine_close(&e);
    model_free(&m);
    free(logits);
}
