/* ternlab: the command-line entry point.  Dispatches to one command; every
 * command has --help.  Exit status: 0 ok, 1 bad input or failed run, 2 usage. */
#include "cli/cli.h"
#include "core/blas_setup.h"
#include "core/err.h"
#include "core/mem.h"
#include "core/strnum.h"
#include "quant/quant.h"
#include "runtime/cuda_engine.h"
#include "runtime/engine.h"
#include "tp/tp_engine.h"

#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *usage_text =
    "ternlab: a testbed for ternary-weight LLM inference\n"
    "\n"
    "usage: ternlab COMMAND [options]   (ternlab COMMAND --help for each)\n"
    "\n"
    "  info      --model PATH [--quant SPEC] [--mem SIZE]   config, tensors, load report,\n"
    "            KV capacity at a memory budget (--mem 24GiB); a .gguf: its metadata too\n"
    "  ppl       --model PATH --tokens FILE [--window 256] [--max-windows N] [--quant SPEC]\n"
    "            [--kv POLICY] [--device cpu|cuda] [--dtype f32|bf16] [--tp N] [--out run.h5]\n"
    "            [--block-size 16] [--kv-blocks N] [--dump-layers FILE]\n"
    "  logits    --model PATH --tokens FILE --window T --windows A:B --out FILE [--quant SPEC]\n"
    "            [--device cpu|cuda] [--dtype f32|bf16] [--tp N] [--block-size 16]\n"
    "            [--dump-layers FILE] [--kv none]\n"
    "  generate  --model PATH --prompt 1,2,3 --max-new N [--quant SPEC] [--batch B]\n"
    "            [--kv POLICY] [--device cpu|cuda] [--dtype f32|bf16] [--tp N]\n"
    "            [--block-size 16] [--kv-blocks N]\n"
    "  quantize  --model PATH --quant SPEC --out DIR|FILE.gguf [--format safetensors|gguf-tq2_0|gguf-tq1_0]\n"
    "            (an --out ending in .gguf without --format writes gguf-tq2_0)\n"
    "  verify    [--device D] [--expect K=V] FILE.h5 ...  is a run file whole (complete, schema)?\n"
    "  diff      --model PATH --tokens FILE [--a SETTINGS] (--b SETTINGS | --b-dump FILE)\n"
    "            per-layer / per-sub-block / per-linear divergence of two runs\n"
    "  bench     CPU kernel benchmarks (ternlab bench --help)\n"
    "  bench-e2e end-to-end decode/prefill throughput of synthetic 7B/27B models on the\n"
    "            GPU, ternary vs BF16 (ternlab bench-e2e --help)\n"
    "\n"
    "--model takes a Hugging Face folder (config.json + safetensors) or a .gguf file.\n"
    "--device cuda runs ppl, logits and generate on the GPU (--dtype bf16: bf16\n"
    "activations and dense weights; f32, the default, is the reference); bench is the\n"
    "CPU benchmark (GPU kernels: make bench-gpu; end to end: bench-e2e).\n"
    "--tp N: N CPU threads (with --device cuda, N GPUs).  --kv POLICY\n"
    "(none|encoder|decoder|all[@layers=a-b]): ternary KV pages (on one GPU: ternary pages in\n"
    "the layers `all` covers; under encoder/decoder the rows' values in f32 pages, no memory\n"
    "saved); for ppl each\n"
    "window's first half is prefilled and the second half decoded and scored; logits\n"
    "(full prefills) takes only none.  --block-size: tokens per KV page (default 16);\n"
    "--kv-blocks N: pages in the KV pool (default: enough for every sequence of a call);\n"
    "--dump-layers FILE: raw f32 (n_layers+2, window, hidden) of window 0 of the token\n"
    "file (whatever --windows says): embedding output, the residual stream after each\n"
    "layer, after the final norm.\n"
    "Exit status: 0 ok, 1 failed run (including output that could not be written),\n"
    "2 usage error.\n";

static struct option all_opts[] = {
    {"model", required_argument, 0, 'm'},      {"tokens", required_argument, 0, 't'},
    {"window", required_argument, 0, 'w'},     {"max-windows", required_argument, 0, 'n'},
    {"windows", required_argument, 0, 'W'},    {"quant", required_argument, 0, 'q'},
    {"kv", required_argument, 0, 'k'},         {"device", required_argument, 0, 'd'},
    {"tp", required_argument, 0, 'p'},         {"out", required_argument, 0, 'o'},
    {"prompt", required_argument, 0, 'P'},     {"max-new", required_argument, 0, 'N'},
    {"block-size", required_argument, 0, 'b'}, {"batch", required_argument, 0, 'B'},
    {"kv-blocks", required_argument, 0, 'K'},  {"dump-layers", required_argument, 0, 'D'},
    {"format", required_argument, 0, 'F'},    {"mem", required_argument, 0, 'M'},
    {"dtype", required_argument, 0, 'T'},
    {"help", no_argument, 0, 'h'},
    {0, 0, 0, 0}};

