/* ternlab diff: where do two runs of one model diverge?  (src/eval/diff.h) */
#include "cli/cli.h"
#include "core/err.h"
#include "core/mem.h"
#include "core/strnum.h"
#include "eval/diff.h"
#include "eval/experiment.h"
#include "load/tokens.h"
#include "log/h5log.h"

#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int cmd_diff(int argc, char **argv);

static const char *diff_help =
    "ternlab diff --model PATH --tokens FILE [--window 256] [--a SETTINGS]\n"
    "             (--b SETTINGS | --b-dump FILE) [--threshold 1e-2] [--out FILE.h5]\n"
    "Runs window 0 (tokens [0, T)) through two settings of one model and compares them\n"
    "per layer (residual stream), per sub-block (attention output, MLP output) and per\n"
    "linear (the same input through A's and B's version of that linear alone):\n"
    "relative L2 error ||A-B||/||B|| (B = reference), max |A-B|, NaN/Inf counts, and\n"
    "the first row where the error crosses --threshold.\n"
    "SETTINGS: comma list of quant=SPEC|loaded, kv=none|encoder|decoder|all[@layers=a-b],\n"
    "dense=0|1 (reference twin of ternary weights), device=cpu, tp=1; default quant=loaded.\n"
    "  e.g. --a 'quant=rule=twn,group=128' --b 'quant=loaded'\n"
    "--b-dump FILE: B is a raw f32 layer dump (n_layers+2, T, hidden) from elsewhere\n"
    "(ppl --dump-layers, or the fixtures' ref_layers.f32); residual rows only.  A runs\n"
    "the window as one prefill, as such dumps are made (under a kv= policy every token is\n"
    "a prompt token then); between two SETTINGS a kv= policy other than none runs ppl --kv's\n"
    "split protocol (the first half prefilled, the rest decoded).\n"
    "--out FILE.h5: also writes the comparison to an HDF5 file: provenance and the\n"
    "settings as root attributes, the tables above in /diff (paper/SCHEMA.md, \"ternlab\n"
    "diff files\"); not a run file (no perplexity), so ternlab verify refuses it.\n"
    "Last stdout line: first_layer <L|none> [block <attn|mlp|resid|...> rel_l2 <v>] threshold <t>\n";

static int usage_err(const char *msg, const char *arg) {
    fprintf(stderr, "ternlab diff: %s%s (see ternlab diff --help)\n", msg, arg ? arg : "");
    return 2;
}

/* Reads a raw f32 layer dump of exactly n floats. */
static int read_dump(const char *path, int64_t n, float **out) {
    MappedFile mf;
    if (file_map(path, &mf) != 0) return -1;
    if (mf.size != (size_t)n * sizeof(float)) {
        int rc = err_set("%s: %zu bytes, expected %lld (f32 [n_layers+2, T, hidden] for this model "
                         "and --window)", path, mf.size, (long long)n * 4);
        file_unmap(&mf);
        return rc;
    }
    float *d = mem_alloc(mf.size, "layer dump");
    if (d) memcpy(d, mf.data, mf.size);
    file_unmap(&mf);
    if (!d) return -1;
    *out = d;
    return 0;
}

