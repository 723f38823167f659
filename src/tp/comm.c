#include "tp/comm.h"
#include "core/err.h"
#include "core/mem.h"
#include "core/timer.h"

#include <stdlib.h>
#include <string.h>

int tp_comm_init(TpComm *c, int tp, int64_t cap) {
    memset(c, 0, sizeof *c);
    if (tp < 1) return err_set("tp communicator: %d ranks", tp);
    c->tp = tp;
    c->cap = cap > 0 ? cap : 1;
    if (pthread_barrier_init(&c->bar, NULL, (unsigned)tp) != 0)
        return err_set("tp communicator: pthread_barrier_init for %d threads failed", tp);
    c->src = xcalloc((size_t)tp, sizeof *c->src);
    c->stats = xcalloc((size_t)tp, sizeof *c->stats);
    c->failed = xcalloc((size_t)tp, sizeof *c->failed);
    c->red = mem_alloc(sizeof(float) * (size_t)c->cap, "tp reduction buffer");
    c->acc = mem_alloc(sizeof(float) * (size_t)c->cap, "tp reduction buffer");
    c->carry = mem_alloc(sizeof(int32_t) * (size_t)c->cap, "tp reduction buffer");
    if (!c->red || !c->acc || !c->carry) {
        tp_comm_free(c);
        return err_prefix("tp communicator (%lld elements): ", (long long)cap);
    }
    return 0;
}

void tp_comm_free(TpComm *c) {
    if (c->tp > 0) pthread_barrier_destroy(&c->bar);
    free(c->src);
    free(c->stats);
    free(c->failed);
    mem_free(c->red);
    mem_free(c->acc);
    mem_free(c->carry);
    memset(c, 0, sizeof *c);
}

void tp_comm_barrier(TpComm *c) {
    if (c->tp > 1) pthread_barrier_wait(&c->bar);
}

double tp_comm_now(void) { return time_now(); }

void tp_comm_account(TpComm *c, int rank, double t0, int64_t elems) {
    c->stats[rank].seconds += time_now() - t0;
    c->stats[rank].calls++;
    c->stats[rank].elems += elems;
}

/* Rank r reduces elements [lo, hi) of its share; the order over ranks is fixed. */
static void share(int64_t n, int tp, int rank, int64_t *lo, int64_t *hi) {
    *lo = n * rank / tp;
    *hi = n * (rank + 1) / tp;
}

void tp_allreduce_sum(TpComm *c, int rank, float *buf, int64_t n) {
    if (c->tp == 1) return;
    double t0 = time_now();
    c->src[rank] = buf;
    pthread_barrier_wait(&c->bar);
    int64_t lo, hi;
    share(n, c->tp, rank, &lo, &hi);
    for (int64_t i = lo; i < hi; i++) {
        float s = ((const float *)c->src[0])[i];
        for (int r = 1; r < c->tp; r++) s += ((const float *)c->src[r])[i];
        c->red[i] = s;
    }
    pthread_barrier_wait(&c->bar);
    memcpy(buf, c->red, sizeof(float) * (size_t)n);
    tp_comm_account(c, rank, t0, n);
}

int tp_allreduce_max_agree(TpComm *c, int rank, float *buf, int64_t n, int ok) {
    if (c->tp == 1) return ok ? 0 : -1;
    double t0 = time_now();
    c->src[rank] = buf;
    c->failed[rank] = !ok;
    pthread_barrier_wait(&c->bar);
    /* (failed[] is written again only after the barrier below, which every
     * rank reaches after reading it here) */
    int any = 0;
    for (int r = 0; r < c->tp; r++) any |= c->failed[r];
    int64_t lo, hi;
    share(n, c->tp, rank, &lo, &hi);
    for (int64_t i = lo; i < hi && !any; i++) {
        float m = ((const float *)c->src[0])[i];
        for (int r = 1; r < c->tp; r++) {
            float v = ((const float *)c->src[r])[i];
            m = v > m ? v : m;
        }
        c->red[i] = m;
    }
    pthread_barrier_wait(&c->bar);
    if (!any) memcpy(buf, c->red, sizeof(float) * (size_t)n);
    tp_comm_account(c, rank, t0, n);
    return any ? -1 : 0;
}

void tp_allreduce_max(TpComm *c, int rank, float *buf, int64_t n) {
    tp_allreduce_max_agree(c, rank, buf, n, 1);
}

void tp_broadcast(TpComm *c, int rank, int root, float *buf, int64_t n) {
    if (c->tp == 1) return;
    double t0 = time_now();
    c->src[rank] = buf;
    pthread_barrier_wait(&c->bar);
    if (rank != root) memcpy(buf, c->src[root], sizeof(float) * (size_t)n);
    /* the root's buffer must stay untouched until everyone has copied it */
    pthread_barrier_wait(&c->bar);
    tp_comm_account(c, rank, t0, n);
}
