/* ternlab bench (the CPU kernel benchmark) and bench-e2e: they run and write
 * complete HDF5 files with every column.  No timing is asserted (a shared
 * machine); correctness of the kernels is tests/test_tern_kernels.c's job. */
#include "test.h"
#include "fixtures.h"
#include "core/err.h"
#include "kv/kv_ternary.h"
#include "log/h5log.h"
#include "runtime/cuda_engine.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

TEST(bench_quick_writes_every_column) {
    char path[512], *out = NULL;
    static char cmd[12000];
    snprintf(path, sizeof path, "%s/bench.h5", test_tmpdir());
    snprintf(cmd, sizeof cmd, "%s bench --quick --out %s", bin_path("ternlab"), path);
    int rc = test_run(cmd, &out);
    CHECK_MSG(rc == 0, "rc %d: %s", rc, out);
    /* the decode rows print the back-to-back int8 timing */
    CHECK_MSG(out && strstr(out, "int8 alone, back to back:") && strstr(out, "sgemv alone:"), "%s", out);
    free(out);
    const char *need[] = {"/bench/rows", "/bench/cols", "/bench/n", "/bench/tern_f32_ms",
                          "/bench/tern_i8_ms", "/bench/blas_f32_ms", "/bench/tern_i8_warm_ms",
                          "/bench/blas_f32_warm_ms", "/bench/speedup_i8_warm_vs_blas_warm",
                          "/bench/speedup_f32_vs_blas", "/bench/speedup_i8_vs_blas",
                          "/bench/tern_f32_frac_mem_bw", "/bench/tern_i8_frac_mem_bw", "/bench/blas_f32_frac_mem_bw",
                          "/bench/tern_f32_ref_err", "/bench/tern_f32_vs_blas_max_rel_diff", "/bench/reps", NULL};
    int v = h5log_verify(path, need);
    CHECK_MSG(v == 0, "%s", err_msg());
    /* ternlab verify names it a benchmark's file (it had said only "missing dataset /metrics/ppl") */
    CHECK_MSG(h5log_verify_schema(path) != 0 && strstr(err_msg(), "a benchmark file, ternlab bench's"), "%s",
              err_msg());
    /* the fraction of the memory read bandwidth measured in the same run (the contract's
     * "fraction of the hardware limit": it had none), the twins' check, the rounds, the CPU */
    const double bw = h5_attr_f64(path, "/", "mem_read_gbs");
    CHECK_MSG(bw > 0.1, "mem_read_gbs %g", bw);
    char cpu[256] = "";
    CHECK(h5log_root_attr_str(path, "cpu", cpu, sizeof cpu) == 0 && cpu[0]);
    double gbs[64], frac[64], err[64], reps[64];
    const int64_t nr = h5_dataset_len(path, "/bench/tern_i8_gbs");
    REQUIRE(nr > 0 && nr <= 64);
    CHECK(h5_read_f64s(path, "/bench/tern_i8_gbs", gbs, nr) == 0 &&
          h5_read_f64s(path, "/bench/tern_i8_frac_mem_bw", frac, nr) == 0 &&
          h5_read_f64s(path, "/bench/tern_f32_ref_err", err, nr) == 0 && h5_read_f64s(path, "/bench/reps", reps, nr) == 0);
    for (int64_t i = 0; i < nr; i++) {
        CHECK_MSG(fabs(frac[i] - gbs[i] / bw) <= 1e-12 * frac[i], "row %lld: frac %g, gbs / bw %g", (long long)i,
                  frac[i], gbs[i] / bw);
        CHECK_MSG(err[i] <= 1e-5 && reps[i] >= 3, "row %lld: ref err %g, reps %g", (long long)i, err[i], reps[i]);
    }
    /* decode rows time int8 and sgemv alone, back to back, and give their ratio; other rows 0 */
    double n_[64], i8w[64], blw[64], spw[64];
    CHECK(h5_read_f64s(path, "/bench/n", n_, nr) == 0 && h5_read_f64s(path, "/bench/tern_i8_warm_ms", i8w, nr) == 0 &&
          h5_read_f64s(path, "/bench/blas_f32_warm_ms", blw, nr) == 0 &&
          h5_read_f64s(path, "/bench/speedup_i8_warm_vs_blas_warm", spw, nr) == 0);
    for (int64_t i = 0; i < nr; i++) {
        if (n_[i] == 1)
            CHECK_MSG(i8w[i] > 0 && blw[i] > 0 && fabs(spw[i] - blw[i] / i8w[i]) <= 1e-12 * spw[i],
                      "row %lld: int8 alone %g ms, sgemv alone %g ms, ratio %g", (long long)i, i8w[i], blw[i], spw[i]);
        else
            CHECK_MSG(i8w[i] == 0 && blw[i] == 0 && spw[i] == 0, "row %lld (n %g): %g %g %g", (long long)i, n_[i],
                      i8w[i], blw[i], spw[i]);
    }
    /* every column from its own times (each a mutation from an audit that had passed): GFLOP/s
     * 2 n rows cols over the time, the ratios OpenBLAS / ternary, each kernel's fraction of the
     * read bandwidth, OpenBLAS's bytes (f32 weights, activations in and out) and the two ternary
     * kernels' difference (f32 against int8 activations: 3 n cols bytes); --quick's shapes */
    {
        static const char *const cols_[] = {"rows", "cols", "tern_f32_ms", "tern_i8_ms", "blas_f32_ms",
                                            "tern_f32_gflops", "tern_i8_gflops", "blas_f32_gflops", "tern_f32_gbs",
                                            "blas_f32_gbs", "speedup_f32_vs_blas", "speedup_i8_vs_blas",
                                            "tern_f32_frac_mem_bw", "blas_f32_frac_mem_bw"};
        enum { NC = sizeof cols_ / sizeof cols_[0] };
        static double c[NC][64];
        for (int k = 0; k < NC; k++) {
            char p[96];
            snprintf(p, sizeof p, "/bench/%s", cols_[k]);
            REQUIRE(h5_read_f64s(path, p, c[k], nr) == 0);
        }
        double *rows = c[0], *cl = c[1], *ms[3] = {c[2], c[3], c[4]}, *gf[3] = {c[5], c[6], c[7]};
        int big = 0, wrong_big = 0, bad = 0;
        for (int64_t i = 0; i < nr; i++) {
            const double n = n_[i], flops = 2 * n * rows[i] * cl[i];
            for (int k = 0; k < 3; k++) bad += fabs(gf[k][i] - flops / (ms[k][i] * 1e-3) * 1e-9) > 1e-9 * gf[k][i];
            bad += fabs(c[10][i] - ms[2][i] / ms[0][i]) > 1e-12 * c[10][i];
            bad += fabs(c[11][i] - ms[2][i] / ms[1][i]) > 1e-12 * c[11][i];
            bad += fabs(c[12][i] - c[8][i] / bw) > 1e-12 * c[12][i] || fabs(c[13][i] - c[9][i] / bw) > 1e-12 * c[13][i];
            const double blas_bytes = rows[i] * cl[i] * 4 + n * cl[i] * 4 + n * rows[i] * 4;
            bad += fabs(c[9][i] * ms[2][i] * 1e6 - blas_bytes) > 1e-9 * blas_bytes;
            const double diff = c[8][i] * ms[0][i] * 1e6 - gbs[i] * ms[1][i] * 1e6;
            bad += fabs(diff - 3 * n * cl[i]) > 1e-9 * (c[8][i] * ms[0][i] * 1e6);
            big += rows[i] == 4096 && cl[i] == 14336;
            wrong_big += rows[i] == 14336 || (rows[i] > 768 && !(rows[i] == 4096 && cl[i] == 14336));
        }
        CHECK_MSG(bad == 0, "%d column values not as their times give", bad);
        CHECK_MSG(big == 2 && wrong_big == 0, "--quick: 4096x14336 in %d rows, %d rows of other large shapes", big,
                  wrong_big);
        CHECK(h5_attr_f64(path, "/", "quick") == 1);
    }
    /* --fixture: the fixture shapes only */
    snprintf(cmd, sizeof cmd, "%s bench --quick --fixture --out %s/fx.h5 > /dev/null", bin_path("ternlab"), test_tmpdir());
    REQUIRE(test_run(cmd, NULL) == 0);
    {
        char fx[600];
        double r_[64], c_[64];
        snprintf(fx, sizeof fx, "%s/fx.h5", test_tmpdir());
        const int64_t nf = h5_dataset_len(fx, "/bench/rows");
        REQUIRE(nf > 0 && nf <= 64 && h5_read_f64s(fx, "/bench/rows", r_, nf) == 0 &&
                h5_read_f64s(fx, "/bench/cols", c_, nf) == 0);
        int large = 0;
        for (int64_t i = 0; i < nf; i++) large += r_[i] > 768 || c_[i] > 768;
        CHECK_MSG(large == 0 && nf == 12, "--fixture: %lld rows, %d of a large shape", (long long)nf, large);
    }
    /* --out twice: refused before anything is written */
    char bin[4096];
    REQUIRE(realpath(bin_path("ternlab"), bin));
    snprintf(cmd, sizeof cmd, "cd %s && %s bench --quick --out a2.h5 --out b2.h5 2>&1; echo \"rc=$?\"; ls", test_tmpdir(),
             bin);
    REQUIRE(test_run(cmd, &out) == 0);
    CHECK_MSG(out && strstr(out, "given more than once") && strstr(out, "rc=2\n") && !strstr(out, "a2.h5") &&
                  !strstr(out, "b2.h5"),
              "%s", out ? out : "");
    free(out);
    /* a place the file cannot be written fails before the benchmark runs (it had run it all first) */
    snprintf(cmd, sizeof cmd, "%s bench --quick --out /proc/nope.h5 2>&1", bin_path("ternlab"));
    rc = test_run(cmd, &out);
    CHECK_MSG(rc == 1 && out && strstr(out, "/proc/nope.h5") && !strstr(out, "shape (rows x cols)"), "rc %d: %s", rc,
              out ? out : "");
    free(out);
}

