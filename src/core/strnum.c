#include "core/strnum.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>

int str_to_i64(const char *s, int64_t lo, int64_t hi, int64_t *out) {
    char *end;
    errno = 0;
    const long long v = strtoll(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi) return -1;
    *out = (int64_t)v;
    return 0;
}

int str_to_f64(const char *s, double *out) {
    char *end;
    errno = 0;
    const double v = strtod(s, &end);
    /* (ERANGE on underflow too: a subnormal result is the number, one that
     * rounded to zero is refused with overflow) */
    if ((errno && !(errno == ERANGE && v != 0 && isfinite(v))) || end == s || *end || !isfinite(v)) return -1;
    *out = v;
    return 0;
}
