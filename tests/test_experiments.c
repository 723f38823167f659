/* Experiment programs end to end on tiny window counts; ternary KV pages;
 * `ternlab quantize` round trips. */
#include "test.h"
#include "core/blas_setup.h"
#include "fixtures.h"
#include "core/err.h"
#include "core/mem.h"
#include "eval/experiment.h"
#include "eval/metrics.h"
#include "eval/ppl.h"
#include "kv/kvcache.h"
#include "load/tokens.h"
#include "log/h5log.h"
#include "runtime/cuda_engine.h"

#include <hdf5.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <omp.h>
#include <unistd.h>

static double read_scalar(const char *file, const char *path) {
    double v;
    h5_read_f64s(file, path, &v, 1);
    return v;
}

/* String attribute `name` of the group (or "/") at `group` of file (as h5log
 * writes strings) into buf: 0, or -1 where absent. */
static int read_group_attr_str(const char *file, const char *group, const char *name, char *buf, size_t n) {
    int rc = -1;
    buf[0] = 0;
    hid_t f = H5Fopen(file, H5F_ACC_RDONLY, H5P_DEFAULT);
    if (f < 0) return -1;
    if (H5Aexists_by_name(f, group, name, H5P_DEFAULT) > 0) {
        hid_t a = H5Aopen_by_name(f, group, name, H5P_DEFAULT, H5P_DEFAULT), mt = h5log_vlen_str_type();
        char *v = NULL;
        if (a >= 0 && mt >= 0 && H5Aread(a, mt, &v) >= 0 && v) snprintf(buf, n, "%s", v), rc = 0;
        if (v) H5free_memory(v);
        if (mt >= 0) H5Tclose(mt);
        if (a >= 0) H5Aclose(a);
    }
    H5Fclose(f);
    return rc;
}

/* Root string attribute `name` of file into buf: 0, or -1 where absent. */
static int read_attr_str(const char *file, const char *name, char *buf, size_t n) {
    return read_group_attr_str(file, "/", name, buf, n);
}

/* Root int64 attribute `name` of file; -1 where absent. */
static int64_t read_attr_i64(const char *file, const char *name) {
    int64_t v = -1;
    hid_t f = H5Fopen(file, H5F_ACC_RDONLY, H5P_DEFAULT);
    if (f < 0) return -1;
    if (H5Aexists_by_name(f, "/", name, H5P_DEFAULT) > 0) {
        hid_t a = H5Aopen_by_name(f, "/", name, H5P_DEFAULT, H5P_DEFAULT);
        if (a < 0 || H5Aread(a, H5T_NATIVE_INT64, &v) < 0) v = -1;
        if (a >= 0) H5Aclose(a);
    }
    H5Fclose(f);
    return v;
}

/* Runs one point of an experiment; returns the output path (static buffer). */
static const char *run_exp(const char *prog, const char *model, const char *value, const char *extra) {
    static char out[1024];
    char cmd[4096], *log = NULL;
    snprintf(out, sizeof out, "%s/%s-%s.h5", test_tmpdir(), prog, value);
    /* the defaults window=32 max_windows=3 where extra does not set them (a setting
     * given twice is refused) */
    const char *ex = extra ? extra : "";
    snprintf(cmd, sizeof cmd, "%s --model %s --value %s --out %s %s %s %s", bin_path(prog), test_path(model),
             value, out, strstr(ex, "window=") == ex || strstr(ex, " window=") ? "" : "window=32",
             strstr(ex, "max_windows=") ? "" : "max_windows=3", ex);
    int rc = test_run(cmd, &log);
    CHECK_MSG(rc == 0, "%s exited %d: %s", cmd, rc, log);
    free(log);
    return out;
}

TEST(exp_each_writes_the_full_schema) {
    struct {
        const char *prog, *model, *value, *extra;
    } runs[] = {
        {"exp_threshold", LLAMA_DIR, "l2opt", NULL},
        {"exp_scale_dtype", BITNET_DIR, "fp8_e4m3", NULL},
        {"exp_group_size", LLAMA_DIR, "32", NULL},
        {"exp_kv_ternary", BITNET_DIR, "encoder", NULL},
        {"exp_throughput", LLAMA_DIR, "ternary",
         "batches='1 3' prompt_len=12 gen_len=3 warmup=0 repeats=1 max_windows=1"},
    };
    for (size_t i = 0; i < sizeof runs / sizeof runs[0]; i++) {
        /* under a sweep (sweep_point.sh --tag) every program records the point's digest */
        char tag[32], got[32] = "";
        snprintf(tag, sizeof tag, "digest-%zu", i);
        setenv("TERNLAB_SWEEP_POINT", tag, 1);
        char omp_was[32] = "";
        const int last = i + 1 == sizeof runs / sizeof runs[0];
        if (last && getenv("OMP_NUM_THREADS")) snprintf(omp_was, sizeof omp_was, "%s", getenv("OMP_NUM_THREADS"));
        if (last) setenv("OMP_NUM_THREADS", "1", 1);
        const char *f = run_exp(runs[i].prog, runs[i].model, runs[i].value, runs[i].extra);
        if (last && omp_was[0]) setenv("OMP_NUM_THREADS", omp_was, 1);
        else if (last) unsetenv("OMP_NUM_THREADS");
        unsetenv("TERNLAB_SWEEP_POINT");
        CHECK_MSG(read_attr_str(f, "sweep_point", got, sizeof got) == 0 && !strcmp(got, tag), "%s: sweep_point '%s'",
                  f, got);
        /* how the KV pages held the rows: ternary on the CPU under a policy, else f32 */
        char pages[96] = "";
        const int tern_kv = !strcmp(runs[i].prog, "exp_kv_ternary");
        CHECK_MSG(read_group_attr_str(f, "/kv", "pages", pages, sizeof pages) == 0 &&
                      !strcmp(pages, tern_kv ? "ternary pages (codes + f16 scales)" : "f32"),
                  "%s: /kv pages '%s'", f, pages);
        CHECK_MSG(h5log_verify_schema(f) == 0, "%s: %s", f, err_msg());
        double ppl = read_scalar(f, "/metrics/ppl"), ref = read_scalar(f, "/metrics/ppl_ref");
        CHECK_MSG(isfinite(ppl) && ppl > 1 && isfinite(ref) && ref > 1, "%s: ppl %g ref %g", f, ppl, ref);
        /* scored tokens: 3 windows of 32 -> 31 each, or 16 each under the split protocol */
        int64_t want = !strcmp(runs[i].prog, "exp_kv_ternary") ? 3 * 16
                     : !strcmp(runs[i].prog, "exp_throughput") ? 31 : 3 * 31;
        CHECK_MSG(h5_dataset_len(f, "/per_token/kl") == want, "%s: %lld scored", f,
                  (long long)h5_dataset_len(f, "/per_token/kl"));
        CHECK(h5_dataset_len(f, "/weights/name") == 28);
        /* the machine's CPU and BLAS kernels (dense results round differently between them) */
        char cpu[256], core[256];
        CHECK_MSG(read_attr_str(f, "cpu", cpu, sizeof cpu) == 0 && strcmp(cpu, cpu_model_report()) == 0,
                  "%s: cpu '%s', want '%s'", f, cpu, cpu_model_report());
        CHECK_MSG(read_attr_str(f, "blas_core", core, sizeof core) == 0 && core[0], "%s: blas_core '%s'", f, core);
        /* and the CPU threads it ran with (OMP_NUM_THREADS=1 for the last) */
        const int64_t want_thr = last ? 1 : omp_get_max_threads();
        CHECK_MSG(read_attr_i64(f, "threads") == want_thr, "%s: threads %lld, want %lld", f,
                  (long long)read_attr_i64(f, "threads"), (long long)want_thr);
        if (!strcmp(runs[i].prog, "exp_throughput")) {
            CHECK(h5_dataset_len(f, "/throughput/decode_tok_s") == 2);
            CHECK(read_scalar(f, "/kv/bytes_per_token") == 4096.0);
            /* the step percentiles are of the same steps: of gen_len = 3 steps (one
             * repeat) p50 is the middle one and p95 = p99 the slowest, bit for bit */
            double q50[2], q95[2], q99[2];
            CHECK(h5_read_f64s(f, "/throughput/latency_ms_p50", q50, 2) == 0 &&
                  h5_read_f64s(f, "/throughput/latency_ms_p95", q95, 2) == 0 &&
                  h5_read_f64s(f, "/throughput/latency_ms_p99", q99, 2) == 0);
            for (int b = 0; b < 2; b++)
                CHECK_MSG(q50[b] > 0 && q50[b] <= q95[b] && q95[b] == q99[b], "batch row %d: p50 %g p95 %g p99 %g",
                          b, q50[b], q95[b], q99[b]);
        }
    }
}

/* The reference is computed once per (model, tokens, windows, protocol,
 * program, BLAS kernels) and read back after that: a second point gets the
 * same reference bits, from RESULTS/cache (a sweep's --out two folders down),
 * else from a cache beside --out (never a folder above it, e.g. /cache). */
TEST(exp_reference_cache_hits) {
    const char *dir = test_tmpdir();
    char cmd[4096], *log = NULL, a[800], b[800], c[800];
    snprintf(a, sizeof a, "%s/exp-threshold/p1.h5", dir);
    snprintf(b, sizeof b, "%s/exp-threshold/p2.h5", dir);
    snprintf(c, sizeof c, "%s/flat.h5", dir);
    const char *outs[3] = {a, b, c};
    for (int i = 0; i < 3; i++) {
        snprintf(cmd, sizeof cmd, "mkdir -p '%s/exp-threshold' && %s --model %s --value twn --out %s window=32 "
                 "max_windows=2 2>&1", dir, bin_path("exp_threshold"), test_path(LLAMA_DIR), outs[i]);
        const int rc = test_run(cmd, &log);
        CHECK_MSG(rc == 0, "%s: %s", cmd, log);
        /* (flat.h5's folder is the sweep layout's RESULTS: the same cache) */
        const int cached = strstr(log, "reference: cached") != NULL;
        CHECK_MSG(cached == (i >= 1), "run %d: %s", i, log);
        if (i >= 1) {
            char want[900];
            snprintf(want, sizeof want, "%s/cache/ref-", dir);
            CHECK_MSG(strstr(log, want) != NULL, "the cache is not %s/cache: %s", dir, log);
        }
        free(log);
    }
    CHECK(read_scalar(a, "/metrics/ppl_ref") == read_scalar(b, "/metrics/ppl_ref"));
    CHECK(read_scalar(a, "/metrics/kl_mean") == read_scalar(b, "/metrics/kl_mean"));
    snprintf(cmd, sizeof cmd, "ls '%s'/cache/ref-*.h5 | wc -l", dir); /* flat.h5: dir/cache too */
    CHECK(test_run(cmd, &log) == 0 && atoi(log) == 1);
    free(log);
}

/* Values a user could type wrong, each a clear error with a non-zero exit
 * (an adversarial review found these accepted, clamped or crashing). */
