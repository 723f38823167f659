/* The BF16 Llama forward against transformers (data/llama-tiny/ref_logits.f32,
 * reference.json), and the paged KV cache's consistency properties. */
#include "test.h"
#include "fixtures.h"
#include "core/err.h"
#include "core/mem.h"
#include "eval/metrics.h"
#include "eval/ppl.h"
#include "load/config.h"
#include "load/tokens.h"
#include "runtime/forward.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* fp32 forward vs fp32 forward (transformers): only summation order differs.
 * An independent numpy forward lands at 1.9e-6 (fixtures README). */
#define TOL_LOGITS_FP32 1e-4
/* decode-after-prefill vs full prefill: same code, different GEMM shapes */
#define TOL_DECODE_VS_PREFILL 1e-5
/* same tokens through the paged cache with other block sizes/placements:
 * only the attention GEMM's K dimension blocking may change the sums */
#define TOL_PAGING 1e-6

static const int T = 256;

TEST(llama_logits_match_transformers) {
    float *got, *ref;
    int V;
    REQUIRE(fixture_oracle_logits(LLAMA_DIR, NULL, T, &got, &ref, &V) == 0);
    int64_t n = 2 * (int64_t)T * V;
    const double all = rel_l2(got, ref, n), worst = rel_l2_worst_row(got, ref, 2 * T, V);
    printf("    logits rel L2 %.3g overall, worst row %.3g\n", all, worst);
    CHECK_MSG(all <= TOL_LOGITS_FP32, "overall rel L2 %.3g", all);
    CHECK_MSG(worst <= TOL_LOGITS_FP32, "worst row rel L2 %.3g", worst);
    free(got);
    free(ref);
}

static void check_greedy(const char *dir, int batch) {
    int32_t *prompt, *want;
    int64_t np = fixture_ref_ints(dir, "greedy_prompt", &prompt);
    int64_t nw = fixture_ref_ints(dir, "greedy_out", &want);
    REQUIRE(np > 0 && nw == 64);
    Model m;
    Engine e;
    REQUIRE(fixture_engine(dir, NULL, 64, 16, batch, np + nw, &m, &e) == 0);
    const int32_t *prompts[16];
    int64_t lens[16];
    int32_t *out[16];
    for (int b = 0; b < batch; b++) {
        prompts[b] = prompt;
        lens[b] = np;
        out[b] = xmalloc(sizeof(int32_t) * (size_t)nw);
    }
    REQUIRE(engine_generate(&e, prompts, lens, batch, nw, out) == 0);
    for (int b = 0; b < batch; b++) {
        int same = 0;
        while (same < nw && out[b][same] == want[same]) same++;
        CHECK_MSG(same == nw, "sequence %d: first difference at token %d (%d vs %d)", b, same,
                  same < nw ? out[b][same] : -1, same < nw ? want[same] : -1);
        free(out[b]);
    }
    free(prompt);
    free(want);
    engine_free(&e);
    model_free(&m);
}

TEST(llama_greedy_matches_transformers) { check_greedy(LLAMA_DIR, 1); }
TEST(llama_greedy_batched_8) { check_greedy(LLAMA_DIR, 8); }

/* Prefill the first half of window 0 in one call, feed the rest one token at a
 * time through decode; the logits must equal a full prefill's. */
TEST(llama_decode_after_prefill_equals_prefill) {
    Model m;
    Engine e;
    REQUIRE(fixture_engine(LLAMA_DIR, NULL, T, 16, 2, T, &m, &e) == 0);
    int32_t *tok;
    int64_t n;
    REQUIRE(tokens_load(test_path(TOKENS_FILE), m.cfg.vocab, &tok, &n) == 0);
    int V = m.cfg.vocab;
    float *full = fixture_window_logits(&e, T, 0, 1);
    REQUIRE(full);
    float *step = xmalloc(sizeof(float) * (size_t)T * (size_t)V);
    int ids[256], seq[256];
    int64_t pos[256];
    int sid = kv_seq_new(&e.kv);
    int half = T / 2;
    for (int i = 0; i < half; i++) {
        ids[i] = tok[i];
        seq[i] = sid;
        pos[i] = i;
    }
    REQUIRE(forward(&m, &e.kv, &e.rs, ids, seq, pos, half, NULL, 0, step) == 0);
    for (int i = half; i < T; i++) {
        int64_t p = i;
        REQUIRE(forward(&m, &e.kv, &e.rs, &tok[i], &sid, &p, 1, NULL, 0, step + (int64_t)i * V) == 0);
    }
    const double worst = rel_l2_worst_row(step, full, T, V);
    printf("    decode vs prefill worst row rel L2 %.3g\n", worst);
    CHECK_MSG(worst <= TOL_DECODE_VS_PREFILL, "worst row %.3g", worst);
    free(step);
    free(full);
    free(tok);
    engine_free(&e);
    model_free(&m);
}

