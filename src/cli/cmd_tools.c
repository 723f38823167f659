/* ternlab quantize | verify */
#include "cli/cli.h"
#include "core/err.h"
#include "core/mem.h"
#include "log/h5log.h"
#include "runtime/linear.h"
#include "runtime/model.h"
#include "ternary_format.h"

#include <cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

typedef struct {
    char name[200];
    const char *dtype;
    int ndim;
    int64_t shape[4];
    const void *data;
    size_t nbytes;
} OutTensor;

/* Writes a safetensors file (header padded to 8 bytes) for `path` to its
 * registered temporary (named into tmp, as tmp_begin), fsynced and left for
 * files_commit; on failure nothing is left. */
static int stage_safetensors(const char *path, const OutTensor *t, int n, char *tmp, size_t tn) {
    if (file_out_check(path) != 0) return -1; /* (before the header is built) */
    cJSON *h = cJSON_CreateObject();
    cJSON *meta = cJSON_AddObjectToObject(h, "__metadata__");
    cJSON_AddStringToObject(meta, "format", "pt");
    size_t off = 0;
    for (int i = 0; i < n; i++) {
        cJSON *e = cJSON_AddObjectToObject(h, t[i].name);
        cJSON_AddStringToObject(e, "dtype", t[i].dtype);
        cJSON *sh = cJSON_AddArrayToObject(e, "shape");
        for (int d = 0; d < t[i].ndim; d++) cJSON_AddItemToArray(sh, cJSON_CreateNumber((double)t[i].shape[d]));
        cJSON *o = cJSON_AddArrayToObject(e, "data_offsets");
        cJSON_AddItemToArray(o, cJSON_CreateNumber((double)off));
        cJSON_AddItemToArray(o, cJSON_CreateNumber((double)(off + t[i].nbytes)));
        off += t[i].nbytes;
    }
    char *text = cJSON_PrintUnformatted(h);
    cJSON_Delete(h);
    size_t hl = strlen(text), padded = (hl + 7) & ~(size_t)7;
    /* the header's length, the header, its padding to 8 bytes, the tensors */
    unsigned char len8[8];
    for (int i = 0; i < 8; i++) len8[i] = (unsigned char)((uint64_t)padded >> (8 * i));
    const void **data = xcalloc((size_t)n + 3, sizeof *data);
    size_t *len = xcalloc((size_t)n + 3, sizeof *len);
    data[0] = len8, len[0] = 8;
    data[1] = text, len[1] = hl;
    data[2] = "       ", len[2] = padded - hl;
    for (int i = 0; i < n; i++) data[3 + i] = t[i].data, len[3 + i] = t[i].nbytes;
    const int rc = file_stage_parts(path, n + 3, data, len, tmp, tn);
    free(data);
    free(len);
    free(text);
    return rc;
}

static Linear *find_linear(Model *m, const char *tensor_name) {
    for (int l = 0; l < m->cfg.n_layers; l++) {
        Layer *L = &m->layers[l];
        Linear *lins[] = LAYER_LINEARS(L);
        for (int i = 0; i < LAYER_N_LINEARS; i++) {
            size_t n = strlen(lins[i]->name);
            if (strncmp(tensor_name, lins[i]->name, n) == 0 && tensor_name[n] == '.') return lins[i];
        }
    }
    return NULL;
}

/* The source folder's files a safetensors output gets copied beside its
 * checkpoint (where the source has them). */
static const char *const copied_files[] = {"tokenizer.json", "generation_config.json"};
#define N_COPIED ((int)(sizeof copied_files / sizeof copied_files[0]))

/* (what a mix of stored and new ternary linears leaves the user: layers=all is
 * another model for the stored ones unless the rule reproduces them) */
static const char kQuantMixAdvice[] =
    "layers=all re-ternarises the stored linears too, by --quant's rule from their values (another "
    "model unless the rule keeps their codes and scales); to keep them as stored and ternarise the "
    "rest, run the source with --quant instead of writing a file";

