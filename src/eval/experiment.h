/* The shared driver of the experiment programs (experiments/exp_*.c).  Each
 * program varies ONE factor; its settings come from configs/<experiment>.conf
 * (key = value; {} stands for the factor's value), any key overridable as
 * key=value on the command line.
 *
 *   build/exp_<name> [--model PATH] [--value V] [--out FILE.h5] [--config FILE]
 *                    [--results DIR] [key=value ...]
 *
 * With --model and --value: one run, one HDF5 file (--out, default
 * RESULTS/<experiment>/<model>__<value>.h5).  Without them: every model of
 * the config's `models` × every value of `values`.
 *
 * A run evaluates the model under the bound settings (on `device` = cpu or
 * cuda, `tp` threads or GPUs) and its reference (same model, dense weights with
 * fp32 accumulation, full-precision KV, the same windows and protocol; on the
 * CPU), and writes the schema of paper/SCHEMA.md.  The
 * reference's logits are cached in RESULTS/cache (RESULTS: two folders above
 * a sweep's --out RESULTS/<experiment>/<file>.h5, else --out's own folder)
 * keyed by model hash + token hash + window + windows + protocol + the
 * program's hash + the BLAS kernels, so a sweep computes each one once. */
#ifndef TL_EXPERIMENT_H
#define TL_EXPERIMENT_H

#include <stddef.h>
#include <stdint.h>

typedef enum { EXP_QUALITY = 0, EXP_THROUGHPUT } ExpKind;

typedef struct {
    const char *name; /* "exp-threshold" */
    ExpKind kind;
    const char *summary; /* one line for --help */
} ExpDef;

/* main() of an experiment program: 0 ok, 1 a run failed, 2 usage. */
int exp_main(const ExpDef *def, int argc, char **argv);

/* One run written to `out` (the run-file schema), as `ternlab ppl --out`: the
 * model under quant (NULL = as loaded) and KV policy kv (NULL = none) on
 * device ("cpu", "cuda"; NULL = cpu) against its reference (always fp32 on the
 * CPU); the reference cache goes beside out (dirname(out)/cache).
 * experiment attribute "ppl", factor "quant".  Returns 0 or -1 (err_set). */
int exp_run_single(const char *model, const char *tokens, int window, int64_t max_windows,
                   const char *quant, const char *kv, int tp, const char *device, const char *out);

#define TERNLAB_VERSION "0.1.0"

/* The source tree's commit (`git rev-parse HEAD` in the working folder), or
 * "unknown" outside git: the run files' git_commit attribute. */
void exp_git_commit(char *out, size_t n);

#endif
