#include "eval/metrics.h"

#include <math.h>

double logsumexp_f32(const float *z, int64_t n) {
    float mx = z[0];
    for (int64_t j = 1; j < n; j++) mx = z[j] > mx ? z[j] : mx;
    double s = 0.0;
    for (int64_t j = 0; j < n; j++) s += exp((double)z[j] - (double)mx);
    return log(s) + (double)mx;
}

double kl_ref_run(const float *z_ref, double lse_ref, const float *z_run, double lse_run, int64_t n) {
    double kl = 0.0;
    for (int64_t j = 0; j < n; j++) {
        double lp = (double)z_ref[j] - lse_ref, lq = (double)z_run[j] - lse_run;
        kl += exp(lp) * (lp - lq);
    }
    return kl > 0.0 ? kl : 0.0; /* rounding can leave -1e-17 for identical rows */
}

double rel_l2_row(const float *a, const float *b, int64_t n) {
    double num = 0.0, den = 0.0;
    for (int64_t j = 0; j < n; j++) {
        double d = (double)a[j] - (double)b[j];
        num += d * d;
        den += (double)b[j] * (double)b[j];
    }
    return den > 0.0 ? sqrt(num / den) : sqrt(num);
}