int quantized_spec(const Model *m, QuantSpec *spec) {
    int act_int8 = -1;
    const QuantSpec want = m->quant; /* (never act-only here: cmd_quantize refuses it) */
    for (int l = 0; l < m->cfg.n_layers; l++) {
        const Layer *L = &m->layers[l];
        const Linear *lins[] = LAYER_LINEARS(L);
        static const char *const kinds[] = {"q", "k", "v", "o", "gate", "up", "down"};
        for (int i = 0; i < LAYER_N_LINEARS; i++) {
            const Linear *lin = lins[i];
            if (!lin->t) continue;
            if (lin->t->group != want.group || lin->t->scale_dtype != want.scale)
                return err_set("%s is ternary in another format than --quant gives (a native ternary "
                               "checkpoint with some layers left as stored); a ternlab checkpoint holds "
                               "one QuantSpec: %s", lin->name, kQuantMixAdvice);
            /* the spec written names the file's ternary linears (the loader refuses a file
             * whose linears are stored otherwise); a native one it leaves out had been
             * written packed under a spec whose layers= and rule did not describe it */
            const int sel = quant_layer_selected(&want, l, kinds[i]);
            if (sel < 0) return -1;
            if (!sel)
                return err_set("%s is ternary as stored (a native ternary checkpoint), but --quant's layers= "
                               "leaves it out; a ternlab checkpoint holds one QuantSpec, which names its "
                               "ternary linears: %s", lin->name, kQuantMixAdvice);
            if (act_int8 >= 0 && act_int8 != lin->act_int8)
                return err_set("linears differ in activation mode: give act= in --quant");
            act_int8 = lin->act_int8;
        }
    }
    if (act_int8 < 0) return err_set("--quant selected no linear to ternarise");
    *spec = want;
    spec->act = act_int8 ? QA_INT8 : QA_F32;
    spec->act_explicit = 1;
    return 0;
}

/* What one quantize_safetensors call writes: each file first to its temporary
 * (staged), then all renamed together (files_commit: the source's copied files,
 * model.safetensors, config.json last; a failed rename undoes the set), so
 * that a failed write or a stop leaves the folder as it was — no
 * model.safetensors without its config.json (which the next call refused as
 * "already holds model.safetensors"), no copied file of the folder's replaced
 * by a checkpoint that did not follow, no folder the call made.  The
 * temporaries staged (none once files_commit has run: it removes or renames
 * them), and whether the call made the folder. */
enum { N_OUT = 2 + N_COPIED };
typedef struct {
    char tmp[N_OUT][4300], final[N_OUT][4200];
    int n, made_dir;
} Written;

/* Remembers a staged file: its temporary (already written) and its final path. */
static void staged(Written *wr, const char *tmp, const char *final) {
    snprintf(wr->tmp[wr->n], sizeof wr->tmp[0], "%s", tmp);
    snprintf(wr->final[wr->n++], sizeof wr->final[0], "%s", final);
}

/* After a failure: the temporaries staged, and the folder if the call made it
 * (when nothing else is in it). */
static void remove_written(Written *wr, const char *out) {
    for (int i = 0; i < wr->n; i++) {
        remove(wr->tmp[i]);
        tmp_end(wr->tmp[i]);
    }
    wr->n = 0;
    if (wr->made_dir) rmdir(out), tmp_end(out);
}

static int stage_text(Written *wr, const char *path, const char *text) {
    char tmp[4300];
    if (file_stage(path, text, strlen(text), tmp, sizeof tmp) != 0) return -1;
    staged(wr, tmp, path);
    return 0;
}

/* A ternary checkpoint in safetensors: the ternary linears as U8 codes in
 * kernels/ternary_format.h's layout [out, tern_row_bytes(in)] plus F32
 * `weight_scales` (the stored, dtype-rounded values); everything else as in
 * the source checkpoint; config.json gets quantization_config
 * {quant_method: ternlab, spec, layout}. */
