/* Memory preflight (see preflight.h): the arithmetic mirrors what model_load,
 * kv_init, runstate_init and the forward pass allocate; when one of them
 * changes its buffers, change the matching line here (tests/test_preflight.c
 * checks the weight estimate against model_weight_bytes on the fixtures). */
#include "runtime/preflight.h"

#include "core/err.h"
#include "kv/kvcache.h"
#include "runtime/linear.h"
#include "ternary_format.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

/* = ATT_Q_CHUNK in forward.c: query rows per attention tile (scores buffer). */
#define PREFLIGHT_ATT_Q_CHUNK 128
/* RoPE tables start at this many positions (rope_ensure in forward.c). */
#define PREFLIGHT_ROPE_MIN 4096

/* Saturating arithmetic: a 70B config with a silly --max-seq must produce a
 * huge number and a refusal, not a wrapped small one and an OOM later. */
static size_t sat_mul(size_t a, size_t b) {
    size_t r;
    return __builtin_mul_overflow(a, b, &r) ? SIZE_MAX : r;
}
static size_t sat_add(size_t a, size_t b) {
    size_t r;
    return __builtin_add_overflow(a, b, &r) ? SIZE_MAX : r;
}
static size_t sat_mul3(size_t a, size_t b, size_t c) { return sat_mul(sat_mul(a, b), c); }
static size_t pos_sz(int64_t v) { return v > 0 ? (size_t)v : 0; }

