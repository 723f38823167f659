/* The `threads` communicator: tp ranks are threads of one process that share
 * memory; collectives are barriers plus reads of each other's published
 * buffers.  Every reduction runs in a FIXED order (rank 0 + rank 1 + ... for
 * each element), so results never depend on thread timing: two runs give the
 * same bits, and tp = 2 and tp = 4 differ from tp = 1 only by where the sum is
 * cut (see tp_linear.c for the int8 path, which is exact).
 *
 * Contract: every rank calls every collective in the same sequence (SPMD).  A
 * rank that hits an error keeps calling the collectives (with whatever data it
 * has) and reports the error afterwards, so a failure never deadlocks; where
 * it has no buffer to offer, tp_allreduce_max_agree takes every rank out of
 * the sequence together.
 * Shared buffers: a collective writes them only after a barrier that every
 * rank reaches after it finished reading the previous collective's results
 * (sum/max/broadcast: publish, barrier, reduce, barrier, read). */
#ifndef TL_TP_COMM_H
#define TL_TP_COMM_H

#include <pthread.h>
#include <stdint.h>

typedef struct {
    double seconds;  /* wall time inside collectives (waiting included) */
    int64_t calls;   /* collectives */
    int64_t elems;   /* elements reduced (floats or ints) */
} TpCommStats;

typedef struct {
    int tp;
    int64_t cap;           /* elements of the shared buffers */
    pthread_barrier_t bar;
    const void **src;      /* (tp) buffers published by each rank for the current collective */
    float *red;            /* (cap) shared reduction result */
    float *acc;            /* (cap) ordered-chain accumulator (tp_linear.c) */
    int32_t *carry;        /* (cap) ordered-chain integer carry */
    TpCommStats *stats;    /* (tp) per rank */
    int *failed;           /* (tp) tp_allreduce_max_agree: the rank could not take part */
} TpComm;

/* cap: most elements one collective moves.  Returns 0 or -1 (err_set). */
int tp_comm_init(TpComm *c, int tp, int64_t cap);
void tp_comm_free(TpComm *c);

void tp_comm_barrier(TpComm *c);
/* buf (n) := sum over ranks of every rank's buf, element i summed as
 * ((b0[i] + b1[i]) + b2[i]) + ...; every rank gets the same bits.  n <= cap. */
void tp_allreduce_sum(TpComm *c, int rank, float *buf, int64_t n);
/* buf (n) := element-wise max over ranks (exact in any order). */
void tp_allreduce_max(TpComm *c, int rank, float *buf, int64_t n);
/* The same, and an agreement: a rank that could not prepare its part (ok 0,
 * e.g. its scratch could not be allocated; buf may then be NULL) says so, and
 * if any rank did, no buffer is read or written and every rank gets -1, so
 * that all of them leave the collective sequence at the same point.  Else 0. */
int tp_allreduce_max_agree(TpComm *c, int rank, float *buf, int64_t n, int ok);
/* Every rank's buf (n) := rank `root`'s buf. */
void tp_broadcast(TpComm *c, int rank, int root, float *buf, int64_t n);
/* Sets t0 for the calling rank's stats (a collective is timed from here to
 * tp_comm_account); used by the ordered chains built from barriers. */
double tp_comm_now(void);
void tp_comm_account(TpComm *c, int rank, double t0, int64_t elems);

#endif
