/* ternlab ppl | logits | generate | info */
#include "cli/cli.h"
#include "core/blas_setup.h"
#include "core/err.h"
#include "core/mem.h"
#include "eval/experiment.h"
#include "eval/ppl.h"
#include "load/tokens.h"
#include "runtime/cuda_engine.h"
#include "runtime/engine.h"
#include "runtime/report.h"
#include "tp/tp_engine.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define PPL_TOKENS_PER_CALL 2048 /* windows batched per forward: GEMMs with M = 2048 */

/* The run's outputs (--out, --dump-layers; NULL: not given) are none of its
 * inputs and not one file (the second writer's temporary had replaced the
 * first's file, or failed to rename): 0, or -1 with err_set. */
static int outs_check(const char *out, const char *dump, const char *model, const char *tokens) {
    if (out && model_out_not_input(out, "--out", model, tokens) != 0) return -1;
    if (dump && model_out_not_input(dump, "--dump-layers", model, tokens) != 0) return -1;
    if (out && dump && file_same(out, dump))
        return err_set("--out and --dump-layers name one file (%s): give each its own", out);
    return 0;
}

static int fail(const char *cmd) {
    fprintf(stderr, "ternlab %s: %s\n", cmd, err_msg());
    return 1;
}

static int need(const char *cmd, const char *what, const void *v) {
    if (v) return 0;
    fprintf(stderr, "ternlab %s: --%s is required (see ternlab %s --help)\n", cmd, what, cmd);
    return -1;
}

/* Parses --kv; `allowed` = 0 for commands that take no KV policy. */
static int check_kv_policy(const char *cmd, const CliOpts *o) {
    KvPolicy p;
    if (kv_policy_parse(o->kv, &p) != 0) {
        fprintf(stderr, "ternlab %s: --kv: %s\n", cmd, err_msg());
        return -1;
    }
    if (p.kind != KVP_NONE && strcmp(cmd, "logits") == 0) {
        fprintf(stderr, "ternlab logits: --kv %s: logits are full prefills (no decoded tokens); "
                        "use ppl --kv or the KV experiment\n", o->kv);
        return -1;
    }
    return 0;
}


static int open_model(const CliOpts *o, Model *m) {
    /* --device cuda: the GPU before the model (its load had come first, however long) */
    if (engine_device_parse(o->device) == ENGINE_CUDA && cuda_engine_precheck(o->tp > 1 ? o->tp : 1) != 0)
        return -1;
    ModelLoadOpts lo = {.quant = o->quant};
    return model_load(o->model, &lo, m);
}

static int open_engine(Engine *e, Model *m, const CliOpts *o, int64_t max_tok, int64_t seqs,
                       int64_t seq_len) {
    EngineOpts eo = {.max_tok = max_tok, .block_size = o->block_size,
                     .device = engine_device_parse(o->device), .bf16 = o->bf16};
    eo.n_blocks = o->kv_blocks ? o->kv_blocks
                               : seqs * ((seq_len + o->block_size - 1) / o->block_size);
    eo.max_ctx = seq_len; /* (the memory check's scratch: a sequence's context, not the pool's) */
    /* the policy from the start: the GPU allocates the pages it needs */
    KvPolicy kp;
    if (kv_policy_parse(o->kv, &kp) != 0) return -1;
    eo.kv = &kp;
    return tp_engine_open(e, m, &eo, o->tp); /* engine_init when --tp 1 */
}

/* --tp N > 1: per-rank weight bytes and collective time on stderr. */
static void report_tp(const Engine *e) {
    TpStats st;
    if (tp_engine_degree(e) == 1 || tp_engine_stats(e, &st) != 0) return;
    fprintf(stderr, "tp %d: decoder weights %zu B unsharded; per rank:", st.tp, st.full_layer_bytes);
    for (int r = 0; r < st.tp; r++) fprintf(stderr, " %zu", st.rank[r].layer_bytes);
    fprintf(stderr, " B; all-reduce %.1f us/token (rank 0)\n",
            st.tokens ? 1e6 * st.rank[0].comm_seconds / (double)st.tokens : 0.0);
}

