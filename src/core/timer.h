/* Wall-clock timing and progress lines on stderr for long runs. */
#ifndef TL_TIMER_H
#define TL_TIMER_H

#include <stdint.h>

double time_now(void); /* seconds, monotonic */

typedef struct {
    const char *what;
    int64_t total;
    double t0, last;
    int enabled;
} Progress;

/* Progress is shown only when stderr is a terminal or TERNLAB_PROGRESS=1. */
void progress_init(Progress *p, const char *what, int64_t total);
void progress_update(Progress *p, int64_t done);
void progress_done(Progress *p);

#endif
