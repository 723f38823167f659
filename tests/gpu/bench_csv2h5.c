/* bench_csv2h5.c — converts the CSV written by build/gpu/bench_gpu (on the
 * device machine, which has no libhdf5) into an HDF5 run file through
 * src/log/h5log.h.  Usage: bench_csv2h5 IN.csv OUT.h5
 *
 * Layout: root attributes experiment = "bench-gpu", device, sms, group,
 * copy_bw_gbs (from the CSV's "# key=value;..." header), every key of that
 * header also as a string attribute "run_<key>" (the run's own record:
 * run_utc, run_reps, run_calls_min, run_commit, run_host .. where bench_gpu
 * wrote them) and the provenance attributes: ternlab_version, and git_commit,
 * created_utc and host of the run where its header has commit, utc and host
 * (bench_gpu from the thirty-sixth session on; else "unknown" and the
 * conversion's time and machine); /bench/{N, K, M} (int64), /bench/kernel (strings),
 * /bench/{time_us, gbs, frac_copy, tflops, speedup_vs_cublas} (f64) and,
 * when the CSV has the column (bench_gpu from 6e90586 on), /bench/config
 * (strings: the ternary kernel the dispatch chose, "" for the cuBLAS and
 * read-floor rows), one
 * entry per CSV row. */
#include "core/err.h"
#include "eval/experiment.h" /* TERNLAB_VERSION */
#include "log/h5log.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_ROWS 4096

static int fail(const char *what) {
    fprintf(stderr, "bench_csv2h5: %s: %s\n", what, err_msg());
    return 1;
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: bench_csv2h5 IN.csv OUT.h5\n");
        return 2;
    }
    FILE *f = fopen(argv[1], "r");
    if (!f) {
        fprintf(stderr, "bench_csv2h5: cannot open %s (run make bench-gpu first)\n", argv[1]);
        return 1;
    }
    static int64_t N[MAX_ROWS], K[MAX_ROWS], M[MAX_ROWS];
    static double t[MAX_ROWS], gbs[MAX_ROWS], frac[MAX_ROWS], tf[MAX_ROWS], sp[MAX_ROWS];
    static char kname[MAX_ROWS][32], cfg[MAX_ROWS][96];
    const char *kp[MAX_ROWS], *cp[MAX_ROWS];
    int has_cfg = 0;
    char line[1024], device[256] = "unknown", group[32] = "unknown", header[1024] = "", commit[96] = "",
                     utc[40] = "", host[256] = "";
    double copy_bw = 0;
    int sms = 0, n = 0;
    while (fgets(line, sizeof line, f)) {
        if (line[0] == '#') {
            char *p;
            if (!header[0]) snprintf(header, sizeof header, "%s", line + 1 + (line[1] == ' '));
            if ((p = strstr(line, "device="))) sscanf(p, "device=%255[^;\n]", device);
            if ((p = strstr(line, "sms="))) sscanf(p, "sms=%d", &sms);
            if ((p = strstr(line, "copy_bw_gbs="))) sscanf(p, "copy_bw_gbs=%lf", &copy_bw);
            if ((p = strstr(line, "group="))) sscanf(p, "group=%31[^;\n]", group);
            if ((p = strstr(line, ";commit="))) sscanf(p, ";commit=%95[^;\n]", commit);
            if ((p = strstr(line, ";utc="))) sscanf(p, ";utc=%39[^;\n]", utc);
            if ((p = strstr(line, ";host="))) sscanf(p, ";host=%255[^;\n]", host);
            continue;
        }
        if (!strncmp(line, "N,", 2)) {
            has_cfg = strstr(line, ",config") != NULL;
            continue;
        }
        if (n == MAX_ROWS) {
            fprintf(stderr, "bench_csv2h5: more than %d rows in %s\n", MAX_ROWS, argv[1]);
            fclose(f);
            return 1;
        }
        long long a, b, c;
        int end = 0;
        if (sscanf(line, "%lld,%lld,%lld,%31[^,],%lf,%lf,%lf,%lf,%lf%n", &a, &b, &c, kname[n], &t[n],
                   &gbs[n], &frac[n], &tf[n], &sp[n], &end) != 9 ||
            (has_cfg && line[end] != ',')) {
            fprintf(stderr, "bench_csv2h5: %s: malformed row %d: %s", argv[1], n + 1, line);
            fclose(f);
            return 1;
        }
        N[n] = a, K[n] = b, M[n] = c;
        kp[n] = kname[n];
        cfg[n][0] = 0;
        if (has_cfg) sscanf(line + end + 1, "%95[^\r\n]", cfg[n]);
        cp[n] = cfg[n];
        n++;
    }
    fclose(f);
    if (n == 0) {
        fprintf(stderr, "bench_csv2h5: %s has no data rows\n", argv[1]);
        return 1;
    }
    H5Log *lg = h5log_create(argv[2]);
    if (!lg) return fail("create");
    if (h5log_write_provenance(lg, TERNLAB_VERSION, commit[0] ? commit : NULL) ||
        (utc[0] && h5log_attr_str(lg, "/", "created_utc", utc)) ||
        (host[0] && h5log_attr_str(lg, "/", "host", host)) ||
        h5log_attr_str(lg, "/", "experiment", "bench-gpu") ||
        h5log_attr_str(lg, "/", "device", device) || h5log_attr_str(lg, "/", "group", group) ||
        h5log_attr_i64(lg, "/", "sms", sms) || h5log_attr_f64(lg, "/", "copy_bw_gbs", copy_bw) ||
        h5log_i64(lg, "/bench/N", N, n) || h5log_i64(lg, "/bench/K", K, n) ||
        h5log_i64(lg, "/bench/M", M, n) || h5log_strings(lg, "/bench/kernel", kp, n) ||
        h5log_f64(lg, "/bench/time_us", t, n) || h5log_f64(lg, "/bench/gbs", gbs, n) ||
        h5log_f64(lg, "/bench/frac_copy", frac, n) || h5log_f64(lg, "/bench/tflops", tf, n) ||
        h5log_f64(lg, "/bench/speedup_vs_cublas", sp, n) ||
        (has_cfg && h5log_strings(lg, "/bench/config", cp, n))) {
        h5log_abort(lg);
        return fail("write");
    }
    /* the header's key=value pairs, each as run_<key> */
    header[strcspn(header, "\r\n")] = 0;
    for (char *save = NULL, *kv = strtok_r(header, ";", &save); kv; kv = strtok_r(NULL, ";", &save)) {
        char *eq = strchr(kv, '=');
        if (!eq || eq == kv || eq - kv > 40) continue;
        char name[48];
        snprintf(name, sizeof name, "run_%.*s", (int)(eq - kv), kv);
        if (h5log_attr_str(lg, "/", name, eq + 1)) {
            h5log_abort(lg);
            return fail("write");
        }
    }
    if (h5log_commit(lg)) return fail("commit");
    printf("wrote %s (%d rows)\n", argv[2], n);
    return 0;
}