TEST(cli_bad_values_are_clear) {
    const char *dir = test_tmpdir();
    char f[800], g[800];
    snprintf(f, sizeof f, "%s", run_exp("exp_kv_ternary", LLAMA_DIR, "none", NULL));
    snprintf(g, sizeof g, "%s/array_complete.h5", dir);
    struct {
        const char *cmd, *want;
        int rc;
    } cases[] = {
        /* a run file whose 'complete' is an array: read into one value (stack overflow), exit 0 */
        {"cp '%F' '%G' && /usr/bin/python3 -c \"import h5py, numpy; f = h5py.File('%G', 'r+'); "
         "del f.attrs['complete']; f.attrs['complete'] = numpy.array([1, 0, 0, 0]); f.close()\" && "
         "%B/ternlab verify '%G'", "not a single integer", 1},
        {"%B/ternlab logits --model %L --tokens %T --window 256 --windows 0:9223372036854775807 --out %D/x.f32",
         "windows", 1},
        {"%B/exp_throughput --model %L --value ternary --out %D/t.h5 prompt_len=0", "prompt_len = 0", 1},
        {"%B/exp_throughput --model %L --value ternary --out %D/t.h5 batches=2x", "'2x'", 1},
        {"%B/exp_kv_ternary --model %L --value none --out %D/t.h5 tp=abc", "not an integer", 1},
        {"%B/exp_kv_ternary --model %L --value none --out %D/t.h5 logit_rows=4294967295", "logit_rows", 1},
        {"%B/exp_kv_ternary --model %L --value none --out %D/t.h5 factor=", "key 'factor' has an empty value", 2},
        /* each program its one factor, its value in the one setting that carries it (exp-threshold
         * with kv={} had run the KV policy as its factor, the file saying factor=rule) */
        {"%B/exp_threshold --model %L --value all --out %D/t.h5 'kv={}'", "kv = {}: exp-threshold's value goes into "
         "quant as rule={} alone", 2},
        {"%B/exp_threshold --model %L --value f16 --out %D/t.h5 'quant=rule=twn,group=128,scale={}'",
         "goes into quant as rule={} alone", 2},
        {"%B/exp_threshold --model %L --value twn --out %D/t.h5 factor=scale", "exp-threshold varies rule alone", 2},
        {"%B/exp_group_size --model %L --value 64 --out %D/t.h5 'quant=rule={},group=64'",
         "goes into quant as group={} alone", 2},
        {"%B/exp_kv_ternary --model %L --value none --out %D/t.h5 factor=policy", "exp-kv-ternary varies kv alone", 2},
        {"%B/exp_kv_ternary --model %L --value all --out %D/t.h5 'kv=x{}'", "goes into kv as {} or {}@layers=a-b alone", 2},
        {"%B/exp_throughput --model %L --value ternary --out %D/t.h5 'quant=rule={}'",
         "exp-throughput reads its value itself", 2},
        {"%B/ternlab ppl --model %L --tokens %T --max-windows 1 --kv all@layers=0-9", "has 4 layers", 1},
        {"%B/ternlab ppl --model %L --tokens %T --max-windows 1 --quant rule=twn,layers=4", "past the model", 1},
        {"%B/ternlab generate --model %L --prompt 1,2,3", "--max-new", 2},
        /* logits' rows are laid out by the window: given, not defaulted (it had been 256, unsaid) */
        {"%B/ternlab logits --model %L --tokens %T --windows 0:1 --out %D/x.f32", "--window T is required", 2},
        {"%B/ternlab diff --model %L --tokens %T --a quant=rule=twn,quant=loaded --b quant=loaded",
         "given twice", 2},
        {"cp -r %L %D/lt && %B/ternlab quantize --model %D/lt --quant rule=twn --out %D/lt/", "itself", 2},
        /* (--quant applies to a .gguf as to a folder: checked alike) */
        {"%B/ternlab info --model %Q --quant rule=foo", "unknown rule 'foo'", 2},
        /* a malformed --quant or --prompt is a usage error, as a malformed --kv (they had exited 1) */
        {"%B/ternlab ppl --model %L --tokens %T --quant rule=foo", "--quant", 2},
        {"%B/ternlab generate --model %L --prompt 1,,2 --max-new 2", "comma-separated integers", 2},
        {"%B/ternlab generate --model %L --prompt 2048 --max-new 2", "outside the vocabulary", 1},
        /* a FIFO is refused, not waited on (open had blocked for a writer) */
        {"rm -f %D/fifo && mkfifo %D/fifo && timeout 60 %B/ternlab ppl --model %L --tokens %D/fifo",
         "not a regular file", 1},
        {"rm -rf %D/ff && mkdir %D/ff && cp %L/config.json %D/ff/ && mkfifo %D/ff/model.safetensors && "
         "timeout 60 %B/ternlab info --model %D/ff", "not a regular file", 1},
        /* a file that is no model folder, and a config.json that is a folder, said so */
        {"cp %Q %D/gguf.txt && %B/ternlab info --model %D/gguf.txt", "not a model folder", 1},
        {"mkdir -p %D/cj/config.json && %B/ternlab info --model %D/cj", "config.json: not a regular file (a directory)", 1},
        /* the experiment programs refuse an option or a setting given twice (the last had won) */
        {"%B/exp_threshold --model %L --value twn --value std --out %D/t.h5", "--value is given more than once", 2},
        {"%B/exp_threshold --model %L --value twn --out %D/t.h5 max_windows=1 ' max_windows = 2'",
         "set one key twice", 2},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        /* %B build dir, %L llama-tiny, %T tokens, %Q a GGUF, %D tmp dir, %F / %G run files */
        char cmd[4096], *o = cmd, *end = cmd + sizeof cmd - 8;
        const char *bd = getenv("TERNLAB_BUILD");
        for (const char *c = cases[i].cmd; *c && o < end; c++) {
            const char *sub = NULL;
            if (c[0] == '%' && c[1]) {
                switch (c[1]) {
                case 'B': sub = bd && *bd ? bd : "build"; break;
                case 'Q': sub = test_path("data/gguf/llama-tiny-bf16.gguf"); break;
                case 'L': sub = test_path(LLAMA_DIR); break;
                case 'T': sub = test_path(TOKENS_FILE); break;
                case 'D': sub = dir; break;
                case 'F': sub = f; break;
                case 'G': sub = g; break;
                }
            }
            if (sub) {
                o += snprintf(o, (size_t)(end - o), "%s", sub);
                c++;
            } else {
                *o++ = *c;
            }
        }
        snprintf(o, (size_t)(end - o + 8), " 2>&1");
        char *out = NULL;
        const int rc = test_run(cmd, &out);
        CHECK_MSG(rc == cases[i].rc && out && strstr(out, cases[i].want), "case %zu: rc %d (want %d, \"%s\"): %s\n%s",
                  i, rc, cases[i].rc, cases[i].want, cmd, out ? out : "");
        free(out);
    }
}

/* The control point of each factor reproduces the reference exactly. */
TEST(exp_control_points_equal_reference) {
    const char *f = run_exp("exp_kv_ternary", LLAMA_DIR, "none", NULL);
    CHECK(read_scalar(f, "/metrics/ppl") == read_scalar(f, "/metrics/ppl_ref"));
    CHECK(read_scalar(f, "/metrics/kl_mean") < 1e-9);
    CHECK(read_scalar(f, "/metrics/top1_agree") == 1.0);
    /* 4 layers x 4 KV heads x 32 dims x (K, V) x 4 bytes; the cache allocates
     * just that per token slot */
    CHECK(read_scalar(f, "/kv/bytes_per_token") == 4096.0);
    CHECK(h5_attr_f64(f, "/kv", "alloc_bytes_per_token") == 4096.0);
    f = run_exp("exp_kv_ternary", LLAMA_DIR, "all", NULL);
    CHECK(read_scalar(f, "/metrics/kl_mean") > 1e-3);
    /* per layer and head: 2 x 8 code bytes + (2 + 1) f16 scales x 2 bytes = 22;
     * allocated: no f32 page, and a format byte per layer */
    CHECK(read_scalar(f, "/kv/bytes_per_token") == 4 * 4 * 22.0);
    CHECK(h5_attr_f64(f, "/kv", "alloc_bytes_per_token") == 4 * 4 * 22.0 + 4);
    f = run_exp("exp_kv_ternary", LLAMA_DIR, "all@layers=1-2", NULL);
    CHECK(read_scalar(f, "/kv/bytes_per_token") == 2 * 4 * 256.0 + 2 * 4 * 22.0);
    /* allocated: f32 pages in layers 0 and 3, the ternary pools span every layer */
    CHECK(h5_attr_f64(f, "/kv", "alloc_bytes_per_token") == 2 * 4 * 256.0 + 4 * 4 * 22.0 + 4);
    f = run_exp("exp_kv_ternary", LLAMA_DIR, "encoder", NULL);
    /* a slot may hold either kind: both pages in every layer */
    CHECK(h5_attr_f64(f, "/kv", "alloc_bytes_per_token") == 4096.0 + 4 * 4 * 22.0 + 4);
}

TEST(exp_bad_input_is_an_error) {
    char cmd[2048], *log = NULL;
    snprintf(cmd, sizeof cmd, "%s --model %s --value nosuchrule --out %s/x.h5 window=32 max_windows=1",
             bin_path("exp_threshold"), test_path(LLAMA_DIR), test_tmpdir());
    CHECK(test_run(cmd, &log) == 1 && strstr(log, "nosuchrule"));
    free(log);
    snprintf(cmd, sizeof cmd, "%s --model %s --value twn windw=3", bin_path("exp_threshold"), test_path(LLAMA_DIR));
    CHECK(test_run(cmd, &log) == 2 && strstr(log, "windw"));
    free(log);
    /* an override that replaces the setting carrying the value: the point would
     * be labelled twn and run absmean (it had, with exit 0); the same for kv */
    snprintf(cmd, sizeof cmd, "%s --model %s --value twn --out %s/y.h5 window=32 max_windows=1 quant=rule=absmean",
             bin_path("exp_threshold"), test_path(LLAMA_DIR), test_tmpdir());
    CHECK_MSG(test_run(cmd, &log) == 1 && strstr(log, "no setting takes the value 'twn'"), "%s", log ? log : "");
    free(log);
    snprintf(cmd, sizeof cmd, "%s --model %s --value all --out %s/z.h5 window=32 max_windows=1 kv=none",
             bin_path("exp_kv_ternary"), test_path(LLAMA_DIR), test_tmpdir());
    CHECK_MSG(test_run(cmd, &log) == 1 && strstr(log, "no setting takes the value 'all'"), "%s", log ? log : "");
    free(log);
    /* the layer range of SCHEMA's `kv = {}@layers=a-b` over the config's values: its
     * baseline point none@layers=a-b is none (it had been refused, failing the sweep's
     * --check and the point), recorded as none */
    snprintf(cmd, sizeof cmd,
             "%1$s --check 'kv={}@layers=0-1' && %1$s --model %2$s --value none --out %3$s/kvl.h5 window=32 "
             "max_windows=1 'kv={}@layers=0-1' 2>&1",
             bin_path("exp_kv_ternary"), test_path(LLAMA_DIR), test_tmpdir());
    CHECK_MSG(test_run(cmd, &log) == 0, "%s", log ? log : "");
    free(log);
    char kvl[600], pol[64] = "";
    snprintf(kvl, sizeof kvl, "%s/kvl.h5", test_tmpdir());
    CHECK_MSG(read_attr_str(kvl, "kv_policy", pol, sizeof pol) == 0 && strcmp(pol, "none") == 0, "kv_policy '%s'",
              pol);
    /* usage errors before any run (exit 2, nothing written): two models of one folder
     * name or two values of one file name would write one file, the later over the
     * earlier (it had, exit 0); an empty path option or setting */
    const char *dir = test_tmpdir();
    snprintf(cmd, sizeof cmd, "mkdir -p %s/other && cp -r %s %s/other/", dir, test_path(LLAMA_DIR), dir);
    REQUIRE(test_run(cmd, NULL) == 0);
    struct {
        const char *fmt, *want;
    } usage[] = {
        /* (%1$s the program, %2$s the tmp folder, %3$s llama-tiny) */
        {"%1$s --results %2$s/u1 --value none max_windows=1 'models=%3$s %2$s/other/llama-tiny'", "would write one file"},
        {"%1$s --results %2$s/u2 --model %3$s 'values=none none'", "would write one file"},
        {"%1$s --results '' --model %3$s --value none%2$.0s", "--results has an empty value"},
        {"%1$s --results %2$s/u3 --model '' --value none%3$.0s", "--model has an empty value"},
        {"%1$s --results %2$s/u4 --model %3$s --value none quant=", "'quant' has an empty value"},
        /* a config key no program reads (a typo had run every point under the default:
         * kv_policy = {} evaluated none under the labels of all four policies) */
        {"sed 's/^kv /kv_policy /' configs/exp-kv-ternary.conf > %2$s/typo.conf && "
         "%1$s --config %2$s/typo.conf --results %2$s/u5 --model %3$s --value all",
         "typo.conf:15: unknown key 'kv_policy'"},
        {"cp configs/exp-kv-ternary.conf %2$s/thr.conf && echo 'prompt_len = 64' >> %2$s/thr.conf && "
         "%1$s --config %2$s/thr.conf --results %2$s/u6 --model %3$s --value all", "unknown key 'prompt_len'"},
        /* a capacity budget that does not parse: before any run (it had failed the run
         * file's write after the whole evaluation) */
        {"%1$s --results %2$s/u7 --model %3$s --value all 'mem=24 lots'", "mem: memory size '24 lots'"},
    };
    for (size_t i = 0; i < sizeof usage / sizeof usage[0]; i++) {
        snprintf(cmd, sizeof cmd, usage[i].fmt, bin_path("exp_kv_ternary"), dir, test_path(LLAMA_DIR));
        const int rc = test_run(cmd, &log);
        CHECK_MSG(rc == 2 && log && strstr(log, usage[i].want), "%s: rc %d: %s", cmd, rc, log ? log : "");
        free(log);
        log = NULL;
    }
    snprintf(cmd, sizeof cmd,
             "test ! -e %s/u1 && test ! -e %s/u2/exp-kv-ternary && test ! -e %s/u5 && test ! -e %s/u6 && test ! -e %s/u7",
             dir, dir, dir, dir, dir);
    CHECK(test_run(cmd, NULL) == 0);
}

/* The programs' bounds are the ones they say: window 2 and 3 run (the config check
 * and ppl --window take 2; the run had refused below 4 with "window 2 out of range"),
 * with ppl's own perplexity on the same windows; exp-throughput's gen_len 1 on the CPU
 * (its request latencies need two output tokens) is refused before any work (after
 * the reference and the timed runs, it had been); --model . inside the checkpoint
 * names the point and the run file's model after the folder (a hidden ".__all.h5"
 * whose model "." failed verify --expect model/=), as does ppl --out's run file. */
TEST(exp_bounds_and_model_dot) {
    const char *dir = test_tmpdir();
    static char cmd[12 * PATH_MAX];
    char f[700], *log = NULL;
    for (int w = 2; w <= 3; w++) {
        snprintf(f, sizeof f, "%s/w%d.h5", dir, w);
        snprintf(cmd, sizeof cmd, "%s --model %s --value all --out %s window=%d max_windows=3 2>&1 && %s ppl --model %s "
                 "--tokens %s --window %d --max-windows 3 --kv all 2>/dev/null",
                 bin_path("exp_kv_ternary"), test_path(LLAMA_DIR), f, w, bin_path("ternlab"), test_path(LLAMA_DIR),
                 test_path(TOKENS_FILE), w);
        const int rc = test_run(cmd, &log);
        double ppl_file = NAN;
        const char *line = log ? strstr(log, "\nppl ") : NULL;
        CHECK_MSG(rc == 0 && h5log_verify_schema(f) == 0 && h5_read_f64s(f, "/metrics/ppl", &ppl_file, 1) == 0 &&
                      line && fabs(strtod(line + 5, NULL) - ppl_file) <= 1e-4 * ppl_file,
                  "window %d: rc %d, file ppl %g:\n%s", w, rc, ppl_file, log ? log : "");
        free(log);
        log = NULL;
    }
    snprintf(f, sizeof f, "%s/g1.h5", dir);
    snprintf(cmd, sizeof cmd, "%s --model %s --value ternary --out %s gen_len=1 2>&1", bin_path("exp_throughput"),
             test_path(LLAMA_DIR), f);
    int rc = test_run(cmd, &log);
    CHECK_MSG(rc == 1 && log && strstr(log, "gen_len = 1: expected 2 .. 65536") && !strstr(log, "reference") &&
                  access(f, F_OK) != 0,
              "gen_len=1: rc %d:\n%s", rc, log ? log : "");
    free(log);
    log = NULL;
    char m[PATH_MAX], t[PATH_MAX], ex[PATH_MAX], tl[PATH_MAX], cf[PATH_MAX];
    REQUIRE(realpath(test_path(LLAMA_DIR), m) && realpath(test_path(TOKENS_FILE), t) &&
            realpath(bin_path("exp_kv_ternary"), ex) && realpath(bin_path("ternlab"), tl) &&
            realpath(test_path("configs/exp-kv-ternary.conf"), cf));
    snprintf(cmd, sizeof cmd, "cd %s && %s --config %s --model . --value all --results %s/dot tokens=%s window=16 "
             "max_windows=1 2>&1 && ls -A %s/dot/exp-kv-ternary && %s verify --expect model/=llama-tiny "
             "%s/dot/exp-kv-ternary/llama-tiny__all.h5 && %s ppl --model . --tokens %s --window 16 --max-windows 1 "
             "--out %s/pdot.h5 && %s verify --expect model/=llama-tiny %s/pdot.h5",
             m, ex, cf, dir, t, dir, tl, dir, tl, t, dir, tl, dir);
    rc = test_run(cmd, &log);
    CHECK_MSG(rc == 0 && log && strstr(log, "\nllama-tiny__all.h5\n") && !strstr(log, ".__all"), "--model .: rc %d:\n%s",
              rc, log ? log : "");
    free(log);
}