static int parse_i64(const char *name, const char *s, int64_t lo, int64_t hi, int64_t *out) {
    if (str_to_i64(s, lo, hi, out) < 0) {
        fprintf(stderr, "ternlab: --%s '%s': expected an integer in [%lld, %lld]\n", name, s,
                (long long)lo, (long long)hi);
        return -1;
    }
    return 0;
}

static int allowed_opt(const char *allowed, const char *name) {
    size_t n = strlen(name);
    for (const char *p = allowed; (p = strstr(p, name)); p += n)
        if ((p == allowed || p[-1] == ' ') && (p[n] == ' ' || p[n] == 0)) return 1;
    return 0;
}

int cli_parse(int argc, char **argv, const char *allowed, CliOpts *o) {
    memset(o, 0, sizeof *o);
    o->window = 256;
    o->tp = 1;
    o->block_size = 16;
    o->batch = 1;
    o->device = "cpu";
    o->kv = "none";
    optind = 1;
    opterr = 0;
    int c, idx = 0;
    unsigned char seen[sizeof all_opts / sizeof all_opts[0]] = {0};
    while ((c = getopt_long(argc, argv, "", all_opts, &idx)) != -1) {
        if (c == '?' || c == ':') {
            fprintf(stderr, "ternlab %s: unknown option or missing value: %s\n", argv[0],
                    argv[optind - 1]);
            return -1;
        }
        const char *name = all_opts[idx].name;
        if (c != 'h' && !allowed_opt(allowed, name)) {
            fprintf(stderr, "ternlab %s: option --%s does not apply to this command\n", argv[0], name);
            return -1;
        }
        /* an option given twice is refused (the last had silently won: --kv all ... --kv none
         * ran none) */
        if (c != 'h' && seen[idx]++) {
            fprintf(stderr, "ternlab %s: --%s is given more than once\n", argv[0], name);
            return -1;
        }
        /* a string option given an empty value (a sweep's unset variable, --quant "$SPEC")
         * is refused, not taken as the option left out or as a default */
        if (optarg && !*optarg && strchr("mtqkdoPDFMT", c)) {
            fprintf(stderr, "ternlab %s: --%s has an empty value\n", argv[0], name);
            return -1;
        }
        int64_t v;
        switch (c) {
        case 'm': o->model = optarg; break;
        case 't': o->tokens = optarg; break;
        case 'q': o->quant = optarg; break;
        case 'k': o->kv = optarg, o->kv_given = 1; break;
        case 'd': o->device = optarg; break;
        case 'o': o->out = optarg; break;
        case 'P': o->prompt = optarg; break;
        case 'D': o->dump_layers = optarg; break;
        case 'F': o->format = optarg; break;
        case 'M': o->mem = optarg; break;
        case 'T': o->dtype = optarg; break;
        case 'h': o->help = 1; break;
        case 'w': if (parse_i64(name, optarg, 2, 1 << 20, &v)) return -1; o->window = (int)v; o->have_window = 1; break;
        case 'n': if (parse_i64(name, optarg, 1, INT64_MAX, &o->max_windows)) return -1; break;
        case 'p': if (parse_i64(name, optarg, 1, TP_MAX_RANKS, &v)) return -1; o->tp = (int)v; break;
        case 'N': if (parse_i64(name, optarg, 0, 1 << 24, &o->max_new)) return -1; break;
        case 'b': if (parse_i64(name, optarg, 1, 1 << 16, &v)) return -1; o->block_size = (int)v; break;
        case 'B': /* (the run state a step runs in holds 4096 tokens: generate opens it so) */
            if (parse_i64(name, optarg, 1, 4096, &v)) return -1;
            o->batch = (int)v;
            break;
        case 'K': if (parse_i64(name, optarg, 1, 1 << 30, &o->kv_blocks)) return -1; break;
        case 'W': {
            char *colon = strchr(optarg, ':');
            char a[32] = {0};
            if (!colon || colon - optarg >= (long)sizeof a) {
                fprintf(stderr, "ternlab: --windows '%s': expected A:B\n", optarg);
                return -1;
            }
            memcpy(a, optarg, (size_t)(colon - optarg));
            if (parse_i64("windows", a, 0, INT64_MAX, &o->win_a) ||
                parse_i64("windows", colon + 1, 1, INT64_MAX, &o->win_b))
                return -1;
            if (o->win_b <= o->win_a) {
                fprintf(stderr, "ternlab: --windows %s: B must be greater than A\n", optarg);
                return -1;
            }
            o->have_windows = 1;
            o->windows = optarg;
            break;
        }
        }
    }
    if (optind < argc) {
        fprintf(stderr, "ternlab %s: unexpected argument '%s'\n", argv[0], argv[optind]);
        return -1;
    }
    if (!o->help && engine_device_parse(o->device) < 0) {
        fprintf(stderr, "ternlab: --device '%s': expected cpu or cuda\n", o->device);
        return -1;
    }
    QuantSpec qs; /* a malformed spec is a usage error, as a malformed --kv (it had exited 1 at the load) */
    if (!o->help && o->quant && quant_spec_parse(o->quant, &qs) != 0) {
        fprintf(stderr, "ternlab %s: --quant: %s\n", argv[0], err_msg());
        return -1;
    }
    if (o->dtype) {
        if (strcmp(o->dtype, "bf16") != 0 && strcmp(o->dtype, "f32") != 0) {
            fprintf(stderr, "ternlab: --dtype '%s': expected f32 or bf16\n", o->dtype);
            return -1;
        }
        o->bf16 = strcmp(o->dtype, "bf16") == 0;
        if (o->bf16 && strcmp(o->device, "cuda") != 0) {
            fprintf(stderr, "ternlab: --dtype bf16 applies to --device cuda (the CPU path "
                            "computes in fp32)\n");
            return -1;
        }
    }
    if (strcmp(o->device, "cuda") == 0 && o->tp > 1) cuda_prepare_multi_gpu();
    if (strcmp(o->device, "cuda") == 0 && o->tp > 1 && o->kv && strcmp(o->kv, "none") != 0) {
        fprintf(stderr, "ternlab: --kv %s with --device cuda --tp %d: ternary KV pages run on one "
                        "GPU or on the CPU\n", o->kv, o->tp);
        return -1;
    }
    /* --tp N > 1 runs on N CPU threads (src/tp); the split itself is checked when
     * the engine opens (tp_engine_open names the model, head counts and N) */
    return 0;
}

