#include "err.h"

#include <stdio.h>
#include <string.h>

static _Thread_local char err_buf[2048];

int err_set(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err_buf, sizeof err_buf, fmt, ap);
    va_end(ap);
    return -1;
}

int err_prefix(const char *fmt, ...) {
    char pre[1024], old[sizeof err_buf];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(pre, sizeof pre, fmt, ap);
    va_end(ap);
    memcpy(old, err_buf, sizeof old);
    size_t n = strlen(pre);
    if (n >= sizeof err_buf) n = sizeof err_buf - 1;
    memcpy(err_buf, pre, n);
    size_t m = strlen(old);
    if (m > sizeof err_buf - 1 - n) m = sizeof err_buf - 1 - n;
    memcpy(err_buf + n, old, m);
    err_buf[n + m] = 0;
    return -1;
}

const char *err_msg(void) { return err_buf[0] ? err_buf : "unknown error"; }

void err_clear(void) { err_buf[0] = 0; }
