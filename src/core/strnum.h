/* Strict decimal integers for command lines and config values. */
#ifndef TL_STRNUM_H
#define TL_STRNUM_H

#include <stdint.h>

/* s as a whole decimal integer (strtoll: leading blanks and a sign allowed;
 * nothing after the digits, no overflow) in [lo, hi] into *out: 0, else -1
 * with *out untouched and no message (the caller names the option). */
int str_to_i64(const char *s, int64_t lo, int64_t hi, int64_t *out);
/* s as a whole finite decimal number (strtod; no overflow, no nonzero value
 * underflowing to zero; a subnormal one is taken) into *out: 0, else -1 with
 * *out untouched and no message. */
int str_to_f64(const char *s, double *out);

#endif