/* --par-scale scales the kernels' fork thresholds (to measure them on other
 * machines): 0 forks the ternary kernels' regions, a huge scale none, and the
 * run file records the scale and the count. */
TEST(bench_par_scale_reaches_the_kernels) {
    const char *scales[] = {"0", "1e30"};
    for (int i = 0; i < 2; i++) {
        char path[512], cmd[1024], *out = NULL;
        snprintf(path, sizeof path, "%s/par%d.h5", test_tmpdir(), i);
        snprintf(cmd, sizeof cmd, "%s bench --quick --fixture --par-scale %s --out %s", bin_path("ternlab"), scales[i],
                 path);
        int rc = test_run(cmd, &out);
        CHECK_MSG(rc == 0 && strstr(out, i ? "fork thresholds x 1e+30" : "fork thresholds x 0"), "rc %d: %s", rc, out);
        free(out);
        const double scale = h5_attr_f64(path, "/", "par_scale"), forks = h5_attr_f64(path, "/", "par_forks");
        CHECK_MSG(scale == atof(scales[i]) && (i ? forks == 0 : forks > 0), "--par-scale %s: par_scale %g, par_forks %g",
                  scales[i], scale, forks);
    }
}

/* The rows of a tiny bench-e2e table under KV policy kv: each (into *bad
 * where not) with bf16 its own reference (1.00) and every other row a ratio
 * to bf16 under the same policy. */
