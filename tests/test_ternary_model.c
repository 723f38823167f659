/* Ternary models end to end: the native BitNet checkpoint against transformers,
 * post-training ternarisation against the PyTorch reference perplexities, and
 * the packed-kernel path against its dequantised dense twin. */
#include "test.h"
#include "fixtures.h"
#include "core/err.h"
#include "core/mem.h"
#include "eval/ppl.h"
#include "load/tokens.h"
#include "runtime/engine.h"
#include "runtime/forward.h"
#include "runtime/linear.h"
#include "kv/kvcache.h"

#include <cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* BitNet: int8 activation rounding flips on last-bit differences and the flips
 * cascade (an independent fp32 numpy forward is 8.2e-3 from transformers and
 * 9e-3 from its own float64 twin): a loose bound plus top-1 agreement. */
#define TOL_BITNET_LOGITS 3e-2
#define MIN_BITNET_TOP1 0.97
/* Perplexity vs the PyTorch references: 0.5% as the issue sets, where codes can move:
 * int8 activations flip a code on a last-bit tie (0.2 % seen), and l2opt scores its cuts in
 * double where make_ptq_refs.py's fp32 cumsum picks another cut in a few rows (8 of 5632 in
 * llama-tiny: 0.01-0.15 %; the double cut has the lower error).  Every other spec has the
 * reference's codes and scales: within summation order (1e-7 seen), bounded at 1e-4 (dense
 * kernels round differently by CPU), which the 0.5 % had hidden. */
#define TOL_PPL_REL 5e-3
#define TOL_PPL_SAME_CODES 1e-4
static double ptq_tol(const char *spec) {
    return strstr(spec, "act=int8") || strstr(spec, "rule=l2opt") ? TOL_PPL_REL : TOL_PPL_SAME_CODES;
}

static const int T = 256;

TEST(bitnet_logits_match_transformers) {
    float *got, *ref;
    int V;
    REQUIRE(fixture_oracle_logits(BITNET_DIR, NULL, T, &got, &ref, &V) == 0);
    int64_t n = 2 * (int64_t)T * V;
    int agree = 0;
    for (int r = 0; r < 2 * T; r++)
        agree += argmax_f32(got + (int64_t)r * V, V) == argmax_f32(ref + (int64_t)r * V, V);
    double rel = rel_l2(got, ref, n), top1 = agree / (2.0 * T);
    printf("    bitnet logits rel L2 %.3g, top-1 agreement %.4f\n", rel, top1);
    CHECK_MSG(rel <= TOL_BITNET_LOGITS, "rel L2 %.3g", rel);
    CHECK_MSG(top1 >= MIN_BITNET_TOP1, "top-1 %.4f", top1);
    free(got);
    free(ref);
}

/* Logits of the model in dir at positions np - 1 .. n - 2 of toks[0..n) (the
 * ones that predict toks[np..n)), one forward pass: ((n - np), vocab), heap. */
static float *teacher_forced_logits(const char *dir, const int32_t *toks, int64_t n, int64_t np, int *vocab) {
    Model m;
    Engine e;
    if (fixture_engine(dir, NULL, n, 16, 1, n, &m, &e) != 0) return NULL;
    const int V = m.cfg.vocab, sid = kv_seq_new(&e.kv);
    int *seq = xmalloc(sizeof(int) * (size_t)n);
    int64_t *pos = xmalloc(sizeof(int64_t) * (size_t)n), *li = xmalloc(sizeof(int64_t) * (size_t)n);
    for (int64_t i = 0; i < n; i++) seq[i] = sid, pos[i] = i, li[i] = np - 1 + i;
    float *lg = xmalloc(sizeof(float) * (size_t)(n - np) * (size_t)V);
    if (forward(e.m, &e.kv, &e.rs, toks, seq, pos, n, li, n - np, lg) != 0) {
        fprintf(stderr, "    %s\n", err_msg());
        free(lg);
        lg = NULL;
    }
    free(seq);
    free(pos);
    free(li);
    engine_free(&e);
    model_free(&m);
    *vocab = V;
    return lg;
}

/* BitNet greedy tokens against transformers'.  Free-running greedy decoding
 * can part from the reference where two logits nearly tie: the int8
 * activation rounding above moves logits by ~1e-2, and which of two tied
 * tokens wins then depends on the summation order of the f32 parts (OpenBLAS
 * picks its kernels by CPU: on one AMD EPYC machine its Haswell kernels part
 * at token 30 of 64, its SkylakeX ones at none).  So: with the reference's
 * tokens as the history (teacher forcing), every one of the 64 predictions is
 * the reference's token or within TIE_LOGIT of our best (a near tie), at most
 * MAX_TIES of them; and where free-running greedy parts from the reference
 * (if it does), its token and the reference's are within TIE_LOGIT of each
 * other in those logits (which of the two the one-pass forward prefers may
 * differ from the step-by-step decode's choice).  TIE_LOGIT: about the
 * per-logit difference from transformers the logits test measures (rel L2
 * 8.8e-3 of logits whose RMS is 5.2: 0.045); the tie met is 0.042 (token 30,
 * with either kernel set; the one-pass forward here parts there too). */
