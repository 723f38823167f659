/* Comparing a run's next-token distributions with the reference's. */
#ifndef TL_METRICS_H
#define TL_METRICS_H

#include <stdint.h>

/* log-sum-exp of a logit row, in double. */
double logsumexp_f32(const float *z, int64_t n);
/* KL(p_ref || p_run) in nats for one position: p = softmax(z), given each
 * row's log-sum-exp. */
double kl_ref_run(const float *z_ref, double lse_ref, const float *z_run, double lse_run, int64_t n);
/* ||a - b|| / ||b|| for one row. */
double rel_l2_row(const float *a, const float *b, int64_t n);

#endif