/* A program stopped by TERM (a sweep stopping a point, scancel) while it
 * writes removes its temporaries: the reference cache's under RESULTS/cache
 * had stayed for good (71 MB in a sweep audit; sweep_point.sh removes only
 * the run file's), and ends by the signal (143).  TERM is sent as soon as a
 * result's temporary appears (the model files' hash cache, written first,
 * lives a few microseconds: a run that saw only it had nothing to test). */
TEST(exp_term_removes_its_temporaries) {
    char cmd[3000], *out = NULL;
    const char *dir = test_tmpdir();
    snprintf(cmd, sizeof cmd,
             "r='%s/term'; mkdir -p \"$r\"; %s --model %s --value twn --results \"$r\" max_windows=40 >/dev/null 2>&1 & "
             "p=$!; i=0; t() { find \"$r\" -name '*.tmp.*' ! -name 'filehash-*'; }; "
             "while [ $i -lt 600 ] && [ -z \"$(t | head -1)\" ]; do "
             "sleep 0.02; i=$((i+1)); done; seen=$(t | wc -l); kill -TERM $p; wait $p; "
             "rc=$?; echo \"seen $seen rc $rc left $(find \"$r\" -name '*.tmp.*' | wc -l)\"",
             dir, bin_path("exp_threshold"), test_path(LLAMA_DIR));
    REQUIRE(test_run(cmd, &out) == 0);
    CHECK_MSG(out && strstr(out, "seen 1 rc 143 left 0"), "%s", out ? out : "");
    free(out);
}

/* Each program's usage names the program as built (it had said build/exp_scale-dtype
 * for build/exp_scale_dtype), and its stdout is checked at exit: output that cannot
 * be written (a full disk) is a failed run, exit 1 with the reason (it had exited 0). */
TEST(exp_usage_names_the_program_and_stdout_is_checked) {
    const char *progs[] = {"exp_threshold", "exp_scale_dtype", "exp_group_size", "exp_kv_ternary",
                           "exp_throughput"};
    for (size_t i = 0; i < sizeof progs / sizeof progs[0]; i++) {
        char cmd[2048], want[64], *out = NULL;
        snprintf(cmd, sizeof cmd, "%s --help", bin_path(progs[i]));
        CHECK(test_run(cmd, &out) == 0);
        snprintf(want, sizeof want, "usage: build/%s ", progs[i]);
        CHECK_MSG(out && strstr(out, want), "%s --help: %s", progs[i], out ? out : "");
        free(out);
        out = NULL;
        snprintf(cmd, sizeof cmd, "{ %s --help > /dev/full; }", bin_path(progs[i]));
        const int rc = test_run(cmd, &out);
        CHECK_MSG(rc == 1 && out && strstr(out, "cannot write the output to standard output"), "%s: rc %d: %s",
                  progs[i], rc, out ? out : "");
        free(out);
    }
    /* a run's summary line lost the same way fails the run */
    char cmd[2048], *out = NULL;
    snprintf(cmd, sizeof cmd, "{ %s --model %s --value twn --out %s/full.h5 window=32 max_windows=1 > /dev/full; }",
             bin_path("exp_threshold"), test_path(LLAMA_DIR), test_tmpdir());
    const int rc = test_run(cmd, &out);
    CHECK_MSG(rc == 1 && out && strstr(out, "cannot write"), "rc %d: %s", rc, out ? out : "");
    free(out);
}

/* --check: every value's settings, no run; the sweep runs it before any point, so that a
 * setting the program refuses fails once, up front (a `factor=` override had failed every
 * point in turn, each after its start). */
TEST(exp_check_and_the_sweep_refuse_settings_up_front) {
    char cmd[4096], *out = NULL;
    const char *d = test_tmpdir();
    snprintf(cmd, sizeof cmd, "%s --check window=32 2>&1", bin_path("exp_threshold"));
    int rc = test_run(cmd, &out);
    CHECK_MSG(rc == 0 && (!out || !*out), "rc %d: %s", rc, out ? out : "");
    free(out);
    snprintf(cmd, sizeof cmd, "%s --check 'values=twn bogus std' 2>&1", bin_path("exp_threshold"));
    rc = test_run(cmd, &out);
    CHECK_MSG(rc == 2 && strstr(out, "rule=bogus: quant: ") && strstr(out, "unknown rule 'bogus'") &&
                  !strstr(out, "rule=twn") && !strstr(out, "rule=std"),
              "rc %d: %s", rc, out);
    free(out);
    snprintf(cmd, sizeof cmd, "%s --check 'batches=1 99999' 2>&1", bin_path("exp_throughput"));
    rc = test_run(cmd, &out);
    CHECK_MSG(rc == 2 && strstr(out, "batches: '99999'"), "rc %d: %s", rc, out);
    free(out);
    snprintf(cmd, sizeof cmd, "%s --check window=abc 2>&1", bin_path("exp_kv_ternary"));
    rc = test_run(cmd, &out);
    CHECK_MSG(rc == 2 && strstr(out, "window"), "rc %d: %s", rc, out);
    free(out);
    snprintf(cmd, sizeof cmd, "bash scripts/sweep.sh exp-kv-ternary --results %s/chk --model %s window=32 "
                              "max_windows=1 factor=rule 2>&1", d, test_path(LLAMA_DIR));
    rc = test_run(cmd, &out);
    const char *first = out ? strstr(out, "varies kv alone") : NULL;
    CHECK_MSG(rc == 2 && first && !strstr(first + 1, "varies kv alone") && strstr(out, "no point ran"), "rc %d: %s",
              rc, out ? out : "");
    free(out);
    char jl[1024];
    snprintf(jl, sizeof jl, "%s/chk/exp-kv-ternary/joblog", d);
    CHECK_MSG(access(jl, F_OK) != 0, "%s exists: the sweep started its points", jl);
}

/* A real sweep: a truncated run file is detected and rerun; complete ones are kept. */
TEST(exp_sweep_reruns_truncated_file) {
    char cmd[4096], *log = NULL;
    const char *d = test_tmpdir();
    snprintf(cmd, sizeof cmd, "bash scripts/sweep.sh exp-kv-ternary --results %s/res --model %s "
                              "window=32 max_windows=2", d, test_path(LLAMA_DIR));
    REQUIRE(test_run(cmd, &log) == 0);
    free(log);
    char f[1024], g[1024];
    snprintf(f, sizeof f, "%s/res/exp-kv-ternary/llama-tiny__decoder.h5", d);
    snprintf(g, sizeof g, "%s/res/exp-kv-ternary/llama-tiny__none.h5", d);
    CHECK(h5log_verify_schema(f) == 0 && h5log_verify_schema(g) == 0);
    char trunc[4096];
    snprintf(trunc, sizeof trunc, "truncate -s 3000 %s && stat -c %%Y.%%i %s", f, g);
    char *before = NULL, *after = NULL;
    REQUIRE(test_run(trunc, &before) == 0);
    CHECK(h5log_verify_schema(f) != 0);
    REQUIRE(test_run(cmd, &log) == 0);
    CHECK_MSG(strstr(log, "llama-tiny__decoder.h5") != NULL, "sweep log: %s", log);
    free(log);
    CHECK(h5log_verify_schema(f) == 0);
    snprintf(trunc, sizeof trunc, "stat -c %%Y.%%i %s", g);
    REQUIRE(test_run(trunc, &after) == 0);
    CHECK_MSG(strstr(before, after) != NULL, "complete file was rewritten");
    free(before);
    free(after);
}

TEST(kv_ternary_row_by_hand) {
    /* V row of 8: mean|x| = (0.9+0.1+0.5+0.2+0.6+0.0+1.2+0.5)/8 = 0.5; x/0.5 rounds to
     * 2,0,-1,0,1,0,-2,1 -> clamp 1,0,-1,0,1,0,-1,1; scale 0.5 (exact in f16) */
    float x[8] = {0.9f, 0.1f, -0.5f, 0.2f, 0.6f, 0.0f, -1.2f, 0.5f}, y[8];
    uint8_t codes[2];
    uint16_t sc[1];
    kvt_quant_row(x, 8, 0, codes, sc);
    kvt_dequant_row(codes, sc, 8, 0, y);
    float want[8] = {0.5f, 0, -0.5f, 0, 0.5f, 0, -0.5f, 0.5f};
    for (int i = 0; i < 8; i++) CHECK_MSG(y[i] == want[i], "v[%d] = %g, want %g", i, y[i], want[i]);
    /* K row of 32: two groups of 16 with their own scales */
    float k[32], ky[32];
    for (int i = 0; i < 32; i++) k[i] = i < 16 ? (i % 2 ? 1.0f : -1.0f) : (i % 2 ? 4.0f : 0.0f);
    uint8_t kc[8];
    uint16_t ks[2];
    kvt_quant_row(k, 32, 1, kc, ks);
    kvt_dequant_row(kc, ks, 32, 1, ky);
    /* group 0: mean 1 -> +-1; group 1: mean 2, x/2 = 2 or 0 -> 1 or 0, scale 2 */
    for (int i = 0; i < 32; i++) {
        float w = i < 16 ? (i % 2 ? 1.0f : -1.0f) : (i % 2 ? 2.0f : 0.0f);
        CHECK_MSG(ky[i] == w, "k[%d] = %g, want %g", i, ky[i], w);
    }
    CHECK(kvt_bytes_per_token_head(32, 1) == 22 && kvt_bytes_per_token_head(32, 0) == 256);
}