/* Block size 1, 16, 64 and shuffled free lists give the same logits. */
TEST(llama_paged_kv_block_size_and_placement) {
    float *base = NULL;
    int V = 0;
    int sizes[] = {16, 1, 64, 16, 1};
    int shuffle[] = {0, 0, 0, 1, 1};
    for (int c = 0; c < 5; c++) {
        Model m;
        Engine e;
        /* spare blocks so that a shuffled free list really scatters the pages */
        REQUIRE(fixture_engine(LLAMA_DIR, NULL, 2 * T, sizes[c], 6, T, &m, &e) == 0);
        if (shuffle[c]) kv_shuffle_free_list(&e.kv, 1234 + (uint64_t)c);
        V = m.cfg.vocab;
        float *got = fixture_window_logits(&e, T, 3, 5);
        REQUIRE(got);
        CHECK(kv_check(&e.kv) == 0);
        if (!base) base = got;
        else {
            double r = rel_l2(got, base, 2 * (int64_t)T * V);
            CHECK_MSG(r <= TOL_PAGING, "block size %d shuffle %d: rel L2 %.3g vs block 16", sizes[c],
                      shuffle[c], r);
            free(got);
        }
        engine_free(&e);
        model_free(&m);
    }
    free(base);
}

/* Decode of several interleaved sequences whose pages come from a shuffled
 * pool equals decoding each alone. */
TEST(llama_batched_decode_independent_of_neighbours) {
    Model m;
    Engine e;
    REQUIRE(fixture_engine(LLAMA_DIR, NULL, 64, 4, 8, 80, &m, &e) == 0);
    kv_shuffle_free_list(&e.kv, 99);
    int32_t *tok;
    int64_t n;
    REQUIRE(tokens_load(test_path(TOKENS_FILE), m.cfg.vocab, &tok, &n) == 0);
    const int32_t *prompts[4];
    int64_t lens[4] = {5, 17, 9, 30};
    int32_t *batched[4], *single[4];
    for (int s = 0; s < 4; s++) {
        prompts[s] = tok + 1000 * (s + 1);
        batched[s] = xmalloc(40 * sizeof(int32_t));
        single[s] = xmalloc(40 * sizeof(int32_t));
    }
    REQUIRE(engine_generate(&e, prompts, lens, 4, 40, batched) == 0);
    for (int s = 0; s < 4; s++) REQUIRE(engine_generate(&e, &prompts[s], &lens[s], 1, 40, &single[s]) == 0);
    for (int s = 0; s < 4; s++) {
        CHECK_MSG(memcmp(batched[s], single[s], 40 * sizeof(int32_t)) == 0,
                  "sequence %d differs between batched and single decode", s);
        free(batched[s]);
        free(single[s]);
    }
    CHECK(kv_check(&e.kv) == 0);
    CHECK(e.kv.n_free == e.kv.n_blocks);
    free(tok);
    engine_free(&e);
    model_free(&m);
}

/* A forward hook that records each call's decode flag and token count and
 * returns zero logits (what engine_generate tells the backend). */
typedef struct {
    int decode[64];
    int64_t n[64];
    int calls;
    int64_t vocab;
} CallLog;

static int record_call(void *ctx, const Model *m, KvCache *kv, RunState *s, const int *tok, const int *seq,
                       const int64_t *pos, int64_t n, const int64_t *logit_idx, int64_t n_logits, float *logits) {
    CallLog *c = ctx;
    if (c->calls < 64) c->decode[c->calls] = s->decode, c->n[c->calls] = n;
    c->calls++;
    if (logits) memset(logits, 0, sizeof(float) * (size_t)(n_logits * c->vocab));
    return 0;
}

