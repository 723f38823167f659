#include "core/strnum.h"

#include <errno.h>
#include <stdlib.h>

int str_to_i64(const char *s, int64_t lo, int64_t hi, int64_t *out) {
    char *end;
    errno = 0;
    const long long v = strtoll(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi) return -1;
    *out = (int64_t)v;
    return 0;
}