static int quantize_safetensors(Model *m, const char *out, Written *wr) {
    if (tmp_mkdir(out, 0777) == 0) wr->made_dir = 1; /* (registered: a stop removes it) */
    else if (errno != EEXIST) return err_set("cannot create %s: %s", out, strerror(errno));
    QuantSpec spec;
    if (quantized_spec(m, &spec) != 0) return -1;
    OutTensor *ts = xcalloc((size_t)m->st.n_tensors * 2 + 2, sizeof(OutTensor));
    int n = 0, rc = 0;
    for (int i = 0; i < m->st.n_tensors && rc == 0; i++) {
        const StTensor *s = &m->st.tensors[i];
        Linear *lin = find_linear(m, s->name);
        if (lin && lin->t) {
            if (strstr(s->name, ".weight_scale")) continue; /* BitNet's per-tensor scale: folded in */
            OutTensor *o = &ts[n++];
            snprintf(o->name, sizeof o->name, "%s.weight", lin->name);
            o->dtype = "U8";
            o->ndim = 2;
            o->shape[0] = lin->out;
            o->shape[1] = lin->t->row_bytes;
            o->data = lin->t->codes;
            o->nbytes = (size_t)(lin->out * lin->t->row_bytes);
            o = &ts[n++];
            snprintf(o->name, sizeof o->name, "%s.weight_scales", lin->name);
            o->dtype = "F32";
            o->ndim = 1;
            o->shape[0] = lin->t->n_scales;
            o->data = lin->t->scales;
            o->nbytes = sizeof(float) * (size_t)lin->t->n_scales;
            continue;
        }
        OutTensor *o = &ts[n++];
        snprintf(o->name, sizeof o->name, "%s", s->name);
        o->dtype = st_dtype_name(s->dtype);
        o->ndim = s->ndim;
        for (int d = 0; d < s->ndim && d < 4; d++) o->shape[d] = s->shape[d];
        o->data = s->data;
        o->nbytes = s->nbytes;
        if (!o->dtype || s->ndim > 4) rc = err_set("tensor '%s' cannot be copied", s->name);
    }
    char path[4200];
    /* the source's tokenizer.json and generation_config.json, then the weights, then
     * config.json: renamed in this order (config.json, which makes the folder a
     * checkpoint, last) */
    for (int i = 0; i < N_COPIED && rc == 0; i++) {
        char *text;
        snprintf(path, sizeof path, "%s/%s", m->path, copied_files[i]);
        struct stat st;
        if (stat(path, &st) != 0) continue;
        if (file_read_all(path, &text, NULL) != 0) continue;
        snprintf(path, sizeof path, "%s/%s", out, copied_files[i]);
        rc = stage_text(wr, path, text);
        free(text);
    }
    if (rc == 0) {
        char tmp[4300];
        snprintf(path, sizeof path, "%s/model.safetensors", out);
        rc = stage_safetensors(path, ts, n, tmp, sizeof tmp);
        if (rc == 0) staged(wr, tmp, path);
    }
    if (rc == 0) {
        char *text;
        snprintf(path, sizeof path, "%s/config.json", m->path);
        rc = file_read_all(path, &text, NULL);
        cJSON *cfg = rc == 0 ? cJSON_Parse(text) : NULL;
        if (rc == 0) free(text);
        if (rc == 0 && !cfg) rc = err_set("%s: cannot re-read", path);
        if (rc == 0) {
            char sp[256];
            quant_spec_format(&spec, sp, sizeof sp);
            cJSON_DeleteItemFromObject(cfg, "quantization_config");
            cJSON *qc = cJSON_AddObjectToObject(cfg, "quantization_config");
            cJSON_AddStringToObject(qc, "quant_method", "ternlab");
            cJSON_AddStringToObject(qc, "spec", sp);
            cJSON_AddStringToObject(qc, "layout", "ternlab 2-bit, 256-column blocks (kernels/ternary_format.h)");
            char *o = cJSON_Print(cfg);
            snprintf(path, sizeof path, "%s/config.json", out);
            rc = stage_text(wr, path, o);
            free(o);
            cJSON_Delete(cfg);
        }
    }
    if (rc == 0) {
        char *tmps[N_OUT], *finals[N_OUT];
        for (int i = 0; i < wr->n; i++) tmps[i] = wr->tmp[i], finals[i] = wr->final[i];
        rc = files_commit(wr->n, tmps, finals);
        wr->n = 0; /* (renamed, or removed with the set undone) */
    }
    free(ts);
    return rc;
}

/* Whether the folder `dir` (if it exists) holds a safetensors checkpoint: a
 * *.safetensors file or an index (model.safetensors.index.json).  Returns 1 with the
 * first such name in `held`, 0 when it holds none or does not exist, -1 when
 * it cannot be read (err_set). */
