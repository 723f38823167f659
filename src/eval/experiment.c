#include "eval/experiment.h"
#include "runtime/cuda_engine.h"
#include "tp/tp_engine.h"
#include "eval/latency.h"
#include "core/blas_setup.h"
#include "core/err.h"
#include "core/hash.h"
#include "core/mem.h"
#include "core/strnum.h"
#include "core/timer.h"
#include "eval/metrics.h"
#include "eval/ppl.h"
#include "load/safetensors.h"
#include "load/tokens.h"
#include "log/expconf.h"
#include "log/h5log.h"
#include "runtime/linear.h"
#include "runtime/report.h"

#include <ctype.h>
#include <errno.h>
#include <hdf5.h>
#include <limits.h>
#include <stddef.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>


#define EXP_TOKENS_PER_CALL 2048 /* windows batched per forward call */
/* The reference's logits for every scored position are kept (and cached) to
 * compute KL and top-1 against each run; beyond this many floats a run must use
 * fewer windows. */
#define EXP_MAX_REF_FLOATS ((int64_t)1 << 28)

typedef struct {
    int T, V, split;
    int64_t nw, N, per_w;
    float *logits; /* (N, V) reference logits of the scored positions */
    double *lse;   /* (N) */
    float *nll;    /* (N) */
    double ppl, seconds;
} RefData;

typedef struct {
    const char *experiment, *factor, *value, *model, *tokens_path, *quant, *kv, *device, *results;
    const char *windows_opt; /* the window-count option as the user types it, for hints
                              * ("max_windows=" in configs, "--max-windows " on the CLI) */
    int T, tp, logit_rows;
    int split; /* the split-window protocol also under policy none (ppl --kv none --out) */
    int64_t max_windows;
    ExpKind kind;
    const ExpConf *conf;
} RunCfg;

static void ref_free(RefData *r) {
    free(r->logits);
    free(r->lse);
    free(r->nll);
    memset(r, 0, sizeof *r);
}

static int mkdirs(const char *path) {
    char buf[4096];
    snprintf(buf, sizeof buf, "%s", path);
    for (char *p = buf + 1; *p; p++)
        if (*p == '/') {
            *p = 0;
            if (mkdir(buf, 0777) != 0 && errno != EEXIST)
                return err_set("cannot create %s: %s", buf, strerror(errno));
            *p = '/';
        }
    if (mkdir(buf, 0777) != 0 && errno != EEXIST)
        return err_set("cannot create %s: %s", buf, strerror(errno));
    return 0;
}

static const char *base_name(const char *path) {
    static char buf[256];
    size_t n = strlen(path);
    while (n > 1 && path[n - 1] == '/') n--;
    size_t s = n;
    while (s > 0 && path[s - 1] != '/') s--;
    snprintf(buf, sizeof buf, "%.*s", (int)(n - s), path + s);
    char *dot = strstr(buf, ".gguf");
    if (dot && dot[5] == 0) *dot = 0;
    return buf;
}

