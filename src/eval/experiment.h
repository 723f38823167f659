/* The shared driver of the experiment programs (experiments/exp_*.c).  Each
 * program varies ONE factor; its settings come from configs/<experiment>.conf
 * (key = value; {} stands for the factor's value), any key overridable as
 * key=value on the command line.
 *
 *   build/exp_<name> [--model PATH] [--value V] [--out FILE.h5] [--config FILE]
 *                    [--results DIR] [key=value ...]
 *
 * With --model and --value: one run, one HDF5 file (--out, default
 * RESULTS/<experiment>/<model>__<value>.h5, or <model>__<value>__<device>.h5
 * where the config's device is not cpu, as scripts/sweep.sh names them).  Without them: every model of
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
    /* the one factor the program varies (its config's `factor`) and the setting whose
     * {} takes the value: carrier "quant" with item "rule=" (the QuantSpec's rule={}), or
     * carrier "kv" with item NULL (kv = {} or {}@layers=a-b); carrier NULL: the program
     * reads the value itself and no setting may hold a {} */
    const char *factor, *carrier, *item;
} ExpDef;

/* main() of an experiment program: 0 ok, 1 a run failed, 2 usage. */
int exp_main(const ExpDef *def, int argc, char **argv);

/* One run written to `out` (the run-file schema), as `ternlab ppl --out`: the
 * model under quant (NULL = as loaded) and KV policy kv (NULL: none, whole
 * windows; given, "none" too: the split-window protocol, as the KV experiment) on
 * device ("cpu", "cuda"; NULL = cpu) against its reference (always fp32 on the
 * CPU); the reference cache goes beside out (dirname(out)/cache, created; out's
 * folder itself must exist).  The evaluation is f32: it carries no --dtype.
 * experiment attribute "ppl", factor "quant".  Returns 0 or -1 (err_set). */
int exp_run_single(const char *model, const char *tokens, int window, int64_t max_windows,
                   const char *quant, const char *kv, int tp, const char *device, const char *out);

/* What exp_run_single would refuse, checked before the caller evaluates
 * anything (each 0, or -1 with err_set):
 *   exp_check_out: out's folder exists;
 *   exp_check_windows: the reference's logits of the windows (max_windows of
 *   window tokens out of n_tokens, 0 = all; split = the KV split protocol) fit
 *   the size a run compares, else a hint naming --max-windows. */
int exp_check_out(const char *out);
int exp_check_windows(int window, int vocab, int64_t n_tokens, int64_t max_windows, int split);

#define TERNLAB_VERSION "0.1.0"

/* The commit of the source tree this program was built from: the run files'
 * git_commit attribute.  What the build wrote beside the program
 * (exp_build_commit: the first line of git_commit in the executable's folder,
 * the Makefile's `git rev-parse HEAD` of its source folder with "-dirty"
 * where tracked sources differed from that commit); where there is none (a
 * build without git, or the program copied elsewhere), the HEAD now of
 * TL_SOURCE_DIR where the build defines it, else of the first folder above
 * the executable holding .git and src/eval/experiment.h (build/ in the tree),
 * never the working folder; else "unknown".  Once a process. */
const char *exp_build_commit(void); /* "" where the build wrote none */
void exp_git_commit(char *out, size_t n);

#endif