/* 0 where the perplexity is finite; else an error (the loader refuses non-finite
 * weights: this is the forward's overflow, which no result is written from). */
static int ppl_finite(double ppl) {
    return isfinite(ppl) ? 0 : err_set("perplexity is %g: the forward produced non-finite logits", ppl);
}

/* --dump-layers FILE: raw f32 (n_layers+2, T, hidden) of window 0 — embedding
 * output, residual stream after each layer, after the final norm — the rows of
 * the fixtures' ref_layers.f32. */
static int dump_layers(Engine *e, const int32_t *tok, int64_t n, int T, const char *path) {
    const ModelConfig *c = &e->m->cfg;
    if (n < T) return err_set("--dump-layers: the token file is shorter than one window");
    size_t cnt = (size_t)(c->n_layers + 2) * (size_t)T * (size_t)c->hidden;
    float *buf = mem_alloc(sizeof(float) * cnt, "layer dump");
    if (!buf) return -1;
    int *ids = xmalloc(sizeof(int) * (size_t)T), *seq = xmalloc(sizeof(int) * (size_t)T);
    int64_t *pos = xmalloc(sizeof(int64_t) * (size_t)T);
    kv_reset(&e->kv);
    int sid = kv_seq_new(&e->kv);
    for (int t = 0; t < T; t++) {
        ids[t] = tok[t];
        seq[t] = sid;
        pos[t] = t;
    }
    e->rs.dump = buf;
    int rc = forward(e->m, &e->kv, &e->rs, ids, seq, pos, T, NULL, 0, NULL);
    e->rs.dump = NULL;
    kv_reset(&e->kv);
    if (rc == 0) rc = file_write_atomic(path, buf, sizeof(float) * cnt);
    mem_free(buf);
    free(ids);
    free(seq);
    free(pos);
    return rc;
}

