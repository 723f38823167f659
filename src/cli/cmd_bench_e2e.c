/* ternlab bench-e2e: end-to-end decode and prefill throughput of synthetic
 * models (random weights generated on the device, no files) in real shapes,
 * ternary against the BF16 reference on the same runtime, in one run.
 *
 * Models:  7b   Llama-2-7B shape (hidden 4096, MLP 11008, 32 layers, 32/32
 *               heads, head_dim 128, vocab 32000)
 *          27b  hidden 4608, MLP 36864, 46 layers, 32 heads / 16 KV heads,
 *               head_dim 128, vocab 256000
 *          7b-hd256  the 7B with 16 heads / 16 KV heads of head_dim 256 (the
 *               same weights and q width: head_dim the one factor changed)
 *          tiny llama-tiny's shape (a quick check of the program itself)
 * Configurations (same runtime, same kernels for everything but the linears):
 *   bf16      every decoder linear dense bf16 through cuBLAS — the reference
 *   tern-i8   every decoder linear ternary (2-bit codes, one scale per row),
 *             int8 per-token activations (BitNet b1.58 style)
 *   tern-bf16 the same codes with bf16 activations
 * lm_head stays dense bf16 and the embedding f32 in all three: on cuBLAS in
 * bf16 (the reference's every linear is cuBLAS's), on ternlab's bf16 GEMV
 * (tern_cuda_gemv_bf16) at 1 .. 4 logit rows in the ternary ones
 * (TERNLAB_CUDA_LM_GEMV=0: cuBLAS there too; /e2e/lm_gemv says which).
 * KV policies (--kv none,all,...; one GPU): each configuration runs under each
 * policy, opened with it (EngineOpts.kv), so the layers it stores all
 * ternary hold 2-bit codes + f16 scales instead of f32 pages; "x bf16"
 * compares against the bf16 row under the same policy.
 *
 * Decode at batch B: B sequences with a prompt of --prompt tokens, then
 * greedy steps (argmax on the GPU, ids fed back); the first steps warm up
 * (eager launch, then graph capture) and the next --steps are timed one by
 * one.  On one GPU the steps are chained (cuda_engine_decode_chain: a step's
 * tokens are the last one's argmax on the device, and it is enqueued before
 * the host waits for the last one's ids, as a serving loop runs), and a
 * step's time is the interval between its ids and the last step's on the
 * host clock; under --tp, or with --sync-steps, each step is timed with the
 * host clock around forward() (inputs up, graph launch, ids back,
 * synchronised).  tokens/s = B / median step time.
 * Prefill: one sequence of --prefill tokens in one forward() call; median of
 * 3 after one warm-up.  tokens/s = prefill / median time.
 * Roofline (decode): bytes one step must move — every weight byte of the
 * linears, lm_head and norms (CudaEngineInfo.step_bytes), the K/V pages of
 * the context (the pool's bytes per token slot, CudaEngineInfo.kv_bytes, so
 * f32 or ternary as the policy made them), and per token its f32 embedding row read and its f32 logits
 * written — over the measured device-to-device copy bandwidth;
 * fraction = roofline time / measured step time.  With --tp N (one rank per
 * GPU, NCCL) the bytes are rank 0's (its shards, the replicated lm_head and
 * norms, its KV heads): each GPU streams its own share.
 * Processes: the copy bandwidth and each shape x tp x configuration are
 * measured in a child process of their own (the parent never touches CUDA),
 * so no measurement inherits the device memory layout, allocator or library
 * state an earlier configuration left (the 27B ternary step had run at 277-281
 * or 293-299 tok/s depending on what ran before it in the process);
 * --same-process runs them all in this one, as before.
 * Output: a markdown table on stdout (and --md FILE); --out FILE.h5 the same
 * numbers in HDF5; both written atomically. */
#include "cli/cli.h"

#include "core/err.h"
#include "eval/experiment.h"
#include "core/mem.h"
#include "core/strnum.h"
#include "core/timer.h"
#include "kv/kv_ternary.h"
#include "log/h5log.h"
#include "runtime/cuda_engine.h"
#include "runtime/forward.h"
#include "runtime/forward_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define MAX_ROWS 512

typedef struct {
    char shape[12], config[12], mode[8]; /* mode: decode / prefill */
    char kv[32];                        /* the KV policy (kv_policy_format) */
    int64_t tp, batch, ctx;             /* ctx: positions at the timed steps (decode) */
    int64_t chained;                    /* decode: 1 when the steps were chained (cuda_engine_decode_chain) */
    int64_t lm_gemv;                    /* 1 when the row's forward calls (decode: the prompts' and the
                                         * steps') enqueued the LM head on tern_cuda_gemv_bf16 */
    double step_ms, tok_s, bytes_per_step, roofline_frac, speedup;
    double kv_bytes_per_token; /* the KV pool's bytes per token slot (rank 0's under tp) */
} E2eRow;