const char *preflight_fmt_bytes(size_t b, char *buf, size_t n) {
    static const char *unit[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
    if (b == SIZE_MAX) {
        snprintf(buf, n, "more than 16 EiB");
        return buf;
    }
    double v = (double)b;
    int u = 0;
    while (v >= 1024.0 && u < 6) {
        v /= 1024.0;
        u++;
    }
    if (u == 0) snprintf(buf, n, "%zu B", b);
    else snprintf(buf, n, "%.*f %s", v < 10 ? 2 : v < 100 ? 1 : 0, v, unit[u]);
    return buf;
}

/* ---- weights ------------------------------------------------------------ */

static size_t ternary_bytes(int64_t rows, int64_t cols, QuantGroup g) {
    /* packed codes with row padding + f32 scales (TernaryMatrix keeps f32 in memory) */
    return sat_add(sat_mul(pos_sz(rows), pos_sz(tern_row_bytes(cols))),
                   sat_mul(pos_sz(tern_n_scales(g, rows, cols)), sizeof(float)));
}

size_t preflight_weight_bytes(const ModelConfig *c, const SafeTensors *st, const QuantSpec *spec,
                              int dense, size_t *load_extra) {
    const size_t F = sizeof(float);
    const int64_t H = c->hidden, I = c->inter, V = c->vocab;
    const int64_t qd = (int64_t)c->n_heads * c->head_dim, kvd = (int64_t)c->n_kv_heads * c->head_dim;
    size_t total = sat_mul3(pos_sz(V), pos_sz(H), F); /* embedding, f32 */
    int tied = c->tie == TIE_TRUE ||
               (c->tie == TIE_ABSENT && st && !st_find(st, "lm_head.weight"));
    if (!tied) total = sat_add(total, sat_mul3(pos_sz(V), pos_sz(H), F));
    total = sat_add(total, sat_mul(pos_sz(H), F)); /* final norm */
    size_t extra = 0;
    static const char *kinds[] = {"q", "k", "v", "o", "gate", "up", "down"};
    const int64_t rows[] = {qd, kvd, kvd, H, I, I, H}, cols[] = {H, H, H, qd, H, H, I};
    const int native = c->bitnet_linears || c->arch == ARCH_BITNET;
    for (int l = 0; l < c->n_layers; l++) {
        size_t norms = 2 * (size_t)H + (c->arch == ARCH_BITNET ? pos_sz(qd) + pos_sz(I) : 0); /* sub-norms */
        total = sat_add(total, sat_mul(norms, F));
        for (int k = 0; k < 7; k++) {
            size_t f32 = sat_mul3(pos_sz(rows[k]), pos_sz(cols[k]), F);
            int sel = spec ? quant_layer_selected(spec, l, kinds[k]) == 1 : 0;
            size_t b;
            if (dense) b = f32;
            else if (sel) b = ternary_bytes(rows[k], cols[k], spec->group);
            else if (native) b = ternary_bytes(rows[k], cols[k], QG_TENSOR);
            else b = f32;
            /* ternarising (or densifying) a linear holds its f32 copy next to the result */
            if ((sel || (native && dense)) && f32 > extra) extra = f32;
            total = sat_add(total, b);
        }
    }
    if (load_extra) *load_extra = extra;
    return total;
}

/* ---- workspaces ------------------------------------------------------------ */

size_t preflight_workspace_bytes(const ModelConfig *c, int64_t max_tok, int64_t max_ctx) {
    const size_t F = sizeof(float), T = pos_sz(max_tok);
    const size_t H = pos_sz(c->hidden), I = pos_sz(c->inter), hd = pos_sz(c->head_dim);
    const size_t qd = pos_sz((int64_t)c->n_heads * c->head_dim);
    const size_t kvd = pos_sz((int64_t)c->n_kv_heads * c->head_dim);
    size_t wide = H > qd ? H : qd;
    wide = wide > I ? wide : I;
    /* runstate_init: x, hout (T,H); xb (T,wide); q, att (T,qd); k, v (T,kvd); hb, hb2 (T,I) */
    size_t per_tok = 2 * H + wide + 2 * qd + 2 * kvd + 2 * I;
    size_t b = sat_mul3(T, per_tok, F);
    b = sat_add(b, linear_scratch_bytes((int64_t)(T < (size_t)INT64_MAX ? T : 0), (int64_t)wide));
    /* attention scratch (ensure_ctx) and RoPE tables (rope_ensure) grow by
     * doubling, so their capacity stays below twice the longest context */
    size_t cap = sat_mul(2, pos_sz(max_ctx));
    b = sat_add(b, sat_mul3(cap, 2 * hd + PREFLIGHT_ATT_Q_CHUNK, F));
    size_t rope = cap > PREFLIGHT_ROPE_MIN ? cap : PREFLIGHT_ROPE_MIN;
    b = sat_add(b, sat_mul3(rope, hd, F)); /* cos + sin, head_dim/2 each */
    /* logits of every token of one call (ppl, logits) */
    b = sat_add(b, sat_mul3(T, pos_sz(c->vocab), F));
    return b;
}

/* ---- available memory ------------------------------------------------------ */

/* "123", "64M", "1.5G", "2GiB" -> bytes; -1 when malformed. */
static int parse_bytes(const char *s, size_t *out) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (end == s || errno || !(v >= 0)) return -1;
    while (isspace((unsigned char)*end)) end++;
    double mul = 1;
    switch (toupper((unsigned char)*end)) {
    case 'K': mul = 1024.0; end++; break;
    case 'M': mul = 1024.0 * 1024; end++; break;
    case 'G': mul = 1024.0 * 1024 * 1024; end++; break;
    case 'T': mul = 1024.0 * 1024 * 1024 * 1024; end++; break;
    default: break;
    }
    if (*end == 'i' || *end == 'I') end++;
    if (*end == 'b' || *end == 'B') end++;
    if (*end) return -1;
    double b = v * mul;
    *out = b >= 18446744073709551615.0 ? SIZE_MAX : (size_t)b;
    return 0;
}

/* First number in a file (a "max" counts as none); 0 or -1. */
static int read_u64_file(const char *path, size_t *out) {
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    unsigned long long v;
    int ok = fscanf(f, "%llu", &v) == 1;
    fclose(f);
    if (!ok) return -1;
    *out = (size_t)v;
    return 0;
}

/* "Key:   1234 kB" from a /proc file, in bytes; 0 or -1. */
static int read_proc_kb(const char *path, const char *key, size_t *out) {
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    char line[256];
    size_t kl = strlen(key);
    int rc = -1;
    while (fgets(line, sizeof line, f)) {
        unsigned long long kb;
        if (strncmp(line, key, kl) == 0 && line[kl] == ':' &&
            sscanf(line + kl + 1, "%llu", &kb) == 1) {
            *out = sat_mul((size_t)kb, 1024);
            rc = 0;
            break;
        }
    }
    fclose(f);
    return rc;
}