int cmd_ppl(int argc, char **argv) {
    CliOpts o;
    if (cli_parse(argc, argv, "model tokens window max-windows quant kv device dtype tp out "
                              "block-size kv-blocks dump-layers", &o) != 0)
        return 2;
    if (o.help) {
        printf("ternlab ppl --model PATH --tokens FILE [--window 256] [--max-windows N]\n"
               "            [--quant SPEC] [--kv POLICY] [--device cpu|cuda] [--dtype f32|bf16]\n"
               "            [--tp N] [--out run.h5]\n"
               "            [--block-size 16] [--kv-blocks N] [--dump-layers FILE]\n"
               "--dump-layers FILE: raw f32 (n_layers+2, T, hidden) of window 0: embedding\n"
               "output, residual stream after each layer, after the final norm.\n"
               "Perplexity over non-overlapping windows of --window tokens (GPTQ protocol:\n"
               "positions 0..T-2 predict 1..T-1, no BOS, partial tail dropped).\n"
               "--kv none|encoder|decoder|all[@layers=a-b]: ternary KV pages for prompt\n"
               "(encoder) or generated (decoder) tokens; with --kv (none too: the reference of\n"
               "that protocol) each window's first half is prefilled and the second half\n"
               "decoded token by token and scored.\n"
               "--out FILE.h5: also write a run file (paper/SCHEMA.md) against the dense reference\n"
               "(evaluated in f32, so not with --dtype bf16; FILE's folder must exist), with the\n"
               "default KV pages: --block-size / --kv-blocks set this command's own pool only.\n"
               "Last stdout line: ppl <value> windows <n> predicted <n>\n");
        return 0;
    }
    if (need("ppl", "model", o.model) || need("ppl", "tokens", o.tokens) || check_kv_policy("ppl", &o))
        return 2;
    if (o.out && o.bf16) {
        /* the run file's evaluation carries no dtype: it had recorded f32 numbers
         * beside this command's bf16 ppl line */
        fprintf(stderr, "ternlab ppl: --dtype bf16 with --out: the run file is evaluated in f32; "
                        "drop --out, or --dtype bf16\n");
        return 2;
    }
    /* what the run file would refuse, refused before the evaluation (which had
     * run to the end first, or created a missing --out folder) */
    if (o.out && exp_check_out(o.out) != 0) return fail("ppl");
    if (o.dump_layers && file_out_path_check(o.dump_layers, "--dump-layers") != 0) return fail("ppl");
    if (outs_check(o.out, o.dump_layers, o.model, o.tokens) != 0) return fail("ppl");

    Model m;
    if (open_model(&o, &m) != 0) return fail("ppl");
    int32_t *tok;
    int64_t n;
    if (tokens_load(o.tokens, m.cfg.vocab, &tok, &n) != 0) {
        model_free(&m);
        return fail("ppl");
    }
    if (o.out) {
        if (exp_check_windows(o.window, m.cfg.vocab, n, o.max_windows, o.kv_given) != 0) {
            free(tok);
            model_free(&m);
            return fail("ppl");
        }
    }
    int64_t per_call = PPL_TOKENS_PER_CALL > o.window ? PPL_TOKENS_PER_CALL / o.window * o.window
                                                      : o.window;
    /* (before the memory plan: a window past the token file had been reported as memory) */
    int bad = n < o.window ? err_set("no complete window of %d tokens in %s (%lld tokens)", o.window, o.tokens,
                                     (long long)n)
                           : 0;
    if (!bad && o.kv_blocks) { /* windows per call as many as --kv-blocks holds (it had taken
                                * 8 regardless and failed, with a hint naming --batch) */
        /* (the split protocol feeds a window's first T-1 tokens: the last is only a target;
         * ceil(T/bs) pages had been asked of it) */
        const int fed = o.kv_given && !o.dump_layers ? o.window - 1 : o.window; /* (the dump: a whole window) */
        const int64_t fit = o.kv_blocks / ((fed + o.block_size - 1) / o.block_size);
        if (fit < 1)
            bad = err_set("--kv-blocks %lld of %d tokens hold less than the %d tokens a window feeds",
                          (long long)o.kv_blocks, o.block_size, fed);
        else if (fit < per_call / o.window)
            per_call = fit * o.window;
    }
    if (bad) {
        free(tok);
        model_free(&m);
        return fail("ppl");
    }
    Engine e;
    if (open_engine(&e, &m, &o, per_call, per_call / o.window, o.window) != 0) {
        free(tok);
        model_free(&m);
        return fail("ppl");
    }
    PplOpts po = {.window = o.window, .max_windows = o.max_windows, .progress = 1};
    /* --kv (none too: that protocol's reference): each window's first half prefilled, the
     * rest decoded and scored (--kv none had scored whole windows, not the reference of
     * --kv encoder's numbers) */
    po.kv_split = o.kv_given;
    PplResult r;
    int rc = o.dump_layers ? dump_layers(&e, tok, n, o.window, o.dump_layers) : 0;
    if (rc == 0) rc = eval_ppl(&e, tok, n, &po, &r);
    if (rc == 0) rc = ppl_finite(r.ppl);
    if (rc == 0) {
        fprintf(stderr, "ppl: %lld windows in %.2fs, %.2fs of it in the forward (%.0f tokens/s there, BLAS core %s)\n",
                (long long)r.n_windows, r.seconds, r.forward_seconds, r.tok_per_s, blas_core_report());
    }
    report_tp(&e);
    tp_engine_close(&e);
    free(tok);
    model_free(&m);
    if (rc == 0 && o.out) {
        /* the run file: the same windows against the dense reference (paper/SCHEMA.md) */
        rc = exp_run_single(o.model, o.tokens, o.window, o.max_windows, o.quant,
                            o.kv_given ? o.kv : NULL, o.tp, o.device, o.out);
        if (rc == 0) fprintf(stderr, "ppl: run file %s\n", o.out);
    }
    if (rc == 0) /* the contract: this is the last line on stdout */
        printf("ppl %.6f windows %lld predicted %lld\n", r.ppl, (long long)r.n_windows,
               (long long)r.n_pred);
    return rc ? fail("ppl") : 0;
}

