/* exp-group-size: how many weights share one scale (rule absmean, scale f16).
 * One factor varies (configs/exp-group-size.conf); the driver is src/eval/experiment.c. */
#include "core/blas_setup.h"
#include "eval/experiment.h"

int main(int argc, char **argv) {
    blas_setup(argc, argv);
    static const ExpDef def = {"exp-group-size", EXP_QUALITY, "how many weights share one scale (rule absmean, scale f16)",
                               "group", "quant", "group="};
    return exp_main(&def, argc, argv);
}
