/* exp-kv-ternary: ternary KV pages for prompt (encoder) vs generated (decoder) tokens, per layer range (weights as loaded).
 * One factor varies (configs/exp-kv-ternary.conf); the driver is src/eval/experiment.c. */
#include "core/blas_setup.h"
#include "eval/experiment.h"

int main(int argc, char **argv) {
    blas_setup(argc, argv);
    static const ExpDef def = {"exp-kv-ternary", EXP_QUALITY, "ternary KV pages for prompt (encoder) vs generated (decoder) tokens, per layer range (weights as loaded)",
                               "kv", "kv", NULL};
    return exp_main(&def, argc, argv);
}