/* engine_generate's edges: an empty prompt and a batch past the run state
 * are refused by name; a prompt longer than the run state is prefilled in
 * chunks and generates what one whole prefill does (a chunk off by one had
 * passed: no prompt was longer); the backend is told prefill (decode 0), then
 * decode (1) for each step after the first token (the ternary-KV policies
 * split on it; the flag dropped had passed).  forward refuses a logit row at
 * the token count and argmax_out on the CPU. */
TEST(engine_generate_edges) {
    Model m, m2;
    Engine e, e2;
    REQUIRE(fixture_engine(LLAMA_DIR, NULL, 16, 16, 2, 64, &m, &e) == 0);
    int32_t *tok;
    int64_t n;
    REQUIRE(tokens_load(test_path(TOKENS_FILE), m.cfg.vocab, &tok, &n) == 0);
    const int32_t *prompts[17];
    int64_t lens[17];
    int32_t *out[17], buf[17][8];
    for (int s = 0; s < 17; s++) prompts[s] = tok + 500 + 3 * s, lens[s] = 4, out[s] = buf[s];
    lens[0] = 0;
    CHECK(engine_generate(&e, prompts, lens, 1, 4, out) != 0 && strstr(err_msg(), "generate: empty prompt"));
    lens[0] = 4;
    CHECK(engine_generate(&e, prompts, lens, 17, 4, out) != 0 &&
          strstr(err_msg(), "batch 17 exceeds the run state (16 tokens)"));
    /* 40 prompt tokens in chunks of 16 against one prefill of 40 */
    REQUIRE(fixture_engine(LLAMA_DIR, NULL, 64, 16, 2, 64, &m2, &e2) == 0);
    int32_t chunked[8], whole[8], *oc = chunked, *ow = whole;
    const int64_t l40 = 40;
    REQUIRE(engine_generate(&e, prompts, &l40, 1, 8, &oc) == 0);
    REQUIRE(engine_generate(&e2, prompts, &l40, 1, 8, &ow) == 0);
    CHECK_MSG(memcmp(chunked, whole, sizeof chunked) == 0, "chunked prefill: %d %d %d .. against %d %d %d ..",
              chunked[0], chunked[1], chunked[2], whole[0], whole[1], whole[2]);
    engine_free(&e2);
    model_free(&m2);
    /* what the backend is told: 2 prompts of 4, 5 new tokens -> one prefill each, 4 decodes */
    CallLog log = {.vocab = m.cfg.vocab};
    e.rs.hook = record_call;
    e.rs.hook_ctx = &log;
    REQUIRE(engine_generate(&e, prompts, lens, 2, 5, out) == 0);
    e.rs.hook = NULL;
    CHECK_MSG(log.calls == 6, "%d forward calls", log.calls);
    for (int i = 0; i < log.calls && i < 6; i++)
        CHECK_MSG(log.decode[i] == (i >= 2) && log.n[i] == (i < 2 ? 4 : 2), "call %d: decode %d, %lld tokens", i,
                  log.decode[i], (long long)log.n[i]);
    CHECK(e.rs.decode == 0);
    /* forward's refusals */
    int sid = kv_seq_new(&e.kv), ids[1] = {5}, seq[1] = {sid};
    int64_t pos[1] = {0}, li = 1;
    float *lg = xmalloc(sizeof(float) * (size_t)m.cfg.vocab);
    CHECK(forward(&m, &e.kv, &e.rs, ids, seq, pos, 1, &li, 1, lg) != 0 &&
          strstr(err_msg(), "logit row 0 is token 1 of 1"));
    int32_t am[1];
    li = 0;
    e.rs.argmax_out = am;
    CHECK(forward(&m, &e.kv, &e.rs, ids, seq, pos, 1, &li, 1, NULL) != 0 &&
          strstr(err_msg(), "argmax_out needs a backend"));
    e.rs.argmax_out = NULL;
    kv_seq_free(&e.kv, sid);
    free(lg);
    free(tok);
    engine_free(&e);
    model_free(&m);
}