static int shape_config(const char *name, ModelConfig *c) {
    memset(c, 0, sizeof *c);
    c->arch = ARCH_LLAMA;
    c->act = ACT_SILU;
    c->eps = 1e-5f;
    c->rope_theta = 10000.0;
    c->head_dim = 128;
    if (strcmp(name, "7b") == 0) {
        c->hidden = 4096, c->inter = 11008, c->n_layers = 32, c->n_heads = 32, c->n_kv_heads = 32;
        c->vocab = 32000;
    } else if (strcmp(name, "7b-hd256") == 0) {
        c->hidden = 4096, c->inter = 11008, c->n_layers = 32, c->n_heads = 16, c->n_kv_heads = 16;
        c->head_dim = 256, c->vocab = 32000;
    } else if (strcmp(name, "27b") == 0) {
        c->hidden = 4608, c->inter = 36864, c->n_layers = 46, c->n_heads = 32, c->n_kv_heads = 16;
        c->vocab = 256000;
    } else if (strcmp(name, "tiny") == 0) {
        c->hidden = 256, c->inter = 688, c->n_layers = 4, c->n_heads = 4, c->n_kv_heads = 2;
        c->head_dim = 64, c->vocab = 4096;
    } else {
        return err_set("unknown --shapes entry '%s' (7b, 27b, 7b-hd256, tiny)", name);
    }
    snprintf(c->model_type, sizeof c->model_type, "synthetic-%s", name);
    return 0;
}

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}
static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_d);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

typedef struct {
    int prompt, steps, warm, prefill;
    int sync_steps; /* 1: every decode step synchronised (forward() per step), never chained */
} E2eOpts;

/* Decode at batch B on an open engine: median step seconds into *sec;
 * *chained = 1 where the steps were chained. */
static int run_decode(Engine *e, int B, const E2eOpts *eo, double *sec, int64_t *ctx_mid, int64_t *chained) {
    const ModelConfig *c = &e->m->cfg;
    kv_reset(&e->kv);
    int n_pre = B * eo->prompt;
    int *tok = xmalloc(sizeof(int) * (size_t)n_pre), *seq = xmalloc(sizeof(int) * (size_t)n_pre);
    int64_t *pos = xmalloc(sizeof(int64_t) * (size_t)n_pre), *lidx = xmalloc(sizeof(int64_t) * (size_t)B);
    int32_t *ids = xmalloc(sizeof(int32_t) * (size_t)B);
    int *sid = xmalloc(sizeof(int) * (size_t)B);
    double *t = xmalloc(sizeof(double) * (size_t)eo->steps);
    int rc = 0;
    for (int b = 0; b < B; b++) sid[b] = kv_seq_new(&e->kv);
    for (int b = 0; b < B; b++)
        for (int i = 0; i < eo->prompt; i++) {
            tok[b * eo->prompt + i] = (b * 131 + i * 7919) % c->vocab;
            seq[b * eo->prompt + i] = sid[b];
            pos[b * eo->prompt + i] = i;
        }
    for (int b = 0; b < B; b++) lidx[b] = (int64_t)(b + 1) * eo->prompt - 1;
    e->rs.argmax_out = ids;
    rc = forward(e->m, &e->kv, &e->rs, tok, seq, pos, n_pre, lidx, B, NULL);
    e->rs.argmax_out = NULL;
    *chained = rc == 0 && !eo->sync_steps && eo->warm >= 1 && cuda_engine_chain_ok(e);
    if (*chained) {
        /* chained: a step's time is the interval between its ids and the last step's on the host */
        const int64_t ns = eo->warm + eo->steps;
        int32_t *cids = xmalloc(sizeof(int32_t) * (size_t)B * (size_t)ns);
        double *done = xmalloc(sizeof(double) * (size_t)ns);
        for (int b = 0; b < B; b++) seq[b] = sid[b], pos[b] = eo->prompt;
        rc = cuda_engine_decode_chain(e, seq, pos, ids, B, ns, cids, done);
        for (int s = 0; s < eo->steps && rc == 0; s++) t[s] = done[eo->warm + s] - done[eo->warm + s - 1];
        free(cids), free(done);
    } else if (rc == 0) { /* each step synchronised: inputs up, graph, ids back, on the host clock */
        e->rs.argmax_out = ids;
        e->rs.decode = 1;
        for (int s = 0; s < eo->warm + eo->steps && rc == 0; s++) {
            for (int b = 0; b < B; b++) {
                tok[b] = ids[b];
                seq[b] = sid[b];
                pos[b] = eo->prompt + s;
                lidx[b] = b;
            }
            double t0 = time_now();
            rc = forward(e->m, &e->kv, &e->rs, tok, seq, pos, B, lidx, B, NULL);
            if (s >= eo->warm) t[s - eo->warm] = time_now() - t0;
        }
        e->rs.decode = 0;
        e->rs.argmax_out = NULL;
    }
    if (rc == 0) *sec = median(t, eo->steps);
    *ctx_mid = eo->prompt + eo->warm + eo->steps / 2;
    kv_reset(&e->kv);
    free(tok), free(seq), free(pos), free(lidx), free(ids), free(sid), free(t);
    return rc;
}

