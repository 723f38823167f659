#include "load/tokens.h"
#include "core/err.h"
#include "core/mem.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

int tokens_load(const char *path, int vocab, int32_t **out, int64_t *n) {
    MappedFile mf;
    if (file_map(path, &mf) != 0) return -1;
    if (mf.size % 4 != 0 || mf.size == 0) {
        size_t sz = mf.size;
        file_unmap(&mf);
        return err_set("%s: token file size %zu is %s: expected raw little-endian int32 ids", path,
                       sz, sz ? "not a multiple of 4" : "zero");
    }
    int64_t cnt = (int64_t)(mf.size / 4);
    int32_t *t = xmalloc(mf.size);
    memcpy(t, mf.data, mf.size);
    file_unmap(&mf);
    for (int64_t i = 0; i < cnt; i++)
        if (t[i] < 0 || t[i] >= vocab) {
            int32_t v = t[i];
            free(t);
            return err_set("%s: token %lld has id %d, outside the vocabulary [0, %d)", path,
                           (long long)i, v, vocab);
        }
    *out = t;
    *n = cnt;
    return 0;
}

int tokens_parse_list(const char *s, int vocab, int32_t **out, int64_t *n) {
    int64_t cap = 16, cnt = 0;
    int32_t *t = xmalloc(sizeof(int32_t) * (size_t)cap);
    const char *p = s;
    while (*p) {
        char *end;
        errno = 0;
        /* each item a bare integer: no blank or '+' before it (strtol's), none empty
         * after the last comma ("1,2," had been 1,2 and "1,,2" refused) */
        long v = (*p >= '0' && *p <= '9') || *p == '-' ? strtol(p, &end, 10) : 0;
        if (!((*p >= '0' && *p <= '9') || *p == '-') || end == p || errno || (*end && *end != ',') ||
            (*end == ',' && !end[1])) {
            free(t);
            return err_set("token list '%s': expected comma-separated integers", s);
        }
        if (vocab > 0 && (v < 0 || v >= vocab)) {
            free(t);
            return err_set("token list: id %ld outside the vocabulary [0, %d)", v, vocab);
        }
        if (cnt == cap) t = xrealloc(t, sizeof(int32_t) * (size_t)(cap *= 2));
        t[cnt++] = (int32_t)v;
        p = *end ? end + 1 : end;
    }
    if (cnt == 0) {
        free(t);
        return err_set("token list is empty");
    }
    *out = t;
    *n = cnt;
    return 0;
}