/* Full WikiText-2 test perplexity (a minute or two): `make check-ppl`. */
TEST(slow_ppl_llama_full) {
    Model m;
    Engine e;
    REQUIRE(fixture_engine(LLAMA_DIR, NULL, 2048, 16, 8, T, &m, &e) == 0);
    int32_t *tok;
    int64_t n;
    REQUIRE(tokens_load(test_path(TOKENS_FILE), m.cfg.vocab, &tok, &n) == 0);
    PplOpts po = {.window = T, .progress = 1};
    PplResult r;
    REQUIRE(eval_ppl(&e, tok, n, &po, &r) == 0);
    double want = fixture_json_number(LLAMA_DIR "/reference.json", "ppl");
    printf("    ppl %.6f (transformers %.6f), %lld windows, %.1fs, %.0f tokens/s\n", r.ppl, want,
           (long long)r.n_windows, r.seconds, r.tok_per_s);
    CHECK(r.n_windows == 1701 && r.n_pred == 433755);
    CHECK_MSG(fabs(r.ppl / want - 1) <= 1e-4, "ppl %.6f vs %.6f", r.ppl, want);
    free(tok);
    engine_free(&e);
    model_free(&m);
}

/* --dump-layers equals transformers' hidden states (ref_layers.f32) row by row. */
#define TOL_LAYER_ROWS 1e-5 /* fp32 vs fp32: per layer 7e-7 .. 2e-6 seen by an independent numpy forward */
TEST(llama_dump_layers_match_transformers) {
    char cmd[4096], *log = NULL, path[600];
    snprintf(path, sizeof path, "%s/layers.f32", test_tmpdir());
    snprintf(cmd, sizeof cmd, "%s ppl --model %s --tokens %s --max-windows 1 --dump-layers %s",
             bin_path("ternlab"), test_path(LLAMA_DIR), test_path(TOKENS_FILE), path);
    REQUIRE(test_run(cmd, &log) == 0);
    free(log);
    float *got, *ref;
    int64_t n = fixture_read_f32(LLAMA_DIR "/ref_layers.f32", &ref);
    char *buf;
    size_t nb;
    REQUIRE(file_read_all(path, &buf, &nb) == 0);
    got = (float *)buf;
    REQUIRE(n == 6 * 256 * 256 && (int64_t)nb == n * 4);
    const double worst = rel_l2_worst_row(got, ref, 6 * 256, 256);
    printf("    layer dump worst row rel L2 %.3g\n", worst);
    CHECK_MSG(worst <= TOL_LAYER_ROWS, "worst row %.3g", worst);
    free(got);
    free(ref);
}

/* The perplexity protocols against each other and against hand values (a
 * mutation audit found each of these wrong forms passing the suite, whose
 * split-protocol checks counted predictions and compared split runs only):
 * the split protocol's nll at each scored position equals the whole-window
 * run's at that position (f32 decode equals prefill up to the GEMM shapes:
 * the prefill's last row and each decode step's input token are the ones a
 * window's own positions give); its nll_out holds exactly the scored
 * positions, in order, summing to nll_sum; first_window starts at that
 * window's tokens; the partial tail is no window; nll_of is -log softmax. */