static int run_prefill(Engine *e, const E2eOpts *eo, double *sec) {
    const ModelConfig *c = &e->m->cfg;
    int P = eo->prefill, rc = 0;
    int *tok = xmalloc(sizeof(int) * (size_t)P), *seq = xmalloc(sizeof(int) * (size_t)P);
    int64_t *pos = xmalloc(sizeof(int64_t) * (size_t)P), last = P - 1;
    int32_t id;
    double t[4];
    e->rs.argmax_out = &id;
    for (int r = 0; r < 4 && rc == 0; r++) {
        kv_reset(&e->kv);
        int s = kv_seq_new(&e->kv);
        for (int i = 0; i < P; i++) tok[i] = (i * 7919) % c->vocab, seq[i] = s, pos[i] = i;
        double t0 = time_now();
        rc = forward(e->m, &e->kv, &e->rs, tok, seq, pos, P, &last, 1, NULL);
        t[r] = time_now() - t0;
    }
    e->rs.argmax_out = NULL;
    kv_reset(&e->kv);
    if (rc == 0) *sec = median(t + 1, 3);
    free(tok), free(seq), free(pos);
    return rc;
}

/* How the decode rows' steps ran: every one chained (2), none (0), some (1) */
static int loop_kind(const E2eRow *r, int nr) {
    int dec = 0, ch = 0;
    for (int i = 0; i < nr; i++)
        if (strcmp(r[i].mode, "decode") == 0) dec++, ch += r[i].chained != 0;
    return ch == 0 ? 0 : ch == dec ? 2 : 1;
}

static const char *loop_text(int kind) {
    static const char *t[] = {"each synchronised: inputs up, graph, ids back",
                              "chained where the table's tp is 1, else synchronised: a chained step is enqueued "
                              "before the last one's ids are back and timed as the interval between two steps' ids",
                              "chained: the next step enqueued before the last one's ids are back, a step's time "
                              "the interval between two steps' ids"};
    return t[kind];
}

static int write_h5(const char *path, const E2eRow *r, int nr, const char *dev, double bw,
                    const E2eOpts *eo, int isolate) {
    H5Log *lg = h5log_create(path);
    if (!lg) return -1;
    char commit[64];
    exp_git_commit(commit, sizeof commit);
    int rc = h5log_write_provenance(lg, TERNLAB_VERSION, commit);
    rc = rc ? rc : h5log_attr_str(lg, "/", "experiment", "bench-e2e");
    rc = rc ? rc : h5log_attr_str(lg, "/", "device", dev);
    rc = rc ? rc : h5log_attr_f64(lg, "/", "copy_bandwidth_bytes_per_s", bw);
    rc = rc ? rc : h5log_attr_i64(lg, "/", "prompt", eo->prompt);
    rc = rc ? rc : h5log_attr_i64(lg, "/", "steps", eo->steps);
    rc = rc ? rc : h5log_attr_i64(lg, "/", "prefill", eo->prefill);
    rc = rc ? rc : h5log_attr_i64(lg, "/", "process_per_config", isolate);
    rc = rc ? rc : h5log_attr_str(lg, "/", "decode_loop", loop_text(loop_kind(r, nr)));
    const char *shape[MAX_ROWS], *config[MAX_ROWS], *mode[MAX_ROWS], *kvp[MAX_ROWS];
    int64_t batch[MAX_ROWS], ctx[MAX_ROWS], tpv[MAX_ROWS], chv[MAX_ROWS], lmv[MAX_ROWS];
    double v[6][MAX_ROWS];
    for (int i = 0; i < nr; i++) {
        shape[i] = r[i].shape, config[i] = r[i].config, mode[i] = r[i].mode, kvp[i] = r[i].kv;
        batch[i] = r[i].batch, ctx[i] = r[i].ctx, tpv[i] = r[i].tp, chv[i] = r[i].chained, lmv[i] = r[i].lm_gemv;
        v[0][i] = r[i].step_ms, v[1][i] = r[i].tok_s, v[2][i] = r[i].bytes_per_step;
        v[3][i] = r[i].roofline_frac, v[4][i] = r[i].speedup, v[5][i] = r[i].kv_bytes_per_token;
    }
    rc = rc ? rc : h5log_strings(lg, "/e2e/shape", shape, nr);
    rc = rc ? rc : h5log_strings(lg, "/e2e/config", config, nr);
    rc = rc ? rc : h5log_strings(lg, "/e2e/mode", mode, nr);
    rc = rc ? rc : h5log_strings(lg, "/e2e/kv_policy", kvp, nr);
    rc = rc ? rc : h5log_i64(lg, "/e2e/batch", batch, nr);
    rc = rc ? rc : h5log_i64(lg, "/e2e/ctx", ctx, nr);
    rc = rc ? rc : h5log_i64(lg, "/e2e/tp", tpv, nr);
    rc = rc ? rc : h5log_i64(lg, "/e2e/chained", chv, nr);
    rc = rc ? rc : h5log_i64(lg, "/e2e/lm_gemv", lmv, nr);
    const char *names[] = {"/e2e/step_ms",           "/e2e/tokens_per_s",    "/e2e/bytes_per_step",
                           "/e2e/roofline_fraction", "/e2e/speedup_vs_bf16", "/e2e/kv_bytes_per_token"};
    for (int k = 0; k < 6 && rc == 0; k++) rc = h5log_f64(lg, names[k], v[k], nr);
    if (rc) {
        h5log_abort(lg);
        return -1;
    }
    return h5log_commit(lg);
}

