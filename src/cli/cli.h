/* ternlab command line: shared option parsing for the commands. */
#ifndef TL_CLI_H
#define TL_CLI_H

#include "runtime/model.h"

#include <stdint.h>

typedef struct {
    const char *model, *tokens, *quant, *kv, *device, *out, *prompt, *windows, *dump_layers, *format;
    const char *mem; /* --mem 24GiB (info: capacity at that budget) */
    const char *dtype; /* --dtype f32|bf16: GPU activations and dense weights */
    int bf16;
    int window, tp, block_size, batch, have_windows, have_window;
    int64_t max_windows, max_new, win_a, win_b, kv_blocks;
    int help;
    int kv_given; /* --kv was given (ppl: the split-window protocol, also for none) */
} CliOpts;

/* Parses argv[1..] (argv[0] is the command name).  `allowed` is a string of the
 * long option names the command takes, e.g. "model tokens window".  Unknown or
 * malformed options are an error (message printed, returns -1). */
int cli_parse(int argc, char **argv, const char *allowed, CliOpts *o);

int cmd_info(int argc, char **argv);
int cmd_ppl(int argc, char **argv);
int cmd_logits(int argc, char **argv);
int cmd_generate(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_bench_e2e(int argc, char **argv);
int cmd_quantize(int argc, char **argv);
int cmd_verify(int argc, char **argv);
int cmd_diff(int argc, char **argv);
int cmd_gguf_info(const char *path);
int cmd_quantize_gguf(const char *model, const char *quant, const char *format, const char *out);
/* The QuantSpec a quantised model's ternary linears hold: m->quant with the
 * activations they run (act= explicit; a linear kept int8 as stored had been
 * recorded as f32).  -1 (err_set) where a ternary linear is in another group
 * or scale dtype (layers left as stored), where they differ in activations,
 * or where none is ternary. */
int quantized_spec(const Model *m, QuantSpec *spec);

#endif