typedef struct {
    FILE *f;
    const char *path;
} LogitsSink;

static int write_window_logits(void *ctx, int64_t w, const float *logits, const int32_t *tokens,
                               int T, int V, int r0) {
    LogitsSink *s = ctx;
    size_t cnt = (size_t)T * (size_t)V;
    if (fwrite(logits, sizeof(float), cnt, s->f) != cnt)
        return err_set("%s: write failed: %s", s->path, strerror(errno));
    return 0;
}

int cmd_logits(int argc, char **argv) {
    CliOpts o;
    if (cli_parse(argc, argv, "model tokens window windows quant kv device dtype tp out "
                              "block-size dump-layers", &o) != 0)
        return 2;
    if (o.help) {
        printf("ternlab logits --model PATH --tokens FILE --window T --windows A:B --out FILE\n"
               "               [--quant SPEC] [--device cpu|cuda] [--dtype f32|bf16] [--tp N]\n"
               "               [--block-size 16] [--dump-layers FILE] [--kv none]\n"
               "Writes raw little-endian f32 [(B-A)*T, vocab]: the logits of windows A..B-1,\n"
               "rows in token order (full prefills, so --kv takes only none).\n"
               "--dump-layers FILE: raw f32 (n_layers+2, T, hidden) of window 0 of the token\n"
               "file: embedding output, residual stream after each layer, after the final norm.\n");
        return 0;
    }
    if (need("logits", "model", o.model) || need("logits", "tokens", o.tokens) ||
        need("logits", "out", o.out) || check_kv_policy("logits", &o))
        return 2;
    if (!o.have_windows) {
        fprintf(stderr, "ternlab logits: --windows A:B is required\n");
        return 2;
    }
    if (!o.have_window) { /* (the rows' layout depends on it: it had defaulted to 256, unsaid) */
        fprintf(stderr, "ternlab logits: --window T is required\n");
        return 2;
    }
    /* (--out's folder checked here too: a missing one had been found only after the
     * model loaded, the message naming the temporary) */
    if (exp_check_out(o.out) != 0 || (o.dump_layers && file_out_path_check(o.dump_layers, "--dump-layers") != 0) ||
        outs_check(o.out, o.dump_layers, o.model, o.tokens) != 0)
        return fail("logits");
    Model m;
    if (open_model(&o, &m) != 0) return fail("logits");
    int32_t *tok;
    int64_t n;
    if (tokens_load(o.tokens, m.cfg.vocab, &tok, &n) != 0) {
        model_free(&m);
        return fail("logits");
    }
    int rc = 0;
    if (o.win_b > n / o.window) /* (win_b * window would overflow for a huge --windows) */
        rc = err_set("--windows %s of %d tokens: %s has %lld tokens (%lld windows)", o.windows, o.window,
                     o.tokens, (long long)n, (long long)(n / o.window));
    Engine e;
    int64_t per_call = PPL_TOKENS_PER_CALL > o.window ? PPL_TOKENS_PER_CALL / o.window * o.window
                                                      : o.window;
    if (rc == 0) rc = open_engine(&e, &m, &o, per_call, per_call / o.window, o.window);
    if (rc == 0) {
        char tmp[4300];
        tmp_begin(tmp, sizeof tmp, o.out); /* (TERM, INT, HUP: removed) */
        LogitsSink sink = {tmp_fopen(tmp, "wb"), tmp};
        if (!sink.f) rc = err_set("%s: cannot create: %s", tmp, strerror(errno));
        PplOpts po = {.window = o.window, .first_window = o.win_a,
                      .max_windows = o.win_b - o.win_a, .on_logits = write_window_logits,
                      .ctx = &sink};
        PplResult r;
        if (rc == 0 && o.dump_layers) rc = dump_layers(&e, tok, n, o.window, o.dump_layers);
        if (rc == 0) rc = eval_ppl(&e, tok, n, &po, &r);
        if (rc == 0) rc = ppl_finite(r.ppl); /* (an overflowed forward's logits are not written as a result) */
        /* on disk before the rename, as every other writer (a crash then leaves
         * the old file or the whole new one) */
        if (sink.f && rc == 0 && (fflush(sink.f) != 0 || fsync(fileno(sink.f)) != 0))
            rc = err_set("%s: write failed: %s", tmp, strerror(errno));
        if (sink.f && fclose(sink.f) != 0 && rc == 0)
            rc = err_set("%s: write failed: %s", tmp, strerror(errno));
        if (rc == 0 && rename(tmp, o.out) != 0)
            rc = err_set("%s: cannot rename to %s: %s", tmp, o.out, strerror(errno));
        if (rc != 0) remove(tmp);
        tmp_end(tmp);
        tp_engine_close(&e);
    }
    free(tok);
    model_free(&m);
    return rc ? fail("logits") : 0;
}

