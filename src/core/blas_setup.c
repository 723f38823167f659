#include "core/blas_setup.h"

#include <cblas.h>
#include <math.h>
#include <omp.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char *wanted_core(void) {
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq"))
        return "SkylakeX";
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return "Haswell";
    return NULL;
}

static int weaker(const char *have, const char *want) {
    /* cores that lack AVX2 kernels, which DYNAMIC_ARCH falls back to when detection fails */
    static const char *old[] = {"Prescott", "Core2", "Penryn", "Dunnington", "Nehalem",
                                "Atom", "Sandybridge", "Katmai", "Northwood", "Banias"};
    if (!want) return 0;
    if (strcmp(want, "Haswell") == 0 || strcmp(want, "SkylakeX") == 0) {
        for (size_t i = 0; i < sizeof old / sizeof old[0]; i++)
            if (strcmp(have, old[i]) == 0) return 1;
        if (strcmp(want, "SkylakeX") == 0 && strcmp(have, "Haswell") == 0) return 1;
    }
    return 0;
}

/* Reads "QUOTA PERIOD" (v2 cpu.max; "max ..." is none) or the v1 pair of files:
 * the quota in CPUs, or 0. */
static double quota_at(const char *dir, int v1, char *p, size_t pn) {
    double quota = -1, period = 0;
    snprintf(p, pn, "%s/%s", dir, v1 ? "cpu.cfs_quota_us" : "cpu.max");
    FILE *a = fopen(p, "r");
    if (!a) return 0;
    if (v1) {
        char q[2400];
        snprintf(q, sizeof q, "%s/cpu.cfs_period_us", dir);
        FILE *b = fopen(q, "r");
        if (!b || fscanf(a, "%lf", &quota) != 1 || fscanf(b, "%lf", &period) != 1) quota = -1;
        if (b) fclose(b);
    } else if (fscanf(a, "%lf %lf", &quota, &period) != 2) quota = -1;
    fclose(a);
    return quota > 0 && period > 0 ? quota / period : 0;
}

/* The CPU quota of the process's cgroups, as whole CPUs rounded up (0: none found):
 * cgroup v2 `cpu.max`, v1 `cpu.cfs_quota_us` / `cpu.cfs_period_us` (the cpu
 * controller's folder: cpu,cpuacct or cpu), in the process's own cgroup and each
 * folder above it to the hierarchy's root — the smallest counts (a container's
 * quota may sit a level up; a hybrid host has both hierarchies).  The root is
 * /sys/fs/cgroup, or TERNLAB_CGROUP_ROOT, and the process's cgroups are read from
 * /proc/self/cgroup, or TERNLAB_CGROUP_SELF (both for tests).  `what` gets the
 * file and its quota in CPUs. */
int cgroup_cpu_limit(char *what, size_t n) {
    const char *root = getenv("TERNLAB_CGROUP_ROOT");
    if (!root || !*root) root = "/sys/fs/cgroup";
    char rel[2][1024] = {"", ""}, line[1200];
    int have[2] = {0, 0}; /* [0] v2, [1] v1's cpu controller */
    const char *self = getenv("TERNLAB_CGROUP_SELF");
    FILE *f = fopen(self && *self ? self : "/proc/self/cgroup", "r");
    while (f && fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = 0;
        char *a = strchr(line, ':'), *b = a ? strchr(a + 1, ':') : NULL;
        if (!b) continue;
        *a = 0, *b = 0; /* "ID", "controllers", "path" */
        char ctl[256];
        snprintf(ctl, sizeof ctl, ",%s,", a + 1);
        const int k = strcmp(line, "0") == 0 && a[1] == 0 ? 0 : strstr(ctl, ",cpu,") ? 1 : -1;
        if (k >= 0 && !have[k]) snprintf(rel[k], sizeof rel[k], "%s", b + 1), have[k] = 1;
    }
    if (f) fclose(f);
    double best = 0;
    for (int k = 0; k < 2; k++) {
        if (!have[k]) continue;
        for (int sub = 0; sub < (k ? 2 : 1); sub++) {
            char r[1024], dir[2200], p[2400];
            snprintf(r, sizeof r, "%s", strcmp(rel[k], "/") == 0 ? "" : rel[k]);
            for (;;) {
                snprintf(dir, sizeof dir, "%s%s%s", root, k == 0 ? "" : sub ? "/cpu" : "/cpu,cpuacct", r);
                const double c = quota_at(dir, k, p, sizeof p);
                if (c > 0 && (best == 0 || c < best)) {
                    best = c;
                    snprintf(what, n, "%s: %g CPUs", p, c);
                }
                char *slash = strrchr(r, '/');
                if (!slash) break;
                *slash = 0; /* up one level; "" is the root, read last */
            }
        }
    }
    /* (a quota of more CPUs than an int holds — cpu.max takes one — is none) */
    return best > 0 ? best < 1e6 ? (int)ceil(best - 1e-9) : 1000000 : 0;
}