#define TIE_LOGIT 0.05f
#define MAX_TIES 2
TEST(bitnet_greedy_matches_transformers) {
    int32_t *prompt, *want, *out[1];
    int64_t np = fixture_ref_ints(BITNET_DIR, "greedy_prompt", &prompt);
    int64_t nw = fixture_ref_ints(BITNET_DIR, "greedy_out", &want);
    REQUIRE(np > 0 && nw == 64);
    out[0] = xmalloc(sizeof(int32_t) * 64);
    REQUIRE(fixture_greedy(BITNET_DIR, NULL, prompt, np, 64, 1, out, NULL) == 0);
    int same = 0;
    while (same < 64 && out[0][same] == want[same]) same++;
    /* the reference's history: prompt then its 64 tokens */
    int32_t *hist = xmalloc(sizeof(int32_t) * (size_t)(np + 64));
    memcpy(hist, prompt, sizeof(int32_t) * (size_t)np);
    memcpy(hist + np, want, sizeof(int32_t) * 64);
    int V = 0;
    float *lg = teacher_forced_logits(BITNET_DIR, hist, np + 64, np, &V);
    REQUIRE(lg != NULL);
    int ties = 0, first_tie = -1, far = 0;
    float worst = 0.0f;
    for (int i = 0; i < 64; i++) {
        const float *row = lg + (int64_t)i * V;
        const int64_t best = argmax_f32(row, V);
        if (best == want[i]) continue;
        const float gap = row[best] - row[want[i]];
        worst = gap > worst ? gap : worst;
        if (gap <= TIE_LOGIT) {
            ties++;
            if (first_tie < 0) first_tie = i;
        } else {
            far++;
        }
    }
    printf("    greedy: first difference at token %d of 64; teacher-forced: %d near ties (first at %d, -1: "
           "none), largest gap %.4f\n",
           same, ties, first_tie, worst);
    CHECK_MSG(far == 0, "%d teacher-forced predictions differ from the reference by more than %.2f (gap %.4f)",
              far, TIE_LOGIT, worst);
    CHECK_MSG(ties <= MAX_TIES, "%d near ties (at most %d)", ties, MAX_TIES);
    if (same < 64) { /* where free-running greedy parts, its token and the reference's nearly tie */
        const float *row = lg + (int64_t)same * V;
        const float d = row[out[0][same]] - row[want[same]];
        CHECK_MSG(fabsf(d) <= TIE_LOGIT, "free-running greedy parts at token %d where the logits differ by %.4f", same,
                  d);
    }
    free(lg);
    free(hist);
    free(out[0]);
    free(prompt);
    free(want);
}

/* Golden check 3: on the same ternary weights, 100 greedy tokens from the packed
 * kernels equal those of the dequantised dense path, at batch 1 and 8. */
static void check_fast_vs_dense(const char *dir, const char *quant) {
    int32_t *prompt;
    int64_t np = fixture_ref_ints(dir, "greedy_prompt", &prompt);
    REQUIRE(np > 0);
    for (int batch = 1; batch <= 8; batch += 7) {
        int32_t *fast[8], *dense[8];
        for (int b = 0; b < batch; b++) {
            fast[b] = xmalloc(sizeof(int32_t) * 100);
            dense[b] = xmalloc(sizeof(int32_t) * 100);
        }
        ModelLoadOpts of = {.quant = quant}, od = {.quant = quant, .dense = 1};
        REQUIRE(fixture_greedy(dir, &of, prompt, np, 100, batch, fast, NULL) == 0);
        REQUIRE(fixture_greedy(dir, &od, prompt, np, 100, batch, dense, NULL) == 0);
        for (int b = 0; b < batch; b++) {
            int same = 0;
            while (same < 100 && fast[b][same] == dense[b][same]) same++;
            CHECK_MSG(same == 100, "%s quant=%s batch %d seq %d: first difference at %d", dir,
                      quant ? quant : "(native)", batch, b, same);
            free(fast[b]);
            free(dense[b]);
        }
    }
    free(prompt);
}

TEST(ternary_fast_path_equals_dense_bitnet) { check_fast_vs_dense(BITNET_DIR, NULL); }
TEST(ternary_fast_path_equals_dense_llama_ptq) {
    check_fast_vs_dense(LLAMA_DIR, "rule=twn,group=64,scale=f16");
    check_fast_vs_dense(LLAMA_DIR, "rule=absmean,group=128,scale=bf16,act=int8");
}