static int tiny_rows(const char *out, const char *want_kv, int *bad) {
    int rows = 0;
    *bad = 0;
    for (const char *l = strstr(out, "| tiny |"); l; l = strstr(l + 1, "| tiny |")) {
        char cfg[16] = "", kv[16] = "";
        double ratio = 0;
        if (sscanf(l, "| tiny | %*d | %15s | %15s | %*s | %*d | %*f | %*f | %lf |", cfg, kv, &ratio) != 3) {
            (*bad)++;
            continue;
        }
        if (strcmp(kv, want_kv) != 0) continue;
        *bad += strcmp(cfg, "bf16") == 0 ? fabs(ratio - 1.0) > 1e-9 : !(ratio > 0);
        rows++;
    }
    return rows;
}

/* Without a GPU, bench-e2e says so and fails cleanly; with one, a tiny
 * synthetic run writes its file. */
TEST(bench_e2e_runs_or_refuses) {
    char path[512], cmd[1024], *out = NULL;
    snprintf(path, sizeof path, "%s/e2e.h5", test_tmpdir());
    snprintf(cmd, sizeof cmd, "%s bench-e2e --shapes tiny --batches 1,4 --steps 4 --prefill 64 --out %s",
             bin_path("ternlab"), path);
    int rc = test_run(cmd, &out);
    char why[256] = "";
    if (!cuda_backend_available(why, sizeof why)) {
        /* the measuring child's error (no device, or a build without CUDA) reaches the parent's message */
        CHECK_MSG(rc == 1 && strstr(out, "ternlab bench-e2e: ") && strstr(out, why), "rc %d: %s (want \"%s\")", rc,
                  out, why);
        free(out);
        out = NULL;
        snprintf(cmd, sizeof cmd, "%s bench-e2e --shapes tiny --same-process --out %s", bin_path("ternlab"), path);
        rc = test_run(cmd, &out);
        CHECK_MSG(rc == 1 && strstr(out, "ternlab bench-e2e: ") && strstr(out, why), "rc %d: %s (want \"%s\")", rc,
                  out, why);
    } else {
        const char *need[] = {"/e2e/shape",       "/e2e/config",           "/e2e/kv_policy",
                              "/e2e/tp",          "/e2e/chained",          "/e2e/tokens_per_s", "/e2e/lm_gemv",
                              "/e2e/roofline_fraction", "/e2e/speedup_vs_bf16", "/e2e/kv_bytes_per_token", NULL};
        for (int same = 0; same < 2; same++) { /* a process per configuration (chained decode steps),
                                                * then one process (steps synchronised) */
            if (same) {
                free(out);
                out = NULL;
                snprintf(cmd, sizeof cmd, "%s bench-e2e --shapes tiny --batches 1,4 --steps 4 --prefill 64 "
                         "--same-process --sync-steps --out %s", bin_path("ternlab"), path);
                rc = test_run(cmd, &out);
            }
            CHECK_MSG(rc == 0, "rc %d: %s", rc, out);
            CHECK_MSG(strstr(out, same ? "each synchronised" : "chained: the next step") != NULL, "%s", out);
            CHECK_MSG(h5log_verify(path, need) == 0, "%s", err_msg());
            /* 3 configurations x (2 batches + prefill) rows; bf16 is its own reference (1.00),
             * every row has a ratio to it */
            int bad = 0;
            const int rows = tiny_rows(out, "none", &bad);
            CHECK_MSG(rows == 9 && bad == 0, "%d rows, %d bad: %s", rows, bad, out);
            /* the LM head on ternlab's bf16 GEMV: in the ternary configurations' rows (1 and 4
             * logit rows a decode step, the prefill's last token), not bf16's (cuBLAS, the reference) */
            double lm[9];
            const double want[9] = {0, 0, 0, 1, 1, 1, 1, 1, 1};
            CHECK(h5_read_f64s(path, "/e2e/lm_gemv", lm, 9) == 0);
            for (int i = 0; i < 9; i++) CHECK_MSG(lm[i] == want[i], "row %d: lm_gemv %g, want %g", i, lm[i], want[i]);
        }
        /* --kv none,all: each configuration under each policy, opened with it — the
         * rows under all report the ternary pool's bytes per token slot (the tiny
         * shape: 4 layers x 2 KV heads x head_dim 64), none the f32 pages', and a
         * decode step under all moves fewer bytes than under none */
        free(out);
        out = NULL;
        snprintf(cmd, sizeof cmd, "%s bench-e2e --shapes tiny --configs bf16,tern-i8 --kv none,all --batches 2 "
                 "--prompt 40 --steps 4 --prefill 64 --out %s", bin_path("ternlab"), path);
        rc = test_run(cmd, &out);
        CHECK_MSG(rc == 0, "rc %d: %s", rc, out);
        CHECK_MSG(h5log_verify(path, need) == 0, "%s", err_msg());
        double kvb[8], gb[8];
        CHECK(h5_read_f64s(path, "/e2e/kv_bytes_per_token", kvb, 8) == 0 &&
              h5_read_f64s(path, "/e2e/bytes_per_step", gb, 8) == 0);
        /* rows: (none: bf16 decode, prefill; tern-i8 decode, prefill), then the same under all */
        const double f32b = 4.0 * 2 * 2 * 64 * 4, ternb = 4.0 * 2 * (double)kvt_bytes_per_token_head(64, 1);
        for (int i = 0; i < 8; i++) CHECK_MSG(kvb[i] == (i < 4 ? f32b : ternb), "row %d: %g bytes a token", i, kvb[i]);
        for (int i = 0; i < 4; i += 2) CHECK_MSG(gb[i + 4] < gb[i], "decode row %d: %g >= %g bytes", i, gb[i + 4], gb[i]);
        int bad_all = 0, bad_none = 0;
        const int all_rows = tiny_rows(out, "all", &bad_all), none_rows = tiny_rows(out, "none", &bad_none);
        CHECK_MSG(all_rows == 4 && none_rows == 4 && bad_all + bad_none == 0,
                  "%d rows under all, %d under none, %d without their ratio to bf16 under the same policy: %s",
                  all_rows, none_rows, bad_all + bad_none, out);
    }
    free(out);
}