void blas_setup(int argc, char **argv) {
    const char *auto_env = getenv("TERNLAB_BLAS_AUTO");
    if (auto_env && strcmp(auto_env, "0") == 0) return;
    int reexec = 0;
    /* OpenMP threads that spin between our parallel loops steal the cores
     * OpenBLAS's own threads need: measured 5x slower perplexity on 2 cores. */
    if (!getenv("OMP_WAIT_POLICY")) {
        setenv("OMP_WAIT_POLICY", "passive", 1);
        reexec = 1;
    }
    /* The kernel benchmark alternates OpenBLAS and ternary calls on the same
     * cores: OpenBLAS's pthreads keep spinning ~0.1 s after each call (seen with
     * strace) and take a core from the ternary kernel being timed.  There,
     * let them sleep at once (a wake-up costs far less than one sgemv). */
    if (argc > 1 && strcmp(argv[1], "bench") == 0 && !getenv("OPENBLAS_THREAD_TIMEOUT")) {
        setenv("OPENBLAS_THREAD_TIMEOUT", "4", 1);
        reexec = 1;
    }
    /* A CPU quota (docker --cpus, a Kubernetes limit) is not seen by OpenMP or OpenBLAS,
     * which size their teams by the CPUs the process may run on: 64 threads time-sliced
     * onto two CPUs' worth.  Each team the user did not size (OpenMP: OMP_NUM_THREADS;
     * OpenBLAS: OPENBLAS_NUM_THREADS or GOTO_NUM_THREADS) is set to the quota, and that
     * reported (TERNLAB_CPU_QUOTA, TERNLAB_CPU_QUOTA_VARS: which were set).  (Either one
     * set had left both teams at every CPU.) */
    int lim = 0, cap_omp = 0, cap_blas = 0;
    const int user_omp = getenv("OMP_NUM_THREADS") != NULL;
    const int user_blas = getenv("OPENBLAS_NUM_THREADS") || getenv("GOTO_NUM_THREADS");
    if (!user_omp || !user_blas) {
        char what[2600] = "";
        lim = cgroup_cpu_limit(what, sizeof what);
        cpu_set_t cs;
        const int ncpu = sched_getaffinity(0, sizeof cs, &cs) == 0 ? CPU_COUNT(&cs) : 0;
        if (lim > 0 && lim < ncpu) {
            char v[32], rep[2800];
            snprintf(v, sizeof v, "%d", lim);
            if ((cap_omp = !user_omp)) setenv("OMP_NUM_THREADS", v, 1);
            if ((cap_blas = !user_blas)) setenv("OPENBLAS_NUM_THREADS", v, 1);
            snprintf(rep, sizeof rep, "%d of %d CPUs (%s)", lim, ncpu, what);
            setenv("TERNLAB_CPU_QUOTA", rep, 1);
            setenv("TERNLAB_CPU_QUOTA_VARS",
                   cap_omp && cap_blas ? "OMP_NUM_THREADS and OPENBLAS_NUM_THREADS"
                   : cap_omp           ? "OMP_NUM_THREADS"
                                       : "OPENBLAS_NUM_THREADS", 1);
            reexec = 1;
        } else lim = 0;
    }
    const char *have = openblas_get_corename();
    const char *want = wanted_core();
    if (!getenv("OPENBLAS_CORETYPE") && have && weaker(have, want)) {
        setenv("OPENBLAS_CORETYPE", want, 1);
        setenv("TERNLAB_BLAS_DETECTED", have, 1);
        reexec = 1;
    }
    if (!reexec) return;
    execv("/proc/self/exe", argv);
    /* exec failed: carry on, but say so; the thread counts set as they can be now
     * (OpenMP and OpenBLAS read their variables when the program started) */
    fprintf(stderr, "ternlab: warning: re-running with OPENBLAS_CORETYPE/OMP_WAIT_POLICY/thread counts set "
                    "failed; BLAS may be slow\n");
    if (cap_omp) omp_set_num_threads(lim);
    if (cap_blas) openblas_set_num_threads(lim);
}

const char *blas_core_report(void) {
    static char buf[160];
    const char *det = getenv("TERNLAB_BLAS_DETECTED");
    if (det)
        snprintf(buf, sizeof buf, "%s (OPENBLAS_CORETYPE set by ternlab: library detected %s)",
                 openblas_get_corename(), det);
    else
        snprintf(buf, sizeof buf, "%s", openblas_get_corename());
    return buf;
}

const char *cpu_quota_vars(void) {
    const char *v = getenv("TERNLAB_CPU_QUOTA_VARS");
    return v && *v ? v : "OMP_NUM_THREADS and OPENBLAS_NUM_THREADS";
}

const char *cpu_quota_report(void) {
    const char *q = getenv("TERNLAB_CPU_QUOTA");
    if (!q || atoi(q) <= 0) return NULL;
    /* (inherited by a child whose variables someone changed since: not ours) */
    const char *vars = cpu_quota_vars();
    const char *names[] = {"OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS"};
    for (int i = 0; i < 2; i++) {
        const char *n = getenv(names[i]);
        if (strstr(vars, names[i]) && (!n || atoi(n) != atoi(q))) return NULL;
    }
    return q;
}

const char *threads_report(void) {
    static char buf[3000];
    const char *q = cpu_quota_report();
    if (q)
        snprintf(buf, sizeof buf, "%d (%s set by ternlab to the cgroup CPU quota: %s)", omp_get_max_threads(),
                 cpu_quota_vars(), q);
    else
        snprintf(buf, sizeof buf, "%d", omp_get_max_threads());
    return buf;
}

const char *cpu_model_report(void) {
    static char buf[160];
    snprintf(buf, sizeof buf, "unknown");
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f) return buf;
    char line[512];
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, "model name", 10) != 0) continue;
        const char *v = strchr(line, ':');
        if (!v) break;
        v++;
        while (*v == ' ' || *v == '\t') v++;
        snprintf(buf, sizeof buf, "%.*s", (int)strcspn(v, "\r\n"), v);
        break;
    }
    fclose(f);
    return buf;
}