/* "a,b,.." into out (at most max values, each 1..4096): the count, or -1 */
static int parse_list(const char *s, int *out, int max) {
    int n = 0;
    const char *p = s;
    for (; *p && n < max;) {
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p || v < 1 || v > 4096) return -1;
        out[n++] = (int)v;
        p = *end == ',' ? end + 1 : end;
        if (*end && *end != ',') return -1;
    }
    return *p ? -1 : n; /* (more than max values) */
}

/* a whole decimal number in [lo, hi] into *out, else -1 */
static int parse_int(const char *s, long lo, long hi, int *out) {
    int64_t v;
    if (str_to_i64(s, lo, hi, &v) < 0) return -1;
    *out = (int)v;
    return 0;
}

/* One measurement: the copy bandwidth (cfg NULL) or one shape x tp x
 * configuration; what it measures goes back in E2eOut. */
typedef struct {
    const char *shape, *cfg;
    const KvPolicy *kv;
    int ternary, act_int8, tp, nb, maxb;
    const int *batches;
    const E2eOpts *eo;
} E2eJob;

#define JOB_ROWS 9 /* up to 8 batches + the prefill */
typedef struct {
    char dev[128];
    double bw;
    int n;
    E2eRow rows[JOB_ROWS];
} E2eOut;

static int measure_bw(const E2eJob *j, E2eOut *o) {
    (void)j;
    char why[256];
    if (!cuda_backend_available(why, sizeof why)) return err_set("%s", why);
    return cuda_copy_bandwidth(0, (size_t)1 << 30, 20, &o->bw);
}

static E2eRow *job_row(const E2eJob *j, E2eOut *o, const char *mode) {
    E2eRow *r = &o->rows[o->n++];
    memset(r, 0, sizeof *r);
    snprintf(r->shape, sizeof r->shape, "%s", j->shape);
    snprintf(r->config, sizeof r->config, "%s", j->cfg);
    snprintf(r->mode, sizeof r->mode, "%s", mode);
    kv_policy_format(j->kv, r->kv, sizeof r->kv);
    r->tp = j->tp;
    return r;
}

/* LM heads e enqueued on ternlab's bf16 GEMV so far (CudaEngineInfo.lm_gemv) */
static int64_t lm_heads_on_gemv(const Engine *e) {
    CudaEngineInfo info;
    return cuda_engine_info(e, &info) == 0 ? info.lm_gemv : 0;
}

/* Opens the synthetic engine and times decode at each batch and the prefill;
 * the rows' roofline fraction and ratio to bf16 are the caller's. */