/* A malformed TERNLAB_CUDA_TBM (tern_cuda_tbm_override's list) fails the
 * ternary run with a message naming it, not a crash or a silent default. */
TEST(bench_e2e_bad_tbm_env) {
    char why[256] = "";
    if (!cuda_backend_available(why, sizeof why)) {
        test_skip("%s", why);
        return;
    }
    char path[512], cmd[1024], *out = NULL;
    snprintf(path, sizeof path, "%s/e2e_tbm.h5", test_tmpdir());
    snprintf(cmd, sizeof cmd,
             "TERNLAB_CUDA_TBM=4096x4096:61520 %s bench-e2e --shapes tiny --configs tern-i8 --batches 1 --steps 2 "
             "--prefill 64 --out %s",
             bin_path("ternlab"), path);
    const int rc = test_run(cmd, &out);
    CHECK_MSG(rc == 1 && strstr(out, "TERNLAB_CUDA_TBM") && strstr(out, "expected ROWSxCOLS:V"), "rc %d: %s", rc, out);
    free(out);
}

/* Bad bench-e2e arguments are usage errors (exit 2) before any GPU work. */
TEST(bench_e2e_bad_arguments) {
    const char *bad[] = {"--shapes foo", "--steps 999999999", "--batches 1,x", "--tp 0",
                         "--prompt -5", "--prefill 100000", "--nosuch 1", "--configs bf16,fp8",
                         "--shapes 7b,27b,tiny,7b,27b,tiny,7b --tp 1,2,3,4 --batches 1,2,3,4,5,6,7,8",
                         /* more values than the lists hold, trailing characters, a list past its buffer */
                         "--batches 1,2,3,4,5,6,7,8,9", "--tp 1,2,3,4,1", "--prompt 32x", "--steps 4.5",
                         "--shapes 7b,7b,7b,7b,7b,7b,7b,7b,7b,7b,7b,7b,7b,7b,7b,7b,7b,7b,7b,7b,7b,7b",
                         "--shapes ,", "--configs ''", "--kv bogus", "--kv all --tp 1,2", "--kv ,",
                         "--kv none,all,encoder,decoder,all", "--kv all@layers=1-0"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char cmd[1024], *out = NULL;
        snprintf(cmd, sizeof cmd, "%s bench-e2e %s", bin_path("ternlab"), bad[i]);
        int rc = test_run(cmd, &out);
        CHECK_MSG(rc == 2 && strstr(out, "bench-e2e"), "%s: rc %d: %s", bad[i], rc, out);
        free(out);
    }
}