static int out_holds_checkpoint(const char *dir, char *held, size_t n) {
    DIR *d = opendir(dir);
    if (!d) {
        if (errno == ENOENT || errno == ENOTDIR) return 0; /* new, or a file: mkdir reports it */
        return err_set("--out %s: cannot read the folder: %s", dir, strerror(errno));
    }
    int found = 0;
    for (struct dirent *e; !found && (e = readdir(d));) {
        size_t l = strlen(e->d_name);
        if ((l >= 12 && strcmp(e->d_name + l - 12, ".safetensors") == 0) ||
            (l >= 23 && strcmp(e->d_name + l - 23, ".safetensors.index.json") == 0)) {
            snprintf(held, n, "%s", e->d_name);
            found = 1;
        }
    }
    closedir(d);
    return found;
}

int cmd_quantize(int argc, char **argv) {
    CliOpts o;
    if (cli_parse(argc, argv, "model quant out format", &o) != 0) return 2;
    if (o.help) {
        printf("ternlab quantize --model PATH --quant SPEC --out DIR [--format safetensors]\n"
               "ternlab quantize --model PATH --quant SPEC --out FILE.gguf [--format gguf-tq2_0|gguf-tq1_0]\n"
               "Writes a ternary checkpoint.  The format follows --out: a name ending in .gguf\n"
               "is a GGUF file (gguf-tq2_0 unless --format says gguf-tq1_0), any other a\n"
               "safetensors folder; a --format that contradicts the name is refused.\n"
               "safetensors: ternary linears as 2-bit codes in ternlab's packed layout + F32\n"
               "scales, config.json quantization_config {quant_method: ternlab, spec}; loads\n"
               "back to identical logits.\n"
               "gguf-*: a llama GGUF with TQ2_0/TQ1_0 linears that llama.cpp reads; needs\n"
               "group=256, row or tensor.  TQ blocks hold one f16 scale per 256 weights:\n"
               "identical logits when every scale is an f16 value (scale=f16, or bf16/fp8\n"
               "scales within f16's range); otherwise (scale=f32) the model is ternarised\n"
               "again with scale=f16 and the file's ternlab.quant_spec says so (its logits\n"
               "are those of --quant with scale=f16).  Both formats record act= as the\n"
               "linears run; a linear left ternary as stored in another format is refused.\n");
        return 0;
    }
    if (!o.model || !o.quant || !o.out) {
        fprintf(stderr, "ternlab quantize: --model, --quant and --out are required\n");
        return 2;
    }
    {   /* act= alone keeps the loaded weights (ppl, logits, the experiments); a file needs the
         * spec of its weights, which such a spec does not give (its rule had been written as the
         * default's over another rule's codes, and a GGUF's f16 fallback re-ternarised them) */
        QuantSpec qs;
        if (quant_spec_parse(o.quant, &qs) == 0 && qs.act_only) {
            fprintf(stderr, "ternlab quantize: --quant %s: act= alone changes activations, not weights; quantize "
                            "writes the weights a full spec makes: give rule=, group=, scale= too\n", o.quant);
            return 2;
        }
    }
    /* ternlab (and llama.cpp) tell a GGUF from a folder by its name: an --out
     * ending in .gguf is a GGUF file (a safetensors folder of that name had been
     * written, which every later command then failed to read as GGUF) */
    size_t ol = strlen(o.out);
    while (ol > 1 && o.out[ol - 1] == '/') ol--;
    const int out_gguf = ol >= 5 && strncmp(o.out + ol - 5, ".gguf", 5) == 0;
    if (out_gguf && ol != strlen(o.out)) { /* (it had tried to write a file named "x.gguf/") */
        fprintf(stderr, "ternlab quantize: --out %s ends in a slash, but a .gguf output is a file: give %.*s\n",
                o.out, (int)ol, o.out);
        return 2;
    }
    const char *fmt = o.format ? o.format : out_gguf ? "gguf-tq2_0" : "safetensors";
    if (strcmp(fmt, "safetensors") != 0 && strcmp(fmt, "gguf-tq2_0") != 0 && strcmp(fmt, "gguf-tq1_0") != 0) {
        fprintf(stderr, "ternlab quantize: --format '%s': expected safetensors, gguf-tq2_0 or gguf-tq1_0\n", fmt);
        return 2;
    }
    if (out_gguf && strncmp(fmt, "gguf-", 5) != 0) {
        fprintf(stderr, "ternlab quantize: --out %s ends in .gguf but --format %s writes a folder; give "
                        "--format gguf-tq2_0|gguf-tq1_0 or an --out without .gguf\n", o.out, fmt);
        return 2;
    }
    if (!out_gguf && strncmp(fmt, "gguf-", 5) == 0) {
        fprintf(stderr, "ternlab quantize: --format %s writes a GGUF file: give an --out ending in .gguf "
                        "(ternlab recognises a GGUF by that name)\n", fmt);
        return 2;
    }
    { /* the output must not be the source checkpoint (it was replaced in place) */
        char rm[PATH_MAX], ro[PATH_MAX];
        if (realpath(o.model, rm) && realpath(o.out, ro) && strcmp(rm, ro) == 0) {
            fprintf(stderr, "ternlab quantize: --out %s is the --model checkpoint itself; give another path\n",
                    o.out);
            return 2;
        }
    }
    if (strncmp(fmt, "gguf-", 5) == 0) return cmd_quantize_gguf(o.model, o.quant, fmt, o.out);
    { /* an existing folder must hold no checkpoint: the new model.safetensors would sit
       * beside another checkpoint's files (an index and its shards, which tools that
       * prefer them would read); a file at --out had failed only after the model was
       * quantised */
        struct stat so;
        if (stat(o.out, &so) == 0 && !S_ISDIR(so.st_mode)) {
            fprintf(stderr, "ternlab quantize: --out %s is a file, not a folder (safetensors output is a "
                            "folder; a GGUF file's name ends in .gguf)\n", o.out);
            return 2;
        }
        /* a config.json there is another model's (or a half-written checkpoint's): the new
         * one would replace it, and a failed write could not give it back */
        char po[PATH_MAX + 64], pm[PATH_MAX + 64];
        struct stat se;
        snprintf(po, sizeof po, "%s/config.json", o.out);
        if (lstat(po, &se) == 0) {
            fprintf(stderr, "ternlab quantize: --out %s already holds config.json: the new checkpoint's would "
                            "replace it; give a new or empty folder\n", o.out);
            return 2;
        }
        for (int i = 0; i < N_COPIED; i++) {
            snprintf(po, sizeof po, "%s/%s", o.out, copied_files[i]);
            snprintf(pm, sizeof pm, "%s/%s", o.model, copied_files[i]);
            /* a file the new checkpoint would not replace (the source has none) would stay
             * beside it: another model's tokenizer.json had outlived the write */
            if (stat(po, &se) == 0 && stat(pm, &se) != 0) {
                fprintf(stderr, "ternlab quantize: --out %s holds %s, which %s does not have: it would stay "
                                "beside the new checkpoint as if it were its own; give a new or empty folder\n",
                        o.out, copied_files[i], o.model);
                return 2;
            }
            /* one it cannot write (a folder, a link), found before the model is quantised
             * (a generation_config.json folder had been found after model.safetensors was
             * written); model.safetensors and config.json cannot be there (refused above
             * and below) */
            if (file_out_check(po) != 0) {
                fprintf(stderr, "ternlab quantize: %s\n", err_msg());
                return 2;
            }
        }
        char held[512];
        int r = out_holds_checkpoint(o.out, held, sizeof held);
        if (r != 0) {
            if (r < 0) fprintf(stderr, "ternlab quantize: %s\n", err_msg());
            else
                fprintf(stderr, "ternlab quantize: --out %s already holds %s: the new checkpoint would "
                                "be mixed with an old one's files; give a new or empty folder\n", o.out, held);
            return 2;
        }
    }
    Model m;
    ModelLoadOpts lo = {.quant = o.quant};
    if (model_load(o.model, &lo, &m) != 0) {
        fprintf(stderr, "ternlab quantize: %s\n", err_msg());
        return 1;
    }
    static Written wr; /* (34 KB of paths) */
    int rc = m.st.n_tensors ? quantize_safetensors(&m, o.out, &wr)
                            : err_set("safetensors output needs a safetensors source checkpoint");
    model_free(&m);
    if (rc != 0) {
        remove_written(&wr, o.out);
        fprintf(stderr, "ternlab quantize: %s\n", err_msg());
        return 1;
    }
    if (wr.made_dir) tmp_end(o.out);
    printf("wrote %s\n", o.out);
    return 0;
}