int cmd_generate(int argc, char **argv) {
    CliOpts o;
    if (cli_parse(argc, argv, "model prompt max-new quant kv device dtype tp block-size batch "
                  "kv-blocks",
                  &o) != 0)
        return 2;
    if (o.help) {
        printf("ternlab generate --model PATH --prompt 1,2,3 --max-new N [--quant SPEC]\n"
               "                 [--batch B] [--kv POLICY] [--block-size 16] [--kv-blocks N]\n"
               "                 [--tp N] [--device cpu|cuda] [--dtype f32|bf16]\n"
               "Greedy decoding with the paged KV cache; prints the generated ids,\n"
               "comma-separated.  --batch B decodes B copies of the prompt together\n"
               "(batched decode) and prints one line per sequence.\n");
        return 0;
    }
    if (need("generate", "model", o.model) || need("generate", "prompt", o.prompt) ||
        check_kv_policy("generate", &o))
        return 2;
    if (o.max_new < 1) { /* (without it the command printed an empty line) */
        fprintf(stderr, "ternlab generate: --max-new N (>= 1) is required\n");
        return 2;
    }
    {   /* the list's form before the model (a usage error); its ids against the vocabulary after */
        int32_t *ids;
        int64_t n;
        if (tokens_parse_list(o.prompt, 0, &ids, &n) != 0) {
            fprintf(stderr, "ternlab generate: --prompt: %s\n", err_msg());
            return 2;
        }
        free(ids);
    }
    Model m;
    if (open_model(&o, &m) != 0) return fail("generate");
    int32_t *prompt;
    int64_t plen;
    if (tokens_parse_list(o.prompt, m.cfg.vocab, &prompt, &plen) != 0) {
        model_free(&m);
        return fail("generate");
    }
    /* the positions the run feeds (the prompt's and every generated token's but the last)
     * against what the RoPE supports, before any work (dynamic: up to max_position_embeddings) */
    if (rope_positions_check(&m.cfg, plen + o.max_new - 2) != 0) {
        free(prompt);
        model_free(&m);
        return fail("generate");
    }
    if (o.kv_blocks) { /* the pool against what the run caches, before any work (as ppl checks it):
                        * a short one had failed once the decode ran out of blocks, the tokens lost */
        /* (each sequence caches its prompt and every generated token but the last) */
        const int64_t per_seq = (plen + o.max_new - 1 + o.block_size - 1) / o.block_size;
        if (o.kv_blocks < per_seq * o.batch) {
            err_set("--kv-blocks %lld of %d tokens hold less than the run caches: %d sequence%s of %lld tokens "
                    "(the prompt's %lld + --max-new %lld - 1) take %lld blocks", (long long)o.kv_blocks,
                    o.block_size, o.batch, o.batch == 1 ? "" : "s", (long long)(plen + o.max_new - 1),
                    (long long)plen, (long long)o.max_new, (long long)(per_seq * o.batch));
            free(prompt);
            model_free(&m);
            return fail("generate");
        }
    }
    Engine e;
    int64_t max_tok = plen > o.batch ? plen : o.batch;
    if (max_tok > 4096) max_tok = 4096;
    int rc = open_engine(&e, &m, &o, max_tok, o.batch, plen + o.max_new);
    /* the ids' buffers (batch x max_new) only once the engine, whose KV cache holds
     * every token, has opened: a size it refuses had first been allocated here */
    const int nb = rc == 0 ? o.batch : 0;
    const int32_t **prompts = xmalloc(sizeof(int32_t *) * (size_t)(nb + 1));
    int64_t *lens = xmalloc(sizeof(int64_t) * (size_t)(nb + 1));
    int32_t **out = xmalloc(sizeof(int32_t *) * (size_t)(nb + 1));
    for (int b = 0; b < nb; b++) {
        prompts[b] = prompt;
        lens[b] = plen;
        out[b] = xmalloc(sizeof(int32_t) * (size_t)(o.max_new + 1));
    }
    if (rc == 0) {
        rc = engine_generate(&e, prompts, lens, o.batch, o.max_new, out);
        tp_engine_close(&e);
    }
    for (int b = 0; b < o.batch && rc == 0; b++) {
        for (int64_t i = 0; i < o.max_new; i++) printf(i ? ",%d" : "%d", out[b][i]);
        printf("\n");
    }
    for (int b = 0; b < nb; b++) free(out[b]);
    free(out);
    free(lens);
    free(prompts);
    free(prompt);
    model_free(&m);
    return rc ? fail("generate") : 0;
}

