/* libFuzzer harness: token input, both forms.
 *   byte 0 even: the rest is a --prompt list ("1,2,3"), tokens_parse_list;
 *   byte 0 odd:  the rest is a token file's contents, written to a temp file
 *                and read back with tokens_load (the real path: mmap + checks).
 * Bytes 1..2 pick the vocabulary size (1..65536).  Every accepted id must be
 * in [0, vocab) and the count must match the input.
 * Seeds: tests/fuzz/corpus/tokens/. */
#include "fuzz_util.h"
#include "load/tokens.h"

#include <stdio.h>
#include <unistd.h>

static char tmp_path[256];

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    snprintf(tmp_path, sizeof tmp_path, "/tmp/ternlab-fuzz-tokens-%d.i32", (int)getpid());
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 3) return 0;
    int as_file = data[0] & 1;
    int vocab = 1 + (int)(data[1] | (data[2] << 8));
    data += 3;
    size -= 3;
    int32_t *ids = NULL;
    int64_t n = 0;
    int rc;
    if (as_file) {
        FILE *f = fopen(tmp_path, "wb");
        if (!f) abort();
        if (size && fwrite(data, 1, size, f) != size) abort();
        fclose(f);
        rc = tokens_load(tmp_path, vocab, &ids, &n);
        if (rc == 0) FUZZ_ASSERT(n > 0 && (size_t)n * 4 == size);
        unlink(tmp_path);
    } else {
        char *s = fuzz_cstr(data, size);
        rc = tokens_parse_list(s, vocab, &ids, &n);
        free(s);
        if (rc == 0) FUZZ_ASSERT(n > 0);
    }
    if (rc == 0)
        for (int64_t i = 0; i < n; i++) FUZZ_ASSERT(ids[i] >= 0 && ids[i] < vocab);
    free(ids);
    return 0;
}