/* fixture_forced_logits (the GPU tests' diagnostic where greedy tokens part)
 * on the CPU: fed greedy's own tokens as decode steps, its logits pick greedy's
 * next token at every step tried (the same path, so exactly); and a prompt
 * longer than one run-state chunk (64) gives the logits that the shorter
 * prompt's decode steps give at the same position (llama-tiny; prefill and
 * decode sum in other orders: rel L2 1e-4, the fixture's f32 logits bound). */
TEST(forced_logits_follow_greedy) {
    int32_t *prompt, *out[1];
    int64_t np = fixture_ref_ints(BITNET_DIR, "greedy_prompt", &prompt);
    REQUIRE(np > 0 && np < 64);
    out[0] = xmalloc(sizeof(int32_t) * 100);
    REQUIRE(fixture_greedy(BITNET_DIR, NULL, prompt, np, 100, 1, out, NULL) == 0);
    const int ks[] = {0, 1, 29, 30, 63, 99};
    int V = 0;
    for (int i = 0; i < 6; i++) {
        float *lg = fixture_forced_logits(BITNET_DIR, NULL, prompt, np, out[0], ks[i], &V);
        REQUIRE(lg != NULL);
        int64_t best = argmax_f32(lg, V);
        CHECK_MSG(best == out[0][ks[i]], "after %d fed tokens: argmax %lld, greedy's token %d", ks[i],
                  (long long)best, out[0][ks[i]]);
        free(lg);
    }
    free(out[0]), free(prompt);
    /* llama-tiny (f32 activations: no int8 rounding to tip): the prompt and 70
     * tokens (two chunks), then 10 decode steps */
    np = fixture_ref_ints(LLAMA_DIR, "greedy_prompt", &prompt);
    REQUIRE(np > 0 && np < 64);
    int32_t *toks = xmalloc(sizeof(int32_t) * (size_t)(np + 80));
    memcpy(toks, prompt, sizeof(int32_t) * (size_t)np);
    for (int i = 0; i < 80; i++) toks[np + i] = (int32_t)((i * 37 + 11) % 256);
    float *a = fixture_forced_logits(LLAMA_DIR, NULL, toks, np + 70, toks + np + 70, 10, &V);
    float *b = fixture_forced_logits(LLAMA_DIR, NULL, toks, np, toks + np, 80, &V);
    REQUIRE(a && b);
    double rel = rel_l2(a, b, V);
    printf("    forced logits after an %lld-token prompt vs decode steps: rel L2 %.3g\n", (long long)(np + 70), rel);
    CHECK_MSG(rel <= 1e-4, "rel L2 %.3g", rel);
    free(a), free(b), free(toks), free(prompt);
}

/* ppl over the first 100 windows under `spec` vs ptq_reference.json. */
static void check_ptq_spec(const char *spec, const cJSON *specs) {
    const cJSON *ent = cJSON_GetObjectItem(specs, spec);
    const cJSON *want = ent ? cJSON_GetObjectItem(ent, "ppl") : NULL;
    REQUIRE(cJSON_IsNumber(want));
    Model m;
    Engine e;
    ModelLoadOpts o = {.quant = spec};
    REQUIRE(fixture_engine(LLAMA_DIR, &o, 2048, 16, 8, T, &m, &e) == 0);
    int32_t *tok;
    int64_t n;
    REQUIRE(tokens_load(test_path(TOKENS_FILE), m.cfg.vocab, &tok, &n) == 0);
    PplOpts po = {.window = T, .max_windows = 100};
    PplResult r;
    REQUIRE(eval_ppl(&e, tok, n, &po, &r) == 0);
    double rel = fabs(r.ppl / want->valuedouble - 1);
    printf("    %-46s ppl %11.4f  ref %11.4f  rel %.2e\n", spec, r.ppl, want->valuedouble, rel);
    CHECK_MSG(rel <= ptq_tol(spec), "%s: ppl %.4f vs %.4f (bound %.0e)", spec, r.ppl, want->valuedouble,
              ptq_tol(spec));
    free(tok);
    engine_free(&e);
    model_free(&m);
}

static void check_ptq(int all) {
    char *text;
    REQUIRE(file_read_all(test_path(LLAMA_DIR "/ptq_reference.json"), &text, NULL) == 0);
    cJSON *root = cJSON_Parse(text);
    free(text);
    const cJSON *specs = cJSON_GetObjectItem(root, "specs");
    REQUIRE(cJSON_IsObject(specs));
    /* the default suite covers every rule, group kind, scale dtype and both act modes */
    static const char *subset[] = {
        "rule=absmean,group=tensor,scale=f32", "rule=twn,group=row,scale=f32",
        "rule=std,group=128,scale=f32",        "rule=l2opt,group=64,scale=f32",
        "rule=absmax,group=128,scale=f32",     "rule=absmean,group=128,scale=fp8_e4m3",
        "rule=absmean,group=128,scale=e8m0",   "rule=twn,group=64,scale=f16,act=int8"};
    int count = 0;
    if (all)
        for (const cJSON *it = specs->child; it; it = it->next, count++) check_ptq_spec(it->string, specs);
    else
        for (size_t i = 0; i < sizeof subset / sizeof subset[0]; i++, count++)
            check_ptq_spec(subset[i], specs);
    CHECK(count == (all ? 26 : 8));
    cJSON_Delete(root);
}