TEST(ppl_protocols_agree_position_by_position) {
    const int W = 64, NW = 3;
    Model m;
    Engine e;
    REQUIRE(fixture_engine(LLAMA_DIR, NULL, NW * W, 16, NW, W, &m, &e) == 0);
    int32_t *tok;
    int64_t n;
    REQUIRE(tokens_load(test_path(TOKENS_FILE), m.cfg.vocab, &tok, &n) == 0);
    const int per_whole = ppl_scored_per_window(W, 0), per_split = ppl_scored_per_window(W, 1);
    const int r0 = W / 2 - 1;
    REQUIRE(per_whole == W - 1 && per_split == W - 1 - r0);
    float *whole = xmalloc(sizeof(float) * (size_t)(NW * per_whole));
    float *split = xmalloc(sizeof(float) * (size_t)(NW * per_split + 1));
    split[NW * per_split] = 12345.0f; /* a sentinel after the scored positions */
    PplOpts ow = {.window = W, .max_windows = NW, .nll_out = whole};
    PplOpts os = {.window = W, .max_windows = NW, .nll_out = split, .kv_split = 1};
    PplResult rw, rs;
    REQUIRE(eval_ppl(&e, tok, n, &ow, &rw) == 0 && eval_ppl(&e, tok, n, &os, &rs) == 0);
    CHECK(rw.n_pred == NW * per_whole && rs.n_pred == NW * per_split);
    CHECK_MSG(split[NW * per_split] == 12345.0f, "nll_out written past its %d positions", NW * per_split);
    double sum = 0, worst = 0;
    for (int w = 0; w < NW; w++)
        for (int j = 0; j < per_split; j++) {
            const double a = split[w * per_split + j], b = whole[w * per_whole + r0 + j];
            sum += a;
            worst = fmax(worst, fabs(a - b) / fmax(fabs(b), 1e-3));
        }
    printf("    split vs whole windows: worst relative nll difference %.3g over %d positions\n", worst,
           NW * per_split);
    CHECK_MSG(worst <= TOL_DECODE_VS_PREFILL * 10, "split protocol's nll differs by %g", worst);
    CHECK_MSG(fabs(sum - rs.nll_sum) <= 1e-6 * fabs(rs.nll_sum), "nll_out sums to %.9g, nll_sum %.9g", sum,
              rs.nll_sum);
    /* first_window 1: window 1's tokens, as in the run over windows 0..2 */
    float *one = xmalloc(sizeof(float) * (size_t)per_whole);
    PplOpts o1 = {.window = W, .first_window = 1, .max_windows = 1, .nll_out = one};
    PplResult r1;
    REQUIRE(eval_ppl(&e, tok, n, &o1, &r1) == 0 && r1.n_windows == 1);
    double w1 = 0;
    for (int j = 0; j < per_whole; j++) w1 = fmax(w1, fabs((double)one[j] - whole[per_whole + j]));
    CHECK_MSG(w1 <= 1e-4, "first_window 1: nll off window 1's by %g", w1);
    /* the partial tail is no window */
    PplOpts oc = {.window = 256};
    CHECK(ppl_window_count(1000, &oc) == 3 && ppl_window_count(1023, &oc) == 3 && ppl_window_count(1024, &oc) == 4);
    /* nll_of over equal logits: log(vocab) */
    const float flat[4] = {0, 0, 0, 0}, peak[3] = {0.0f, 0.0f, (float)log(2.0)};
    CHECK(fabs(nll_of(flat, 4, 2) - log(4.0)) <= 1e-12);
    CHECK(fabs(nll_of(peak, 3, 2) - (log(4.0) - log(2.0))) <= 1e-7); /* e^0 + e^0 + 2 = 4 */
    free(one), free(whole), free(split), free(tok);
    engine_free(&e);
    model_free(&m);
}

/* ---- scaled RoPE: transformers' linear, llama3, yarn, dynamic, longrope types */

/* The inverse frequencies equal transformers' bit for bit (its float32
 * arithmetic; rope.reference.json holds the model's own inv_freq buffer), for
 * the default rope and both spellings of each scaling. */
TEST(rope_scaled_inv_freq_match_transformers) {
    static const char *const vs[] = {"default", "llama3",  "linear",   "yarn",         "yarn_opts",
                                     "yarn_null", "dynamic", "longrope", "longrope_opts"};
    for (int k = 0; k < 9; k++)
        for (int legacy = 0; legacy < (k ? 2 : 1); legacy++) {
            float want[64], got[64];
            const int n = fixture_rope_inv_freq(vs[k], want, 64);
            const char *dir = k ? fixture_rope_dir(vs[k], legacy) : test_path(LLAMA_DIR);
            ModelConfig c;
            REQUIRE(n == 16 && dir);
            const int rc = config_load(dir, &c);
            CHECK_MSG(rc == 0, "%s", err_msg());
            if (rc) continue;
            CHECK(c.head_dim == 2 * n);
            rope_inv_freq(&c, got);
            int same = 0;
            while (same < n && got[same] == want[same]) same++;
            CHECK_MSG(same == n, "%s%s: frequency %d is %.9g, transformers' %.9g", vs[k], legacy ? " (legacy)" : "",
                      same, same < n ? (double)got[same] : 0.0, same < n ? (double)want[same] : 0.0);
            /* the factor on cos and sin: yarn's and longrope's, bit for bit in double, 1 elsewhere */
            const double att = k ? fixture_rope_attention(vs[k]) : 1.0;
            CHECK_MSG(att > 0 && rope_attention_factor(&c) == (float)att &&
                          (c.rope_kind != ROPE_YARN || c.rope_attn == att) &&
                          (c.rope_kind != ROPE_LONGROPE || c.rope_attn == att),
                      "%s: attention factor %.17g, transformers' %.17g", vs[k], (double)rope_attention_factor(&c), att);
        }
}

