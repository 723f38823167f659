/* exp-throughput: tokens/s of dense BF16 vs ternary weights across batch sizes
 * (prefill of a prompt per sequence, then batched greedy decode), with the
 * run's perplexity against the dense reference on a few windows.
 * configs/exp-throughput.conf; the driver is src/eval/experiment.c. */
#include "core/blas_setup.h"
#include "eval/experiment.h"

int main(int argc, char **argv) {
    blas_setup(argc, argv);
    static const ExpDef def = {"exp-throughput", EXP_THROUGHPUT,
                               "dense BF16 vs ternary weights: prefill and decode tokens/s per batch size",
                               "weights", NULL, NULL};
    return exp_main(&def, argc, argv);
}
