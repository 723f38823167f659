/* exp-scale-dtype: how the dtype that stores the ternary scales changes quality (rule absmean, group 128).
 * One factor varies (configs/exp-scale-dtype.conf); the driver is src/eval/experiment.c. */
#include "core/blas_setup.h"
#include "eval/experiment.h"

int main(int argc, char **argv) {
    blas_setup(argc, argv);
    static const ExpDef def = {"exp-scale-dtype", EXP_QUALITY, "how the dtype that stores the ternary scales changes quality (rule absmean, group 128)",
                               "scale", "quant", "scale="};
    return exp_main(&def, argc, argv);
}