/* KEY=VALUE, KEY?=VALUE or KEY/=VALUE with a non-empty KEY (an empty one had checked
 * nothing: "?=x" passed every file; "==x" read before the string) */
static int expect_ok(const char *e) {
    const char *eq = strchr(e, '=');
    return eq && eq - e >= 1 + (eq[-1] == '?' || eq[-1] == '/');
}

/* The last component of path v (trailing slashes dropped), in place. */
static const char *last_component(char *v) {
    size_t n = strlen(v);
    while (n > 1 && v[n - 1] == '/') v[--n] = 0;
    const char *b = strrchr(v, '/');
    return b && b[1] ? b + 1 : v;
}

/* 1 where another process holds path's exclusive lock: HDF5 locks a file it
 * has open for writing (flock, LOCK_EX; an h5py File(..., "r+"), a viewer
 * annotating a run), and a reader's open then fails as a damaged file's does. */
static int write_locked(const char *path) {
    struct stat st;
    if (stat(path, &st) != 0 || !S_ISREG(st.st_mode)) return 0;
    const int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) return 0;
    const int busy = flock(fd, LOCK_SH | LOCK_NB) != 0 && errno == EWOULDBLOCK;
    close(fd); /* (and with it the shared lock, where taken) */
    return busy;
}

/* One file's checks (cmd_verify): 0 finished and as expected, 1 not a finished
 * run file, 5 open for writing in another process (not checked), 4 not as
 * expected, 3 another device's (printed on stdout). */