/* The messages say what is wrong: an option without its value is not an
 * "unknown option", a stray word is not an option "missing its value". */
TEST(bench_argument_messages) {
    const struct {
        const char *args, *want, *not_want;
    } cases[] = {{"bench --out", "--out needs a value", "unknown"},
                 {"bench extra", "unexpected argument 'extra'", "needs a value"},
                 {"bench --nosuch", "unknown option '--nosuch'", NULL},
                 {"bench --par-scale -1", "--par-scale '-1': expected a finite number >= 0", NULL},
                 {"bench --par-scale nan", "--par-scale 'nan': expected a finite number", NULL},
                 {"bench --par-scale", "--par-scale '': expected", NULL},
                 {"bench-e2e extra", "unexpected argument 'extra'", "needs a value"},
                 {"bench-e2e --out", "--out needs a value", "unknown"},
                 {"bench-e2e --nosuch", "unknown option --nosuch", "needs a value"},
                 /* every shape name is known (the first accepted, the second not) */
                 {"bench-e2e --shapes 7b-hd256,foo", "unknown --shapes entry 'foo'", "'7b-hd256'"},
                 {"bench-e2e --shapes 27b,7b-hd25", "unknown --shapes entry '7b-hd25'", "'27b'"}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char cmd[1024], *out = NULL;
        snprintf(cmd, sizeof cmd, "%s %s", bin_path("ternlab"), cases[i].args);
        int rc = test_run(cmd, &out);
        CHECK_MSG(rc == 2 && strstr(out, cases[i].want) && (!cases[i].not_want || !strstr(out, cases[i].not_want)),
                  "%s: rc %d: %s (want \"%s\")", cases[i].args, rc, out, cases[i].want);
        free(out);
    }
}