/* Real checkpoints' llama3 scalings (Llama 3.1 and 3.2; data/llama-tiny/
 * rope_freq_cases.json, transformers' inv_freq computed without a model): many
 * more frequencies in the smooth band than llama-tiny's two, where the blend's
 * order of operations shows.  Read through config.json; bit for bit. */
TEST(rope_llama3_inv_freq_match_transformers_real_scalings) {
    int k = 0, n;
    const char *name = NULL, *dir = NULL;
    float want[ROPE_MAX_FACTORS], got[ROPE_MAX_FACTORS];
    while ((n = fixture_rope_freq_case(k, &name, &dir, want, ROPE_MAX_FACTORS)) > 0) {
        ModelConfig c;
        const int rc = config_load(dir, &c);
        CHECK_MSG(rc == 0, "%s: %s", name, err_msg());
        k++;
        if (rc) continue;
        CHECK(c.rope_kind == ROPE_LLAMA3 && c.head_dim == 2 * n);
        rope_inv_freq(&c, got);
        int same = 0, smooth = 0;
        float s;
        while (same < n && got[same] == want[same]) same++;
        for (int i = 0; i < n; i++) smooth += rope_llama3_band(&c, rope_default_freq(&c, i), &s) == 2;
        printf("    %s: %d frequencies, %d in the smooth band\n", name, n, smooth);
        CHECK(smooth >= 2);
        CHECK_MSG(same == n, "%s: frequency %d is %.9g, transformers' %.9g", name, same,
                  same < n ? (double)got[same] : 0.0, same < n ? (double)want[same] : 0.0);
    }
    CHECK_MSG(n == 0 && k == 3, "%d cases read, then %d", k, n);
}

/* The forward under each scaling against transformers' logits (data/llama-tiny/
 * rope_*.ref_logits.f32: 0.40 .. 0.83 rel L2 away from the unscaled model's,
 * dynamic's equal to it up to 1024 tokens),
 * the prefill's window and a decode step's: the unscaled fixture's fp32 bound. */
TEST(rope_scaled_logits_match_transformers) {
    static const char *const vs[] = {"llama3", "linear", "yarn", "yarn_opts", "dynamic", "longrope"};
    for (int k = 0; k < 6; k++) {
        double all, worst, dec;
        REQUIRE(fixture_rope_oracle(vs[k], &all, &worst, &dec) == 0);
        printf("    %s: logits rel L2 %.3g overall, worst row %.3g; decode step at position 99 %.3g\n", vs[k], all,
               worst, dec);
        CHECK_MSG(worst <= TOL_LOGITS_FP32 && dec <= TOL_LOGITS_FP32, "%s: worst row %.3g, decode %.3g", vs[k], worst,
                  dec);
    }
}

/* yarn under CPU tensor parallelism (each rank rotates with the model's tables,
 * the attention factor in them): `ternlab logits --tp 2` of window 0 against
 * transformers' logits, and `ternlab info` naming the scaling. */
