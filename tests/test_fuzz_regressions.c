/* Replays the fuzzing seeds (tests/fuzz/corpus/<name>/) and every input a
 * fuzzer once crashed on (tests/fuzz/regressions/<name>/) through the same
 * code the libFuzzer harnesses run, in the normal test suite and without
 * clang: each harness file is compiled in here with its entry point renamed.
 * Errors from the parsers are fine; a crash, a sanitizer report (under
 * SANITIZE=1) or a broken promise (FUZZ_ASSERT traps) fails the test. */
#include "test.h"

#include <dirent.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define LLVMFuzzerTestOneInput fuzz_one_safetensors
#include "fuzz/fuzz_safetensors.c"
#undef LLVMFuzzerTestOneInput

#define LLVMFuzzerTestOneInput fuzz_one_st_index
#define LLVMFuzzerInitialize fuzz_init_st_index
#include "fuzz/fuzz_st_index.c"
#undef LLVMFuzzerTestOneInput
#undef LLVMFuzzerInitialize

#define LLVMFuzzerTestOneInput fuzz_one_config
#include "fuzz/fuzz_config.c"
#undef LLVMFuzzerTestOneInput

#define LLVMFuzzerTestOneInput fuzz_one_tokens
#define LLVMFuzzerInitialize fuzz_init_tokens
#include "fuzz/fuzz_tokens.c"
#undef LLVMFuzzerTestOneInput
#undef LLVMFuzzerInitialize

#define LLVMFuzzerTestOneInput fuzz_one_quantspec
#include "fuzz/fuzz_quantspec.c"
#undef LLVMFuzzerTestOneInput

#define LLVMFuzzerTestOneInput fuzz_one_expconf
#include "fuzz/fuzz_expconf.c"
#undef LLVMFuzzerTestOneInput

#define LLVMFuzzerTestOneInput fuzz_one_kvpolicy
#include "fuzz/fuzz_kvpolicy.c"
#undef LLVMFuzzerTestOneInput

/* The GGUF parser is in the library once its source exists (the Makefile
 * takes every .c under src/); -Isrc makes this test see it. */
#if __has_include("load/gguf.c")
#define TL_FUZZ_HAVE_GGUF 1
#define LLVMFuzzerTestOneInput fuzz_one_gguf
#include "fuzz/fuzz_gguf.c"
#undef LLVMFuzzerTestOneInput
#endif

typedef int (*fuzz_fn)(const uint8_t *, size_t);

static int read_file(const char *path, uint8_t **out, size_t *size) {
    FILE *f = fopen(path, "rb");
    if (!f) return -1;
    size_t cap = 4096, n = 0;
    uint8_t *buf = malloc(cap);
    for (;;) {
        if (n == cap) buf = realloc(buf, cap *= 2);
        size_t got = fread(buf + n, 1, cap - n, f);
        if (!got) break;
        n += got;
    }
    fclose(f);
    *out = buf;
    *size = n;
    return 0;
}

/* Runs fn on every regular file of tests/fuzz/<kind>/<name>/; returns the
 * count (-1 when the folder is missing). */
static int replay_dir(const char *kind, const char *name, fuzz_fn fn) {
    char rel[256];
    snprintf(rel, sizeof rel, "tests/fuzz/%s/%s", kind, name);
    const char *dpath = test_path(rel);
    DIR *d = opendir(dpath);
    if (!d) return -1;
    int count = 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        if (de->d_name[0] == '.') continue;
        char path[1024];
        snprintf(path, sizeof path, "%s/%s", dpath, de->d_name);
        uint8_t *data;
        size_t size;
        if (read_file(path, &data, &size) != 0) {
            test_fail(__FILE__, __LINE__, "cannot read %s", path);
            continue;
        }
        /* stderr names the input before it runs, so a crash points at it */
        fprintf(stderr, "    replay %s/%s/%s (%zu bytes)\n", kind, name, de->d_name, size);
        fn(data, size);
        free(data);
        count++;
    }
    closedir(d);
    return count;
}

static void replay(const char *name, fuzz_fn fn) {
    int seeds = replay_dir("corpus", name, fn);
    CHECK_MSG(seeds > 0, "tests/fuzz/corpus/%s has no seeds", name);
    int regs = replay_dir("regressions", name, fn);
    fprintf(stderr, "    %s: %d seeds, %d regression inputs\n", name, seeds, regs < 0 ? 0 : regs);
}

TEST(fuzz_replay_safetensors) { replay("safetensors", fuzz_one_safetensors); }

TEST(fuzz_replay_st_index) {
    fuzz_init_st_index(NULL, NULL);
    replay("st_index", fuzz_one_st_index);
}

TEST(fuzz_replay_config) { replay("config", fuzz_one_config); }

TEST(fuzz_replay_tokens) {
    fuzz_init_tokens(NULL, NULL);
    replay("tokens", fuzz_one_tokens);
}

TEST(fuzz_replay_quantspec) { replay("quantspec", fuzz_one_quantspec); }

TEST(fuzz_replay_expconf) { replay("expconf", fuzz_one_expconf); }

TEST(fuzz_replay_kvpolicy) { replay("kvpolicy", fuzz_one_kvpolicy); }

#ifdef TL_FUZZ_HAVE_GGUF
TEST(fuzz_replay_gguf) { replay("gguf", fuzz_one_gguf); }
#endif