/* Every command the main usage says "--device cuda runs" takes --device (bench,
 * the CPU benchmark, had been listed and answered "unknown option"). */
TEST(bench_device_claim_in_usage_holds) {
    char cmd[1024], *usage = NULL;
    snprintf(cmd, sizeof cmd, "%s --help", bin_path("ternlab"));
    REQUIRE(test_run(cmd, &usage) == 0 && usage);
    const char *claim = strstr(usage, "--device cuda runs ");
    REQUIRE(claim != NULL);
    const char *end = strstr(claim, "on the GPU");
    REQUIRE(end != NULL);
    const char *cmds[] = {"info", "ppl", "logits", "generate", "quantize", "verify", "diff", "bench", "bench-e2e"};
    int listed = 0;
    for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++) {
        size_t n = strlen(cmds[i]);
        int in_claim = 0;
        for (const char *p = claim + strlen("--device cuda runs "); p < end && (p = strstr(p, cmds[i])) && p < end; p += n)
            if ((p[-1] == ' ' || p[-1] == '\n') && (p[n] == ' ' || p[n] == ',' || p[n] == '\n')) in_claim = 1;
        if (!in_claim) continue;
        listed++;
        char *out = NULL;
        snprintf(cmd, sizeof cmd, "%s %s --device cuda", bin_path("ternlab"), cmds[i]);
        test_run(cmd, &out);
        CHECK_MSG(out && !strstr(out, "unknown option") && !strstr(out, "does not apply"),
                  "the usage says --device cuda runs %s, which answers: %s", cmds[i], out ? out : "");
        free(out);
    }
    CHECK_MSG(listed >= 3, "%d commands found in the --device sentence: %.*s", listed, (int)(end - claim), claim);
    free(usage);
}

/* scripts/trace_step.py (the timing probe's summary, `make trace`) on a made-up
 * trace: records sorted by the time after the wait split into launches at a
 * change of call site or a full grid (two launches of one site back to back),
 * each launch's share is its release to the next one's, a mark goes to the
 * launch running at its end. */
TEST(trace_step_summary) {
    char path[512], cmd[1024], *out = NULL;
    snprintf(path, sizeof path, "%s/trace.txt", test_tmpdir());
    FILE *f = fopen(path, "w");
    REQUIRE(f != NULL);
    /* file line grid cta sm t0 t1 kind: A (1:10, one CTA), B (2:20, two CTAs) twice, A again;
     * a mark of B's first launch (CTA 0: its point 300 ns after the wait, its end 500 later) */
    fputs("# step tokens=1 records=7\n"
          "1 10 1 0 5 900 1000 0\n"
          "2 20 2 1 8 1600 2100 0\n"
          "2 20 2 0 7 1500 2000 0\n"
          "2 21 2 0 7 2300 2800 1\n"
          "2 20 2 0 7 2500 4000 0\n"
          "2 20 2 1 9 2600 4050 0\n"
          "1 10 1 0 5 3000 5000 0\n",
          f);
    fclose(f);
    snprintf(cmd, sizeof cmd, "/usr/bin/python3 scripts/trace_step.py %s --seq", path);
    int rc = test_run(cmd, &out);
    REQUIRE(out != NULL);
    CHECK_MSG(rc == 0, "rc %d: %s", rc, out);
    CHECK_MSG(strstr(out, "4 launches, 4.0 us from the first release to the last"), "%s", out);
    const char *a = strstr(out, "\n  00000001:10 "), *b = strstr(out, "\n  00000002:20 ");
    int ca = 0, cb = 0;
    double sa = 0, sb = 0, pre = 0, body = 0, tail = 0;
    CHECK_MSG(a && sscanf(a, " 00000001:10 %d %lf", &ca, &sa) == 2 && ca == 2 && fabs(sa - 1.0) < 1e-9,
              "A: %d calls, %.2f us: %s", ca, sa, out);
    CHECK_MSG(b && sscanf(b, " 00000002:20 %d %lf %*f %*f %*f%% %lf %lf %lf", &cb, &sb, &pre, &body, &tail) == 5 &&
                  cb == 2 && fabs(sb - 3.0) < 1e-9 && fabs(pre - 0.3) < 1e-9 && fabs(body - 0.5) < 1e-9 &&
                  fabs(tail - 1.2) < 1e-9,
              "B: %d calls, %.2f us, marks %.2f %.2f %.2f: %s", cb, sb, pre, body, tail, out);
    free(out);
}
