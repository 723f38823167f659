#include "timer.h"

#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

double time_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

void progress_init(Progress *p, const char *what, int64_t total) {
    const char *env = getenv("TERNLAB_PROGRESS");
    p->what = what;
    p->total = total;
    p->t0 = p->last = time_now();
    p->enabled = env ? atoi(env) != 0 : isatty(2);
}

void progress_update(Progress *p, int64_t done) {
    if (!p->enabled) return;
    double t = time_now();
    if (t - p->last < 0.5 && done < p->total) return;
    p->last = t;
    double el = t - p->t0;
    double eta = done > 0 ? el * (double)(p->total - done) / (double)done : 0.0;
    fprintf(stderr, "\r%s: %lld/%lld  %.1fs elapsed, eta %.1fs   ", p->what, (long long)done,
            (long long)p->total, el, eta);
    fflush(stderr);
}

void progress_done(Progress *p) {
    if (!p->enabled) return;
    fprintf(stderr, "\r%s: %lld/%lld done in %.1fs            \n", p->what, (long long)p->total,
            (long long)p->total, time_now() - p->t0);
}
