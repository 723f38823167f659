/* exp-threshold: which threshold/scale rule ternarises a model best (rule varies; group 128, scale f16).
 * One factor varies (configs/exp-threshold.conf); the driver is src/eval/experiment.c. */
#include "core/blas_setup.h"
#include "eval/experiment.h"

int main(int argc, char **argv) {
    blas_setup(argc, argv);
    static const ExpDef def = {"exp-threshold", EXP_QUALITY, "which threshold/scale rule ternarises a model best (rule varies; group 128, scale f16)",
                               "rule", "quant", "rule="};
    return exp_main(&def, argc, argv);
}