static int verify_one(const char *path, const char *device, const char *const *expect, int n_expect) {
    char dev[128], val[512];
    if (write_locked(path)) {
        fprintf(stderr, "ternlab verify: %s: open for writing in another process (its HDF5 file lock is "
                        "held): not checked\n", path);
        return 5;
    }
    if (h5log_verify_schema(path) != 0) {
        fprintf(stderr, "ternlab verify: %s\n", err_msg());
        return 1;
    }
    for (int k = 0; k < n_expect; k++) {
        const char *eq = strchr(expect[k], '=');
        const int opt = eq[-1] == '?';  /* KEY?=VALUE: only where the file has KEY */
        const int base = eq[-1] == '/'; /* KEY/=NAME: the path's last component */
        char key[64];
        const int kl = (int)(eq - expect[k]) - opt - base;
        snprintf(key, sizeof key, "%.*s", kl < 63 ? kl : 63, expect[k]);
        const int ra = h5log_root_attr_str(path, key, val, sizeof val);
        if (ra == -2 && opt) continue;
        if (ra != 0) {
            fprintf(stderr, "ternlab verify: %s\n", err_msg());
            return 4;
        }
        const char *got = base ? last_component(val) : val;
        if (strcmp(got, eq + 1) != 0) {
            fprintf(stderr, "ternlab verify: %s: %s%s is '%s', not '%s'\n", path, key,
                    base ? "'s last component" : "", got, eq + 1);
            return 4;
        }
    }
    if (device && h5log_root_attr_str(path, "device", dev, sizeof dev) != 0) {
        fprintf(stderr, "ternlab verify: %s\n", err_msg());
        return 1;
    }
    if (device && strcmp(dev, device) != 0) {
        fprintf(stderr, "ternlab verify: %s: a run on %s, not %s\n", path, dev, device);
        printf("%s\n", dev);
        return 3;
    }
    return 0;
}