TEST(kv_policy_parse_and_select) {
    KvPolicy p;
    REQUIRE(kv_policy_parse("encoder@layers=1-2", &p) == 0);
    CHECK(kv_policy_ternary(&p, 1, 0) && !kv_policy_ternary(&p, 1, 1) && !kv_policy_ternary(&p, 0, 0));
    REQUIRE(kv_policy_parse("decoder", &p) == 0);
    CHECK(kv_policy_ternary(&p, 3, 1) && !kv_policy_ternary(&p, 3, 0));
    char buf[64];
    REQUIRE(kv_policy_parse("all@layers=2", &p) == 0);
    kv_policy_format(&p, buf, sizeof buf);
    CHECK(strcmp(buf, "all@layers=2") == 0);
    CHECK(kv_policy_parse("sometimes", &p) != 0 && strstr(err_msg(), "encoder"));
    CHECK(kv_policy_parse("all@layers=3-1", &p) != 0);
    CHECK(kv_policy_parse("all@heads=1", &p) != 0);
    /* numbers as the QuantSpec takes them, digits only (" 1", "+1", "-0" had been taken
     * and recorded as another string: all@layers=1, all@layers=0) */
    const char *bad[] = {"all@layers= 1", "all@layers=+1", "all@layers=-0", "all@layers=1-+2", "all@layers=1- 2",
                         "all@layers=-0--0", "all@layers=", "all@layers=1-", "all@layers=1-2x"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        CHECK_MSG(kv_policy_parse(bad[i], &p) != 0 && strstr(err_msg(), "bad layer range"), "'%s' taken", bad[i]);
    REQUIRE(kv_policy_parse("all@layers=0-07", &p) == 0 && p.layer_lo == 0 && p.layer_hi == 7);
    /* none over a layer range is none, recorded as none (exp-kv-ternary's kv = {}@layers=a-b
     * at its baseline value; refused, it had failed the sweep's --check); the range's syntax is
     * still checked */
    REQUIRE(kv_policy_parse("none@layers=0-1", &p) == 0 && p.kind == KVP_NONE && p.layer_lo < 0);
    kv_policy_format(&p, buf, sizeof buf);
    CHECK(strcmp(buf, "none") == 0);
    CHECK(kv_policy_parse("none@layers=1-0", &p) != 0 && strstr(err_msg(), "bad layer range"));
}

/* ternlab quantize writes a checkpoint that loads back to identical logits. */
TEST(quantize_round_trip_identical_logits) {
    const char *specs[] = {"rule=twn,group=64,scale=fp8_e4m3,layers=mlp",
                           "rule=l2opt,group=row,scale=bf16,act=int8"};
    const char *srcs[] = {LLAMA_DIR, BITNET_DIR};
    for (int i = 0; i < 2; i++) {
        char cmd[8192], *log = NULL, dir[512], a[600], b[600];
        snprintf(dir, sizeof dir, "%s/q%d", test_tmpdir(), i);
        snprintf(cmd, sizeof cmd, "%s quantize --model %s --quant %s --out %s", bin_path("ternlab"), test_path(srcs[i]),
                 specs[i], dir);
        REQUIRE(test_run(cmd, &log) == 0);
        free(log);
        snprintf(a, sizeof a, "%s/a.f32", test_tmpdir());
        snprintf(b, sizeof b, "%s/b.f32", test_tmpdir());
        snprintf(cmd, sizeof cmd, "%s logits --model %s --quant %s --tokens %s --window 64 "
                 "--windows 0:2 --out %s && %s logits --model %s --tokens %s --window 64 "
                 "--windows 0:2 --out %s && cmp %s %s", bin_path("ternlab"), test_path(srcs[i]), specs[i],
                 test_path(TOKENS_FILE), a, bin_path("ternlab"), dir, test_path(TOKENS_FILE), b, a, b);
        CHECK_MSG(test_run(cmd, &log) == 0, "%s: %s", specs[i], log);
        free(log);
        /* the header padded to 8 bytes, as the format's writers pad it (ternlab's own reader
         * takes any length; other readers align the data on it) */
        char st[700];
        snprintf(st, sizeof st, "%s/model.safetensors", dir);
        FILE *f = fopen(st, "rb");
        unsigned char len[8] = {0};
        REQUIRE(f && fread(len, 1, 8, f) == 8);
        fclose(f);
        uint64_t hl = 0;
        for (int k = 7; k >= 0; k--) hl = hl << 8 | len[k];
        CHECK_MSG(hl % 8 == 0, "%s: header of %llu bytes", specs[i], (unsigned long long)hl);
    }
    /* a native ternary model with only some layers re-ternarised would mix formats */
    char cmd[2048], *log = NULL;
    snprintf(cmd, sizeof cmd, "%s quantize --model %s --quant rule=twn,group=64,layers=mlp --out %s/q9",
             bin_path("ternlab"), test_path(BITNET_DIR), test_tmpdir());
    CHECK(test_run(cmd, &log) == 1 && strstr(log, "layers=all"));
    free(log);
}

/* Ternary KV policies shrink the pool that is really allocated: `all` keeps no
 * f32 page, a layer range keeps f32 pages only outside it. */
TEST(kv_ternary_pool_allocation) {
    KvCache kv;
    REQUIRE(kv_init(&kv, 4, 4, 32, 16, 10) == 0);
    size_t slots = 16 * 10;
    CHECK(kv_alloc_bytes(&kv) == slots * 4096); /* 4 layers x 4 heads x 32 x (K,V) x 4 B */
    KvPolicy p;
    REQUIRE(kv_policy_parse("all", &p) == 0 && kv_set_policy(&kv, &p) == 0);
    /* per layer: 1 format byte + 4 heads x (2 x 8 code bytes + 3 f16 scales) = 1 + 4 x 22 */
    CHECK_MSG(kv_alloc_bytes(&kv) == slots * 4 * 89, "all: %zu", kv_alloc_bytes(&kv));
    REQUIRE(kv_policy_parse("all@layers=1-2", &p) == 0 && kv_set_policy(&kv, &p) == 0);
    CHECK(kv_alloc_bytes(&kv) == slots * (2 * 1024 + 4 * 89));
    REQUIRE(kv_policy_parse("encoder", &p) == 0 && kv_set_policy(&kv, &p) == 0);
    CHECK(kv_alloc_bytes(&kv) == slots * (4096 + 4 * 89)); /* mixed: both kinds of page */
    kv_free(&kv);
}

/* ternlab ppl --kv POLICY uses the split-window protocol; --out writes a run
 * file; the last stdout line keeps its contract. */
/* A run file under an act-only --quant says what ran: bitnet-tiny's own weights ("native
 * ternary", the spec as given; it had said "ternarised"), llama-tiny's ternarised with the
 * defaults (the full spec: "act=int8" alone had hidden rule, group and scale). */
TEST(ppl_run_file_of_an_act_only_spec) {
    const struct {
        const char *model, *spec, *weights;
    } cases[] = {{BITNET_DIR, "act=f32", "native ternary"},
                 {LLAMA_DIR, "rule=absmean,group=tensor,scale=f32,act=int8,layers=all", "ternarised"}};
    for (int i = 0; i < 2; i++) {
        char cmd[4096], *log = NULL, out[600], spec[256] = "", w[64] = "";
        snprintf(out, sizeof out, "%s/act%d.h5", test_tmpdir(), i);
        snprintf(cmd, sizeof cmd, "%s ppl --model %s --tokens %s --window 32 --max-windows 1 --quant %s --out %s 2>&1",
                 bin_path("ternlab"), test_path(cases[i].model), test_path(TOKENS_FILE), i ? "act=int8" : "act=f32",
                 out);
        CHECK_MSG(test_run(cmd, &log) == 0, "%s", log ? log : "");
        free(log);
        CHECK(h5log_root_attr_str(out, "quant_spec", spec, sizeof spec) == 0 &&
              h5log_root_attr_str(out, "weights", w, sizeof w) == 0);
        CHECK_MSG(strcmp(spec, cases[i].spec) == 0 && strcmp(w, cases[i].weights) == 0, "%s: quant_spec '%s', weights '%s'",
                  cases[i].model, spec, w);
    }
}

TEST(ppl_cli_kv_policy_and_run_file) {
    char cmd[4096], *log = NULL, out[600];
    snprintf(out, sizeof out, "%s/ppl/run.h5", test_tmpdir());
    snprintf(cmd, sizeof cmd, "mkdir -p %s/ppl && %s ppl --model %s --tokens %s --window 64 --max-windows 3 "
             "--kv all --out %s 2>/dev/null | tail -n 1", test_tmpdir(), bin_path("ternlab"),
             test_path(LLAMA_DIR), test_path(TOKENS_FILE), out);
    REQUIRE(test_run(cmd, &log) == 0);
    double ppl = 0;
    long long w = 0, p = 0;
    CHECK_MSG(sscanf(log, "ppl %lf windows %lld predicted %lld", &ppl, &w, &p) == 3, "%s", log);
    CHECK(w == 3 && p == 3 * 32); /* split protocol: T - T/2 scored per window */
    free(log);
    CHECK_MSG(h5log_verify_schema(out) == 0, "%s", err_msg());
    CHECK(fabs(read_scalar(out, "/metrics/ppl") - ppl) <= 1e-5 * ppl);
    CHECK(read_scalar(out, "/kv/bytes_per_token") == 352.0);
    const double ref_all = read_scalar(out, "/metrics/ppl_ref");
    /* --kv none: the same protocol, the reference of --kv all's numbers (it had scored whole
     * windows, 3 x 63 positions, a ppl no policy's run compares with); no --kv: whole windows */
    char out2[600];
    snprintf(out2, sizeof out2, "%s/ppl/none.h5", test_tmpdir());
    for (int given = 1; given >= 0; given--) {
        snprintf(cmd, sizeof cmd, "%s ppl --model %s --tokens %s --window 64 --max-windows 3 %s --out %s "
                 "2>/dev/null | tail -n 1", bin_path("ternlab"), test_path(LLAMA_DIR), test_path(TOKENS_FILE),
                 given ? "--kv none" : "", out2);
        remove(out2);
        REQUIRE(test_run(cmd, &log) == 0);
        CHECK_MSG(sscanf(log, "ppl %lf windows %lld predicted %lld", &ppl, &w, &p) == 3, "%s", log);
        CHECK_MSG(w == 3 && p == (given ? 3 * 32 : 3 * 63), "--kv none given %d: %s", given, log);
        free(log);
        if (given) {
            CHECK_MSG(fabs(ppl - ref_all) <= 1e-5 * ref_all, "--kv none %.6f, --kv all's reference %.6f", ppl,
                      ref_all);
            CHECK(fabs(read_scalar(out2, "/metrics/ppl") - ref_all) <= 1e-5 * ref_all);
        }
    }
    snprintf(cmd, sizeof cmd, "%s logits --model %s --tokens %s --window 64 --windows 0:1 --kv all "
             "--out %s/l.f32", bin_path("ternlab"), test_path(LLAMA_DIR), test_path(TOKENS_FILE),
             test_tmpdir());
    CHECK(test_run(cmd, &log) == 2 && strstr(log, "full prefills"));
    free(log);
}

/* device=cuda: without a GPU a clear error (no file); with one, the KV
 * experiment's evaluated model (ternary KV pages on the GPU) and the throughput
 * experiment's engines run there and write the whole schema.  Every value times the CUDA
 * engine's bf16 form there (the dense baseline bf16 through cuBLAS, as
 * bench-e2e), f32 on the CPU: the /throughput attribute dtype says which. */
TEST(exp_device_cuda_runs_or_refuses) {
    char cmd[2048], *out = NULL;
    snprintf(cmd, sizeof cmd, "%s --model %s --value decoder device=cuda max_windows=1 --out %s/kvc.h5",
             bin_path("exp_kv_ternary"), test_path(LLAMA_DIR), test_tmpdir());
    int rc = test_run(cmd, &out);
    char f[1024];
    snprintf(f, sizeof f, "%s/kvc.h5", test_tmpdir());
    if (!cuda_backend_available(NULL, 0)) {
        CHECK_MSG(rc != 0 && strstr(out, "--device cuda"), "rc %d: %s", rc, out);
        CHECK(access(f, F_OK) != 0);
    } else {
        char dev[16] = "", pol[32] = "", pages[96] = "";
        CHECK_MSG(rc == 0 && h5log_verify_schema(f) == 0 && read_attr_str(f, "device", dev, sizeof dev) == 0 &&
                      !strcmp(dev, "cuda") && read_attr_str(f, "kv_policy", pol, sizeof pol) == 0 &&
                      !strcmp(pol, "decoder") && read_group_attr_str(f, "/kv", "pages", pages, sizeof pages) == 0 &&
                      strstr(pages, "memory not saved"),
                  "rc %d, device '%s', kv_policy '%s', pages '%s': %s", rc, dev, pol, pages, out);
    }
    free(out);
    snprintf(cmd, sizeof cmd,
             "%s --model %s --value ternary device=cuda batches='1 3' prompt_len=12 gen_len=3 "
             "warmup=0 repeats=1 max_windows=1 --out %s/thr.h5",
             bin_path("exp_throughput"), test_path(LLAMA_DIR), test_tmpdir());
    rc = test_run(cmd, &out);
    snprintf(f, sizeof f, "%s/thr.h5", test_tmpdir());
    if (!cuda_backend_available(NULL, 0)) {
        CHECK_MSG(rc != 0 && strstr(out, "--device cuda"), "rc %d: %s", rc, out);
        CHECK(access(f, F_OK) != 0);
    } else {
        CHECK_MSG(rc == 0, "rc %d: %s", rc, out);
        CHECK_MSG(h5log_verify_schema(f) == 0, "%s", err_msg());
        CHECK(h5_dataset_len(f, "/throughput/decode_tok_s") == 2);
    }
    free(out);
    /* every value's timed runs: the engine's bf16 form on CUDA, f32 on the CPU; the file says which */
    for (int i = 0; i < 4; i++) {
        const int cuda = i / 2;
        const char *value = i % 2 ? "ternary" : "bf16";
        snprintf(f, sizeof f, "%s/thr_%s_%d.h5", test_tmpdir(), value, cuda);
        snprintf(cmd, sizeof cmd,
                 "%s --model %s --value %s device=%s batches=1 prompt_len=12 gen_len=3 warmup=0 repeats=1 "
                 "max_windows=1 --out %s",
                 bin_path("exp_throughput"), test_path(LLAMA_DIR), value, cuda ? "cuda" : "cpu", f);
        rc = test_run(cmd, &out);
        if (cuda && !cuda_backend_available(NULL, 0)) {
            CHECK_MSG(rc != 0, "rc %d: %s", rc, out);
        } else {
            char dd[32] = "";
            CHECK_MSG(rc == 0 && read_group_attr_str(f, "/throughput", "dtype", dd, sizeof dd) == 0 &&
                          strcmp(dd, cuda ? "bf16" : "f32") == 0,
                      "%s on %s: rc %d, dtype '%s': %s", value, cuda ? "cuda" : "cpu", rc, dd, out);
        }
        free(out);
    }
}

/* ppl --out refuses what the run file cannot be before evaluating anything:
 * too many windows to compare with the reference (it had evaluated them all,
 * 45 s, then refused naming max_windows=, a config key), a missing folder (it
 * had been created, with cache/ in it), --dtype bf16 (the run file had been
 * evaluated in f32 without a word).  Experiment programs name their config key. */
TEST(ppl_out_refused_before_evaluating) {
    const char *d = test_tmpdir();
    char cmd[4096], *log = NULL, f[800];
    snprintf(f, sizeof f, "%s/all.h5", d);
    /* every window of the token file: 433755 scored x 2048 logits */
    snprintf(cmd, sizeof cmd, "%s ppl --model %s --tokens %s --out %s 2>&1", bin_path("ternlab"),
             test_path(BITNET_DIR), test_path(TOKENS_FILE), f);
    int rc = test_run(cmd, &log);
    CHECK_MSG(rc == 1 && strstr(log, "use --max-windows 514 or fewer"), "rc %d: %s", rc, log);
    CHECK_MSG(!strstr(log, "windows in") && !strstr(log, "\nppl "), "evaluated first: %s", log);
    CHECK(access(f, F_OK) != 0);
    free(log);
    snprintf(cmd, sizeof cmd, "%s --model %s --value none --out %s/kv.h5 max_windows=0 2>&1",
             bin_path("exp_kv_ternary"), test_path(LLAMA_DIR), d);
    rc = test_run(cmd, &log);
    CHECK_MSG(rc == 1 && strstr(log, "use max_windows="), "rc %d: %s", rc, log);
    free(log);
    /* a missing folder: an error, nothing created */
    snprintf(f, sizeof f, "%s/nonexist/r.h5", d);
    snprintf(cmd, sizeof cmd, "%s ppl --model %s --tokens %s --window 32 --max-windows 1 --out %s 2>&1",
             bin_path("ternlab"), test_path(LLAMA_DIR), test_path(TOKENS_FILE), f);
    rc = test_run(cmd, &log);
    CHECK_MSG(rc == 1 && strstr(log, "nonexist") && !strstr(log, "\nppl "), "rc %d: %s", rc, log);
    snprintf(f, sizeof f, "%s/nonexist", d);
    CHECK_MSG(access(f, F_OK) != 0, "%s was created", f);
    free(log);
    /* the experiment programs likewise: a missing --out folder, and an @layers range past
     * the model, refused before the reference is made (both had been found only after the
     * evaluation: the folder when the run file was written, the range by the engine after
     * the reference was computed and cached) */
    struct {
        const char *prog, *value, *out, *want;
    } early[] = {
        {"exp_threshold", "twn", "nonexist/x.h5", "create it first"},
        {"exp_kv_ternary", "all@layers=0-9", "k.h5", "@layers=0-9: the model has 4 layers"},
    };
    for (size_t i = 0; i < sizeof early / sizeof early[0]; i++) {
        snprintf(cmd, sizeof cmd, "%s --model %s --value %s --results %s/early%zu --out %s/%s window=32 "
                 "max_windows=1 2>&1", bin_path(early[i].prog), test_path(LLAMA_DIR), early[i].value, d, i, d,
                 early[i].out);
        rc = test_run(cmd, &log);
        CHECK_MSG(rc == 1 && strstr(log, early[i].want), "%s: rc %d: %s", cmd, rc, log);
        free(log);
        snprintf(cmd, sizeof cmd, "test -z \"$(find %s/early%zu -name 'ref-*' 2>/dev/null)\"", d, i);
        CHECK_MSG(test_run(cmd, NULL) == 0, "%s: the reference was made first", early[i].prog);
    }
    /* bf16: refused as usage before anything runs (with or without a GPU) */
    snprintf(cmd, sizeof cmd, "%s ppl --model %s --tokens %s --window 32 --max-windows 1 --device cuda "
             "--dtype bf16 --out %s/b.h5 2>&1", bin_path("ternlab"), test_path(LLAMA_DIR),
             test_path(TOKENS_FILE), d);
    rc = test_run(cmd, &log);
    CHECK_MSG(rc == 2 && strstr(log, "--dtype bf16 with --out"), "rc %d: %s", rc, log);
    free(log);
}

/* exp-throughput's "ternary" runs a native ternary checkpoint as stored (it had
 * been re-ternarised by the config's absmean rule: ppl 46.3 against 36.2) and
 * ternarises a BF16 one by that rule. */
TEST(exp_throughput_native_ternary_as_stored) {
    const char *extra = "batches=1 prompt_len=12 gen_len=3 warmup=0 repeats=1 max_windows=1";
    const char *f = run_exp("exp_throughput", BITNET_DIR, "ternary", extra);
    char spec[256], w[64];
    CHECK(read_attr_str(f, "quant_spec", spec, sizeof spec) == 0 && strcmp(spec, "loaded") == 0);
    CHECK(read_attr_str(f, "weights", w, sizeof w) == 0 && strcmp(w, "native ternary") == 0);
    /* the packed kernels against their dense twin (the reference): the same numbers */
    CHECK_MSG(read_scalar(f, "/metrics/kl_mean") < 1e-6, "kl %g", read_scalar(f, "/metrics/kl_mean"));
    char cmd[2048], *log = NULL;
    snprintf(cmd, sizeof cmd, "h5dump -d /load_report/run_as %s", f);
    REQUIRE(test_run(cmd, &log) == 0);
    CHECK_MSG(strstr(log, "ternary packed (native)") && !strstr(log, "ternarised"), "%s", log);
    free(log);
    f = run_exp("exp_throughput", LLAMA_DIR, "ternary", extra);
    CHECK(read_attr_str(f, "quant_spec", spec, sizeof spec) == 0 && strstr(spec, "rule=absmean,group=128"));
    CHECK(read_attr_str(f, "weights", w, sizeof w) == 0 && strcmp(w, "ternarised") == 0);
    /* the native checkpoint's dense baseline: its linears run as dense twins, so /weights
     * says dense (sparsity 0, no scales; it had given the ternary codes' statistics) */
    f = run_exp("exp_throughput", BITNET_DIR, "bf16", extra);
    const int64_t L = h5_dataset_len(f, "/weights/sparsity");
    double sp[64], smin[64];
    REQUIRE(L > 0 && L <= 64);
    CHECK(h5_read_f64s(f, "/weights/sparsity", sp, L) == 0 && h5_read_f64s(f, "/weights/scale_min", smin, L) == 0);
    for (int64_t i = 0; i < L; i++)
        CHECK_MSG(sp[i] == 0.0 && isnan(smin[i]), "linear %lld: sparsity %g, scale_min %g", (long long)i, sp[i],
                  smin[i]);
}

/* kl_mean and logit_rel_l2 are the same bits from run to run with many threads (an
 * OpenMP reduction had added the threads' partial sums in the order they finished:
 * the last bits moved between runs with 3 or more threads) */
TEST(exp_metrics_same_bits_with_many_threads) {
    double kl[3], rel[3];
    for (int i = 0; i < 3; i++) {
        char cmd[4096], out[700], *log = NULL;
        snprintf(out, sizeof out, "%s/many%d.h5", test_tmpdir(), i);
        snprintf(cmd, sizeof cmd, "OMP_NUM_THREADS=16 %s --model %s --value e8m0 --out %s window=256 max_windows=2",
                 bin_path("exp_scale_dtype"), test_path(LLAMA_DIR), out);
        const int rc = test_run(cmd, &log);
        CHECK_MSG(rc == 0, "rc %d: %s", rc, log);
        free(log);
        kl[i] = read_scalar(out, "/metrics/kl_mean");
        rel[i] = read_scalar(out, "/metrics/logit_rel_l2");
    }
    for (int i = 1; i < 3; i++)
        CHECK_MSG(memcmp(&kl[i], &kl[0], sizeof kl[0]) == 0 && memcmp(&rel[i], &rel[0], sizeof rel[0]) == 0,
                  "run %d: kl %.17g rel %.17g, run 0: %.17g %.17g", i, kl[i], rel[i], kl[0], rel[0]);
}

/* exp-throughput's timed engines run the run's KV policy (they had run none
 * whatever kv said, under a file labelled with the policy): kv=all gives a
 * pool of ternary pages alone, its bytes per token slot recorded beside the
 * policy, against none's f32 pages. */
TEST(exp_throughput_times_the_kv_policy) {
    const char *extra = "batches=1 prompt_len=12 gen_len=3 warmup=0 repeats=1 max_windows=1";
    char ex[256], kvp[64] = "";
    double a[2] = {NAN, NAN};
    const char *pols[] = {"none", "all"};
    for (int i = 0; i < 2; i++) {
        snprintf(ex, sizeof ex, "%s kv=%s", extra, pols[i]);
        const char *f = run_exp("exp_throughput", LLAMA_DIR, "ternary", ex);
        CHECK(h5_read_f64s(f, "/throughput/kv_alloc_bytes_per_token", &a[i], 1) == 0);
        CHECK_MSG(read_group_attr_str(f, "/throughput", "kv_policy", kvp, sizeof kvp) == 0 && !strcmp(kvp, pols[i]),
                  "kv_policy '%s'", kvp);
        CHECK_MSG(h5log_verify_schema(f) == 0, "%s: %s", f, err_msg());
    }
    /* llama-tiny: 4 layers x 4 KV heads x head_dim 32; f32 K and V, or per layer the format flag and
     * per head K and V codes (8 bytes each) and f16 scales (2 of K, 1 of V) */
    const double f32 = 4 * 4 * 2 * 32 * 4.0, tern = 4 * (1 + 4 * (2 * 8 + 2 * (2 + 1)));
    CHECK_MSG(a[0] == f32 && a[1] == tern, "bytes per token slot: none %g (want %g), all %g (want %g)", a[0], f32,
              a[1], tern);
    /* over two CPU ranks (each holding half the KV heads and its own format flags): the whole
     * pool's bytes, one's plus a flag per layer (/kv: the model's geometry, one cache) */
    snprintf(ex, sizeof ex, "%s kv=all tp=2", extra);
    const char *f = run_exp("exp_throughput", LLAMA_DIR, "ternary", ex);
    double t2 = NAN;
    CHECK(h5_read_f64s(f, "/throughput/kv_alloc_bytes_per_token", &t2, 1) == 0);
    const double kv2 = h5_attr_f64(f, "/kv", "alloc_bytes_per_token");
    CHECK_MSG(t2 == tern + 4 && kv2 == tern, "tp 2: %g (want %g) and /kv %g (want %g) bytes per token slot", t2,
              tern + 4, kv2, tern);
}

/* `git rev-parse HEAD` of `dir` into out ("unknown" where it fails). */
static void git_head_of(const char *dir, char *out, size_t n) {
    char cmd[2048], *log = NULL;
    snprintf(cmd, sizeof cmd, "git -C '%s' rev-parse HEAD 2>/dev/null", dir);
    if (test_run(cmd, &log) == 0 && log && strlen(log) >= 40) snprintf(out, n, "%.40s", log);
    else snprintf(out, n, "unknown");
    free(log);
}

/* git_commit is the commit the program was built from, as the build wrote it
 * beside the programs (exp_build_commit: HEAD of the source folder when make
 * ran, "-dirty" where tracked sources differed from it): never that of the
 * working folder (it had been, when run from another repository), nor the
 * checkout's HEAD when the program runs (it had been: a commit made or an
 * edit saved after the build moved it, and uncommitted edits were never
 * flagged); `ternlab diff --out` records it too (it had written "unknown"
 * always).  A copy of the program placed in another git tree of ternlab's
 * shape, with no git_commit beside it, records the HEAD of the folder it was
 * built in, not that tree's. */
TEST(run_files_record_the_source_commit) {
    const char *d = test_tmpdir();
    char root[1024], model[1024], tokens[1024], cmd[16384], *log = NULL;
    char own[4096]; /* the build's program, absolute: the commands run in other folders */
    REQUIRE(realpath(test_path("."), root) && realpath(test_path(LLAMA_DIR), model) &&
            realpath(test_path(TOKENS_FILE), tokens) && realpath(bin_path("ternlab"), own));
    /* other: another repository, the working folder; tree: a git tree with the
     * program in build/ */
    snprintf(cmd, sizeof cmd,
             "(set -e; G='git -c user.name=t -c user.email=t@t'; cd '%s'; mkdir -p other tree/src/eval tree/build; "
             "(cd other && git init -q && $G commit -q --allow-empty -m other); "
             "(cd tree && touch src/eval/experiment.h && git init -q && git add src && $G commit -q -m tree); "
             "cp '%s' tree/build/ternlab)", d, own);
    int rc = test_run(cmd, &log);
    CHECK_MSG(rc == 0, "%s: %s", cmd, log);
    free(log);
    if (rc != 0) return;
    char other[1100], tree[1100], h_other[64], h_tree[64], h_root[64];
    snprintf(other, sizeof other, "%s/other", d);
    snprintf(tree, sizeof tree, "%s/tree", d);
    git_head_of(other, h_other, sizeof h_other);
    git_head_of(tree, h_tree, sizeof h_tree);
    git_head_of(root, h_root, sizeof h_root);
    REQUIRE(strcmp(h_other, "unknown") != 0 && strcmp(h_tree, "unknown") != 0);
    /* the build (the Makefile) ran in a checkout: its HEAD, maybe with -dirty, in
     * git_commit beside the programs */
    const char *baked = exp_build_commit();
    const size_t bl = strlen(baked);
    CHECK_MSG(strcmp(h_root, "unknown") == 0 ||
                  ((bl == 40 || (bl == 46 && strcmp(baked + 40, "-dirty") == 0)) &&
                   strspn(baked, "0123456789abcdef") == 40),
              "baked-in commit '%s'", baked);
    if (!baked[0]) baked = h_root; /* a build without git: looked up when the program runs */
    /* the build's own program, then the copy in tree/ */
    char bin[1200];
    snprintf(bin, sizeof bin, "%s/build/ternlab", tree);
    const char *progs[2] = {own, bin};
    for (int i = 0; i < 2; i++) {
        char p[1100], q[1100], cp[128], cq[128];
        snprintf(p, sizeof p, "%s/ppl%d.h5", d, i);
        snprintf(q, sizeof q, "%s/diff%d.h5", d, i);
        snprintf(cmd, sizeof cmd,
                 "(cd '%s' && '%s' ppl --model '%s' --tokens '%s' --window 32 --max-windows 1 --out '%s' && "
                 "'%s' diff --model '%s' --tokens '%s' --window 32 --b quant=rule=twn --out '%s')",
                 other, progs[i], model, tokens, p, progs[i], model, tokens, q);
        rc = test_run(cmd, &log);
        CHECK_MSG(rc == 0, "%s: %s", cmd, log);
        free(log);
        CHECK(read_attr_str(p, "git_commit", cp, sizeof cp) == 0);
        CHECK(read_attr_str(q, "git_commit", cq, sizeof cq) == 0);
        CHECK_MSG(strcmp(cp, cq) == 0, "ppl %s, diff %s", cp, cq);
        CHECK_MSG(strcmp(cp, h_other) != 0, "the working folder's commit %s", cp);
        /* the build's program: what the build wrote beside it (this runner, in the same
         * folder, reads the same file); the copy, with none beside it: the HEAD of the
         * folder it was built in (TL_SOURCE_DIR), never the copy's tree's */
        const char *want = i == 0 ? baked : h_root;
        CHECK_MSG(strcmp(cp, want) == 0, "%s: %s, want %s", progs[i], cp, want);
        CHECK_MSG(strcmp(cp, h_tree) != 0, "%s: the copy's tree's commit %s", progs[i], cp);
    }
}

/* The reference cache's key and model_sha256 cover every file the loader
 * reads: a copy of llama-tiny differing only in config.json (rope_theta), and
 * two sharded copies with the same index differing only in a shard's contents
 * (down_proj negated), each got another model's cached reference (wrong
 * ppl_ref, kl, top1) and the same model_sha256 when only model.safetensors or
 * the index was hashed.  The hash is the documented one (paper/SCHEMA.md);
 * tokens_sha256 is the token file's sha256sum. */
TEST(exp_reference_key_is_every_model_file) {
    const char *d = test_tmpdir();
    char cmd[16384], *log = NULL, llama[2048];
    REQUIRE(realpath(test_path(LLAMA_DIR), llama));
    /* a: llama-tiny; b: its config with another rope_theta; sA / sB: llama-tiny
     * in two shards, sB with the down_proj weights negated (BF16 sign bits) */
    snprintf(cmd, sizeof cmd,
             "set -e; cd '%s'; mkdir -p a b sA sB res/exp-threshold; "
             "cp '%s/config.json' '%s/model.safetensors' a/; cp a/* b/; "
             "sed -i 's/\"rope_theta\": *10000.0/\"rope_theta\": 500.0/' b/config.json; "
             "if cmp -s a/config.json b/config.json; then exit 1; fi; cp a/config.json sA/; cp a/config.json sB/; "
             "cat > shard.py <<'PY'\n"
             "import json, struct, sys\n"
             "src, dst, neg = sys.argv[1], sys.argv[2], sys.argv[3] == '1'\n"
             "raw = open(src + '/model.safetensors', 'rb').read()\n"
             "n = struct.unpack('<Q', raw[:8])[0]\n"
             "hdr = json.loads(raw[8:8 + n]); body = raw[8 + n:]\n"
             "names = sorted(k for k in hdr if k != '__metadata__')\n"
             "wm = {}\n"
             "for si, part in enumerate((names[:len(names) // 2], names[len(names) // 2:])):\n"
             "    fn = 'model-%%05d-of-00002.safetensors' %% (si + 1)\n"
             "    h, data = {}, bytearray()\n"
             "    for k in part:\n"
             "        b0, b1 = hdr[k]['data_offsets']\n"
             "        chunk = bytearray(body[b0:b1])\n"
             "        if neg and 'mlp.down_proj' in k:\n"
             "            assert hdr[k]['dtype'] == 'BF16'\n"
             "            for i in range(1, len(chunk), 2): chunk[i] ^= 0x80\n"
             "        h[k] = {'dtype': hdr[k]['dtype'], 'shape': hdr[k]['shape'],\n"
             "                'data_offsets': [len(data), len(data) + len(chunk)]}\n"
             "        data += chunk; wm[k] = fn\n"
             "    hj = json.dumps(h).encode(); hj += b' ' * ((8 - len(hj) %% 8) %% 8)\n"
             "    open(dst + '/' + fn, 'wb').write(struct.pack('<Q', len(hj)) + hj + data)\n"
             "json.dump({'metadata': {}, 'weight_map': wm}, open(dst + '/model.safetensors.index.json', 'w'))\n"
             "PY\n"
             "/usr/bin/python3 shard.py a sA 0 && /usr/bin/python3 shard.py a sB 1 && "
             "cmp sA/model.safetensors.index.json sB/model.safetensors.index.json",
             d, llama, llama);
    int rc = test_run(cmd, &log);
    REQUIRE(rc == 0 || (fprintf(stderr, "%s\n", log ? log : ""), 0));
    free(log);
    const char *models[4] = {"a", "b", "sA", "sB"};
    char sha[4][128], files[4][900];
    double ref[4];
    for (int i = 0; i < 4; i++) {
        snprintf(files[i], sizeof files[i], "%s/res/exp-threshold/%s.h5", d, models[i]);
        snprintf(cmd, sizeof cmd, "%s --model '%s/%s' --value twn --out '%s' window=32 max_windows=2 2>&1",
                 bin_path("exp_threshold"), d, models[i], files[i]);
        rc = test_run(cmd, &log);
        CHECK_MSG(rc == 0, "%s: %s", cmd, log);
        /* b after a, sB after sA: another model, so another reference */
        CHECK_MSG(!(i % 2 == 1 && strstr(log, "reference: cached")), "%s reused %s's reference: %s",
                  models[i], models[i - 1], log);
        free(log);
        ref[i] = read_scalar(files[i], "/metrics/ppl_ref");
        CHECK(read_attr_str(files[i], "model_sha256", sha[i], sizeof sha[i]) == 0 && strlen(sha[i]) == 64);
    }
    CHECK_MSG(strcmp(sha[0], sha[1]) != 0 && ref[0] != ref[1], "config.json: sha %s / %s, ppl_ref %g / %g",
              sha[0], sha[1], ref[0], ref[1]);
    CHECK_MSG(strcmp(sha[2], sha[3]) != 0 && ref[2] != ref[3], "shards: sha %s / %s, ppl_ref %g / %g",
              sha[2], sha[3], ref[2], ref[3]);
    /* the same weights in one file or two shards: the same reference (computed apart) */
    CHECK_MSG(ref[0] == ref[2], "a %g, sA %g", ref[0], ref[2]);
    /* the definition paper/SCHEMA.md gives, with sha256sum */
    const char *want_cmd[2] = {
        "cd '%s/a' && sha256sum config.json model.safetensors | sha256sum",
        "cd '%s/sA' && sha256sum config.json model.safetensors.index.json model-00001-of-00002.safetensors "
        "model-00002-of-00002.safetensors | sha256sum"};
    for (int i = 0; i < 2; i++) {
        snprintf(cmd, sizeof cmd, want_cmd[i], d);
        REQUIRE(test_run(cmd, &log) == 0);
        CHECK_MSG(strncmp(log, sha[2 * i], 64) == 0, "%s: model_sha256 %s, sha256sum %.64s", models[2 * i],
                  sha[2 * i], log);
        free(log);
    }
    /* tokens_sha256: the SHA-256 of the token file the run read (its path in tokens) */
    char tpath[1024], tsha[128];
    CHECK(read_attr_str(files[1], "tokens", tpath, sizeof tpath) == 0 &&
          read_attr_str(files[1], "tokens_sha256", tsha, sizeof tsha) == 0);
    snprintf(cmd, sizeof cmd, "cd '%s' && sha256sum '%s'", test_path(""), tpath);
    REQUIRE(test_run(cmd, &log) == 0);
    CHECK_MSG(strlen(tsha) == 64 && strncmp(log, tsha, 64) == 0, "tokens_sha256 %s, sha256sum %.64s", tsha, log);
    free(log);
    /* the files' hashes are kept beside the reference cache, by version: a's config.json
     * rewritten in place (same inode and size, another rope_theta) with its modification
     * time set back (as cp -p or rsync -t leave it) is read again */
    snprintf(cmd, sizeof cmd,
             "cd '%s' && ls res/cache/filehash-* | wc -l && "
             "sed 's/\"rope_theta\": *10000.0/\"rope_theta\": 20000.0/' a/config.json > c.tmp && "
             "if cmp -s c.tmp a/config.json; then exit 1; fi && touch -r a/config.json c.stamp && "
             "cat c.tmp > a/config.json && touch -r c.stamp a/config.json", d);
    REQUIRE(test_run(cmd, &log) == 0 || (fprintf(stderr, "%s\n", log ? log : ""), 0));
    CHECK_MSG(atoi(log) >= 7, "%s file hashes kept", log); /* a 2, b 2, sA 4 less the shared config.json */
    free(log);
    char sha_a2[128];
    snprintf(cmd, sizeof cmd, "%s --model '%s/a' --value twn --out '%s/res/exp-threshold/a2.h5' window=32 "
             "max_windows=2 2>&1", bin_path("exp_threshold"), d, d);
    rc = test_run(cmd, &log);
    CHECK_MSG(rc == 0, "%s: %s", cmd, log);
    free(log);
    snprintf(files[0], sizeof files[0], "%s/res/exp-threshold/a2.h5", d);
    CHECK(read_attr_str(files[0], "model_sha256", sha_a2, sizeof sha_a2) == 0);
    CHECK_MSG(strcmp(sha_a2, sha[0]) != 0, "a rewritten in place kept model_sha256 %s", sha_a2);
}

/* Without --out a run is RESULTS/<exp>/<model>__<value>.h5 on the CPU and
 * <model>__<value>__cuda.h5 on CUDA: a CUDA point never replaces the CPU
 * file of the same model and value (both had been <model>__<value>.h5).
 * Without a GPU the CUDA point fails, naming the file it would have written. */
TEST(exp_run_file_name_has_the_device) {
    const char *d = test_tmpdir();
    const char *extra = "batches=1 prompt_len=12 gen_len=3 warmup=0 repeats=1 max_windows=1 window=32";
    char cmd[4096], *log = NULL, cpu_f[900], cuda_f[900], st0[256] = "", st1[256] = "";
    snprintf(cpu_f, sizeof cpu_f, "%s/res/exp-throughput/llama-tiny__ternary.h5", d);
    snprintf(cuda_f, sizeof cuda_f, "%s/res/exp-throughput/llama-tiny__ternary__cuda.h5", d);
    snprintf(cmd, sizeof cmd, "%s --model %s --value ternary --results '%s/res' %s 2>&1",
             bin_path("exp_throughput"), test_path(LLAMA_DIR), d, extra);
    int rc = test_run(cmd, &log);
    CHECK_MSG(rc == 0, "%s: %s", cmd, log);
    free(log);
    CHECK_MSG(h5log_verify_schema(cpu_f) == 0, "%s: %s", cpu_f, err_msg());
    snprintf(cmd, sizeof cmd, "stat -c %%Y.%%i '%s'", cpu_f);
    char *s = NULL;
    REQUIRE(test_run(cmd, &s) == 0);
    snprintf(st0, sizeof st0, "%s", s);
    free(s);
    snprintf(cmd, sizeof cmd, "%s --model %s --value ternary --results '%s/res' device=cuda %s 2>&1",
             bin_path("exp_throughput"), test_path(LLAMA_DIR), d, extra);
    rc = test_run(cmd, &log);
    if (cuda_backend_available(NULL, 0)) {
        CHECK_MSG(rc == 0, "%s: %s", cmd, log);
        CHECK_MSG(h5log_verify_schema(cuda_f) == 0, "%s: %s", cuda_f, err_msg());
        char dev[64];
        CHECK(read_attr_str(cuda_f, "device", dev, sizeof dev) == 0 && strncmp(dev, "cuda", 4) == 0);
    } else {
        CHECK_MSG(rc != 0 && strstr(log, "llama-tiny__ternary__cuda.h5"), "rc %d: %s", rc, log);
    }
    free(log);
    snprintf(cmd, sizeof cmd, "stat -c %%Y.%%i '%s'", cpu_f);
    REQUIRE(test_run(cmd, &s) == 0);
    snprintf(st1, sizeof st1, "%s", s);
    free(s);
    CHECK_MSG(strcmp(st0, st1) == 0, "the CPU file was replaced (%s -> %s)", st0, st1);
    char dev[64];
    CHECK(read_attr_str(cpu_f, "device", dev, sizeof dev) == 0 && strcmp(dev, "cpu") == 0);
}

typedef struct {
    double sleep_s; /* per window */
    int windows;
} SlowCtx;

static int slow_on_window(void *vctx, int64_t w, const float *logits, const int32_t *ids, int T, int V,
                          int r0) {
    SlowCtx *c = vctx;
    c->windows++;
    usleep((useconds_t)(c->sleep_s * 1e6));
    return 0;
}

/* eval_tok_s: the tokens fed to forward() (T a window; T - 1 under the KV
 * split protocol, whose last token is never fed) over the time inside the
 * forward calls.  It had been nw * T over the whole loop, per-window
 * callbacks (the comparison with the reference) included: here a callback
 * that sleeps 0.3 s a window would have held the rate under 2 * 64 / 0.6. */
TEST(eval_tok_s_counts_fed_tokens_and_forward_time) {
    Model m;
    Engine e;
    REQUIRE(fixture_engine(LLAMA_DIR, NULL, 2 * 64, 16, 2, 64, &m, &e) == 0);
    int32_t *tok = NULL;
    int64_t n = 0;
    REQUIRE(tokens_load(test_path(TOKENS_FILE), m.cfg.vocab, &tok, &n) == 0);
    for (int split = 0; split <= 1; split++) {
        SlowCtx c = {.sleep_s = 0.3};
        PplOpts o = {.window = 64, .max_windows = 2, .on_logits = slow_on_window, .ctx = &c, .kv_split = split};
        PplResult r;
        REQUIRE(eval_ppl(&e, tok, n, &o, &r) == 0);
        CHECK(c.windows == 2);
        CHECK_MSG(r.fed_tokens == (split ? 2 * 63 : 2 * 64), "split %d: fed %lld", split, (long long)r.fed_tokens);
        CHECK_MSG(r.seconds >= 0.6 && r.forward_seconds > 0 && r.forward_seconds < r.seconds - 0.5,
                  "split %d: %.3f s, forward %.3f s", split, r.seconds, r.forward_seconds);
        CHECK_MSG(r.tok_per_s == (double)r.fed_tokens / r.forward_seconds, "split %d: %g tok/s", split, r.tok_per_s);
        CHECK(r.tok_per_s > (double)r.fed_tokens / (r.seconds - 0.5));
        if (split) CHECK(r.decode_tokens == 2 * (63 - 32) && r.decode_seconds <= r.forward_seconds);
    }
    free(tok);
    engine_free(&e);
    model_free(&m);
}

/* The figures, tables and paper label what ran: exp-throughput's value `bf16`
 * runs dense f32 (its /load_report/run_as) and had been called "dense BF16",
 * overstating the ternary speed-up; the reference is the checkpoint's weights
 * dense (a native ternary model's dequantised) and had been called "BF16". */
TEST(scripts_label_what_ran) {
    const char *d = test_tmpdir();
    const char *thr = "batches=1 prompt_len=12 gen_len=3 warmup=0 repeats=1 max_windows=1 window=32";
    char cmd[16384], *log = NULL;
    struct {
        const char *prog, *exp, *value, *extra;
    } runs[] = {{"exp_throughput", "exp-throughput", "bf16", thr},
                {"exp_throughput", "exp-throughput", "ternary", thr},
                {"exp_threshold", "exp-threshold", "twn", "window=32 max_windows=2"}};
    for (size_t i = 0; i < sizeof runs / sizeof runs[0]; i++) {
        snprintf(cmd, sizeof cmd, "mkdir -p '%s/res/%s' && %s --model %s --value %s --out '%s/res/%s/llama-tiny__%s.h5' %s 2>&1",
                 d, runs[i].exp, bin_path(runs[i].prog), test_path(LLAMA_DIR), runs[i].value, d, runs[i].exp,
                 runs[i].value, runs[i].extra);
        int rc = test_run(cmd, &log);
        REQUIRE(rc == 0 || (fprintf(stderr, "%s\n", log), 0));
        free(log);
    }
    /* the tables and the paper, then the figures' legends (savefig replaced by a capture) */
    snprintf(cmd, sizeof cmd,
             "cd '%s' && /usr/bin/python3 scripts/tables.py --results '%s/res' --out '%s/paper/tables' >/dev/null && "
             "/usr/bin/python3 scripts/paper.py --results '%s/res' --paper '%s/paper' >/dev/null && "
             "cat '%s/paper/tables/exp-throughput.md' '%s/paper/tables/exp-threshold.md' '%s/paper/paper.md' && "
             "(/usr/bin/python3 - '%s/res' <<'PY'\n"
             "import sys\n"
             "sys.path.insert(0, 'scripts')\n"
             "import figures, ternlab_runs as tr\n"
             "def capture(fig, path, **kw):\n"
             "    for ax in fig.axes:\n"
             "        if ax.get_legend():\n"
             "            print('legend:', ' | '.join(t.get_text() for t in ax.get_legend().get_texts()))\n"
             "tr.savefig_atomic = capture\n"
             "for exp in ('exp-throughput', 'exp-threshold'):\n"
             "    figures.draw(exp, tr.load(sys.argv[1], exp), '.')\n"
             "import shutil, h5py\n"
             "c = sys.argv[1] + '/../bf16_on_cuda.h5'\n"
             "shutil.copy(sys.argv[1] + '/exp-throughput/llama-tiny__bf16.h5', c)\n"
             "with h5py.File(c, 'r+') as f: f['throughput'].attrs['dtype'] = 'bf16'\n"
             "print('cuda label:', tr.weights_label(tr.read_run(c)))\n"
             "rs = [{'model_name': 'a', 'value': v, 'attrs': {'device': d}} for v, d in\n"
             "      (('x', 'cpu'), ('y', 'cpu'), ('x', 'cuda:H200'))]\n"
             "print('missing:', tr.missing_points(rs, ['x', 'y']))\n"
             "PY\n)", /* (test_run appends to the last line) */
             test_path(""), d, d, d, d, d, d, d, d);
    int rc = test_run(cmd, &log);
    REQUIRE(rc == 0 || (fprintf(stderr, "%s\n", log), 0));
    CHECK_MSG(strstr(log, "| llama-tiny | dense f32 | cpu | 1 |") &&
                  strstr(log, "| llama-tiny | ternary packed (ternarised) | cpu | 1 |") &&
                  !strstr(log, "| llama-tiny | bf16 |"), "throughput table:\n%s", log);
    CHECK_MSG(strstr(log, "PPL (dense ref.)") && strstr(log, "`bf16`: dense f32 on cpu"), "%s", log);
    CHECK_MSG(strstr(log, "legend: llama-tiny dense f32 (cpu) | llama-tiny ternary packed (ternarised) (cpu)") &&
                  strstr(log, "llama-tiny dense reference"), "legends:\n%s", log);
    CHECK_MSG(!strstr(log, "BF16 ref") && !strstr(log, "BF16 reference") && !strstr(log, "dense BF16"),
              "BF16 where it is not:\n%s", log);
    /* a dense run timed in the CUDA engine's bf16 form (its /throughput dense_dtype) */
    CHECK_MSG(strstr(log, "cuda label: dense bf16\n"), "%s", log);
    /* a point missing on one device of two sharing the folder is reported with its device */
    CHECK_MSG(strstr(log, "missing: [('a (cuda)', ['y'], False)]"), "%s", log);
    free(log);
}

/* A point run by its program (--results) and the sweep of the same point find
 * each other's file: both name it from the model's folder or file name and
 * the value with every byte outside [A-Za-z0-9._+-] made '_' (the program had
 * kept '@' and '=' and dropped ".gguf": both ways ran the point, and the tables
 * showed it twice). */
TEST(exp_program_and_sweep_name_a_point_alike) {
    const char *d = test_tmpdir();
    char cmd[4096], *log = NULL, f[1024];
    snprintf(cmd, sizeof cmd, "%s --model %s --results '%s/res' window=16 max_windows=1 'values=all@layers=0-1' 2>&1",
             bin_path("exp_kv_ternary"), test_path("data/gguf/llama-tiny-bf16.gguf"), d);
    int rc = test_run(cmd, &log);
    CHECK_MSG(rc == 0, "%s: %s", cmd, log);
    free(log);
    snprintf(f, sizeof f, "%s/res/exp-kv-ternary/llama-tiny-bf16.gguf__all_layers_0-1.h5", d);
    CHECK_MSG(h5log_verify_schema(f) == 0, "%s", err_msg());
    snprintf(cmd, sizeof cmd, "cd '%s' && bash scripts/sweep.sh exp-kv-ternary --results '%s/res' --model %s "
             "--dry-run window=16 max_windows=1 'values=all@layers=0-1' 2>&1",
             test_path(""), d, test_path("data/gguf/llama-tiny-bf16.gguf"));
    rc = test_run(cmd, &log);
    CHECK_MSG(rc == 0 && strstr(log, "1 points (1 complete)") && strstr(log, "complete, skipped"), "%s", log);
    free(log);
}

/* exp-throughput with tp = 2 on the CPU: the request latencies run on the
 * two-rank engine the file records (they had run on one rank, in a file
 * saying tp = 2), and the linear split of the step, which would time the
 * unsharded linears, is NaN. */
TEST(exp_throughput_latency_on_the_tp_engine) {
    char out[1024], cmd[4096], *log = NULL;
    snprintf(out, sizeof out, "%s/tp2.h5", test_tmpdir());
    snprintf(cmd, sizeof cmd, "%s --model %s --value ternary --out %s window=16 max_windows=1 prompt_len=8 "
             "gen_len=2 warmup=0 repeats=1 batches=1 tp=2 2>&1", bin_path("exp_throughput"), test_path(LLAMA_DIR), out);
    int rc = test_run(cmd, &log);
    CHECK_MSG(rc == 0, "%s: %s", cmd, log);
    free(log);
    CHECK(h5_attr_f64(out, "/throughput", "latency_tp") == 2.0);
    CHECK(isfinite(read_scalar(out, "/throughput/ttft_ms_p50")) && read_scalar(out, "/throughput/ttft_ms_p50") > 0);
    CHECK(isfinite(read_scalar(out, "/throughput/step_ms")));
    CHECK(isnan(read_scalar(out, "/throughput/step_linear_ms")));
}

/* The run file's model_sha256 (and the reference cache's key) hash the files
 * the loader reads: with model.safetensors and an index beside it, the single
 * file (st_open_dir reads it first, as transformers); the index and its shards
 * had been hashed, so a cached reference of the shards could serve a model
 * that ran from the single file. */
TEST(exp_model_hash_follows_the_files_read) {
    const char *dir = test_tmpdir();
    char cmd[6000], *log = NULL, a[800], b[800], c[800];
    snprintf(cmd, sizeof cmd,
             "set -e; mkdir -p '%s/one' && cp '%s/config.json' '%s/model.safetensors' '%s/one/' && cd '%s' && "
             "mkdir -p both shards && cp one/* both/ && cp one/config.json shards/ && "
             "cp one/model.safetensors shards/model-00001-of-00001.safetensors && "
             "printf '{\"metadata\": {}, \"weight_map\": {\"model.embed_tokens.weight\": "
             "\"model-00001-of-00001.safetensors\"}}' > shards/model.safetensors.index.json && "
             "cp shards/model.safetensors.index.json shards/model-00001-of-00001.safetensors both/",
             dir, test_path(LLAMA_DIR), test_path(LLAMA_DIR), dir, dir);
    int rc0 = test_run(cmd, &log);
    CHECK_MSG(rc0 == 0, "%s: %s", cmd, log);
    free(log);
    if (rc0 != 0) return;
    const char *names[3] = {"one", "both", "shards"};
    char *outs[3] = {a, b, c};
    for (int i = 0; i < 3; i++) {
        snprintf(outs[i], 800, "%s/r/exp-threshold/%s.h5", dir, names[i]);
        snprintf(cmd, sizeof cmd, "mkdir -p '%s/r/exp-threshold' && %s --model %s/%s --value twn --out %s window=32 "
                 "max_windows=1 logit_rows=2 2>&1", dir, bin_path("exp_threshold"), dir, names[i], outs[i]);
        const int rc = test_run(cmd, &log);
        CHECK_MSG(rc == 0, "%s: %s", cmd, log);
        free(log);
    }
    char sa[80] = "", sb[80] = "", sc[80] = "";
    CHECK(h5log_root_attr_str(a, "model_sha256", sa, sizeof sa) == 0 &&
          h5log_root_attr_str(b, "model_sha256", sb, sizeof sb) == 0 &&
          h5log_root_attr_str(c, "model_sha256", sc, sizeof sc) == 0);
    CHECK_MSG(strcmp(sa, sb) == 0 && strcmp(sa, sc) != 0, "one %s, both %s, shards %s", sa, sb, sc);
}

static double mean_of(const double *v, int64_t n) {
    double s = 0;
    for (int64_t i = 0; i < n; i++) s += v[i];
    return n ? s / (double)n : NAN;
}

/* The numbers a KV run file records, against each other and against the
 * protocol (llama-tiny, window 32: the split protocol scores positions 15..30):
 * nll_mean and the mean per-token nll are log(ppl), the mean nll_ref is
 * log(ppl_ref); kl_mean is the mean per-token KL; the logit rows kept are
 * positions 15.. (logit_rows 16: every scored row) and logit_rel_l2 is the
 * mean of |test - ref| / |ref| over them; /logits/ref is the reference's (not
 * the run's: they differ under all, agree under none, whose nll is the
 * reference's bit for bit); none runs the split protocol too; bytes per token
 * weigh the 16 prompt and 15 generated tokens; the defaults keep 8 logit rows
 * and a 24 GiB budget.  (Mutations of each of these had passed: the tests
 * had checked them finite, positive or ordered.) */
TEST(exp_kv_run_file_numbers_agree) {
    const char *values[] = {"none", "all", "encoder", "decoder"};
    const double bpt[] = {4096.0, 352.0, (16 * 352.0 + 15 * 4096.0) / 31, (16 * 4096.0 + 15 * 352.0) / 31};
    for (int vi = 0; vi < 4; vi++) {
        const char *f = run_exp("exp_kv_ternary", LLAMA_DIR, values[vi], "max_windows=1 logit_rows=16");
        double nll[16], nref[16], kl[16], pos[16], kv;
        REQUIRE(h5_dataset_len(f, "/per_token/nll") == 16 && h5_dataset_len(f, "/per_token/kl") == 16 &&
                h5_dataset_len(f, "/logits/positions") == 16);
        REQUIRE(h5_read_f64s(f, "/per_token/nll", nll, 16) == 0 && h5_read_f64s(f, "/per_token/nll_ref", nref, 16) == 0 &&
                h5_read_f64s(f, "/per_token/kl", kl, 16) == 0 && h5_read_f64s(f, "/logits/positions", pos, 16) == 0);
        const double ppl = read_scalar(f, "/metrics/ppl"), ppl_ref = read_scalar(f, "/metrics/ppl_ref");
        CHECK_MSG(fabs(read_scalar(f, "/metrics/nll_mean") - log(ppl)) <= 1e-9 * log(ppl), "%s: nll_mean", values[vi]);
        CHECK_MSG(fabs(mean_of(nll, 16) - log(ppl)) <= 1e-6 * log(ppl), "%s: mean nll %.9g, log ppl %.9g", values[vi],
                  mean_of(nll, 16), log(ppl));
        CHECK_MSG(fabs(mean_of(nref, 16) - log(ppl_ref)) <= 1e-6 * log(ppl_ref), "%s: mean nll_ref %.9g, log ppl_ref %.9g",
                  values[vi], mean_of(nref, 16), log(ppl_ref));
        const double klm = read_scalar(f, "/metrics/kl_mean");
        CHECK_MSG(fabs(klm - mean_of(kl, 16)) <= 1e-6 * (klm + 1e-6), "%s: kl_mean %.9g, mean kl %.9g", values[vi], klm,
                  mean_of(kl, 16));
        for (int i = 0; i < 16; i++) CHECK_MSG(pos[i] == 15 + i, "%s: position %d is %g", values[vi], i, pos[i]);
        double *lt = xmalloc(sizeof(double) * 16 * 2048), *lr = xmalloc(sizeof(double) * 16 * 2048);
        REQUIRE(h5_read_f64s(f, "/logits/test", lt, 16 * 2048) == 0 && h5_read_f64s(f, "/logits/ref", lr, 16 * 2048) == 0);
        double rl = 0, agree = 0;
        for (int r = 0; r < 16; r++) {
            double d2 = 0, r2 = 0, mt = -INFINITY, mr = -INFINITY, st = 0, sr = 0, klr = 0;
            int at = 0, ar = 0;
            for (int k = 0; k < 2048; k++) {
                const double a = lt[r * 2048 + k], b = lr[r * 2048 + k];
                d2 += (a - b) * (a - b), r2 += b * b;
                if (a > mt) mt = a, at = k; /* (the first maximum, as argmax) */
                if (b > mr) mr = b, ar = k;
            }
            rl += sqrt(d2 / r2) / 16;
            agree += (at == ar) / 16.0;
            /* this row's KL(ref || test) from the dumped logits, each by its own log-sum-exp */
            for (int k = 0; k < 2048; k++) st += exp(lt[r * 2048 + k] - mt), sr += exp(lr[r * 2048 + k] - mr);
            for (int k = 0; k < 2048; k++) {
                const double lpr = lr[r * 2048 + k] - mr - log(sr), lpt = lt[r * 2048 + k] - mt - log(st);
                klr += exp(lpr) * (lpr - lpt);
            }
            CHECK_MSG(fabs(kl[r] - klr) <= 1e-5 * klr + 1e-7, "%s: row %d's kl %.9g, KL(ref || test) from the logits %.9g",
                      values[vi], r, kl[r], klr);
        }
        const double t1 = read_scalar(f, "/metrics/top1_agree");
        CHECK_MSG(fabs(t1 - agree) <= 1e-12, "%s: top1_agree %.6f, from the logits %.6f", values[vi], t1, agree);
        if (vi == 1) CHECK_MSG(agree < 1, "all: every top-1 agrees (%g)", agree);
        const double got = read_scalar(f, "/metrics/logit_rel_l2");
        CHECK_MSG(fabs(got - rl) <= 1e-5 * (rl + 1e-9), "%s: logit_rel_l2 %.9g, from the logits %.9g", values[vi], got, rl);
        if (vi == 0)
            CHECK_MSG(memcmp(nll, nref, sizeof nll) == 0 && memcmp(lt, lr, sizeof(double) * 16 * 2048) == 0,
                      "none: not the reference's numbers");
        else
            CHECK_MSG(rl > 1e-3, "%s: the run's logits are the reference's (rel %g)", values[vi], rl);
        free(lt);
        free(lr);
        char proto[64] = "";
        CHECK(read_group_attr_str(f, "/", "protocol", proto, sizeof proto) == 0 && strcmp(proto, "kv-split-half") == 0);
        kv = read_scalar(f, "/kv/bytes_per_token");
        CHECK_MSG(fabs(kv - bpt[vi]) <= 1e-9 * bpt[vi], "%s: %.6f bytes a token, want %.6f", values[vi], kv, bpt[vi]);
    }
    /* two windows: the second's rows at its own positions, w T + T / 2 - 1 + j (window 32) */
    {
        const char *f2 = run_exp("exp_kv_ternary", LLAMA_DIR, "none", "max_windows=2 logit_rows=32");
        double p2[32];
        REQUIRE(h5_dataset_len(f2, "/logits/positions") == 32 && h5_read_f64s(f2, "/logits/positions", p2, 32) == 0);
        for (int j = 0; j < 32; j++)
            CHECK_MSG(p2[j] == (j < 16 ? 15 + j : 32 + 15 + (j - 16)), "two windows: position %d is %g", j, p2[j]);
    }
    /* the config's capacity budget overridden (mem is in the shipped config, so it can be) */
    const char *f = run_exp("exp_kv_ternary", LLAMA_DIR, "none", "max_windows=1 mem=1GiB");
    CHECK(h5_dataset_len(f, "/logits/positions") == 8);
    CHECK(read_scalar(f, "/capacity/budget") == (double)(1ll << 30));
    /* the program's own defaults where a config has no logit_rows (every shipped one sets
     * 8) and no mem (24GiB) */
    char cmd[4096];
    snprintf(cmd, sizeof cmd,
             "sed '/^logit_rows/d; /^mem /d' configs/exp-kv-ternary.conf > %1$s/nolr.conf && "
             "! grep -q 'logit_rows\\|^mem' %1$s/nolr.conf && "
             "%2$s --config %1$s/nolr.conf --model %3$s --value none --out %1$s/nolr.h5 window=32 max_windows=1 2>&1",
             test_tmpdir(), bin_path("exp_kv_ternary"), test_path(LLAMA_DIR));
    char *log = NULL;
    CHECK_MSG(test_run(cmd, &log) == 0, "%s", log ? log : "");
    free(log);
    snprintf(cmd, sizeof cmd, "%s/nolr.h5", test_tmpdir());
    CHECK_MSG(h5_dataset_len(cmd, "/logits/positions") == 8, "%lld logit rows without logit_rows",
              (long long)h5_dataset_len(cmd, "/logits/positions"));
    CHECK(read_scalar(cmd, "/capacity/budget") == (double)(24ll << 30));
}

/* The metrics' formulas on rows worked by hand: logsumexp over every entry
 * (log 8 for {0, 0, 0, log 5}; the last entry dropped had passed every run-file
 * check, which used the same sum on both sides), KL of a row against itself 0
 * and of {log .5, log .5} against {log .25, log .75} by hand, the relative L2
 * normalised by the second row. */
TEST(metrics_by_hand) {
    const float z[4] = {0.0f, 0.0f, 0.0f, logf(5.0f)};
    CHECK_MSG(fabs(logsumexp_f32(z, 4) - log(8.0)) <= 1e-6, "logsumexp %.9g, want log 8", logsumexp_f32(z, 4));
    const float p[2] = {logf(0.5f), logf(0.5f)}, q[2] = {logf(0.25f), logf(0.75f)};
    const double want = 0.5 * log(0.5 / 0.25) + 0.5 * log(0.5 / 0.75);
    CHECK(kl_ref_run(p, logsumexp_f32(p, 2), p, logsumexp_f32(p, 2), 2) == 0.0);
    const double kl = kl_ref_run(p, logsumexp_f32(p, 2), q, logsumexp_f32(q, 2), 2);
    CHECK_MSG(fabs(kl - want) <= 1e-6, "KL %.9g, want %.9g", kl, want);
    const float a[2] = {2.0f, 0.0f}, b[2] = {1.0f, 0.0f};
    CHECK(rel_l2_row(a, b, 2) == 1.0 && rel_l2_row(b, a, 2) == 0.5);
    /* rows that are not log-probabilities: each normalised by its own log-sum-exp
     * (p = (1/2, 1/2), q = (1/4, 3/4): KL = 1/2 ln(4/3); by the other row's, 0 after
     * the clamp) */
    const float zr[2] = {0.0f, 0.0f}, zq[2] = {7.0f, 7.0f + logf(3.0f)};
    const double kl2 = kl_ref_run(zr, log(2.0), zq, 7.0 + log(4.0), 2);
    CHECK_MSG(fabs(kl2 - 0.5 * log(4.0 / 3.0)) <= 1e-6, "KL %.9g, want %.9g", kl2, 0.5 * log(4.0 / 3.0));
    /* every element counted, the last one too: ||(3, 0, -1)|| / ||(0, 0, 5)|| = sqrt(10) / 5,
     * ||(0, 2)|| / ||(1, 0)|| = 2; a zero reference: the difference's norm, 0 for 0 */
    const float c3[3] = {3.0f, 0.0f, 4.0f}, d3[3] = {0.0f, 0.0f, 5.0f}, e2[2] = {1.0f, 2.0f}, f2[2] = {1.0f, 0.0f},
                g2[2] = {3.0f, 4.0f}, zero[2] = {0.0f, 0.0f};
    CHECK_MSG(fabs(rel_l2_row(c3, d3, 3) - sqrt(10.0) / 5.0) <= 1e-12, "%.12g", rel_l2_row(c3, d3, 3));
    CHECK(rel_l2_row(e2, f2, 2) == 2.0 && rel_l2_row(g2, zero, 2) == 5.0 && rel_l2_row(zero, zero, 2) == 0.0);
    /* the log-sum-exp shifted by the row's maximum, wherever it is: no overflow */
    const float big[2] = {0.0f, 1000.0f}, big2[2] = {1000.0f, 0.0f}, low[2] = {-1000.0f, -1000.0f};
    CHECK_MSG(logsumexp_f32(big, 2) == 1000.0 && logsumexp_f32(big2, 2) == 1000.0 &&
                  fabs(logsumexp_f32(low, 2) - (-1000.0 + log(2.0))) <= 1e-12,
              "%.17g %.17g %.17g", logsumexp_f32(big, 2), logsumexp_f32(big2, 2), logsumexp_f32(low, 2));
}

/* exp-throughput's decode rate is the batch's generated tokens over its steps'
 * time: with one repeat of 2 steps, p50 and p99 are the two steps, so
 * decode_tok_s = 3 x 2 / (p50 + p99) (the prompt's tokens over it had passed);
 * with 32 steps p95 is the second slowest and p99 the slowest, apart (p99
 * written as p95 had passed: of 3 steps they are one). */
TEST(exp_throughput_rates_from_steps) {
    const char *f = run_exp("exp_throughput", LLAMA_DIR, "ternary",
                            "batches=3 prompt_len=8 gen_len=2 warmup=0 repeats=1 max_windows=1");
    const double dec = read_scalar(f, "/throughput/decode_tok_s"), p50 = read_scalar(f, "/throughput/latency_ms_p50"),
                 p99 = read_scalar(f, "/throughput/latency_ms_p99");
    CHECK_MSG(fabs(dec - 6.0 / ((p50 + p99) / 1e3)) <= 1e-9 * dec, "decode %.9g tok/s, steps %g + %g ms", dec, p50, p99);
    f = run_exp("exp_throughput", LLAMA_DIR, "ternary", "batches=1 prompt_len=8 gen_len=32 warmup=0 repeats=1 max_windows=1");
    const double q50 = read_scalar(f, "/throughput/latency_ms_p50"), q95 = read_scalar(f, "/throughput/latency_ms_p95"),
                 q99 = read_scalar(f, "/throughput/latency_ms_p99");
    CHECK_MSG(q50 <= q95 && q95 < q99, "p50 %g p95 %g p99 %g", q50, q95, q99);
}

/* The reference cache is keyed on the token file's bytes, not its name: a
 * token file rewritten in place (other tokens) is another reference (keyed on
 * the name, the old reference would be read back for the new tokens). */
TEST(exp_reference_cache_keys_the_tokens) {
    const char *dir = test_tmpdir();
    char tokf[800], out[800], cmd[8192], *log = NULL;
    snprintf(tokf, sizeof tokf, "%s/retok.i32", dir);
    snprintf(out, sizeof out, "%s/retok/p.h5", dir);
    double ppl_ref[2];
    for (int i = 0; i < 2; i++) {
        /* the second time the same name holds the stream 32 tokens on */
        snprintf(cmd, sizeof cmd, "mkdir -p '%s/retok' && tail -c +%d '%s' > '%s' && %s --model %s --value twn --out %s "
                 "tokens=%s window=32 max_windows=1 2>&1",
                 dir, 1 + 128 * i, test_path(TOKENS_FILE), tokf, bin_path("exp_threshold"), test_path(LLAMA_DIR), out,
                 tokf);
        const int rc = test_run(cmd, &log);
        CHECK_MSG(rc == 0 && !strstr(log, "reference: cached"), "run %d: rc %d: %s", i, rc, log);
        free(log);
        ppl_ref[i] = read_scalar(out, "/metrics/ppl_ref");
    }
    CHECK_MSG(ppl_ref[0] != ppl_ref[1], "ppl_ref %g both times", ppl_ref[0]);
}

/* A run file's /weights/rel_err is each linear's ternary error against its own
 * dense weights (gate's had stood in for up's, unseen), for the spec the run
 * file records; a window under 2 is refused by the program (windows of 2 and 3 run:
 * exp_bounds_and_model_dot). */
TEST(exp_weights_rel_err_by_linear) {
    const char *f = run_exp("exp_threshold", LLAMA_DIR, "twn", "max_windows=1");
    char spec[256] = "";
    REQUIRE(read_group_attr_str(f, "/", "quant_spec", spec, sizeof spec) == 0 && spec[0]);
    ModelLoadOpts oq = {.quant = spec}, od = {.dense = 1};
    Model mq, md;
    REQUIRE(model_load(test_path(LLAMA_DIR), &oq, &mq) == 0);
    REQUIRE(model_load(test_path(LLAMA_DIR), &od, &md) == 0);
    const int nl = 7 * mq.cfg.n_layers;
    double *re = xmalloc(sizeof(double) * (size_t)nl);
    REQUIRE(h5_read_f64s(f, "/weights/rel_err", re, nl) == 0);
    for (int l = 0, i = 0; l < mq.cfg.n_layers; l++) {
        Linear *q[7] = {&mq.layers[l].q, &mq.layers[l].k, &mq.layers[l].v, &mq.layers[l].o,
                        &mq.layers[l].gate, &mq.layers[l].up, &mq.layers[l].down};
        Linear *d[7] = {&md.layers[l].q, &md.layers[l].k, &md.layers[l].v, &md.layers[l].o,
                        &md.layers[l].gate, &md.layers[l].up, &md.layers[l].down};
        for (int k = 0; k < 7; k++, i++) {
            REQUIRE(q[k]->t && d[k]->w);
            const double want = tern_rel_error(q[k]->t, d[k]->w);
            CHECK_MSG(fabs(re[i] - want) <= 1e-12 * want, "%s: rel_err %.9g, want %.9g", q[k]->name, re[i], want);
        }
    }
    free(re);
    model_free(&mq);
    model_free(&md);
    char cmd[2048], *log = NULL;
    snprintf(cmd, sizeof cmd, "%s --model %s --value twn --out %s/w1.h5 window=1 max_windows=1 2>&1",
             bin_path("exp_threshold"), test_path(LLAMA_DIR), test_tmpdir());
    const int rc = test_run(cmd, &log);
    CHECK_MSG(rc == 2 && strstr(log, "window = 1, must be at least 2"), "rc %d: %s", rc, log);
    free(log);
}