static int measure_config(const E2eJob *j, E2eOut *o) {
    const E2eOpts *eo = j->eo;
    Model m;
    memset(&m, 0, sizeof m);
    if (shape_config(j->shape, &m.cfg) != 0) return -1;
    const ModelConfig *c = &m.cfg;
    int64_t ctx_max = eo->prompt + eo->warm + eo->steps + 1;
    int64_t per_seq = (ctx_max + 15) / 16, pre_blocks = (eo->prefill + 15) / 16;
    EngineOpts eopt = {.max_tok = j->maxb * eo->prompt > eo->prefill ? j->maxb * eo->prompt : eo->prefill,
                       .block_size = 16, .device = ENGINE_CUDA, .bf16 = 1, .kv = j->kv};
    eopt.n_blocks = j->maxb * per_seq > pre_blocks ? j->maxb * per_seq : pre_blocks;
    CudaSynthetic syn = {.ternary = j->ternary, .act_int8 = j->act_int8, .seed = 1, .tp = j->tp};
    Engine e;
    double t0 = time_now();
    int rc = cuda_engine_open_synthetic(&e, &m, &eopt, &syn);
    if (rc == 0) {
        CudaEngineInfo info;
        cuda_engine_info(&e, &info);
        snprintf(o->dev, sizeof o->dev, "%s", info.device_name);
        /* the pool's bytes per token slot: every layer's K and V pages, f32 or ternary */
        const double kv_tok = (double)info.kv_bytes / ((double)eopt.n_blocks * eopt.block_size);
        char pol[32];
        kv_policy_format(j->kv, pol, sizeof pol);
        fprintf(stderr, "bench-e2e: %s %s kv %s tp %d: %.2f GB of weights, %.0f KV bytes a token on the device "
                "(%.1f s)\n", j->shape, j->cfg, pol, j->tp, (double)info.weight_bytes / 1e9, kv_tok,
                time_now() - t0);
        for (int bi = 0; bi < j->nb && rc == 0; bi++) {
            double sec = 0;
            int64_t ctx = 0, chained = 0;
            const int64_t lm0 = lm_heads_on_gemv(&e);
            if ((rc = run_decode(&e, j->batches[bi], eo, &sec, &ctx, &chained)) != 0) break;
            E2eRow *r = job_row(j, o, "decode");
            r->batch = j->batches[bi];
            r->chained = chained;
            r->lm_gemv = lm_heads_on_gemv(&e) > lm0;
            r->ctx = ctx;
            r->step_ms = 1e3 * sec;
            r->tok_s = j->batches[bi] / sec;
            double kv = (double)j->batches[bi] * (double)ctx * kv_tok;
            /* per token: its embedding row read, its logits written (f32; every rank's
             * replicated lm_head writes all of them) */
            double tok = (double)j->batches[bi] * 4.0 * ((double)c->hidden + (double)c->vocab);
            r->bytes_per_step = (double)info.step_bytes + kv + tok;
            r->kv_bytes_per_token = kv_tok;
            fprintf(stderr, "bench-e2e: %s %s kv %s decode B=%d: %.3f ms/step, %.0f tok/s\n", j->shape, j->cfg,
                    pol, j->batches[bi], r->step_ms, r->tok_s);
        }
        double sec = 0;
        const int64_t lm0 = lm_heads_on_gemv(&e);
        if (rc == 0 && (rc = run_prefill(&e, eo, &sec)) == 0) {
            E2eRow *r = job_row(j, o, "prefill");
            r->lm_gemv = lm_heads_on_gemv(&e) > lm0; /* (its one logit row) */
            r->batch = r->ctx = eo->prefill;
            r->step_ms = 1e3 * sec;
            r->tok_s = eo->prefill / sec;
            r->bytes_per_step = (double)info.step_bytes;
            r->kv_bytes_per_token = kv_tok;
            fprintf(stderr, "bench-e2e: %s %s kv %s prefill %d: %.1f ms, %.0f tok/s\n", j->shape, j->cfg, pol,
                    eo->prefill, r->step_ms, r->tok_s);
        }
        engine_free(&e);
    }
    mem_free(m.rope_cos);
    mem_free(m.rope_sin);
    return rc;
}

static int io_all(int fd, void *buf, size_t n, int wr) {
    for (char *p = buf; n > 0;) {
        ssize_t k = wr ? write(fd, p, n) : read(fd, p, n);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) return -1;
        p += k, n -= (size_t)k;
    }
    return 0;
}

/* Runs fn in a child process of its own (isolate), so that no measurement
 * inherits the device memory layout or library state an earlier one left:
 * the parent never touches CUDA, each child opens, measures and exits, and
 * sends E2eOut (or its error) back through a pipe. */
static int run_job(int (*fn)(const E2eJob *, E2eOut *), const E2eJob *j, E2eOut *o, int isolate,
                   const char *what) {
    memset(o, 0, sizeof *o);
    if (!isolate) return fn(j, o);
    int fd[2];
    if (pipe2(fd, O_CLOEXEC) != 0) return err_set("pipe: %s", strerror(errno));
    fflush(stdout);
    fflush(stderr);
    struct {
        int32_t rc;
        char msg[512];
    } h;
    memset(&h, 0, sizeof h);
    const pid_t pid = fork();
    if (pid < 0) {
        close(fd[0]), close(fd[1]);
        return err_set("fork: %s", strerror(errno));
    }
    if (pid == 0) {
        close(fd[0]);
        h.rc = fn(j, o) != 0;
        if (h.rc) snprintf(h.msg, sizeof h.msg, "%s", err_msg());
        const int ok = io_all(fd[1], &h, sizeof h, 1) == 0 && (h.rc || io_all(fd[1], o, sizeof *o, 1) == 0);
        _exit(ok ? 0 : 3);
    }
    close(fd[1]);
    int got = io_all(fd[0], &h, sizeof h, 0) == 0;
    if (got && h.rc == 0) got = io_all(fd[0], o, sizeof *o, 0) == 0;
    close(fd[0]);
    int st = 0;
    pid_t w;
    while ((w = waitpid(pid, &st, 0)) < 0 && errno == EINTR) {
    }
    if (w < 0) return err_set("the process measuring %s: waitpid: %s", what, strerror(errno));
    if (WIFSIGNALED(st))
        return err_set("the process measuring %s died (signal %d, %s)", what, WTERMSIG(st), strsignal(WTERMSIG(st)));
    if (!got) return err_set("the process measuring %s exited (status %d) without a result", what, WEXITSTATUS(st));
    if (h.rc) return err_set("%s", h.msg);
    o->n = o->n < 0 ? 0 : o->n > JOB_ROWS ? JOB_ROWS : o->n;
    return 0;
}