int cmd_verify(int argc, char **argv) {
    const char *device = NULL, *expect[8];
    char why[256] = ""; /* a usage error's reason, printed before the usage */
    int n_expect = 0, first = 1, usage = 0;
    for (; first < argc && !usage && argv[first][0] == '-'; first++) {
        const char *a = argv[first];
        const int dev = !strcmp(a, "--device") || !strncmp(a, "--device=", 9);
        const int exp = !strcmp(a, "--expect") || !strncmp(a, "--expect=", 9);
        const char *v = !strchr(a, '=') ? (first + 1 < argc ? argv[first + 1] : NULL) : strchr(a, '=') + 1;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage = -1;
        } else if (!dev && !exp) {
            snprintf(why, sizeof why, "unknown option '%s'", a);
        } else if (!v || !v[0]) {
            snprintf(why, sizeof why, "%.*s needs a value", (int)strcspn(a, "="), a);
        } else if (dev && device) {
            snprintf(why, sizeof why, "--device is given more than once");
        } else if (dev) {
            device = v;
        } else if (!expect_ok(v)) {
            snprintf(why, sizeof why, "--expect '%.160s': expected KEY=VALUE, KEY?=VALUE or KEY/=VALUE", v);
        } else if (n_expect == 8) {
            snprintf(why, sizeof why, "more than 8 --expect");
        } else {
            expect[n_expect++] = v;
        }
        if (why[0]) usage = 1;
        else if (!strchr(a, '=') && usage == 0) first++; /* (its value) */
    }
    for (int i = first; i < argc && !usage; i++) /* ("verify F --device cuda" had looked for a file "--device") */
        if (argv[i][0] == '-' && argv[i][1] == '-') {
            snprintf(why, sizeof why, "'%.100s' after the files: options come first", argv[i]);
            usage = 1;
        }
    if (!usage && first >= argc) {
        snprintf(why, sizeof why, "no file");
        usage = 1;
    }
    if (usage) {
        if (why[0]) fprintf(stderr, "ternlab verify: %s\n\n", why);
        fprintf(usage < 0 ? stdout : stderr, "ternlab verify [--device D] [--expect KEY=VALUE ...] FILE.h5 [FILE.h5 ...]\n"
               "Exit 0 when every file is a finished run file: it opens (not truncated),\n"
               "has complete = 1 and every dataset and root attribute of paper/SCHEMA.md,\n"
               "whose values can be read.\n"
               "--expect KEY=VALUE (up to 8): also that the string root attribute KEY is VALUE (e.g.\n"
               "experiment=exp-threshold, factor_value=twn); a finished file that is not exits 4.\n"
               "KEY?=VALUE: the same where the file has KEY (a file without it passes).\n"
               "KEY/=NAME: the last component of the path in KEY is NAME (model/=llama-tiny).\n"
               "--device D: also that its root attribute device is D; a finished file of\n"
               "another device prints that device on stdout (one line per such file) and\n"
               "exits 3.  A file another process has open for writing (its HDF5 file lock\n"
               "held: h5py's \"r+\", a viewer) is not read and exits 5.  An invalid file (1)\n"
               "comes before 5, 5 before 4, 4 before 3.\n");
        return usage < 0 ? 0 : 2;
    }
    /* each file in a child process: a damaged file can crash the HDF5 library
     * itself (a flipped byte in a global heap: SIGSEGV in H5HG_read), and one
     * such file had killed verify, and with it a sweep's checks */
    int bad = 0, other = 0, wrong = 0, busy = 0;
    for (int i = first; i < argc; i++) {
        fflush(stdout);
        fflush(stderr);
        pid_t pid = fork();
        int r;
        if (pid == 0) {
            r = verify_one(argv[i], device, expect, n_expect);
            /* (its stdout line, another device's name, not written: a failed run, 1 — it
             * had exited 3 with the line lost) */
            errno = 0;
            if (fflush(stdout) != 0 || ferror(stdout)) {
                fprintf(stderr, "ternlab verify: cannot write the output to standard output: %s\n",
                        errno ? strerror(errno) : "write error");
                r = 1;
            }
            fflush(stderr);
            _exit(r);
        }
        int st = 0;
        if (pid < 0) {
            r = verify_one(argv[i], device, expect, n_expect); /* (no child: in this process) */
        } else if (waitpid(pid, &st, 0) != pid) {
            fprintf(stderr, "ternlab verify: %s: waiting for its check failed (%s)\n", argv[i], strerror(errno));
            r = 1;
        } else if (WIFSIGNALED(st)) {
            const int sg = WTERMSIG(st);
            if (sg == SIGSEGV || sg == SIGBUS || sg == SIGABRT || sg == SIGFPE || sg == SIGILL)
                fprintf(stderr, "ternlab verify: %s: damaged: reading it crashed the HDF5 library (signal %d, %s)\n",
                        argv[i], sg, strsignal(sg));
            else
                fprintf(stderr, "ternlab verify: %s: its check was killed (signal %d, %s)\n", argv[i], sg,
                        strsignal(sg));
            r = 1;
        } else {
            r = WEXITSTATUS(st);
        }
        if (r == 4) wrong = 1;
        else if (r == 3) other = 1;
        else if (r == 5) busy = 1;
        else if (r != 0) bad = 1; /* (1: the file, or the check's own failure) */
    }
    return bad ? 1 : busy ? 5 : wrong ? 4 : other ? 3 : 0;
}
