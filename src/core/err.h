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

/* Flushes and closes stdout, a program's results (ids, the ppl line, reports),
 * at its end.  Redirected to a file, stdout is fully buffered, so a write that
 * failed (disk full, a closed pipe: SIGPIPE ignored) shows only here or in
 * ferror: without this check such a run exited 0 with its output lost.
 * Returns rc, or 1 (with "WHO: cannot write the output to standard output: ..."
 * on stderr) where rc was 0 and the output could not be written. */
int err_stdout_finish(const char *who, int rc);

#endif