int cmd_diff(int argc, char **argv) {
    static struct option opts[] = {
        {"model", required_argument, 0, 'm'}, {"tokens", required_argument, 0, 't'},
        {"window", required_argument, 0, 'w'}, {"a", required_argument, 0, 'a'},
        {"b", required_argument, 0, 'b'}, {"b-dump", required_argument, 0, 'D'},
        {"threshold", required_argument, 0, 'T'}, {"out", required_argument, 0, 'o'},
        {"help", no_argument, 0, 'h'}, {0, 0, 0, 0}};
    const char *model = NULL, *tokens = NULL, *sa = "quant=loaded", *sb = NULL, *bdump = NULL,
               *out = NULL;
    int64_t window = 256;
    double thr = DIFF_DEFAULT_THRESHOLD;
    optind = 1;
    opterr = 0;
    int c, idx;
    unsigned char seen[sizeof opts / sizeof opts[0]] = {0};
    while ((c = getopt_long(argc, argv, "", opts, &idx)) != -1) {
        if (c != '?' && c != ':' && c != 'h' && seen[idx]++)
            return usage_err("an option is given more than once: --", opts[idx].name);
        switch (c) {
        case 'm': model = optarg; break;
        case 't': tokens = optarg; break;
        case 'a': sa = optarg; break;
        case 'b': sb = optarg; break;
        case 'D': bdump = optarg; break;
        case 'o': out = optarg; break;
        case 'h': printf("%s", diff_help); return 0;
        case 'w':
            if (str_to_i64(optarg, 2, 1 << 20, &window) < 0)
                return usage_err("--window: expected an integer in [2, 1048576], got ", optarg);
            break;
        case 'T':
            if (str_to_f64(optarg, &thr) != 0 || !(thr > 0))
                return usage_err("--threshold: expected a positive number, got ", optarg);
            break;
        default: return usage_err("unknown option or missing value: ", argv[optind - 1]);
        }
    }
    if (optind < argc) return usage_err("unexpected argument ", argv[optind]);
    if (!model) return usage_err("--model is required", NULL);
    if (!tokens) return usage_err("--tokens is required", NULL);
    if (!sb == !bdump) return usage_err("give exactly one of --b SETTINGS and --b-dump FILE", NULL);
    /* an empty value (a sweep's unset variable) is refused as ternlab's other commands do */
    const struct {
        const char *name, *v;
    } given[] = {{"--model", model}, {"--tokens", tokens}, {"--a", sa}, {"--b", sb}, {"--b-dump", bdump}, {"--out", out}};
    for (size_t i = 0; i < sizeof given / sizeof given[0]; i++)
        if (given[i].v && !*given[i].v) return usage_err("an empty value for ", given[i].name);
    /* the output written over an input (the model's files, the tokens, the B dump) refused before any work */
    int bad_out = out && (file_out_path_check(out, "--out") != 0 || model_out_not_input(out, "--out", model, tokens) != 0);
    if (!bad_out && out && bdump && file_same(out, bdump))
        bad_out = err_set("--out %s is the --b-dump file", out);
    if (bad_out) {
        fprintf(stderr, "ternlab diff: %s\n", err_msg());
        return 1;
    }

    DiffSide A, B;
    if (diff_side_parse(sa, &A) != 0) {
        fprintf(stderr, "ternlab diff: --a: %s\n", err_msg());
        return 2;
    }
    if (sb && diff_side_parse(sb, &B) != 0) {
        fprintf(stderr, "ternlab diff: --b: %s\n", err_msg());
        return 2;
    }
    Model ma, mb;
    int have_b = 0, rc = 0;
    int32_t *tok = NULL;
    int64_t n = 0;
    float *dump = NULL;
    char bdesc[4200];
    if (diff_side_load(model, &A, &ma) != 0) {
        fprintf(stderr, "ternlab diff: A: %s\n", err_msg());
        return 1;
    }
    const ModelConfig *cfg = &ma.cfg;
    if (sb) {
        rc = diff_side_load(model, &B, &mb);
        have_b = rc == 0;
        if (rc) err_prefix("B: ");
        snprintf(bdesc, sizeof bdesc, "%s", B.desc);
    } else {
        rc = read_dump(bdump, (int64_t)(cfg->n_layers + 2) * window * cfg->hidden, &dump);
        snprintf(bdesc, sizeof bdesc, "dump %.4000s", bdump);
    }
    if (rc == 0) rc = tokens_load(tokens, cfg->vocab, &tok, &n);
    if (rc == 0 && n < window)
        rc = err_set("%s: %lld tokens, shorter than one window of %lld", tokens, (long long)n, (long long)window);
    DiffResult r;
    if (rc == 0)
        rc = diff_compare(&ma, &A.kv, have_b ? &mb : NULL, have_b ? &B.kv : NULL, dump, tok,
                          (int)window, thr, &r);
    if (rc == 0) {
        if (out) {
            char commit[80];
            exp_git_commit(commit, sizeof commit); /* (NULL had written "unknown" always) */
            H5Log *lg = h5log_create(out);
            int e = lg ? 0 : -1;
            if (e == 0) {
                e |= h5log_write_provenance(lg, TERNLAB_VERSION, commit);
                e |= h5log_attr_str(lg, "/", "experiment", "diff");
                e |= h5log_attr_str(lg, "/", "model", model);
                e |= h5log_attr_str(lg, "/", "tokens", tokens);
                e |= h5log_attr_i64(lg, "/", "window", window);
                e |= diff_write_h5(lg, "/diff", &r, A.desc, bdesc);
                if (e) h5log_abort(lg);
                else e = h5log_commit(lg);
            }
            rc = e ? -1 : 0;
        }
        diff_print(&r, A.desc, bdesc, stdout);
        diff_result_free(&r);
    }
    free(tok);
    mem_free(dump);
    if (have_b) model_free(&mb);
    model_free(&ma);
    if (rc) {
        fprintf(stderr, "ternlab diff: %s\n", err_msg());
        return 1;
    }
    return 0;
}
