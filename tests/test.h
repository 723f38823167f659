/* Minimal test harness: TEST(name) registers a function; CHECK records a
 * failure (file:line and message) and lets the test go on.  The runner
 * (tests/runner.c) runs each test in its own child process so that a crash
 * counts as a failure instead of ending the run, and prints the final line
 * "N passed, N failed". */
#ifndef TL_TEST_H
#define TL_TEST_H

#include <stdio.h>

/* TL_ASAN_BUILD: 1 in an AddressSanitizer build (make SANITIZE=1), else 0. */
#if defined(__SANITIZE_ADDRESS__)
#define TL_ASAN_BUILD 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define TL_ASAN_BUILD 1
#endif
#endif
#ifndef TL_ASAN_BUILD
#define TL_ASAN_BUILD 0
#endif

typedef void (*test_fn)(void);
void test_register(const char *name, test_fn fn);
void test_fail(const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
int test_failures(void);
/* Marks the current test skipped (the caller returns right after): it counts
 * neither as passed nor as failed, e.g. a GPU test on a machine without one. */
void test_skip(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Path of a file under the repository root (TERNLAB_ROOT, default "."); an
 * absolute path as it is. */
const char *test_path(const char *rel);
/* Path of a fresh scratch directory for this test (removed at exit). */
const char *test_tmpdir(void);
/* Runs a shell command; returns its exit status (or -1); stdout+stderr go to
 * *out (heap, NUL-terminated) when out is non-NULL. */
int test_run(const char *cmd, char **out);

#define TEST(name)                                                                \
    static void name(void);                                                       \
    __attribute__((constructor)) static void test_reg_##name(void) {              \
        test_register(#name, name);                                               \
    }                                                                             \
    static void name(void)

#define CHECK(cond)                                                               \
    do {                                                                          \
        if (!(cond)) test_fail(__FILE__, __LINE__, "%s", #cond);                  \
    } while (0)

#define CHECK_MSG(cond, ...)                                                      \
    do {                                                                          \
        if (!(cond)) test_fail(__FILE__, __LINE__, __VA_ARGS__);                  \
    } while (0)

/* Stops the current test (after recording a failure) when a precondition
 * for the rest of it does not hold. */
#define REQUIRE(cond)                                                             \
    do {                                                                          \
        if (!(cond)) {                                                            \
            test_fail(__FILE__, __LINE__, "required: %s", #cond);                 \
            return;                                                               \
        }                                                                         \
    } while (0)

#endif
