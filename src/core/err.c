#include "err.h"

#include <errno.h>
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

int err_stdout_finish(const char *who, int rc) {
    int bad = ferror(stdout) != 0, e = 0;
    errno = 0;
    if (fflush(stdout) != 0) {
        bad = 1;
        e = errno;
    }
    errno = 0;
    if (fclose(stdout) != 0 && !bad) {
        bad = 1;
        e = errno;
    }
    if (!bad) return rc;
    fprintf(stderr, "%s: cannot write the output to standard output: %s\n", who, e ? strerror(e) : "write error");
    return rc ? rc : 1;
}