/* s with every byte outside [A-Za-z0-9._+-] made '_' (scripts/sweep.sh's safe()). */
static void file_safe(const char *s, char *out, size_t n) {
    size_t i = 0;
    for (; s[i] && i + 1 < n; i++) {
        const unsigned char c = (unsigned char)s[i];
        out[i] = (isalnum(c) && c < 128) || c == '.' || c == '_' || c == '+' || c == '-' ? (char)c : '_';
    }
    if (n) out[i] = 0;
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* The files model_load reads from the HF folder dir, in the order they are
 * hashed: config.json, then model.safetensors, or (without it, as st_open_dir
 * chooses) model.safetensors.index.json and every shard it names (each once,
 * sorted by name).  *names (heap, n strings, file names without the folder;
 * free each and the array) on 0; -1 (err_set) where the index cannot be read. */
static int model_files(const char *dir, char ***names, int *n) {
    const int sharded = st_dir_files(dir, NULL);
    char **shards = NULL;
    int ns = 0;
    if (sharded && st_index_shards(dir, &shards, &ns) != 0) return -1;
    char **v = xmalloc(sizeof(char *) * (size_t)(ns + 2));
    int k = 0;
    v[k++] = xstrdup("config.json");
    v[k++] = xstrdup(sharded ? "model.safetensors.index.json" : "model.safetensors");
    for (int i = 0; i < ns; i++) v[k++] = shards[i];
    free(shards);
    qsort(v + 2, (size_t)ns, sizeof(char *), cmp_str);
    *names = v;
    *n = k;
    return 0;
}

/* SHA-256 of the file at path, read once per version of the file: a version
 * is its (real path, device, inode, size, modification and status change
 * times), and its hash is kept for the process and, where cache_dir is given,
 * in cache_dir/filehash-<key> (a sweep runs one process per point; a 27B
 * checkpoint is ~50 GB to read).  A file rewritten has another change time,
 * so another key, even where its modification time was set back (cp -p,
 * rsync -t, tar: that key alone had kept the old hash, and with it the old
 * reference); the cache file holds the key's text and is checked. */
static int file_sha_memo(const char *path, const char *cache_dir, char out[65]) {
    static struct {
        char key[65], sha[65];
    } memo[64];
    static int n_memo;
    struct stat st;
    char real[4096], key[4400], kh[65], cp[4300];
    if (stat(path, &st) != 0 || !realpath(path, real)) return sha256_file(path, out); /* (its error) */
    snprintf(key, sizeof key, "%s|%llu|%llu|%lld|%lld.%09ld|%lld.%09ld", real, (unsigned long long)st.st_dev,
             (unsigned long long)st.st_ino, (long long)st.st_size, (long long)st.st_mtim.tv_sec,
             (long)st.st_mtim.tv_nsec, (long long)st.st_ctim.tv_sec, (long)st.st_ctim.tv_nsec);
    sha256_bytes(key, strlen(key), kh);
    for (int i = 0; i < n_memo; i++)
        if (strcmp(memo[i].key, kh) == 0) {
            memcpy(out, memo[i].sha, 65);
            return 0;
        }
    int have = 0;
    if (cache_dir) { /* two lines: the key, the file's SHA-256 */
        snprintf(cp, sizeof cp, "%s/filehash-%.24s", cache_dir, kh);
        FILE *f = fopen(cp, "r");
        if (f) {
            char l1[4400], l2[80];
            if (fgets(l1, sizeof l1, f) && fgets(l2, sizeof l2, f)) {
                l1[strcspn(l1, "\n")] = 0;
                l2[strcspn(l2, "\n")] = 0;
                have = strcmp(l1, key) == 0 && strlen(l2) == 64 && strspn(l2, "0123456789abcdef") == 64;
                if (have) memcpy(out, l2, 65);
            }
            fclose(f);
        }
    }
    if (!have) {
        if (sha256_file(path, out) != 0) return -1;
        if (cache_dir && mkdirs(cache_dir) == 0) { /* best effort, atomically */
            char tmp[4400];
            tmp_begin(tmp, sizeof tmp, cp);
            FILE *f = tmp_fopen(tmp, "w");
            int ok = f && fprintf(f, "%s\n%s\n", key, out) > 0;
            if (f) ok = fclose(f) == 0 && ok;
            if (!ok || rename(tmp, cp) != 0) unlink(tmp);
            tmp_end(tmp);
        }
        err_clear();
    }
    if (n_memo < (int)(sizeof memo / sizeof memo[0])) {
        memcpy(memo[n_memo].key, kh, 65);
        memcpy(memo[n_memo++].sha, out, 65);
    }
    return 0;
}

/* SHA-256 identifying the checkpoint at `model` by every file the loader reads
 * (paper/SCHEMA.md, model_sha256): a .gguf file's own SHA-256; for an HF folder
 * the SHA-256 of the lines "<sha256>  <file>\n" (sha256sum's format) of the
 * files of model_files in that order, i.e.
 * `(cd MODEL && sha256sum config.json model.safetensors) | sha256sum`.  So a
 * model that differs only in config.json or in a shard's contents has another
 * hash, hence another reference.  Each file read once per version
 * (file_sha_memo, its hashes kept in cache_dir where given). */
static int model_hash(const char *model, const char *cache_dir, char out[65]) {
    struct stat st;
    if (stat(model, &st) == 0 && S_ISREG(st.st_mode)) return file_sha_memo(model, cache_dir, out);
    char **names = NULL, p[4096], file_sha[65];
    int n = 0, rc = 0;
    if (model_files(model, &names, &n) != 0) return -1;
    size_t cap = (size_t)n * (64 + 2 + 1) + 1, len = 0;
    for (int i = 0; i < n; i++) cap += strlen(names[i]);
    char *lines = xmalloc(cap);
    for (int i = 0; i < n && rc == 0; i++) {
        snprintf(p, sizeof p, "%s/%s", model, names[i]);
        rc = file_sha_memo(p, cache_dir, file_sha);
        if (rc == 0) len += (size_t)snprintf(lines + len, cap - len, "%s  %s\n", file_sha, names[i]);
    }
    if (rc == 0) sha256_bytes(lines, len, out);
    free(lines);
    for (int i = 0; i < n; i++) free(names[i]);
    free(names);
    return rc;
}

/* HEAD of the git checkout whose top folder is dir (it holds .git) into out:
 * 0, or -1 (not a checkout, or git failed) */
static int git_head(const char *dir, char *out, size_t n) {
    char p[4200], cmd[4 * 4096 + 64], buf[128] = {0};
    struct stat st;
    snprintf(p, sizeof p, "%s/.git", dir);
    if (stat(p, &st) != 0) return -1;
    /* `git -C 'dir'`, the folder single-quoted for the shell (' as '\'') */
    size_t k = (size_t)snprintf(cmd, sizeof cmd, "git -C '");
    for (const char *c = dir; *c && k < sizeof cmd - 64; c++) {
        if (*c == '\'') k += (size_t)snprintf(cmd + k, sizeof cmd - k, "'\\''");
        else cmd[k++] = *c;
    }
    snprintf(cmd + k, sizeof cmd - k, "' rev-parse HEAD 2>/dev/null");
    FILE *f = popen(cmd, "r");
    if (!f) return -1;
    int ok = fgets(buf, sizeof buf, f) && strspn(buf, "0123456789abcdef") >= 40;
    pclose(f);
    if (!ok) return -1;
    buf[strcspn(buf, "\n")] = 0;
    snprintf(out, n, "%s", buf);
    return 0;
}

const char *exp_build_commit(void) {
    static char c[80];
    static int done;
    if (!done) { /* the Makefile's git_commit beside this program (first line) */
        done = 1;
        exe_side_line("git_commit", 0, c, sizeof c);
    }
    return c;
}

void exp_git_commit(char *out, size_t n) {
    static char commit[80]; /* once a process: exp_main writes every point of a sweep */
    if (!commit[0] && exp_build_commit()[0]) snprintf(commit, sizeof commit, "%s", exp_build_commit());
    if (!commit[0]) {
        /* the fallback where the build had no git: the checkout's HEAD now
         * (which may have moved since the build, and says nothing of edits) */
        int found = 0;
#ifdef TL_SOURCE_DIR /* the tree the build was made in (Makefile: -DTL_SOURCE_DIR='"$(CURDIR)"') */
        found = git_head(TL_SOURCE_DIR, commit, sizeof commit) == 0;
#endif
        /* else the ternlab tree that holds this program (build/ inside it): the
         * folders above the executable, up to the first with .git and our sources;
         * never the working folder, which may be another repository */
        char dir[4096], mark[4200];
        ssize_t len = found ? -1 : readlink("/proc/self/exe", dir, sizeof dir - 1);
        if (len > 0) {
            dir[len] = 0;
            do {
                path_parent(dir);
                struct stat st;
                snprintf(mark, sizeof mark, "%s/src/eval/experiment.h", dir);
                found = stat(mark, &st) == 0 && git_head(dir, commit, sizeof commit) == 0;
            } while (!found && strcmp(dir, "/") != 0 && strcmp(dir, ".") != 0);
        }
        if (!found) snprintf(commit, sizeof commit, "unknown");
    }
    snprintf(out, n, "%s", commit);
}

/* ---- evaluation with per-position callbacks ------------------------------ */

typedef struct {
    RefData *ref;
    /* test side (NULL when computing the reference) */
    float *nll, *kl;
    double kl_sum, rel_sum;
    int64_t top1;
    float *logit_test; /* (logit_rows, V) */
    int logit_rows;
    /* a GPU engine's KV pool after the run (cuda_engine_info): bytes per token
     * slot and the layers on ternary pages; NAN / -1 on the CPU */
    double dev_kv_alloc;
    int dev_kv_tern_layers;
} EvalCtx;

static int on_window(void *vctx, int64_t w, const float *logits, const int32_t *ids, int T, int V,
                     int r0) {
    EvalCtx *c = vctx;
    RefData *R = c->ref;
    int64_t base = w * R->per_w;
    if (!c->nll) { /* computing the reference */
        for (int r = r0; r < T - 1; r++) {
            int64_t i = base + (r - r0);
            const float *z = logits + (int64_t)r * V;
            memcpy(R->logits + i * V, z, sizeof(float) * (size_t)V);
            R->lse[i] = logsumexp_f32(z, V);
            R->nll[i] = (float)(R->lse[i] - (double)z[ids[r + 1]]);
        }
        return 0;
    }
    /* each row's KL and relative L2 kept, then added in row order: an OpenMP reduction
     * adds the threads' partial sums in the order they finish, and kl_mean / logit_rel_l2
     * had moved in the last bits from run to run with 3 or more threads */
    const int nrow = T - 1 - r0;
    double *kr = xmalloc(sizeof(double) * (size_t)(2 * (nrow > 0 ? nrow : 1))), *rr = kr + (nrow > 0 ? nrow : 1);
    int64_t top1 = 0;
#pragma omp parallel for reduction(+ : top1) schedule(static)
    for (int r = r0; r < T - 1; r++) {
        int64_t i = base + (r - r0);
        const float *z = logits + (int64_t)r * V, *zr = R->logits + i * V;
        double lse = logsumexp_f32(z, V);
        c->nll[i] = (float)(lse - (double)z[ids[r + 1]]);
        double kl = kl_ref_run(zr, R->lse[i], z, lse, V);
        c->kl[i] = (float)kl;
        kr[r - r0] = kl;
        rr[r - r0] = rel_l2_row(z, zr, V);
        top1 += argmax_f32(z, V) == argmax_f32(zr, V);
    }
    for (int j = 0; j < nrow; j++) {
        c->kl_sum += kr[j];
        c->rel_sum += rr[j];
    }
    free(kr);
    c->top1 += top1;
    for (int r = r0; r < T - 1; r++) {
        int64_t i = base + (r - r0);
        if (i < c->logit_rows) memcpy(c->logit_test + i * V, logits + (int64_t)r * V, sizeof(float) * (size_t)V);
    }
    return 0;
}

/* Bytes per token slot of an engine's KV pool (slots of it) as its policy left
 * it, over all its ranks (each holds its KV heads' share in a pool of the same
 * shape as rank 0's): the GPU's pages (cuda_engine_info), the CPU cache's. */
static double engine_kv_alloc(const Engine *e, int64_t slots) {
    CudaEngineInfo ci;
    if (cuda_engine_is(e))
        return cuda_engine_info(e, &ci) == 0 ? (double)ci.kv_bytes * ci.tp / (double)slots : NAN;
    return e->kv.host_pages ? (double)kv_alloc_bytes(&e->kv) * tp_engine_degree(e) / (double)slots : NAN;
}

/* Runs the windows through a model; fills the reference (ctx->nll == NULL) or
 * the run's metrics. */
static int evaluate(Model *m, int tp, EngineDevice dev, const KvPolicy *pol, const int32_t *tok,
                    int64_t n, const RefData *R, EvalCtx *ctx, PplResult *res, TpStats *tps) {
    int64_t per_call = EXP_TOKENS_PER_CALL / R->T * R->T;
    if (per_call < R->T) per_call = R->T;
    Engine e;
    EngineOpts eo = {.max_tok = per_call, .block_size = 16, .device = dev, .kv = pol};
    eo.n_blocks = per_call / R->T * ((R->T + 15) / 16);
    if (tp_engine_open(&e, m, &eo, tp) != 0) return -1; /* (with the policy: EngineOpts.kv) */
    PplOpts po = {.window = R->T, .max_windows = R->nw, .on_logits = on_window, .ctx = ctx,
                  .kv_split = R->split, .progress = 1};
    const int rc = eval_ppl(&e, tok, n, &po, res);
    CudaEngineInfo ci;
    const int gpu = rc == 0 && cuda_engine_is(&e) && cuda_engine_info(&e, &ci) == 0;
    ctx->dev_kv_alloc = gpu ? engine_kv_alloc(&e, eo.n_blocks * eo.block_size) : NAN;
    ctx->dev_kv_tern_layers = gpu ? ci.kv_ternary_pages : -1;
    if (tps) tp_engine_stats(&e, tps);
    tp_engine_close(&e);
    return rc;
}

/* ---- the reference, cached ---------------------------------------------- */

static int ref_cache_read(const char *path, const char *key, RefData *R) {
    struct stat st;
    if (stat(path, &st) != 0) return 1;
    if (h5log_verify(path, (const char *const[]){"/ref/logits", "/ref/lse", "/ref/nll", NULL}) != 0)
        return 1;
    int rc = 1;
    H5E_auto2_t fn;
    void *data;
    H5Eget_auto2(H5E_DEFAULT, &fn, &data);
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
    hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    if (f >= 0) {
        hid_t a = H5Aopen(f, "key", H5P_DEFAULT), ap = H5Aopen(f, "ppl", H5P_DEFAULT);
        char *k = NULL;
        hid_t t = h5log_vlen_str_type();
        double ppl = NAN;
        if (a >= 0 && ap >= 0 && t >= 0 && H5Aread(a, t, &k) >= 0 && k && strcmp(k, key) == 0 &&
            H5Aread(ap, H5T_NATIVE_DOUBLE, &ppl) >= 0) {
            hid_t d1 = H5Dopen2(f, "/ref/logits", H5P_DEFAULT), d2 = H5Dopen2(f, "/ref/lse", H5P_DEFAULT),
                  d3 = H5Dopen2(f, "/ref/nll", H5P_DEFAULT), sp = d1 >= 0 ? H5Dget_space(d1) : -1;
            if (d1 >= 0 && d2 >= 0 && d3 >= 0 && sp >= 0 && H5Sget_simple_extent_npoints(sp) == R->N * R->V &&
                H5Dread(d1, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, R->logits) >= 0 &&
                H5Dread(d2, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, R->lse) >= 0 &&
                H5Dread(d3, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, R->nll) >= 0) {
                R->ppl = ppl; /* (the float64 one the reference run computed) */
                rc = 0;
            }
            if (sp >= 0) H5Sclose(sp);
            if (d1 >= 0) H5Dclose(d1);
            if (d2 >= 0) H5Dclose(d2);
            if (d3 >= 0) H5Dclose(d3);
        }
        if (k) H5free_memory(k);
        if (t >= 0) H5Tclose(t);
        if (a >= 0) H5Aclose(a);
        if (ap >= 0) H5Aclose(ap);
        H5Fclose(f);
    }
    H5Eset_auto2(H5E_DEFAULT, fn, data);
    return rc;
}

static int ref_cache_write(const char *path, const char *key, const RefData *R) {
    H5Log *lg = h5log_create(path);
    if (!lg) return -1;
    int rc = h5log_attr_str(lg, "/", "key", key);
    if (rc == 0) rc = h5log_f32_2d(lg, "/ref/logits", R->logits, R->N, R->V);
    if (rc == 0) rc = h5log_f64(lg, "/ref/lse", R->lse, R->N);
    if (rc == 0) rc = h5log_f32(lg, "/ref/nll", R->nll, R->N);
    if (rc == 0) rc = h5log_attr_f64(lg, "/", "ppl", R->ppl);
    if (rc != 0) {
        h5log_abort(lg);
        return -1;
    }
    return h5log_commit(lg);
}

/* key's integer into *out where the config has it (else *out is left, the
 * default), within [lo, hi]: 0, or -1 (err_set) for a malformed or
 * out-of-range value */
static int conf_i64_opt(const ExpConf *c, const char *key, int64_t lo, int64_t hi, int64_t *out) {
    if (!expconf_get(c, key)) return 0;
    if (expconf_get_i64(c, key, out) != 0) return -1;
    if (*out < lo || *out > hi)
        return err_set("%s = %lld: expected %lld .. %lld", key, (long long)*out, (long long)lo, (long long)hi);
    return 0;
}

/* The reference's logits of N scored positions (per_w a window, V logits each)
 * fit in EXP_MAX_REF_FLOATS: 0, or -1 (err_set) with a hint in the user's own
 * option (opt: "max_windows=" or "--max-windows "). */
static int ref_size_check(int64_t N, int V, int64_t per_w, const char *opt) {
    if (N * V <= EXP_MAX_REF_FLOATS) return 0;
    int64_t most = EXP_MAX_REF_FLOATS / V / per_w;
    if (most < 1)
        return err_set("one window's %lld scored positions x %d logits is too many to compare "
                       "with the reference; use a shorter window", (long long)per_w, V);
    return err_set("%lld scored positions x %d logits is too many to compare with the "
                   "reference; use %s%lld or fewer", (long long)N, V, opt, (long long)most);
}

int exp_check_windows(int window, int vocab, int64_t n_tokens, int64_t max_windows, int split) {
    PplOpts cnt = {.window = window, .max_windows = max_windows};
    int64_t per_w = ppl_scored_per_window(window, split);
    return ref_size_check(ppl_window_count(n_tokens, &cnt) * per_w, vocab, per_w, "--max-windows ");
}

/* mp, or where its last component names no folder ("." or "..": --model . inside the
 * checkpoint) its resolved path in buf (PATH_MAX bytes): the run file's model and the
 * point's name are then the folder's (they had been "." and a hidden ".__VALUE.h5"). */
static const char *model_path_named(const char *mp, char *buf) {
    size_t ml = strlen(mp);
    while (ml > 1 && mp[ml - 1] == '/') ml--;
    size_t b = ml;
    while (b > 0 && mp[b - 1] != '/') b--;
    const int dots = (ml - b == 1 && mp[b] == '.') || (ml - b == 2 && mp[b] == '.' && mp[b + 1] == '.');
    return dots && realpath(mp, buf) ? buf : mp;
}

int exp_check_out(const char *out) { return file_out_path_check(out, "--out"); }

/* tok_sha: the token file's SHA-256 (the run's tokens_sha256) */
static int get_reference(const RunCfg *rc, const char *model_sha, const char *tok_sha, const int32_t *tok,
                         int64_t n, RefData *R) {
    char key[1024], khash[65], path[4096];
    /* the program's own bytes and the BLAS kernels too: another build, or
     * another kernel set (dense results round differently), is another
     * reference (the program's hash once a process: exp_main runs every
     * point of a sweep in one) */
    static char exe_sha[65];
    if (!exe_sha[0] && sha256_file("/proc/self/exe", exe_sha) != 0) snprintf(exe_sha, sizeof exe_sha, "unknown");
    snprintf(key, sizeof key, "model=%s tokens=%s window=%d windows=%lld protocol=%s program=%s blas=%s",
             model_sha, tok_sha, R->T, (long long)R->nw, R->split ? "kv-split-half" : "gptq-windows", exe_sha,
             blas_core_report());
    sha256_bytes(key, strlen(key), khash);
    snprintf(path, sizeof path, "%s/cache", rc->results);
    if (mkdirs(path) != 0) return -1;
    snprintf(path, sizeof path, "%s/cache/ref-%.24s.h5", rc->results, khash);
    if (ref_cache_read(path, key, R) == 0) {
        fprintf(stderr, "reference: cached %s\n", path);
        return 0;
    }
    Model m;
    ModelLoadOpts o = {.quant = NULL, .dense = 1};
    if (model_load(rc->model, &o, &m) != 0) return -1;
    KvPolicy none = {KVP_NONE, -1, -1};
    EvalCtx ctx = {.ref = R};
    PplResult res;
    /* the reference: tp 1 on the CPU (fp32, the definition), whatever device the run uses */
    int st = evaluate(&m, 1, ENGINE_CPU, &none, tok, n, R, &ctx, &res, NULL);
    model_free(&m);
    if (st != 0) return -1;
    R->ppl = res.ppl;
    R->seconds = res.seconds;
    if (ref_cache_write(path, key, R) != 0)
        fprintf(stderr, "reference: warning: could not cache (%s)\n", err_msg());
    return 0;
}

/* ---- throughput ---------------------------------------------------------- */

typedef struct {
    /* p50 / p95 / p99: nearest-rank percentiles of the same decode steps */
    double prefill_tok_s, decode_tok_s, p50_ms, p95_ms, p99_ms;
    double allreduce_us_per_tok; /* tp > 1: rank 0's time in collectives per token (measured runs) */
    double kv_alloc;             /* KV pool bytes per token slot under the run's policy (engine_kv_alloc) */
} Throughput;

/* batch sequences of prompt_len tokens prefilled in one call, then gen_len
 * batched decode steps (greedy); medians over `repeats` after `warmup`. */
static int measure_throughput(Model *m, int tp, EngineDevice dev, int bf16, const KvPolicy *pol, const int32_t *tok,
                              int64_t n, int batch, int prompt_len, int gen_len, int warmup, int repeats,
                              Throughput *out) {
    if ((int64_t)batch * (prompt_len + gen_len) > n)
        return err_set("throughput: batch %d x %d tokens exceeds the token file", batch,
                       prompt_len + gen_len);
    Engine e;
    EngineOpts eo = {.max_tok = (int64_t)batch * prompt_len, .block_size = 16, .device = dev, .bf16 = bf16,
                     .kv = pol};
    eo.n_blocks = (int64_t)batch * ((prompt_len + gen_len + 15) / 16);
    if (tp_engine_open(&e, m, &eo, tp) != 0) return -1; /* (with the policy: EngineOpts.kv) */
    int64_t nt = (int64_t)batch * prompt_len;
    int *ids = xmalloc(sizeof(int) * (size_t)nt), *seq = xmalloc(sizeof(int) * (size_t)nt);
    int64_t *pos = xmalloc(sizeof(int64_t) * (size_t)nt), *lidx = xmalloc(sizeof(int64_t) * (size_t)batch);
    float *lg = mem_alloc(sizeof(float) * (size_t)batch * (size_t)m->cfg.vocab, "logits");
    double *pre = xcalloc((size_t)repeats, sizeof(double)), *dec = xcalloc((size_t)repeats, sizeof(double));
    double *steps = xcalloc((size_t)(repeats * gen_len), sizeof(double));
    int rc = lg ? 0 : -1;
    for (int it = 0; it < warmup + repeats && rc == 0; it++) {
        if (it == warmup) tp_engine_reset_stats(&e); /* count the measured runs only */
        kv_reset(&e.kv);
        int sids[4096];
        for (int b = 0; b < batch; b++) {
            sids[b] = kv_seq_new(&e.kv);
            for (int t = 0; t < prompt_len; t++) {
                ids[b * prompt_len + t] = tok[(int64_t)b * (prompt_len + gen_len) + t];
                seq[b * prompt_len + t] = sids[b];
                pos[b * prompt_len + t] = t;
            }
            lidx[b] = (int64_t)b * prompt_len + prompt_len - 1;
        }
        e.rs.decode = 0;
        double t0 = time_now();
        rc = forward(m, &e.kv, &e.rs, ids, seq, pos, nt, lidx, batch, lg);
        double tp = time_now() - t0, td = 0;
        e.rs.decode = 1;
        for (int g = 0; g < gen_len && rc == 0; g++) {
            for (int b = 0; b < batch; b++) {
                ids[b] = (int)argmax_f32(lg + (int64_t)b * m->cfg.vocab, m->cfg.vocab);
                seq[b] = sids[b];
                pos[b] = prompt_len + g;
                lidx[b] = b;
            }
            double s0 = time_now();
            rc = forward(m, &e.kv, &e.rs, ids, seq, pos, batch, lidx, batch, lg);
            double ds = time_now() - s0;
            td += ds;
            if (it >= warmup) steps[(it - warmup) * gen_len + g] = ds * 1e3;
        }
        if (it >= warmup) {
            pre[it - warmup] = (double)nt / tp;
            dec[it - warmup] = (double)batch * gen_len / td;
        }
    }
    if (rc == 0) {
        out->prefill_tok_s = latency_percentile(pre, repeats, 0.5);
        out->decode_tok_s = latency_percentile(dec, repeats, 0.5);
        out->p50_ms = latency_percentile(steps, (int64_t)repeats * gen_len, 0.5);
        out->p95_ms = latency_percentile(steps, (int64_t)repeats * gen_len, 0.95);
        out->p99_ms = latency_percentile(steps, (int64_t)repeats * gen_len, 0.99);
        TpStats ts;
        tp_engine_stats(&e, &ts);
        out->allreduce_us_per_tok = ts.gpu_ranks ? NAN : ts.tokens ? 1e6 * ts.rank[0].comm_seconds / (double)ts.tokens : 0;
        out->kv_alloc = engine_kv_alloc(&e, eo.n_blocks * eo.block_size);
    }
    free(ids);
    free(seq);
    free(pos);
    free(lidx);
    free(pre);
    free(dec);
    free(steps);
    mem_free(lg);
    tp_engine_close(&e);
    return rc;
}

/* ---- one run ------------------------------------------------------------- */

typedef struct {
    const char **names;
    double *sparsity, *rel_err, *smin, *smax;
    int64_t *bytes;
    int n;
    Model *dense; /* for rel_err; NULL when not needed */
} WeightStats;

static void stat_linear(Linear *lin, int layer, const char *kind, void *vctx) {
    WeightStats *ws = vctx;
    int i = ws->n++;
    ws->names[i] = lin->name;
    ws->bytes[i] = (int64_t)linear_bytes(lin);
    if (lin->t && !lin->twin) { /* (a dense twin of a ternary layer runs dense: a dense row) */
        float a, b;
        tern_scale_range(lin->t, &a, &b);
        ws->sparsity[i] = tern_sparsity(lin->t);
        ws->smin[i] = a;
        ws->smax[i] = b;
        ws->rel_err[i] = 0.0;
        if (ws->dense) {
            const Layer *L = &ws->dense->layers[layer];
            const Linear *d = !strcmp(kind, "q") ? &L->q : !strcmp(kind, "k") ? &L->k
                            : !strcmp(kind, "v") ? &L->v : !strcmp(kind, "o") ? &L->o
                            : !strcmp(kind, "gate") ? &L->gate : !strcmp(kind, "up") ? &L->up : &L->down;
            ws->rel_err[i] = tern_rel_error(lin->t, d->w);
        }
    } else {
        ws->sparsity[i] = 0.0;
        ws->rel_err[i] = 0.0;
        ws->smin[i] = ws->smax[i] = NAN;
    }
}

/* What point_settings_check reads: the device, the KV policy, exp-throughput's lengths
 * and batch sizes (batches: nb of them, the caller's to free; NULL for the other
 * experiments). */
typedef struct {
    EngineDevice dev;
    KvPolicy pol;
    int64_t pl, gl, wu, rp; /* prompt_len, gen_len, warmup, repeats */
    int nb;
    int64_t *batches;
} PointSettings;

/* The settings a point reads before its model loads (device, tp, exp-throughput's value,
 * lengths and batch sizes, the KV policy, the QuantSpec), each checked, into *ps: 0, or
 * -1 (err_set; nothing left to free). */
static int point_settings_check(const RunCfg *rc, PointSettings *ps) {
    *ps = (PointSettings){.pl = 128, .gl = 32, .wu = 1, .rp = 3};
    const int dev_i = engine_device_parse(rc->device);
    if (dev_i < 0) return err_set("device '%s': expected cpu or cuda", rc->device);
    const EngineDevice dev = ps->dev = (EngineDevice)dev_i;
    if (rc->tp < 1 || rc->tp > TP_MAX_RANKS)
        return err_set("tp %d: expected 1..%d (CPU threads or GPUs)", rc->tp, TP_MAX_RANKS);
    /* exp-throughput's lengths before any work (a gen_len the CPU's request latencies
     * cannot time, 1, had been found after the reference and the timed runs) */
    if (rc->kind == EXP_THROUGHPUT &&
        (conf_i64_opt(rc->conf, "prompt_len", 1, 1 << 16, &ps->pl) != 0 ||
         conf_i64_opt(rc->conf, "gen_len", dev == ENGINE_CPU ? 2 : 1, 1 << 16, &ps->gl) != 0 ||
         conf_i64_opt(rc->conf, "warmup", 0, 1000, &ps->wu) != 0 || conf_i64_opt(rc->conf, "repeats", 1, 1000, &ps->rp) != 0))
        return -1;
    if (rc->kind == EXP_THROUGHPUT && strcmp(rc->value, "bf16") != 0 && strcmp(rc->value, "ternary") != 0)
        return err_set("exp-throughput: value '%s' (expected bf16 or ternary)", rc->value);
    if (kv_policy_parse(rc->kv, &ps->pol) != 0) return -1;
    if (dev == ENGINE_CUDA && ps->pol.kind != KVP_NONE && rc->tp > 1)
        return err_set("device cuda, tp %d, kv %s: ternary KV pages run on one GPU or on the CPU", rc->tp,
                       rc->kv);
    QuantSpec qs; /* (found at the model's load, after the reference's path was hashed) */
    if (strcmp(rc->quant, "loaded") != 0 && quant_spec_parse(rc->quant, &qs) != 0) return err_prefix("quant: ");
    if (rc->kind == EXP_THROUGHPUT) { /* (found after the model's loads and the reference) */
        int nb = 0, bad = 0;
        char **bl = expconf_list(rc->conf, "batches", &nb);
        int64_t *b = xcalloc((size_t)nb + 1, sizeof(int64_t));
        for (int i = 0; i < nb && !bad; i++)
            if (str_to_i64(bl[i], 1, 4096, &b[i]) < 0)
                bad = err_set("batches: '%s' is not a batch size in [1, 4096]", bl[i]);
        expconf_free_list(bl);
        if (!bad && nb == 0) bad = err_set("batches: no batch size given");
        if (bad) {
            free(b);
            return -1;
        }
        ps->nb = nb, ps->batches = b;
    }
    return 0;
}

/* One point with its checked settings (run_point's); ps->batches stays the caller's. */
static int run_point_settled(const RunCfg *rc, const char *out, const PointSettings *ps) {
    char model_sha[65], spec_str[256], pol_str[96], commit[64];
    const EngineDevice dev = ps->dev;
    const int64_t pl = ps->pl, gl = ps->gl, wu = ps->wu, rp = ps->rp;
    const KvPolicy pol = ps->pol;
    const int nb = ps->nb;
    const int64_t *batches = ps->batches;
    if (dev == ENGINE_CUDA && rc->tp > 1) cuda_prepare_multi_gpu();
    /* (the GPU before the model's hash, its load and the reference, as the commands do;
     * not in point_settings_check: a sweep checks on a machine that may have none) */
    if (dev == ENGINE_CUDA && cuda_engine_precheck(rc->tp) != 0) return -1;
    if (model_out_not_input(out, "--out", rc->model, rc->tokens_path) != 0) return -1;
    int loaded = strcmp(rc->quant, "loaded") == 0;
    /* (the checkpoint's file hashes kept with the reference cache: RESULTS/cache) */
    char hash_cache[4200];
    snprintf(hash_cache, sizeof hash_cache, "%s/cache", rc->results);
    if (model_hash(rc->model, hash_cache, model_sha) != 0) return -1;

    Model m;
    ModelLoadOpts mo = {.quant = loaded ? NULL : rc->quant};
    if (rc->kind == EXP_THROUGHPUT && strcmp(rc->value, "bf16") == 0) {
        mo.quant = NULL;
        mo.dense = 1;
        loaded = 1;
    }
    if (model_load(rc->model, &mo, &m) != 0) return -1;
    /* exp-throughput on CUDA times the engine's bf16 form for every value, as bench-e2e
     * does (dense weights, the activations into non-int8 linears and the lm_head in bf16:
     * the dense baseline is then bf16 through cuBLAS); on the CPU f32 (OpenBLAS sgemm:
     * Debian's OpenBLAS has no bf16 GEMM) */
    const int thr_bf16 = rc->kind == EXP_THROUGHPUT && dev == ENGINE_CUDA;
    int64_t lat_tp = 0; /* the request latencies' engine ranks (exp-throughput on the CPU) */
    /* exp-throughput's "ternary" is the checkpoint's ternary weights: a native
     * ternary checkpoint runs as stored (DESIGN.md: never re-ternarised unless
     * asked); the config's quant is the rule for BF16 checkpoints only.  The
     * loader tells native ternary after loading, so such a checkpoint is loaded
     * twice (cheap: packed); a BF16 one once, as before. */
    if (rc->kind == EXP_THROUGHPUT && !mo.dense && m.native_ternary && m.has_quant) {
        model_free(&m);
        mo.quant = NULL;
        loaded = 1;
        if (model_load(rc->model, &mo, &m) != 0) return -1;
    }
    int32_t *tok = NULL;
    int64_t n = 0;
    /* the policy's layers against the model before the reference is made (the engine checks too) */
    int st = kv_policy_check_layers(&pol, m.cfg.n_layers);
    if (st == 0) st = tokens_load(rc->tokens_path, m.cfg.vocab, &tok, &n);
    /* the file's contents, recorded beside its path: two runs of one path over other tokens
     * are told apart (scripts/ternlab_runs.py), as their cached references are */
    char tok_sha[65] = "";
    if (st == 0) st = sha256_file(rc->tokens_path, tok_sha);
    RefData R = {.T = rc->T, .V = m.cfg.vocab};
    R.split = pol.kind != KVP_NONE || strcmp(rc->factor, "kv") == 0 || rc->split;
    R.per_w = ppl_scored_per_window(R.T, R.split);
    PplOpts cnt = {.window = R.T, .max_windows = rc->max_windows};
    R.nw = st == 0 ? ppl_window_count(n, &cnt) : 0;
    R.N = R.nw * R.per_w;
    if (st == 0 && R.nw == 0) st = err_set("no complete window of %d tokens in %s", R.T, rc->tokens_path);
    if (st == 0) st = ref_size_check(R.N, R.V, R.per_w, rc->windows_opt ? rc->windows_opt : "max_windows=");
    if (st == 0) {
        R.logits = mem_alloc(sizeof(float) * (size_t)(R.N * R.V), "reference logits");
        R.lse = xmalloc(sizeof(double) * (size_t)R.N);
        R.nll = xmalloc(sizeof(float) * (size_t)R.N);
        if (!R.logits) st = -1;
    }
    if (st == 0) st = get_reference(rc, model_sha, tok_sha, tok, n, &R);

    TpStats tps = {0};
    EvalCtx ctx = {.ref = &R, .logit_rows = rc->logit_rows < R.N ? rc->logit_rows : (int)R.N};
    PplResult res = {0};
    if (st == 0) {
        ctx.nll = xmalloc(sizeof(float) * (size_t)R.N);
        ctx.kl = xmalloc(sizeof(float) * (size_t)R.N);
        ctx.logit_test = xmalloc(sizeof(float) * (size_t)ctx.logit_rows * (size_t)R.V + 4);
        st = evaluate(&m, rc->tp, dev, &pol, tok, n, &R, &ctx, &res, &tps);
    }
    /* as `ternlab ppl`: a forward that overflowed is an error, not a run (its KL and top-1
     * over non-finite logits had read 0 and 1, perfect agreement; the loader refuses
     * non-finite weights) */
    if (st == 0 && !(isfinite(res.ppl) && isfinite(R.ppl) && isfinite(ctx.kl_sum) && isfinite(ctx.rel_sum)))
        st = err_set("perplexity %g (dense reference %g), KL sum %g, logit rel. L2 sum %g: the forward produced "
                     "non-finite logits",
                     res.ppl, R.ppl, ctx.kl_sum, ctx.rel_sum);

    /* throughput rows */
    double *pre = NULL, *dec = NULL, *p50 = NULL, *p95 = NULL, *p99 = NULL, *arus = NULL, *kva = NULL;
    /* latency statistics per batch (src/eval/latency.h), columns of /throughput/; the
     * step percentiles latency_ms_p50 / p95 / p99 all come from the throughput loop's
     * steps (p95 had come from the latency simulation's: p95 above p99 in a row) */
    enum { LT_TTFT50, LT_TTFT95, LT_TTFT99, LT_TPOT50, LT_TPOT95, LT_TPOT99, LT_TOKS,
           LT_STEP, LT_ATTN, LT_LIN, LT_TERN, LT_TWIN, LT_UNPACK, LT_SHARE, LT_ACTQ, LT_OTHER, LT_N };
    static const char *const lt_names[LT_N] = {
        "ttft_ms_p50", "ttft_ms_p95", "ttft_ms_p99", "tpot_ms_p50", "tpot_ms_p95", "tpot_ms_p99",
        "tok_s", "step_ms", "step_attention_ms", "step_linear_ms",
        "step_ternary_ms", "step_twin_ms", "step_unpack_ms", "step_unpack_share",
        "step_act_quant_ms", "step_other_ms"};
    double *lt[LT_N] = {0};
    if (st == 0 && rc->kind == EXP_THROUGHPUT) {
        pre = xcalloc((size_t)nb + 1, sizeof(double));
        dec = xcalloc((size_t)nb + 1, sizeof(double));
        p50 = xcalloc((size_t)nb + 1, sizeof(double));
        p95 = xcalloc((size_t)nb + 1, sizeof(double));
        p99 = xcalloc((size_t)nb + 1, sizeof(double));
        arus = xcalloc((size_t)nb + 1, sizeof(double));
        kva = xcalloc((size_t)nb + 1, sizeof(double));
        for (int j = 0; j < LT_N; j++) lt[j] = xcalloc((size_t)nb + 1, sizeof(double));
        /* the dense twin of the packed model, for the unpack/dequant share (none for bf16) */
        Model twin;
        int have_twin = 0;
        if (!mo.dense) {
            ModelLoadOpts tw = {.quant = mo.quant, .dense = 1};
            if (model_load(rc->model, &tw, &twin) != 0) st = -1;
            else have_twin = 1;
        }
        for (int i = 0; i < nb && st == 0; i++) {
            Throughput t = {0};
            st = measure_throughput(&m, rc->tp, dev, thr_bf16, &pol, tok, n, (int)batches[i], (int)pl, (int)gl,
                                    (int)wu, (int)rp, &t);
            if (st == 0) {
                pre[i] = t.prefill_tok_s;
                dec[i] = t.decode_tok_s;
                p50[i] = t.p50_ms;
                p95[i] = t.p95_ms;
                p99[i] = t.p99_ms;
                arus[i] = t.allreduce_us_per_tok;
                kva[i] = t.kv_alloc;
                fprintf(stderr, "throughput %s batch %lld: prefill %.0f tok/s, decode %.0f tok/s, "
                                "step p50 %.2f ms p99 %.2f ms\n", rc->value, (long long)batches[i],
                        t.prefill_tok_s, t.decode_tok_s, t.p50_ms, t.p99_ms);
            }
            LatencyOpts lo = {.batch = (int)batches[i], .prompt_len = (int)pl, .gen_len = (int)gl,
                              .n_requests = 4 * (int)batches[i], .warmup = (int)wu,
                              .repeats = rp < 1 ? 1 : (int)rp, .tp = rc->tp, .kv = &pol};
            LatencyResult L;
            /* request latencies and the step split time the CPU path's pieces: on
             * cuda these columns are NaN (the GPU numbers are the rows above) */
            if (st == 0 && dev == ENGINE_CUDA)
                for (int j = 0; j < LT_N; j++) lt[j][i] = NAN;
            if (st == 0 && dev == ENGINE_CPU)
                st = latency_measure(&m, have_twin ? &twin : NULL, tok, n, &lo, &L);
            if (st == 0 && dev == ENGINE_CPU) lat_tp = L.tp;
            if (st == 0 && dev == ENGINE_CPU) {
                double v[LT_N] = {L.ttft_ms_p50, L.ttft_ms_p95, L.ttft_ms_p99, L.tpot_ms_p50,
                                  L.tpot_ms_p95, L.tpot_ms_p99, L.tok_s, L.step_ms,
                                  L.attention_ms, L.linear_ms, L.ternary_ms, L.twin_ms, L.unpack_ms,
                                  L.unpack_share, L.act_quant_ms, L.other_ms};
                for (int j = 0; j < LT_N; j++) lt[j][i] = v[j];
                fprintf(stderr, "latency %s batch %lld: TTFT p50 %.2f ms, TPOT p50 %.2f ms, %.0f tok/s; "
                                "step %.2f ms = linear %.2f (ternary %.2f vs twin %.2f) + attention "
                                "%.2f + other %.2f\n", rc->value, (long long)batches[i],
                        L.ttft_ms_p50, L.tpot_ms_p50, L.tok_s, L.step_ms, L.linear_ms, L.ternary_ms,
                        L.twin_ms, L.attention_ms, L.other_ms);
            }
        }
        if (have_twin) model_free(&twin);
    }

    /* weight statistics */
    WeightStats ws = {0};
    int nl = 7 * m.cfg.n_layers;
    ws.names = xcalloc((size_t)nl, sizeof(char *));
    ws.sparsity = xcalloc((size_t)nl, sizeof(double));
    ws.rel_err = xcalloc((size_t)nl, sizeof(double));
    ws.smin = xcalloc((size_t)nl, sizeof(double));
    ws.smax = xcalloc((size_t)nl, sizeof(double));
    ws.bytes = xcalloc((size_t)nl, sizeof(int64_t));
    Model dense;
    int have_dense = 0;
    if (st == 0 && m.has_quant) {
        ModelLoadOpts od = {.dense = 1};
        if (model_load(rc->model, &od, &dense) == 0) {
            have_dense = 1;
            ws.dense = &dense;
        } else st = -1;
    }
    if (st == 0) model_for_each_linear(&m, stat_linear, &ws);

    /* write the run file */
    H5Log *lg = NULL;
    if (st == 0 && !(lg = h5log_create(out))) st = -1;
    if (st == 0) {
        exp_git_commit(commit, sizeof commit);
        if (loaded || !m.has_quant) snprintf(spec_str, sizeof spec_str, "loaded");
        else { /* an act-only spec that kept no linear (a dense model's, all ternarised with the
                * defaults) in the full form that says so */
            QuantSpec qs = m.quant;
            if (qs.act_only && model_act_only_kept(&m) == 0) qs.act_only = 0;
            quant_spec_format(&qs, spec_str, sizeof spec_str);
        }
        kv_policy_format(&pol, pol_str, sizeof pol_str);
        double N = (double)R.N;
        int64_t P = ctx.logit_rows;
        int64_t *positions = xmalloc(sizeof(int64_t) * (size_t)(P + 1));
        for (int64_t i = 0; i < P; i++)
            positions[i] = (i / R.per_w) * R.T + (R.split ? R.T / 2 - 1 : 0) + i % R.per_w;
        Engine tmp; /* KV bytes per token under the policy, from the cache geometry */
        EngineOpts eo = {.max_tok = 1, .block_size = 16, .n_blocks = 1};
        double kvb = NAN, enc = NAN, dec_b = NAN, alloc = NAN;
        if (engine_init(&tmp, &m, &eo) == 0) {
            if (kv_set_policy(&tmp.kv, &pol) == 0) {
                enc = (double)kv_bytes_per_token(&tmp.kv, 0);
                dec_b = (double)kv_bytes_per_token(&tmp.kv, 1);
                /* what the cache allocates per token slot: f32 pages where a token
                 * may stay full precision, ternary pages where one may be ternary,
                 * the format flag */
                alloc = (double)kv_alloc_bytes(&tmp.kv) / (double)(eo.n_blocks * eo.block_size);
                if (dev == ENGINE_CUDA) alloc = ctx.dev_kv_alloc; /* the GPU's pages: see "pages" below */
            }
            int h = R.T / 2;
            kvb = R.split ? (h * enc + (R.T - 1 - h) * dec_b) / (R.T - 1) : enc;
            engine_free(&tmp);
        }
        int e = 0;
        e |= h5log_write_provenance(lg, TERNLAB_VERSION, commit);
        e |= h5log_attr_str(lg, "/", "cpu", cpu_model_report());
        e |= h5log_attr_str(lg, "/", "blas_core", blas_core_report());
        e |= h5log_attr_i64(lg, "/", "threads", omp_get_max_threads());
        e |= h5log_attr_str(lg, "/", "experiment", rc->experiment);
        e |= h5log_attr_str(lg, "/", "factor", rc->factor);
        e |= h5log_attr_str(lg, "/", "factor_value", rc->value);
        e |= h5log_attr_str(lg, "/", "model", rc->model);
        e |= h5log_attr_str(lg, "/", "model_sha256", model_sha);
        e |= h5log_attr_str(lg, "/", "tokens", rc->tokens_path);
        e |= h5log_attr_str(lg, "/", "tokens_sha256", tok_sha);
        e |= h5log_attr_i64(lg, "/", "window", R.T);
        e |= h5log_attr_str(lg, "/", "quant_spec", spec_str);
        e |= h5log_attr_str(lg, "/", "kv_policy", pol_str);
        e |= h5log_attr_str(lg, "/", "device", rc->device);
        e |= h5log_attr_i64(lg, "/", "tp", rc->tp);
        e |= h5log_attr_i64(lg, "/", "windows", R.nw);
        e |= h5log_attr_str(lg, "/", "protocol", R.split ? "kv-split-half" : "gptq-windows");
        /* the sweep's digest of the point's settings (scripts/sweep.sh): a finished file
         * of other settings under the point's name is not taken as this point's */
        const char *swp = getenv("TERNLAB_SWEEP_POINT");
        if (swp && swp[0]) e |= h5log_attr_str(lg, "/", "sweep_point", swp);
        e |= h5log_attr_str(lg, "/", "weights", m.native_ternary &&
                                                         (!m.has_quant ||
                                                          model_act_only_kept(&m) == 7 * m.cfg.n_layers) &&
                                                         !mo.dense
                                                     ? "native ternary" : m.has_quant ? "ternarised" : "dense");
        e |= h5log_scalar_f64(lg, "/metrics/ppl", res.ppl);
        e |= h5log_scalar_f64(lg, "/metrics/ppl_ref", R.ppl);
        e |= h5log_scalar_f64(lg, "/metrics/nll_mean", res.nll_sum / N);
        e |= h5log_scalar_f64(lg, "/metrics/kl_mean", ctx.kl_sum / N);
        e |= h5log_scalar_f64(lg, "/metrics/top1_agree", (double)ctx.top1 / N);
        e |= h5log_scalar_f64(lg, "/metrics/logit_rel_l2", ctx.rel_sum / N);
        e |= h5log_f32(lg, "/per_token/nll", ctx.nll, R.N);
        e |= h5log_f32(lg, "/per_token/nll_ref", R.nll, R.N);
        e |= h5log_f32(lg, "/per_token/kl", ctx.kl, R.N);
        e |= h5log_i64(lg, "/logits/positions", positions, P);
        e |= h5log_f32_2d(lg, "/logits/test", ctx.logit_test, P, R.V);
        e |= h5log_f32_2d(lg, "/logits/ref", R.logits, P, R.V);
        e |= h5log_i64(lg, "/throughput/batch", batches, nb);
        e |= h5log_f64(lg, "/throughput/prefill_tok_s", pre, nb);
        e |= h5log_f64(lg, "/throughput/decode_tok_s", dec, nb);
        e |= h5log_f64(lg, "/throughput/latency_ms_p50", p50, nb);
        e |= h5log_f64(lg, "/throughput/latency_ms_p99", p99, nb);
        if (rc->kind == EXP_THROUGHPUT) e |= h5log_f64(lg, "/throughput/latency_ms_p95", p95, nb);
        e |= h5log_f64(lg, "/throughput/allreduce_us_per_token", arus, nb);
        {   /* per-rank decoder weight bytes (as read, and payload without row padding) */
            int64_t rb[TP_MAX_RANKS], rpb[TP_MAX_RANKS];
            int ntp = tps.tp > 0 ? tps.tp : 1;
            for (int r = 0; r < ntp; r++) {
                rb[r] = (int64_t)tps.rank[r].layer_bytes;
                rpb[r] = tps.rank[r].layer_payload_bits < 0 ? -1 : tps.rank[r].layer_payload_bits / 8;
            }
            e |= h5log_i64(lg, "/tp/rank_weight_bytes", rb, ntp);
            e |= h5log_i64(lg, "/tp/rank_weight_payload_bytes", rpb, ntp);
            e |= h5log_scalar_f64(lg, "/tp/allreduce_us_per_token_eval",
                                  tps.gpu_ranks ? NAN
                                  : tps.tokens  ? 1e6 * tps.rank[0].comm_seconds / (double)tps.tokens
                                                : 0);
        }
        if (rc->kind == EXP_THROUGHPUT) {
            for (int j = 0; j < LT_N; j++) {
                char lp[96];
                snprintf(lp, sizeof lp, "/throughput/%s", lt_names[j]);
                e |= h5log_f64(lg, lp, lt[j], nb);
            }
            /* the timed runs' precision (paper/SCHEMA.md) */
            e |= h5log_attr_str(lg, "/throughput", "dtype", thr_bf16 ? "bf16" : "f32");
            /* the ranks of the engine the request latencies ran on (0: not measured: cuda) */
            e |= h5log_attr_i64(lg, "/throughput", "latency_tp", lat_tp);
            /* the timed engines' KV policy (the run's) and pool bytes per token slot */
            e |= h5log_attr_str(lg, "/throughput", "kv_policy", pol_str);
            e |= h5log_f64(lg, "/throughput/kv_alloc_bytes_per_token", kva, nb);
        }
        /* what was loaded and which kernels ran (every run file) */
        e |= report_write_h5(lg, &m);
        /* KV capacity at a memory budget (the KV experiment; config key mem, default 24GiB) */
        if (strcmp(rc->factor, "kv") == 0) {
            uint64_t budget;
            if (parse_bytes(expconf_get_or(rc->conf, "mem", "24GiB"), &budget) != 0) e |= -1;
            else e |= report_capacity_h5(lg, "/capacity", &m, budget);
        }
        e |= h5log_strings(lg, "/weights/name", ws.names, ws.n);
        e |= h5log_f64(lg, "/weights/sparsity", ws.sparsity, ws.n);
        e |= h5log_f64(lg, "/weights/rel_err", ws.rel_err, ws.n);
        e |= h5log_f64(lg, "/weights/scale_min", ws.smin, ws.n);
        e |= h5log_f64(lg, "/weights/scale_max", ws.smax, ws.n);
        e |= h5log_i64(lg, "/weights/bytes", ws.bytes, ws.n);
        e |= h5log_scalar_f64(lg, "/kv/bytes_per_token", kvb);
        e |= h5log_scalar_str(lg, "/kv/policy", pol_str);
        e |= h5log_attr_f64(lg, "/kv", "bytes_per_token_encoder", enc);
        e |= h5log_attr_f64(lg, "/kv", "bytes_per_token_decoder", dec_b);
        e |= h5log_attr_f64(lg, "/kv", "alloc_bytes_per_token", alloc);
        /* how the evaluated model's pages held the ternary rows: the bytes above are the
         * format's; on the GPU a layer whose tokens of one phase only are ternary keeps
         * their values in its f32 pages (fwdc_kv_ternarise), one whose every token is
         * ternary has ternary pages alone (fwdc_kv_code_rows) */
        e |= h5log_attr_str(lg, "/kv", "pages",
                            pol.kind == KVP_NONE ? "f32"
                            : dev != ENGINE_CUDA || ctx.dev_kv_tern_layers > 0
                                ? "ternary pages (codes + f16 scales)"
                                : "f32 pages holding the ternary values (memory not saved)");
        e |= h5log_attr_f64(lg, "/metrics", "eval_tok_s", res.tok_per_s);
        e |= h5log_attr_f64(lg, "/metrics", "decode_tok_s",
                            res.decode_seconds > 0 ? (double)res.decode_tokens / res.decode_seconds : NAN);
        free(positions);
        if (e) {
            h5log_abort(lg);
            st = -1;
        } else {
            st = h5log_commit(lg);
        }
        if (st == 0)
            fprintf(strcmp(rc->experiment, "ppl") ? stdout : stderr,
                    "%s %s=%s %s: ppl %.4f (ref %.4f) kl %.4g top1 %.4f kv %.1f B/token -> %s\n",
                   rc->experiment, rc->factor, rc->value, base_name(rc->model), res.ppl, R.ppl,
                   ctx.kl_sum / N, (double)ctx.top1 / N, kvb, out);
    }
    if (have_dense) model_free(&dense);
    free(ws.names);
    free(ws.sparsity);
    free(ws.rel_err);
    free(ws.smin);
    free(ws.smax);
    free(ws.bytes);
    free(pre);
    free(dec);
    free(p50);
    free(p95);
    free(p99);
    free(arus);
    free(kva);
    for (int j = 0; j < LT_N; j++) free(lt[j]);
    free(ctx.nll);
    free(ctx.kl);
    free(ctx.logit_test);
    ref_free(&R);
    free(tok);
    model_free(&m);
    return st;
}

static int run_point(const RunCfg *rc, const char *out) {
    /* --out's folder before any work (a missing one had been created, with cache/ in
     * it, by the reference cache, or found missing only when the file was written) */
    if (exp_check_out(out) != 0) return -1;
    PointSettings ps;
    if (point_settings_check(rc, &ps) != 0) return -1;
    const int st = run_point_settled(rc, out, &ps);
    free(ps.batches);
    return st;
}

/* ---- one run from the CLI (ternlab ppl --out) ------------------------------ */

int exp_run_single(const char *model, const char *tokens, int window, int64_t max_windows,
                   const char *quant, const char *kv, int tp, const char *device, const char *out) {
    ExpConf c;
    char text[256];
    snprintf(text, sizeof text, "factor = quant\nvalues = x\nmodels = x\ntokens = x\nwindow = 1\n"
                                "max_windows = 0\n");
    if (expconf_parse(text, "ternlab ppl", &c) != 0) return -1;
    char results[4096];
    snprintf(results, sizeof results, "%s", out);
    path_parent(results);
    char mres[PATH_MAX]; /* (--model . as the programs name it: the folder's path) */
    RunCfg rc = {.experiment = "ppl", .factor = "quant", .value = quant ? quant : "loaded",
                 .model = model_path_named(model, mres), .tokens_path = tokens, .quant = quant ? quant : "loaded",
                 .kv = kv ? kv : "none", .split = kv != NULL, .device = device ? device : "cpu", .results = results,
                 .windows_opt = "--max-windows ",
                 .T = window,
                 .tp = tp, .logit_rows = 8, .max_windows = max_windows, .kind = EXP_QUALITY,
                 .conf = &c};
    int st = run_point(&rc, out);
    expconf_free(&c);
    return st;
}

/* ---- main ---------------------------------------------------------------- */

/* A point file's model part: the model folder's (or file's) name, file-safe. */
static void model_file_name(const char *mp0, char *mn, size_t n) {
    char mdir[4096], res[PATH_MAX];
    const char *mp = model_path_named(mp0, res);
    size_t ml = strlen(mp);
    while (ml > 1 && mp[ml - 1] == '/') ml--;
    snprintf(mdir, sizeof mdir, "%.*s", (int)ml, mp);
    const char *slash = strrchr(mdir, '/');
    file_safe(slash ? slash + 1 : mdir, mn, n);
}

/* -1 (err_set) where two entries of list[0, n) give one part of a point's file
 * name (models: their folders' names; values: themselves, file-safe), so that
 * their points would write one file, the later over the earlier (two models
 * called llama-tiny in different folders had, exit 0). */
static int names_distinct(char *const *list, int n, int models, const char *key) {
    for (int i = 0; i < n; i++)
        for (int j = i + 1; j < n; j++) {
            char a[256], b[256];
            if (models) model_file_name(list[i], a, sizeof a), model_file_name(list[j], b, sizeof b);
            else file_safe(list[i], a, sizeof a), file_safe(list[j], b, sizeof b);
            if (strcmp(a, b) == 0)
                return err_set("%s: '%s' and '%s' would write one file (%s): give each its own name", key, list[i],
                               list[j], a);
        }
    return 0;
}

static void usage(const ExpDef *def, FILE *f) {
    char prog[64]; /* the program's file name: exp-kv-ternary -> kv_ternary (build/exp_kv_ternary) */
    snprintf(prog, sizeof prog, "%s", def->name + 4);
    for (char *c = prog; *c; c++)
        if (*c == '-') *c = '_';
    fprintf(f,
            "%s: %s\n\n"
            "usage: build/exp_%s [--model PATH] [--value V] [--out FILE.h5] [--config FILE]\n"
            "                    [--results DIR] [--check] [key=value ...]\n\n"
            "Settings come from configs/%s.conf; key=value overrides any of them (but the\n"
            "program's factor, whose value's {} stays in its setting: paper/SCHEMA.md, \"Configs\").\n"
            "With --model and --value: one run written to --out (default\n"
            "RESULTS/%s/<model>__<value>.h5, <model>__<value>__<device>.h5 for a\n"
            "device other than cpu); otherwise every model x value of the config.\n"
            "--check: check the settings of every value (the config, the overrides, each value's\n"
            "QuantSpec / KV policy / device / lengths), run nothing; exit 2 naming each bad one.\n"
            "For sweeps across cores or nodes: scripts/sweep.sh %s (it runs --check first).\n",
            def->name, def->summary, prog, def->name, def->name, def->name);
}

/* whether two overrides "key=value" (blanks around the key allowed) name one key */
static int override_key_eq(const char *a, const char *b) {
    while (*a == ' ' || *a == '\t') a++;
    while (*b == ' ' || *b == '\t') b++;
    size_t la = strcspn(a, "="), lb = strcspn(b, "=");
    while (la && (a[la - 1] == ' ' || a[la - 1] == '\t')) la--;
    while (lb && (b[lb - 1] == ' ' || b[lb - 1] == '\t')) lb--;
    return la == lb && !strncmp(a, b, la);
}

/* The program's one factor, and its value carried by the one setting the program
 * names (ExpDef): an override of `factor`, or a {} moved into another setting or
 * another item of the QuantSpec, had run another factor under this program's name
 * (exp-threshold with kv={}: rule twn, the KV policy varied, the file saying
 * factor=rule).  0, or -1 with err_set. */
static int factor_carried(const ExpDef *def, const ExpConf *c) {
    const char *f = expconf_get_or(c, "factor", "");
    if (def->factor && strcmp(f, def->factor) != 0)
        return err_set("factor = %s: %s varies %s alone (each factor has a program of its own)", f, def->name,
                       def->factor);
    for (int k = 0; k < c->n; k++) {
        const char *key = c->entries[k].key, *v = c->entries[k].value, *at = strstr(v, "{}");
        if (!at || !strcmp(key, "values")) continue; /* (values are not bound: expconf_bind) */
        int ok = def->carrier && strcmp(key, def->carrier) == 0 && !strstr(at + 2, "{}");
        if (ok && def->item) { /* one comma item "<item>{}" of the QuantSpec */
            const size_t il = strlen(def->item);
            ok = at - v >= (ptrdiff_t)il && strncmp(at - il, def->item, il) == 0 &&
                 (at - il == v || at[-(ptrdiff_t)il - 1] == ',') && (at[2] == '\0' || at[2] == ',');
        } else if (ok) { /* the whole policy, optionally with its layer range */
            ok = at == v && (at[2] == '\0' || at[2] == '@');
        }
        if (!ok && !def->carrier)
            return err_set("%s = %s: %s reads its value itself (it varies %s): no setting takes a {}", key, v,
                           def->name, def->factor ? def->factor : "its factor");
        if (!ok)
            return err_set("%s = %s: %s's value goes into %s as %s{}%s alone (it varies %s); a {} elsewhere would "
                           "vary another factor under this program's name", key, v, def->name, def->carrier,
                           def->item ? def->item : "", def->item ? "" : " or {}@layers=a-b",
                           def->factor ? def->factor : "its factor");
    }
    return 0;
}

/* Point (model mp, value v): `c` a fresh copy of `config` with conf's settings (the
 * overrides), bound to v, and rc's settings read from it.  0, or -1 (err_set); the caller
 * frees c (expconf_free) whatever the result. */
static int point_cfg(const ExpDef *def, const char *config, const ExpConf *conf, const char *mp, const char *v,
                     const char *results, ExpConf *c, RunCfg *rc) {
    *rc = (RunCfg){.experiment = def->name, .kind = def->kind, .conf = c, .model = mp, .value = v,
                   .results = results};
    if (expconf_load(config, c) != 0) return -1; /* (this had failed the point without a word) */
    char tmp_over[4096];
    for (int k = 0; k < conf->n; k++) {
        snprintf(tmp_over, sizeof tmp_over, "%s=%s", conf->entries[k].key, conf->entries[k].value);
        expconf_override(c, tmp_over);
    }
    int64_t T = 0, mw = 0, tp = 1, lr = 8;
    int st = expconf_bind(c, v);
    /* a quality experiment's value reaches the run only through a "{}" (the
     * throughput one reads it itself): none left means an override replaced
     * the setting that carried it, and every point would be the same run */
    if (st == 0 && def->kind != EXP_THROUGHPUT)
        st = err_set("no setting takes the value '%s' (no \"{}\" left in %s and its overrides: "
                     "an override such as %s=... replaced the one that had it), so the run "
                     "would not be the point it is named after",
                     v, config, strcmp(def->name, "exp-kv-ternary") == 0 ? "kv" : "quant");
    if (st > 0) st = 0;
    if (st == 0 && (expconf_get_i64(c, "window", &T) != 0 || expconf_get_i64(c, "max_windows", &mw) != 0))
        st = -1;
    if (st == 0 && (conf_i64_opt(c, "tp", 1, 64, &tp) != 0 || conf_i64_opt(c, "logit_rows", 0, 1 << 20, &lr) != 0))
        st = -1;
    if (st != 0) return -1;
    rc->factor = expconf_get(c, "factor");
    rc->tokens_path = expconf_get(c, "tokens");
    rc->quant = expconf_get_or(c, "quant", "loaded");
    rc->kv = expconf_get_or(c, "kv", "none");
    rc->device = expconf_get_or(c, "device", "cpu");
    rc->T = (int)T;
    rc->max_windows = mw;
    rc->tp = (int)tp;
    rc->logit_rows = (int)(lr < 0 ? 0 : lr);
    /* (2 as the config check and ppl --window: the bound had been 4, unsaid) */
    if (T < 2 || T > (1 << 20)) return err_set("window %lld: expected 2 .. %d tokens", (long long)T, 1 << 20);
    return 0;
}

static int exp_run(const ExpDef *def, int argc, char **argv) {
    signal(SIGXFSZ, SIG_IGN); /* (a file size limit: EFBIG, an error, not a kill) */
    signal(SIGPIPE, SIG_IGN); /* (a closed pipe: EPIPE, an error, not a kill) */
    tmp_cleanup_on_signals(); /* (stopped: the run file's and the reference cache's temporaries go) */
    const char *model = NULL, *value = NULL, *out = NULL, *config = NULL, *results = "results";
    char cfgpath[4096];
    int n_over = 0, check = 0;
    char **over = xcalloc((size_t)argc + 1, sizeof(char *));
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--check")) {
            check = 1;
            continue;
        }
        const char **slot = !strcmp(a, "--model") ? &model : !strcmp(a, "--value") ? &value
                          : !strcmp(a, "--out") ? &out : !strcmp(a, "--config") ? &config
                          : !strcmp(a, "--results") ? &results : NULL;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(def, stdout);
            free(over);
            return 0;
        }
        if (slot) {
            if (i + 1 >= argc) {
                fprintf(stderr, "%s: %s needs a value\n", def->name, a);
                free(over);
                return 2;
            }
            for (int j = 1; j < i; j++) /* (the last had been taken: --value twn --value std ran std) */
                if (!strcmp(argv[j], a)) {
                    fprintf(stderr, "%s: %s is given more than once\n", def->name, a);
                    free(over);
                    return 2;
                }
            *slot = argv[++i];
            if (!**slot) { /* ("" had made --results the root folder: /exp-kv-ternary, /cache) */
                fprintf(stderr, "%s: %s has an empty value\n", def->name, a);
                free(over);
                return 2;
            }
        } else if (a[0] != '-' && strchr(a, '=')) {
            for (int j = 0; j < n_over; j++)
                if (override_key_eq(over[j], a)) {
                    fprintf(stderr, "%s: '%s' and '%s' set one key twice\n", def->name, over[j], a);
                    free(over);
                    return 2;
                }
            over[n_over++] = argv[i];
        } else {
            fprintf(stderr, "%s: unknown argument '%s'\n\n", def->name, a);
            usage(def, stderr);
            free(over);
            return 2;
        }
    }
    char resbuf[4096];
    int results_given = 0;
    for (int i = 1; i < argc; i++) results_given |= !strcmp(argv[i], "--results");
    if (out && !results_given) {
        /* the reference cache (RESULTS/cache): a sweep's --out is
         * RESULTS/<experiment>/<file>.h5, so RESULTS is two folders up; any
         * other --out keeps it in the file's own folder (two folders up of
         * /tmp/x.h5 had been /cache) */
        snprintf(resbuf, sizeof resbuf, "%s", out);
        path_parent(resbuf);
        const char *base = strrchr(resbuf, '/');
        if (strcmp(base ? base + 1 : resbuf, def->name) == 0) path_parent(resbuf); /* RESULTS/<experiment> */
        results = resbuf;
    }
    if (!config) {
        snprintf(cfgpath, sizeof cfgpath, "configs/%s.conf", def->name);
        config = cfgpath;
    }
    ExpConf conf;
    if (expconf_load(config, &conf) != 0) {
        fprintf(stderr, "%s: %s\n", def->name, err_msg());
        free(over);
        return 2;
    }
    /* the keys the experiment programs read (run_point, exp_run): every
     * experiment's, then mem (the capacity budget) in the program whose factor is kv, the
     * throughput experiment's own */
    static const char *const known[] = {"factor", "values", "models", "tokens", "window", "max_windows",
                                        "quant", "kv", "device", "tp", "logit_rows", NULL};
    static const char *const kv_keys[] = {"mem", NULL};
    static const char *const thr_keys[] = {"batches", "prompt_len", "gen_len", "warmup", "repeats", NULL};
    /* (the overrides first: a check before them let values=, factor= or max_windows=-1 through) */
    uint64_t mem_budget = 0;
    if (expconf_apply_args(&conf, n_over, over, NULL) != 0 || expconf_check(&conf) != 0 ||
        expconf_check_keys(&conf, known,
                           def->kind == EXP_THROUGHPUT                      ? thr_keys
                           : def->factor && !strcmp(def->factor, "kv") ? kv_keys
                                                                       : NULL) != 0 ||
        factor_carried(def, &conf) != 0 ||
        /* (a bad budget had failed the run file's write, after the whole evaluation) */
        (expconf_get(&conf, "mem") && parse_bytes(expconf_get(&conf, "mem"), &mem_budget) != 0 &&
         err_prefix("%s: mem: ", conf.path))) {
        fprintf(stderr, "%s: %s\n", def->name, err_msg());
        expconf_free(&conf);
        free(over);
        return 2;
    }
    free(over);
    int nv = 0, nm = 0;
    char **values = value ? NULL : expconf_list(&conf, "values", &nv);
    char **models = model ? NULL : expconf_list(&conf, "models", &nm);
    if (value) nv = 1;
    if (model) nm = 1;
    if (!out && ((models && names_distinct(models, nm, 1, "models") != 0) ||
                 (values && names_distinct(values, nv, 0, "values") != 0))) {
        fprintf(stderr, "%s: %s\n", def->name, err_msg());
        expconf_free_list(values);
        expconf_free_list(models);
        expconf_free(&conf);
        return 2;
    }
    if (out && (nv != 1 || nm != 1)) {
        fprintf(stderr, "%s: --out needs a single run (--model and --value)\n", def->name);
        expconf_free_list(values);
        expconf_free_list(models);
        expconf_free(&conf);
        return 2;
    }
    int failed = 0;
    if (check) { /* every value's settings, no run (scripts/sweep.sh, before its points) */
        for (int vi = 0; vi < nv; vi++) {
            const char *v = value ? value : values[vi];
            ExpConf c;
            RunCfg rc;
            PointSettings ps = {0};
            if (point_cfg(def, config, &conf, "", v, results, &c, &rc) != 0 || point_settings_check(&rc, &ps) != 0) {
                fprintf(stderr, "%s: %s=%s: %s\n", def->name, def->factor ? def->factor : "value", v, err_msg());
                failed++;
            }
            free(ps.batches);
            expconf_free(&c);
        }
        expconf_free_list(values);
        expconf_free_list(models);
        expconf_free(&conf);
        return failed ? 2 : 0;
    }
    for (int mi = 0; mi < nm; mi++)
        for (int vi = 0; vi < nv; vi++) {
            char mres[PATH_MAX];
            const char *mp = model_path_named(model ? model : models[mi], mres);
            const char *v = value ? value : values[vi];
            ExpConf c;
            RunCfg rc;
            int st = point_cfg(def, config, &conf, mp, v, results, &c, &rc);
            char outp[4096] = "";
            if (st == 0) {
                if (out) snprintf(outp, sizeof outp, "%s", out);
                else {
                    snprintf(outp, sizeof outp, "%s/%s", results, def->name);
                    st = mkdirs(outp);
                    /* named as scripts/sweep.sh names its --out, so that the two
                     * ways of running a point find each other's files: the model
                     * folder's (or file's) name and the value with every byte
                     * outside [A-Za-z0-9._+-] made '_', and the device where it is
                     * not the CPU (a CUDA run beside a CPU one of the same point) */
                    const int cpu = strcmp(rc.device, "cpu") == 0;
                    char mn[256], vn[256], dn[128];
                    model_file_name(mp, mn, sizeof mn);
                    file_safe(v, vn, sizeof vn);
                    file_safe(rc.device, dn, sizeof dn);
                    snprintf(outp, sizeof outp, "%s/%s/%s__%s%s%s.h5", results, def->name, mn, vn,
                             cpu ? "" : "__", cpu ? "" : dn);
                }
            }
            if (st == 0) st = run_point(&rc, outp);
            if (st != 0) {
                fprintf(stderr, "%s: %s=%s on %s%s%s%s: %s\n", def->name, rc.factor ? rc.factor : "value",
                        v, mp, outp[0] ? " (" : "", outp, outp[0] ? ")" : "", err_msg());
                failed++;
            }
            expconf_free(&c);
        }
    expconf_free_list(values);
    expconf_free_list(models);
    expconf_free(&conf);
    return failed ? 1 : 0;
}

int exp_main(const ExpDef *def, int argc, char **argv) {
    /* (the summary lines and --help on stdout: a write that failed is a failed run) */
    return err_stdout_finish(def->name, exp_run(def, argc, argv));
}