TEST(ptq_reference_subset) { check_ptq(0); }
TEST(slow_ppl_ptq_reference_all) { check_ptq(1); }

TEST(slow_ppl_bitnet_full) {
    Model m;
    Engine e;
    REQUIRE(fixture_engine(BITNET_DIR, NULL, 2048, 16, 8, T, &m, &e) == 0);
    int32_t *tok;
    int64_t n;
    REQUIRE(tokens_load(test_path(TOKENS_FILE), m.cfg.vocab, &tok, &n) == 0);
    PplOpts po = {.window = T, .progress = 1};
    PplResult r;
    REQUIRE(eval_ppl(&e, tok, n, &po, &r) == 0);
    double want = fixture_json_number(BITNET_DIR "/reference.json", "ppl");
    printf("    bitnet ppl %.4f (transformers %.4f), %.1fs, %.0f tokens/s\n", r.ppl, want, r.seconds,
           r.tok_per_s);
    CHECK_MSG(fabs(r.ppl / want - 1) <= TOL_PPL_REL, "ppl %.4f vs %.4f", r.ppl, want);
    free(tok);
    engine_free(&e);
    model_free(&m);
}

int model_quantise_linear(Model *m, Linear *lin, int layer, const char *kind, const ModelLoadOpts *opts);

/* The int8 dense twin of a linear whose last group is short (300 columns in
 * groups of 256: 256 + 44) equals the packed kernel's result: each group's
 * sgemm takes the group's own width (the last one's full width had read the
 * next row's activations; a mutation from an audit that the suite had passed,
 * since every fixture's widths are multiples of 256).  Also f32 activations. */
TEST(ternary_twin_short_last_group) {
    enum { OUT = 7, IN = 300, N = 3 };
    float *w = xmalloc(sizeof(float) * OUT * IN), x[N * IN], y0[N * OUT], y1[N * OUT];
    uint32_t seed = 7;
    for (int i = 0; i < OUT * IN; i++) {
        seed = seed * 1664525u + 1013904223u;
        w[i] = (float)(seed >> 8) / 16777216.0f - 0.5f;
    }
    for (int i = 0; i < N * IN; i++) {
        seed = seed * 1664525u + 1013904223u;
        x[i] = (float)(seed >> 8) / 16777216.0f - 0.5f;
    }
    const char *specs[2] = {"rule=absmean,group=256,act=int8", "rule=absmean,group=256,act=f32"};
    for (int k = 0; k < 2; k++) {
        Linear lin[2];
        Model m[2];
        for (int t = 0; t < 2; t++) {
            memset(&m[t], 0, sizeof m[t]);
            memset(&lin[t], 0, sizeof lin[t]);
            m[t].cfg.n_layers = 1;
            snprintf(lin[t].name, sizeof lin[t].name, "model.layers.0.self_attn.q_proj");
            lin[t].out = OUT, lin[t].in = IN;
            lin[t].w = mem_alloc(sizeof(float) * OUT * IN, "w");
            REQUIRE(lin[t].w);
            memcpy(lin[t].w, w, sizeof(float) * OUT * IN);
            ModelLoadOpts o = {.quant = specs[k], .dense = t};
            REQUIRE(model_quantise_linear(&m[t], &lin[t], 0, "q", &o) == 0);
        }
        REQUIRE(lin[0].t && !lin[0].twin && lin[1].twin && lin[1].t->n_groups == 2);
        void *scr = mem_alloc(linear_scratch_bytes(N, IN), "scratch");
        REQUIRE(scr);
        REQUIRE(linear_forward(&lin[0], x, N, y0, scr) == 0 && linear_forward(&lin[1], x, N, y1, scr) == 0);
        double d2 = 0, r2 = 0;
        for (int i = 0; i < N * OUT; i++) d2 += (double)(y0[i] - y1[i]) * (y0[i] - y1[i]), r2 += (double)y0[i] * y0[i];
        CHECK_MSG(sqrt(d2 / r2) <= 1e-6, "%s: twin vs packed rel L2 %.3g", specs[k], sqrt(d2 / r2));
        mem_free(scr);
        for (int t = 0; t < 2; t++) linear_free(&lin[t]);
    }
    free(w);
}