/* stdout checked at exit (err_stdout_finish): "ternlab CMD: cannot write ..." */
static int finish_stdout(const char *cmd, int rc) {
    char who[64];
    snprintf(who, sizeof who, "ternlab %s", cmd);
    return err_stdout_finish(who, rc);
}

int main(int argc, char **argv) {
    /* a file size limit (ulimit -f) then fails the write with EFBIG, reported
     * like a full disk, instead of killing the program mid-file */
    signal(SIGXFSZ, SIG_IGN);
    /* and a reader that went away (`ternlab info ... | head -c1`) fails the
     * write with EPIPE, reported (exit 1) as any output that cannot be
     * written, instead of killing the program (exit 141) */
    signal(SIGPIPE, SIG_IGN);
    /* stopped by TERM, INT or HUP: the temporaries of files being written go */
    tmp_cleanup_on_signals();
    blas_setup(argc, argv);
    if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0 ||
        strcmp(argv[1], "help") == 0) {
        fputs(usage_text, argc < 2 ? stderr : stdout);
        return finish_stdout("--help", argc < 2 ? 2 : 0);
    }
    static const struct {
        const char *name;
        int (*fn)(int, char **);
    } cmds[] = {{"info", cmd_info},         {"ppl", cmd_ppl}, {"logits", cmd_logits},
                {"generate", cmd_generate}, {"bench", cmd_bench}, {"bench-e2e", cmd_bench_e2e},
                {"quantize", cmd_quantize}, {"verify", cmd_verify},
                {"diff", cmd_diff}};
    for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++)
        if (strcmp(argv[1], cmds[i].name) == 0)
            return finish_stdout(cmds[i].name, cmds[i].fn(argc - 1, argv + 1));
    fprintf(stderr, "ternlab: unknown command '%s'\n\n%s", argv[1], usage_text);
    return 2;
}

/* Replaced by src/cli/cmd_bench.c when the kernel benchmarks are built. */
__attribute__((weak)) int cmd_bench(int argc, char **argv) {
    fprintf(stderr, "ternlab bench: not available in this build\n");
    return 2;
}
