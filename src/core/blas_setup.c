#include "core/blas_setup.h"

#include <cblas.h>
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
    const char *have = openblas_get_corename();
    const char *want = wanted_core();
    if (!getenv("OPENBLAS_CORETYPE") && have && weaker(have, want)) {
        setenv("OPENBLAS_CORETYPE", want, 1);
        setenv("TERNLAB_BLAS_DETECTED", have, 1);
        reexec = 1;
    }
    if (!reexec) return;
    execv("/proc/self/exe", argv);
    /* exec failed: carry on, but say so */
    fprintf(stderr, "ternlab: warning: re-running with OPENBLAS_CORETYPE/OMP_WAIT_POLICY set "
                    "failed; BLAS may be slow\n");
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