static void take_min(size_t v, const char *what, size_t *best, char *source, size_t n) {
    if (v < *best) {
        *best = v;
        snprintf(source, n, "%s", what);
    }
}

int preflight_available(size_t *avail, char *source, size_t n) {
    char dummy[8];
    if (!source) source = dummy, n = sizeof dummy;
    const char *env = getenv("TERNLAB_MEM_LIMIT");
    if (env && *env) {
        if (parse_bytes(env, avail) != 0) {
            *avail = SIZE_MAX;
            return err_set("TERNLAB_MEM_LIMIT='%s' is not a byte count (e.g. 2G, 512M, 1073741824)",
                           env);
        }
        /* a budget for the whole process: what is already resident (e.g. the
         * weights, when the KV cache is planned after loading) counts against it */
        size_t rss = 0;
        read_proc_kb("/proc/self/status", "VmRSS", &rss);
        *avail = *avail > rss ? *avail - rss : 0;
        snprintf(source, n, "TERNLAB_MEM_LIMIT");
        return 0;
    }
    size_t best = SIZE_MAX, v;
    snprintf(source, n, "unknown");
    if (read_proc_kb("/proc/meminfo", "MemAvailable", &v) == 0) {
        take_min(v, "MemAvailable", &best, source, n);
    } else {
        long pages = sysconf(_SC_AVPHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
        if (pages > 0 && psz > 0) take_min(sat_mul((size_t)pages, (size_t)psz), "free pages",
                                           &best, source, n);
    }
    /* cgroup v2, then v1: a job's limit is often far below the node's memory */
    size_t lim, cur;
    if (read_u64_file("/sys/fs/cgroup/memory.max", &lim) == 0 &&
        read_u64_file("/sys/fs/cgroup/memory.current", &cur) == 0)
        take_min(lim > cur ? lim - cur : 0, "cgroup memory.max", &best, source, n);
    else if (read_u64_file("/sys/fs/cgroup/memory/memory.limit_in_bytes", &lim) == 0 &&
             read_u64_file("/sys/fs/cgroup/memory/memory.usage_in_bytes", &cur) == 0 &&
             lim < ((size_t)1 << 60))
        take_min(lim > cur ? lim - cur : 0, "cgroup memory limit", &best, source, n);
    struct rlimit rl;
    if (getrlimit(RLIMIT_AS, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY) {
        size_t used = 0;
        read_proc_kb("/proc/self/status", "VmSize", &used);
        size_t lim_as = (size_t)rl.rlim_cur;
        take_min(lim_as > used ? lim_as - used : 0, "RLIMIT_AS (ulimit -v)", &best, source, n);
    }
    *avail = best;
    if (best == SIZE_MAX) return err_set("could not tell how much memory is available");
    return 0;
}

/* ---- the check ----------------------------------------------------------------- */

/* the longest context one sequence can reach: max_ctx, unless <= 0 or past the pool */
static int64_t longest_ctx(int64_t max_ctx, int64_t kv_tokens) {
    return max_ctx > 0 && max_ctx < kv_tokens ? max_ctx : kv_tokens;
}

/* preflight_plan with the longest context max_ctx (<= 0 or past the pool: the pool) */
static int plan_ctx(const ModelConfig *c, size_t weight_bytes, size_t load_extra, size_t ranks,
                    int64_t kv_tokens, int64_t max_ctx, int64_t max_tok, int block_size, PreflightPlan *p) {
    memset(p, 0, sizeof *p);
    int bs = block_size > 0 ? block_size : 16;
    int64_t blocks = kv_tokens > 0 ? (kv_tokens + bs - 1) / bs : 0;
    const size_t per_tok = sat_mul3(2 * sizeof(float) * pos_sz(c->n_layers), pos_sz(c->n_kv_heads),
                                    pos_sz(c->head_dim));
    p->weights = weight_bytes;
    p->load_extra = load_extra;
    p->kv_tokens = blocks * bs;
    p->kv = sat_mul(per_tok, pos_sz(p->kv_tokens));
    if (blocks <= (1 << 30)) /* the allocator's own arithmetic, when it can be asked */
        p->kv = kv_bytes_needed(c->n_layers, c->n_kv_heads, c->head_dim, bs, (int)blocks);
    const int64_t ctx = longest_ctx(max_ctx, p->kv_tokens);
    p->workspace = max_tok > 0 || kv_tokens > 0 ? preflight_workspace_bytes(c, max_tok, ctx) : 0;
    p->ranks = ranks;
    p->margin = PREFLIGHT_MARGIN_BYTES;
    p->needed = sat_add(sat_add(sat_add(p->weights, p->load_extra), sat_add(p->kv, p->workspace)),
                        sat_add(p->ranks, p->margin));
    if (preflight_available(&p->available, p->source, sizeof p->source) != 0) {
        if (getenv("TERNLAB_MEM_LIMIT")) return -1; /* a malformed override is the user's error */
        return 0; /* nothing to compare with: let the allocations decide */
    }
    if (p->needed <= p->available) return 0;

    char need[32], avail[32], w[32], kv[32], ws[32], ex[32], mg[32];
    char advice[768];
    size_t o = 0;
    size_t room = p->available > p->margin ? p->available - p->margin : 0;
    size_t wtot = sat_add(sat_add(p->weights, p->load_extra), p->ranks);
    /* (no --tp advice: this process holds every rank's shards and KV pages on the CPU, and
     * the whole model before a GPU gets its shards; --tp had been advised and ran over) */
    if (p->ranks)
        o += (size_t)snprintf(advice + o, sizeof advice - o,
                              " --tp 1 needs none of the ranks' %s (on the CPU they share this process: "
                              "--tp adds memory).", preflight_fmt_bytes(p->ranks, w, sizeof w));
    if (wtot > room) {
        o += (size_t)snprintf(advice + o, sizeof advice - o,
                              " The weights alone need %s: ternarise with --quant (2 bits "
                              "instead of 32 per weight) or use a machine with more memory.",
                              preflight_fmt_bytes(wtot, w, sizeof w));
    } else {
        size_t left = room - wtot;
        size_t ws_fixed = max_tok > 0 ? preflight_workspace_bytes(c, max_tok, 0) : 0;
        if (ws_fixed > left / 2)
            o += (size_t)snprintf(advice + o, sizeof advice - o,
                                  " Workspaces for %lld tokens per forward call need %s: fewer "
                                  "tokens per call (--window for ppl and logits, --batch for "
                                  "generate).", (long long)max_tok,
                                  preflight_fmt_bytes(ws_fixed, ws, sizeof ws));
        /* KV tokens that fit beside weights and fixed workspaces (each cached
         * token also costs attention scratch and RoPE table rows) */
        size_t tok_cost = sat_add(per_tok, (2 * (2 * pos_sz(c->head_dim) + PREFLIGHT_ATT_Q_CHUNK) +
                                            2 * pos_sz(c->head_dim)) * sizeof(float));
        size_t fit = left > ws_fixed ? (left - ws_fixed) / (tok_cost ? tok_cost : 1) : 0;
        int64_t fit_blocks = (int64_t)(fit / (size_t)bs);
        if (p->kv_tokens > 0 && fit_blocks < 1)
            o += (size_t)snprintf(advice + o, sizeof advice - o,
                                  " The KV cache needs %s for %lld tokens (%s per token), and not "
                                  "one block of %d tokens fits beside the rest: lower the tokens "
                                  "per call first.",
                                  preflight_fmt_bytes(p->kv, kv, sizeof kv), (long long)p->kv_tokens,
                                  preflight_fmt_bytes(per_tok, ex, sizeof ex), bs);
        else if (p->kv_tokens > 0)
            o += (size_t)snprintf(advice + o, sizeof advice - o,
                                  " The KV cache needs %s for %lld tokens (%s per token): lower "
                                  "the sequence length (--window for ppl and logits; the prompt + "
                                  "--max-new, or --batch, for generate) so that at most %lld tokens "
                                  "are cached "
                                  "(--kv-blocks %lld at block size %d).",
                                  preflight_fmt_bytes(p->kv, kv, sizeof kv),
                                  (long long)p->kv_tokens,
                                  preflight_fmt_bytes(per_tok, ex, sizeof ex),
                                  (long long)(fit_blocks * bs), (long long)fit_blocks, bs);
    }
    /* (weights 0: the engine's check, after the load — they are not in either figure) */
    char wpart[160] = "";
    size_t wl = 0;
    if (p->weights || p->load_extra) {
        char w2[32], ex2[32];
        wl += (size_t)snprintf(wpart, sizeof wpart, "weights %s + load peak %s + ",
                               preflight_fmt_bytes(p->weights, w2, sizeof w2),
                               preflight_fmt_bytes(p->load_extra, ex2, sizeof ex2));
    }
    if (p->ranks) {
        char r2[32];
        snprintf(wpart + wl, sizeof wpart - wl, "the --tp ranks' shards and buffers %s + ",
                 preflight_fmt_bytes(p->ranks, r2, sizeof r2));
    }
    return err_set("not enough memory: need %s, %s available (%s%s): %sKV cache %s (%lld tokens) + "
                   "workspaces %s + margin %s.%s",
                   preflight_fmt_bytes(p->needed, need, sizeof need),
                   preflight_fmt_bytes(p->available, avail, sizeof avail), p->source,
                   p->weights || p->load_extra ? "" : ", with the model loaded", wpart,
                   preflight_fmt_bytes(p->kv, kv, sizeof kv), (long long)p->kv_tokens,
                   preflight_fmt_bytes(p->workspace, ws, sizeof ws),
                   preflight_fmt_bytes(p->margin, mg, sizeof mg), advice);
}

int preflight_plan(const ModelConfig *c, size_t weight_bytes, size_t load_extra, int64_t kv_tokens,
                   int64_t max_tok, int block_size, PreflightPlan *p) {
    return plan_ctx(c, weight_bytes, load_extra, 0, kv_tokens, 0, max_tok, block_size, p);
}

int preflight_check(const ModelConfig *c, size_t weight_bytes, int64_t kv_tokens, int64_t max_tok,
                    int block_size, char *report, size_t n) {
    return preflight_check_ctx(c, weight_bytes, 0, kv_tokens, 0, max_tok, block_size, report, n);
}

size_t preflight_tp_ranks_bytes(const ModelConfig *c, int tp, size_t shard_bytes, int64_t max_tok,
                                int64_t max_ctx, int64_t kv_tokens) {
    if (tp <= 1) return 0;
    ModelConfig r = *c; /* a rank's share (tp divides them: tp_plan_check) */
    r.n_heads = c->n_heads / tp;
    r.n_kv_heads = c->n_kv_heads / tp;
    r.inter = c->inter / tp;
    r.vocab = (c->vocab + tp - 1) / tp;
    size_t b = sat_add(shard_bytes, sat_mul(pos_sz(tp), preflight_workspace_bytes(&r, max_tok, longest_ctx(max_ctx, kv_tokens))));
    /* the communicator: two float and one int32 buffer of max_tok x hidden */
    return sat_add(b, sat_mul3(3 * sizeof(float), pos_sz(max_tok), pos_sz(c->hidden)));
}

int preflight_check_ctx(const ModelConfig *c, size_t weight_bytes, size_t ranks_bytes, int64_t kv_tokens,
                        int64_t max_ctx, int64_t max_tok, int block_size, char *report, size_t n) {
    PreflightPlan p;
    int rc = plan_ctx(c, weight_bytes, 0, ranks_bytes, kv_tokens, max_ctx, max_tok, block_size, &p);
    if (report && n) {
        char need[32], avail[32], w[32], kv[32], ws[32], rk[64] = "";
        if (p.ranks) {
            char r2[32];
            snprintf(rk, sizeof rk, " + --tp ranks %s", preflight_fmt_bytes(p.ranks, r2, sizeof r2));
        }
        snprintf(report, n,
                 "memory: weights %s + KV cache %s (%lld tokens) + workspaces %s%s + margin = %s "
                 "needed, %s available (%s)%s",
                 preflight_fmt_bytes(p.weights, w, sizeof w), preflight_fmt_bytes(p.kv, kv, sizeof kv),
                 (long long)p.kv_tokens, preflight_fmt_bytes(p.workspace, ws, sizeof ws), rk,
                 preflight_fmt_bytes(p.needed, need, sizeof need),
                 p.available == SIZE_MAX ? "unknown" : preflight_fmt_bytes(p.available, avail,
                                                                           sizeof avail),
                 p.source, rc == 0 ? "" : ": REFUSED");
    }
    return rc;
}
