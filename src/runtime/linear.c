#include "runtime/linear.h"
#include "core/err.h"
#include "core/mem.h"

#include <cblas.h>
#include <string.h>

size_t linear_scratch_bytes(int64_t n, int64_t in) {
    return (size_t)n * (size_t)in * (sizeof(float) + 1) + (size_t)n * sizeof(float) + 128;
}

void linear_forward(const Linear *lin, const float *x, int64_t n, float *y, void *scratch) {
    (void)scratch;
    /* W (out,in) @ x (n,in)^T -> y (n,out): row-major C = A B^T with A = x, B = W */
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)n, (int)lin->out, (int)lin->in, 1.0f,
                x, (int)lin->in, lin->w, (int)lin->in, 0.0f, y, (int)lin->out);
}

void linear_free(Linear *lin) {
    mem_free(lin->w);
    lin->w = NULL;
}

int model_load_bitnet_linear(Model *m, Linear *lin, const ModelLoadOpts *opts) {
    return err_set("%s: packed BitNet weights are not supported yet", lin->name);
}

int model_quantise_linear(Model *m, Linear *lin, int layer, const char *kind,
                          const ModelLoadOpts *opts) {
    if (opts->quant) return err_set("--quant is not supported yet");
    return 0;
}

static size_t linear_bytes(const Linear *lin) {
    return lin->w ? sizeof(float) * (size_t)(lin->out * lin->in) : 0;
}

size_t model_weight_bytes(const Model *m) {
    size_t b = linear_bytes(&m->lm_head) * (m->lm_head_tied ? 0 : 1);
    b += sizeof(float) * (size_t)m->cfg.vocab * (size_t)m->cfg.hidden;
    for (int l = 0; l < m->cfg.n_layers; l++) {
        const Layer *L = &m->layers[l];
        const Linear *lins[] = {&L->q, &L->k, &L->v, &L->o, &L->gate, &L->up, &L->down};
        for (size_t i = 0; i < sizeof lins / sizeof lins[0]; i++) b += linear_bytes(lins[i]);
    }
    return b;
}