int cmd_info(int argc, char **argv) {
    CliOpts o;
    if (cli_parse(argc, argv, "model quant mem", &o) != 0) return 2;
    if (o.help) {
        printf("ternlab info --model PATH [--quant SPEC] [--mem SIZE]\n"
               "Prints the configuration, every tensor (dtype, shape, bytes) and the load\n"
               "report: each linear's stored format, how it runs (rule, group, scale dtype,\n"
               "bits per weight, bytes), the kernel of each op on this machine and every\n"
               "fallback taken.  --mem: how many KV tokens fit in that budget for each KV\n"
               "policy and weight format (units B, KiB, MiB, GiB, TiB; KB, MB, GB, TB; a\n"
               "number alone is bytes; e.g. --mem 24GiB; no capacity table without it).\n"
               "A .gguf file: its metadata and tensors as stored first, then the rest as\n"
               "for a folder.\n");
        return 0;
    }
    if (need("info", "model", o.model)) return 2;
    uint64_t budget = 0;
    if (o.mem && parse_bytes(o.mem, &budget) != 0) {
        fprintf(stderr, "ternlab info: --mem: %s\n", err_msg());
        return 2;
    }
    size_t ml = strlen(o.model);
    const int gguf = ml >= 5 && !strcmp(o.model + ml - 5, ".gguf");
    /* a .gguf: its own listing (metadata, tensors as stored), then the model as loaded
     * (the load report and --mem's table had been left out there) */
    if (gguf && cmd_gguf_info(o.model) != 0) return 1;
    Model m;
    if (open_model(&o, &m) != 0) {
        if (gguf) fprintf(stderr, "ternlab info: %s: listed above; loading it as a model failed (below)\n", o.model);
        return fail("info");
    }
    const ModelConfig *c = &m.cfg;
    if (!gguf) printf("model        %s\n", o.model); /* (a .gguf's listing has it) */
    printf("architecture %s (model_type %s)\n", arch_name(c->arch), c->model_type);
    printf("hidden %d  layers %d  heads %d  kv_heads %d  head_dim %d  intermediate %d  vocab %d\n",
           c->hidden, c->n_layers, c->n_heads, c->n_kv_heads, c->head_dim, c->inter, c->vocab);
    printf("rms_norm_eps %g  rope_theta %g  hidden_act %s  max_position_embeddings %d\n",
           (double)c->eps, c->rope_theta, c->act == ACT_SILU ? "silu" : "relu2", c->max_pos);
    if (c->rope_kind == ROPE_LINEAR) printf("rope scaling linear, factor %g\n", c->rope_factor);
    else if (c->rope_kind == ROPE_DYNAMIC)
        printf("rope scaling dynamic, factor %g: the default frequencies (theta %.17g) up to "
               "max_position_embeddings %d tokens, longer sequences refused\n", c->rope_factor, rope_base(c), c->rope_orig_ctx);
    else if (c->rope_kind == ROPE_YARN)
        printf("rope scaling yarn, factor %g, original_max_position_embeddings %d, correction dims %g .. %g, "
               "attention factor %.9g\n", c->rope_factor, c->rope_orig_ctx, c->rope_low, c->rope_high, c->rope_attn);
    else if (c->rope_kind == ROPE_LONGROPE)
        printf("rope scaling longrope, factor %g, original_max_position_embeddings %d: the short factors, "
               "attention factor %.9g; longer sequences (the long factors) refused\n", c->rope_factor,
               c->rope_orig_ctx, c->rope_attn);
    else if (c->rope_kind == ROPE_LLAMA3)
        printf("rope scaling llama3, factor %g, low_freq_factor %g, high_freq_factor %g, "
               "original_max_position_embeddings %d\n", c->rope_factor, c->rope_low, c->rope_high, c->rope_orig_ctx);
    else if (c->rope_kind == ROPE_FACTORS)
        printf("rope scaling by rope_freqs.weight (a divisor per frequency)\n");
    if (c->bitnet_1bitllm)
        printf("bitnet linears: 1bitLLM's BitnetForCausalLM (float weights ternarised at load, per-tensor "
               "absmean; int8 activations per token)\n");
    else if (c->bitnet_linears)
        printf("bitnet linear_class %s (weight_scale %s)\n",
               c->bitnet_scale == BITNET_BITLINEAR ? "bitlinear" : "autobitlinear",
               c->bitnet_scale == BITNET_BITLINEAR ? "divides" : "multiplies");
    if (m.load_notes[0]) printf("note: %s\n", m.load_notes);
    printf("blas core    %s\n", blas_core_report());
    printf("threads      %s\n", threads_report());
    if (!gguf) { /* (a .gguf's listing has its tensors as stored) */
        size_t total = 0;
        printf("tensors (%d in %d file%s):\n", m.st.n_tensors, m.st.n_files, m.st.n_files == 1 ? "" : "s");
        for (int i = 0; i < m.st.n_tensors; i++) {
            const StTensor *t = &m.st.tensors[i];
            char shape[128] = "";
            for (int d = 0; d < t->ndim; d++) {
                size_t l = strlen(shape);
                snprintf(shape + l, sizeof shape - l, d ? ", %lld" : "%lld", (long long)t->shape[d]);
            }
            printf("  %-52s %-5s [%s] %zu bytes\n", t->name, st_dtype_name(t->dtype), shape, t->nbytes);
            total += t->nbytes;
        }
        printf("checkpoint bytes %zu\n", total);
    }
    printf("forward weight bytes %zu\n", model_weight_bytes(&m));
    report_print(&m, stdout);
    if (o.mem) report_capacity(&m, budget, stdout);
    model_free(&m);
    return 0;
}
