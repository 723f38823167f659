/* Test runner: runs every registered test (or those whose name contains one
 * of the arguments) in a child process each; prints "N passed, N failed[, N skipped]". */
#include "test.h"
#include "core/blas_setup.h"

/* Test children end with _exit, which skips LeakSanitizer's exit check: run it
 * explicitly in sanitizer builds so a leak fails the test that made it. */
#if defined(__SANITIZE_ADDRESS__)
#define TL_LSAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define TL_LSAN 1
#endif
#endif
#ifdef TL_LSAN
#include <sanitizer/lsan_interface.h>
#endif

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <signal.h>
#include <unistd.h>

#define MAX_TESTS 1024

static struct {
    const char *name;
    test_fn fn;
} tests[MAX_TESTS];
static int n_tests;
static int failures;
static char tmpdir[512];

void test_register(const char *name, test_fn fn) {
    if (n_tests == MAX_TESTS) {
        fprintf(stderr, "too many tests\n");
        exit(2);
    }
    tests[n_tests].name = name;
    tests[n_tests].fn = fn;
    n_tests++;
}

void test_fail(const char *file, int line, const char *fmt, ...) {
    va_list ap;
    fprintf(stderr, "    FAIL %s:%d: ", file, line);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\n");
    failures++;
}

int test_failures(void) { return failures; }

#define SKIP_STATUS 77 /* a child's exit status for "skipped" */
static int skipped_here;

void test_skip(const char *fmt, ...) {
    va_list ap;
    fprintf(stderr, "    SKIPPED: ");
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\n");
    skipped_here = 1;
}

const char *test_path(const char *rel) {
    static _Thread_local char buf[8][1024];
    static _Thread_local int k;
    const char *root = getenv("TERNLAB_ROOT");
    char *b = buf[k++ & 7];
    if (rel[0] == '/') snprintf(b, sizeof buf[0], "%s", rel); /* (an absolute path, e.g. under test_tmpdir) */
    else snprintf(b, sizeof buf[0], "%s/%s", root ? root : ".", rel);
    return b;
}

const char *test_tmpdir(void) {
    if (!tmpdir[0]) {
        snprintf(tmpdir, sizeof tmpdir, "/tmp/ternlab-test-XXXXXX");
        if (!mkdtemp(tmpdir)) {
            perror("mkdtemp");
            exit(2);
        }
    }
    return tmpdir;
}

int test_run(const char *cmd, char **out) {
    char full[8192];
    snprintf(full, sizeof full, "%s 2>&1", cmd);
    FILE *p = popen(full, "r");
    if (!p) return -1;
    size_t n = 0, cap = 4096;
    char *buf = malloc(cap);
    for (;;) {
        if (cap - n < 1024) buf = realloc(buf, cap *= 2);
        size_t got = fread(buf + n, 1, cap - n - 1, p);
        if (!got) break;
        n += got;
    }
    buf[n] = 0;
    int st = pclose(p);
    if (out) *out = buf;
    else free(buf);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* Arguments select tests whose names contain them; "!text" leaves out tests
 * whose names contain text.  Tests named slow_* (full-data checks, minutes)
 * run only when an argument that itself starts with "slow" selects them
 * (`make check-ppl`). */
static int selected(const char *name, int argc, char **argv) {
    int slow = strncmp(name, "slow_", 5) == 0, positives = 0, hit = 0;
    for (int i = 1; i < argc; i++) {
        if (argv[i][0] == '!') { /* "!name": leave out tests whose names contain it */
            if (strstr(name, argv[i] + 1)) return 0;
            continue;
        }
        positives++;
        if (strstr(name, argv[i]) && (!slow || strncmp(argv[i], "slow", 4) == 0)) hit = 1;
    }
    return positives ? hit : !slow;
}

/* Per-test limit in seconds: TERNLAB_TEST_TIMEOUT, default 900 (the slowest
 * test takes well under a minute; sanitizer builds several times that). */
static unsigned test_timeout_s(void) {
    const char *e = getenv("TERNLAB_TEST_TIMEOUT");
    const long v = e && *e ? strtol(e, NULL, 10) : 900;
    return v > 0 && v < 86400 ? (unsigned)v : 900;
}

int main(int argc, char **argv) {
    int passed = 0, failed = 0, skipped = 0;
    blas_setup(argc, argv);
    setvbuf(stdout, NULL, _IOLBF, 0);
    for (int i = 0; i < n_tests; i++) {
        if (!selected(tests[i].name, argc, argv)) continue;
        struct timespec t0, t1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        fflush(stdout);
        fflush(stderr);
        pid_t pid = fork();
        if (pid < 0) {
            perror("fork");
            return 2;
        }
        if (pid == 0) {
            /* a test that hangs (a collective waiting for a peer, a spin on a
             * device flag) is killed and reported instead of stopping the run */
            alarm(test_timeout_s());
            tests[i].fn();
            if (tmpdir[0]) {
                char cmd[600];
                snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
                if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", tmpdir);
            }
            fflush(stdout);
            fflush(stderr);
#ifdef TL_LSAN
            if (__lsan_do_recoverable_leak_check()) failures++;
#endif
            _exit(failures ? 1 : skipped_here ? SKIP_STATUS : 0);
        }
        int st = 0;
        waitpid(pid, &st, 0);
        clock_gettime(CLOCK_MONOTONIC, &t1);
        double dt = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
        int ok = WIFEXITED(st) && WEXITSTATUS(st) == 0;
        if (WIFEXITED(st) && WEXITSTATUS(st) == SKIP_STATUS) {
            skipped++;
            printf("skip %-48s %7.2fs\n", tests[i].name, dt);
        } else if (ok) {
            passed++;
            printf("ok   %-48s %7.2fs\n", tests[i].name, dt);
        } else {
            failed++;
            if (WIFSIGNALED(st) && WTERMSIG(st) == SIGALRM)
                printf("FAIL %-48s (no result after %u s: killed)\n", tests[i].name,
                       test_timeout_s());
            else if (WIFSIGNALED(st))
                printf("FAIL %-48s (killed by signal %d)\n", tests[i].name, WTERMSIG(st));
            else
                printf("FAIL %-48s %7.2fs\n", tests[i].name, dt);
        }
    }
    if (skipped)
        printf("%d passed, %d failed, %d skipped\n", passed, failed, skipped);
    else
        printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
