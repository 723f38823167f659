/* Error reporting: functions that can fail return a negative code and leave a
 * message here; only main() decides to exit.  The message is thread-local so
 * worker threads (tensor parallel ranks) do not clobber each other. */
#ifndef TL_ERR_H
#define TL_ERR_H

#include <stdarg.h>

/* Formats a message into the thread's error buffer; always returns -1 so that
 * callers can write `return err_set("...")`. */
int err_set(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Prepends context ("loading X: ") to the current message; returns -1. */
int err_prefix(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
const char *err_msg(void);
void err_clear(void);

#endif