TEST(rope_yarn_tp2_logits_match_transformers) {
    const char *bin = getenv("TERNLAB_BIN") ? getenv("TERNLAB_BIN") : "build/ternlab";
    const char *dir = fixture_rope_dir("yarn", 1);
    char cmd[4096], out[700];
    char *said = NULL;
    REQUIRE(dir);
    snprintf(out, sizeof out, "%s/yarn-tp2.f32", test_tmpdir());
    snprintf(cmd, sizeof cmd, "%s logits --model %s --tokens %s --window 256 --windows 0:1 --tp 2 --out %s", bin, dir,
             test_path(TOKENS_FILE), out);
    const int rc = test_run(cmd, &said);
    CHECK_MSG(rc == 0, "rc %d: %s", rc, said ? said : "");
    free(said);
    float *got = NULL, *ref = NULL;
    const int64_t n = fixture_read_f32(out, &got), nr = fixture_read_f32(LLAMA_DIR "/rope_yarn.ref_logits.f32", &ref);
    CHECK_MSG(n > 0 && n == nr && n % 256 == 0, "%lld logits, transformers' %lld", (long long)n, (long long)nr);
    if (n > 0 && n == nr && n % 256 == 0) {
        const double worst = rel_l2_worst_row(got, ref, 256, n / 256);
        printf("    yarn, --tp 2: worst row rel L2 %.3g against transformers\n", worst);
        CHECK_MSG(worst <= TOL_LOGITS_FP32, "worst row %.3g", worst);
    }
    free(got);
    free(ref);
    snprintf(cmd, sizeof cmd, "%s info --model %s", bin, dir);
    said = NULL;
    CHECK(test_run(cmd, &said) == 0 && said &&
          strstr(said, "rope scaling yarn, factor 4, original_max_position_embeddings 256, correction dims 0 .. 7, "
                       "attention factor 1.13862944"));
    free(said);
}

/* dynamic NTK scaling past max_position_embeddings (llama-tiny's 1024), where
 * transformers rescales theta call by call, and longrope past its original
 * length (512), where it takes the long factors call by call, are refused
 * before any work, the run's exit 1 naming it; a window that ends at the last
 * position before the limit runs. */
TEST(rope_dynamic_and_longrope_refuse_positions_past_their_limit) {
    const char *bin = getenv("TERNLAB_BIN") ? getenv("TERNLAB_BIN") : "build/ternlab";
    static const struct {
        const char *variant, *refusal, *info;
        int limit;
    } vs[] = {
        {"dynamic", "under dynamic RoPE scaling: a sequence longer than max_position_embeddings 1024",
         "rope scaling dynamic, factor 2: the default frequencies (theta 10000) up to max_position_embeddings 1024",
         1024},
        {"longrope", "under longrope RoPE scaling: a sequence longer than original_max_position_embeddings 512",
         "rope scaling longrope, factor 2, original_max_position_embeddings 512: the short factors, attention factor "
         "1.05409255",
         512},
    };
    for (int v = 0; v < 2; v++) {
        const char *dir = fixture_rope_dir(vs[v].variant, 1);
        const int L = vs[v].limit;
        char cmd[4096], out[700], want[160], *said = NULL;
        REQUIRE(dir);
        snprintf(want, sizeof want, "position %d %s", L, vs[v].refusal);
        for (int w = 0; w < 2; w++) {
            snprintf(out, sizeof out, "%s/lim-%d-%d.f32", test_tmpdir(), v, w);
            snprintf(cmd, sizeof cmd, "%s logits --model %s --tokens %s --window %d --windows 0:1 --out %s", bin, dir,
                     test_path(TOKENS_FILE), L + w, out);
            const int rc = test_run(cmd, &said);
            if (w)
                CHECK_MSG(rc == 1 && said && strstr(said, want), "%s: rc %d: %s", vs[v].variant, rc, said ? said : "");
            else
                CHECK_MSG(rc == 0, "%s: rc %d: %s", vs[v].variant, rc, said ? said : "");
            free(said);
            said = NULL;
        }
        /* generate: refused before any work where its last fed token (the prompt's 2 + L - 2)
         * would sit at position L */
        snprintf(cmd, sizeof cmd, "%s generate --model %s --prompt 1,2 --max-new %d", bin, dir, L);
        int rc = test_run(cmd, &said);
        CHECK_MSG(rc == 1 && said && strstr(said, want) && !strstr(said, "forward: "), /* (not the forward's, after
                                                                                          L - 3 steps) */
                  "%s: rc %d: %s", vs[v].variant, rc, said ? said : "");
        free(said);
        /* 8 new tokens run; for longrope L - 1, whose last fed token sits at position L - 1 */
        snprintf(cmd, sizeof cmd, "%s generate --model %s --prompt 1,2 --max-new %d", bin, dir, v ? L - 1 : 8);
        said = NULL;
        rc = test_run(cmd, &said);
        CHECK_MSG(rc == 0, "%s: rc %d: %s", vs[v].variant, rc, said ? said : "");
        free(said);
        said = NULL;
        snprintf(cmd, sizeof cmd, "%s info --model %s", bin, dir);
        CHECK_MSG(test_run(cmd, &said) == 0 && said && strstr(said, vs[v].info), "%s", said ? said : "");
        free(said);
    }
}