int cmd_bench_e2e(int argc, char **argv) {
    const char *shapes = "7b,27b", *out = NULL, *md = NULL, *batches_s = "1,8,64", *tps_s = "1";
    const char *configs = "bf16,tern-i8,tern-bf16", *kvs_s = "none";
    E2eOpts eo = {.prompt = 32, .steps = 32, .warm = 3, .prefill = 2048};
    int isolate = 1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--same-process") == 0) {
            isolate = 0;
            continue;
        }
        if (strcmp(a, "--sync-steps") == 0) {
            eo.sync_steps = 1;
            continue;
        }
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            printf("ternlab bench-e2e [--shapes 7b,27b (also 7b-hd256, tiny)] [--batches 1,8,64] [--prompt 32]\n"
                   "                  [--steps 32] [--prefill 2048] [--tp 1,2] [--device cuda]\n"
                   "                  [--configs bf16,tern-i8,tern-bf16] [--out FILE.h5]\n"
                   "                  [--kv none,all,...] [--md FILE.md] [--same-process]\n"
                   "                  [--sync-steps]\n"
                   "Decode tokens/s at each batch and prefill tokens/s of synthetic ternary\n"
                   "models vs the BF16 reference on the same runtime (GPU; see the source).\n"
                   "Each configuration runs in a process of its own; --same-process runs\n"
                   "them one after another in this one.  Decode steps on one GPU are\n"
                   "chained (the next step enqueued before the last one's ids are back);\n"
                   "--sync-steps waits for each step's ids before the next, as under --tp.\n"
                   "--kv runs each configuration under each KV policy (none, encoder, decoder,\n"
                   "all, optionally @layers=a-b; one GPU): layers stored all ternary keep\n"
                   "2-bit codes + f16 scales instead of f32 pages.\n");
            return 0;
        }
        /* the options that take a value; anything else is a usage error of its own
         * (a stray word had been reported as an option missing its value) */
        static const char *const with_value[] = {"--prompt", "--steps", "--prefill", "--shapes", "--batches",
                                                 "--tp",     "--configs", "--out",   "--md",     "--device",
                                                 "--kv"};
        int known = 0;
        for (size_t k = 0; k < sizeof with_value / sizeof with_value[0]; k++) known |= strcmp(a, with_value[k]) == 0;
        if (!known) {
            if (a[0] == '-') fprintf(stderr, "ternlab bench-e2e: unknown option %s (see ternlab bench-e2e --help)\n", a);
            else fprintf(stderr, "ternlab bench-e2e: unexpected argument '%s' (see ternlab bench-e2e --help)\n", a);
            return 2;
        }
        if (!v) {
            fprintf(stderr, "ternlab bench-e2e: %s needs a value\n", a);
            return 2;
        }
        const int pr = strcmp(a, "--prompt") == 0, st = strcmp(a, "--steps") == 0, pf = strcmp(a, "--prefill") == 0;
        if (pr || st || pf) {
            if (parse_int(v, 1, st ? 100000 : 8192, pr ? &eo.prompt : st ? &eo.steps : &eo.prefill) != 0) {
                fprintf(stderr, "ternlab bench-e2e: %s %s: expected a whole number 1..%d\n", a, v,
                        st ? 100000 : 8192);
                return 2;
            }
        } else if (strcmp(a, "--shapes") == 0) shapes = v;
        else if (strcmp(a, "--batches") == 0) batches_s = v;
        else if (strcmp(a, "--tp") == 0) tps_s = v;
        else if (strcmp(a, "--configs") == 0) configs = v;
        else if (strcmp(a, "--out") == 0) out = v;
        else if (strcmp(a, "--md") == 0) md = v;
        else if (strcmp(a, "--kv") == 0) kvs_s = v;
        else if (strcmp(a, "--device") == 0) {
            if (strcmp(v, "cuda") != 0) {
                fprintf(stderr, "ternlab bench-e2e: runs on --device cuda only\n");
                return 2;
            }
        } else {
            fprintf(stderr, "ternlab bench-e2e: unknown option %s\n", a);
            return 2;
        }
        i++;
    }
    int batches[8], tps[4];
    int nb = parse_list(batches_s, batches, 8), ntp = parse_list(tps_s, tps, 4);
    /* (each option named alone: one message for both had given contradictory bounds) */
    if (nb < 1) {
        fprintf(stderr, "ternlab bench-e2e: --batches %s: expected 1 to 8 comma-separated batch sizes, each 1..4096\n",
                batches_s);
        return 2;
    }
    if (ntp < 1) {
        fprintf(stderr, "ternlab bench-e2e: --tp %s: expected 1 to 4 comma-separated GPU counts\n", tps_s);
        return 2;
    }
    if (strlen(shapes) >= 64 || strlen(configs) >= 96) {
        fprintf(stderr, "ternlab bench-e2e: --shapes (63 characters) or --configs (95) too long\n");
        return 2;
    }
    int nshapes = 0;
    { /* every shape name known before any GPU work */
        char chk[64];
        snprintf(chk, sizeof chk, "%s", shapes);
        ModelConfig c;
        for (char *sv = NULL, *sh = strtok_r(chk, ",", &sv); sh; sh = strtok_r(NULL, ",", &sv), nshapes++)
            if (shape_config(sh, &c) != 0) {
                fprintf(stderr, "ternlab bench-e2e: %s\n", err_msg());
                return 2;
            }
    }
    static const struct {
        const char *name;
        int ternary, act_int8;
    } cfgs[] = {{"bf16", 0, 0}, {"tern-i8", 1, 1}, {"tern-bf16", 1, 0}};
    int use_cfg[3] = {0, 0, 0};
    { /* --configs: a subset, in the fixed order (x bf16 needs bf16 in the run) */
        char chk[96];
        snprintf(chk, sizeof chk, "%s", configs);
        for (char *sv = NULL, *cn = strtok_r(chk, ",", &sv); cn; cn = strtok_r(NULL, ",", &sv)) {
            int found = 0;
            for (int k = 0; k < 3; k++)
                if (strcmp(cn, cfgs[k].name) == 0) use_cfg[k] = found = 1;
            if (!found) {
                fprintf(stderr, "ternlab bench-e2e: unknown config '%s' (bf16, tern-i8, tern-bf16)\n",
                        cn);
                return 2;
            }
        }
    }
    const int ncfg = use_cfg[0] + use_cfg[1] + use_cfg[2];
    if (nshapes == 0 || ncfg == 0) {
        fprintf(stderr, "ternlab bench-e2e: --shapes and --configs need at least one name each\n");
        return 2;
    }
    KvPolicy kvs[4];
    int nkv = 0;
    { /* --kv: up to 4 policies, each as --kv takes it elsewhere */
        char chk[128];
        if (strlen(kvs_s) >= sizeof chk) {
            fprintf(stderr, "ternlab bench-e2e: --kv too long (%zu characters at most)\n", sizeof chk - 1);
            return 2;
        }
        snprintf(chk, sizeof chk, "%s", kvs_s);
        for (char *sv = NULL, *kn = strtok_r(chk, ",", &sv); kn; kn = strtok_r(NULL, ",", &sv)) {
            if (nkv == 4) {
                fprintf(stderr, "ternlab bench-e2e: --kv takes at most 4 policies\n");
                return 2;
            }
            if (kv_policy_parse(kn, &kvs[nkv]) != 0) {
                fprintf(stderr, "ternlab bench-e2e: --kv: %s\n", err_msg());
                return 2;
            }
            for (int ti = 0; ti < ntp; ti++)
                if (kvs[nkv].kind != KVP_NONE && tps[ti] > 1) { /* (as the engine refuses it) */
                    fprintf(stderr, "ternlab bench-e2e: --kv %s with --tp %d: ternary KV pages run on one GPU\n",
                            kn, tps[ti]);
                    return 2;
                }
            nkv++;
        }
        if (nkv == 0) {
            fprintf(stderr, "ternlab bench-e2e: --kv needs at least one policy\n");
            return 2;
        }
    }
    if ((int64_t)nshapes * ntp * ncfg * nkv * (nb + 1) > MAX_ROWS) {
        fprintf(stderr,
                "ternlab bench-e2e: %d shapes x %d tp x %d configs x %d KV policies x %d rows is more than %d rows\n",
                nshapes, ntp, ncfg, nkv, nb + 1, MAX_ROWS);
        return 2;
    }
    for (int i = 0; i < ntp; i++)
        if (tps[i] > 1) cuda_prepare_multi_gpu(); /* before the first CUDA call */
    int maxb = 1;
    for (int i = 0; i < nb; i++) maxb = batches[i] > maxb ? batches[i] : maxb;
    E2eJob job = {.nb = nb, .maxb = maxb, .batches = batches, .eo = &eo};
    E2eOut jo;
    if (run_job(measure_bw, &job, &jo, isolate, "the copy bandwidth") != 0) {
        fprintf(stderr, "ternlab bench-e2e: %s\n", err_msg());
        return 1;
    }
    const double bw = jo.bw;
    E2eRow rows[MAX_ROWS];
    int nr = 0, rc = 0;
    char dev[128] = "";
    char list[64];
    snprintf(list, sizeof list, "%s", shapes);
    for (char *sv = NULL, *sh = strtok_r(list, ",", &sv); sh && rc == 0; sh = strtok_r(NULL, ",", &sv))
        for (int ti = 0; ti < ntp && rc == 0; ti++)
            for (int ki = 0; ki < nkv && rc == 0; ki++)
                for (size_t k = 0; k < sizeof cfgs / sizeof cfgs[0] && rc == 0; k++) {
                    if (!use_cfg[k]) continue;
                    job.shape = sh, job.cfg = cfgs[k].name, job.tp = tps[ti], job.kv = &kvs[ki];
                    job.ternary = cfgs[k].ternary, job.act_int8 = cfgs[k].act_int8;
                    char what[96], pol[32];
                    kv_policy_format(&kvs[ki], pol, sizeof pol);
                    snprintf(what, sizeof what, "%s %s kv %s tp %d", sh, cfgs[k].name, pol, tps[ti]);
                    if ((rc = run_job(measure_config, &job, &jo, isolate, what)) != 0) break;
                    if (jo.dev[0]) snprintf(dev, sizeof dev, "%s", jo.dev);
                    for (int i = 0; i < jo.n && nr < MAX_ROWS; i++) rows[nr++] = jo.rows[i];
                }
    for (int i = 0; i < nr; i++) { /* against the bf16 row of the same shape, tp, KV policy, mode, batch */
        E2eRow *r = &rows[i];
        r->roofline_frac = strcmp(r->mode, "decode") == 0 ? r->bytes_per_step / bw / (1e-3 * r->step_ms)
                                                           : NAN; /* (prefill: no roofline) */
        r->speedup = NAN; /* (no bf16 row in the run: no ratio) */
        for (int k = 0; k < nr; k++)
            if (strcmp(rows[k].config, "bf16") == 0 && strcmp(rows[k].shape, r->shape) == 0 &&
                strcmp(rows[k].mode, r->mode) == 0 && strcmp(rows[k].kv, r->kv) == 0 && rows[k].tp == r->tp &&
                rows[k].batch == r->batch)
                r->speedup = r->tok_s / rows[k].tok_s;
    }
    if (rc != 0) {
        fprintf(stderr, "ternlab bench-e2e: %s\n", err_msg());
        return 1;
    }
    char *tab = NULL;
    size_t tab_n = 0;
    FILE *f = open_memstream(&tab, &tab_n);
    if (!f) {
        fprintf(stderr, "ternlab bench-e2e: open_memstream: %s\n", strerror(errno));
        return 1;
    }
    fprintf(f, "End-to-end throughput on %s (copy bandwidth %.0f GB/s, read + written), "
               "synthetic models, prompt %d, %d timed decode steps (%s; tokens/s from the median step), "
               "prefill %d tokens (median of 3), %s. lm_head stays dense bf16 in every configuration (on "
               "cuBLAS in bf16; at 1 .. 4 tokens on ternlab's bf16 GEMV in the ternary ones); "
               "kv: the KV policy (none: f32 pages; in layers a policy stores all ternary, 2-bit codes + "
               "f16 scales); x bf16: against bf16 under the same policy; "
               "GB/step/GPU: the bytes a decode step must move (weights, norms, lm_head, the K/V pages "
               "of the context, each token's embedding row and logits; weights only for prefill); "
               "%% of roofline: the time those bytes take "
               "at the copy bandwidth over the step's time.\n\n",
            dev, bw / 1e9, eo.prompt, eo.steps, loop_text(loop_kind(rows, nr)), eo.prefill,
            isolate ? "each configuration in a process of its own" : "all configurations in one process");
    fprintf(f, "| shape | tp | config | kv | mode | batch | ms/step | tokens/s | x bf16 | GB/step/GPU | %% of "
               "roofline |\n");
    fprintf(f, "| --- | ---: | --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |\n");
    for (int i = 0; i < nr; i++) {
        const E2eRow *r = &rows[i];
        char roof[16] = "—", sp[16] = "—";
        if (strcmp(r->mode, "decode") == 0) snprintf(roof, sizeof roof, "%.0f%%", 100 * r->roofline_frac);
        if (!isnan(r->speedup)) snprintf(sp, sizeof sp, "%.2f", r->speedup);
        fprintf(f, "| %s | %lld | %s | %s | %s | %lld | %.3f | %.0f | %s | %.3f | %s |\n", r->shape,
                (long long)r->tp, r->config, r->kv, r->mode, (long long)r->batch, r->step_ms, r->tok_s, sp,
                r->bytes_per_step / 1e9, roof);
    }
    fclose(f);
    fwrite(tab, 1, tab_n, stdout);
    const int md_rc = md ? file_write_atomic(md, tab, tab_n) : 0;
    free(tab);
    if (md_rc != 0) {
        fprintf(stderr, "ternlab bench-e2e: %s\n", err_msg());
        return 1;
    }
    if (out && write_h5(out, rows, nr, dev, bw, &eo, isolate) != 0) {
        fprintf(stderr, "ternlab bench-e2e: %s\n", err_msg());
        return 1;
    }
    return 0;
}