/* Windows over several forward calls (an engine of 256 tokens a call: one
 * window each): nll_out holds every window's scored positions in place, each
 * transformers' -log softmax from its logits (ref_logits.f32, windows 0 and 1),
 * and on_logits is told each window's own index — first_window on; the window
 * count skips first_window whole windows and never goes below 0. */
typedef struct {
    int64_t seen[4];
    int n;
} WinSeen;
static int record_window(void *ctx, int64_t w, const float *lg, const int32_t *ids, int T, int V, int r0) {
    WinSeen *s = ctx;
    if (s->n < 4) s->seen[s->n] = w;
    s->n++;
    return 0;
}
TEST(ppl_nll_out_over_calls_matches_transformers) {
    enum { T = 256, PER = T - 1 };
    PplOpts c = {.window = T, .first_window = 1};
    CHECK(ppl_window_count(1024, &c) == 3);
    c.max_windows = 2;
    CHECK(ppl_window_count(1024, &c) == 2);
    c.max_windows = 0, c.first_window = 4;
    CHECK(ppl_window_count(1024, &c) == 0);
    c.first_window = 5;
    CHECK(ppl_window_count(1024, &c) == 0);
    Model m;
    Engine e;
    REQUIRE(fixture_engine(LLAMA_DIR, NULL, T, 16, 1, T, &m, &e) == 0);
    const int V = m.cfg.vocab;
    int32_t *tok;
    int64_t n;
    float *ref = NULL;
    REQUIRE(tokens_load(test_path(TOKENS_FILE), V, &tok, &n) == 0);
    REQUIRE(fixture_read_f32(LLAMA_DIR "/ref_logits.f32", &ref) >= (int64_t)2 * T * V);
    float buf[2 * PER + 1];
    for (int i = 0; i <= 2 * PER; i++) buf[i] = NAN;
    WinSeen s = {{0}, 0};
    PplOpts o = {.window = T, .max_windows = 2, .nll_out = buf, .on_logits = record_window, .ctx = &s};
    PplResult r;
    REQUIRE(eval_ppl(&e, tok, n, &o, &r) == 0 && r.n_windows == 2);
    double worst = 0;
    for (int w = 0; w < 2; w++)
        for (int t = 0; t < PER; t++) {
            const float *row = ref + ((int64_t)w * T + t) * V;
            const double want = logsumexp_f32(row, V) - (double)row[tok[w * T + t + 1]];
            const double d = fabs((double)buf[w * PER + t] - want);
            worst = isnan(d) ? INFINITY : fmax(worst, d);
        }
    printf("    nll_out over two calls against transformers: worst |diff| %.3g\n", worst);
    CHECK_MSG(worst <= 1e-3, "worst |diff| %g", worst);
    CHECK(isnan(buf[2 * PER])); /* (nothing past the scored positions) */
    CHECK_MSG(s.n == 2 && s.seen[0] == 0 && s.seen[1] == 1, "%d windows seen: %lld %lld", s.n, (long long)s.seen[0],
              (long long)s.seen[1]);
    /* from window 1: its index and its positions */
    s.n = 0;
    for (int i = 0; i <= 2 * PER; i++) buf[i] = NAN;
    PplOpts o1 = {.window = T, .first_window = 1, .max_windows = 1, .nll_out = buf, .on_logits = record_window, .ctx = &s};
    REQUIRE(eval_ppl(&e, tok, n, &o1, &r) == 0 && r.n_windows == 1);
    worst = 0;
    for (int t = 0; t < PER; t++) {
        const float *row = ref + ((int64_t)T + t) * V;
        const double d = fabs((double)buf[t] - (logsumexp_f32(row, V) - (double)row[tok[T + t + 1]]));
        worst = isnan(d) ? INFINITY : fmax(worst, d);
    }
    CHECK_MSG(worst <= 1e-3 && isnan(buf[PER]), "window 1: worst |diff| %g", worst);
    CHECK_MSG(s.n == 1 && s.seen[0] == 1, "%d windows seen, the first %lld", s.n, (long long)s.seen[0]);
    free(ref);
    free(tok);
    engine_free(&e);
    model_free(&m);
}
