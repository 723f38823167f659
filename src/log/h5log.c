/* HDF5 run-file writer and verifier (see h5log.h for the contract and
 * paper/SCHEMA.md for the schema).
 *
 * Every HDF5 call is checked.  libhdf5 prints its error stack to stderr by
 * default; we switch that off and instead take the innermost message of the
 * stack into err_set, prefixed with the file and the object.
 *
 * The file is built in memory (the core driver, no backing store) and written
 * to disk by commit with plain write/fsync/rename.  Why: libhdf5 1.10 (what
 * Debian and Ubuntu ship; fixed upstream in 2023, HDFFV-11052, HDF5 PR #2291)
 * frees a file whose H5Fclose fails but keeps its id registered, and
 * H5_term_library closes that id again at exit(): a write error (full disk,
 * RLIMIT_FSIZE) that made H5Fclose fail became a segfault at exit, even after
 * the caller had reported it.  No file-level setting helps (the file id was the only open object and
 * the close degree was already STRONG).  In memory, HDF5 does no I/O, so none
 * of its calls fails for a full disk and H5Fclose cannot fail that way; the
 * disk errors come from our own write() with errno.  Cost: the whole file is
 * held in memory until commit, and commit briefly holds a second copy (run
 * files are a few MB; a reference cache is as large as the reference logits
 * its writer already holds). */
#include "log/h5log.h"

#include "core/err.h"
#include "core/mem.h"

#include <math.h>
#include <errno.h>
#include <fcntl.h>
#include <hdf5.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

struct H5Log {
    hid_t file;       /* the file being built, in memory, or H5I_INVALID_HID */
    int fd;           /* the temporary file on disk (empty until commit), or -1 */
    char *final_path; /* where commit renames it to */
    char *tmp_path;   /* "<final_path>.tmp.<host>.<pid>" */
    int failed;       /* a writer returned an error: commit refuses the file */
};

/* rc of a writer; a failure marks the log, so that h5log_commit refuses it
 * (h5log.h: "or still h5log_commit, which then fails") */
static int lg_mark(H5Log *lg, int rc) {
    if (rc != 0 && lg) lg->failed = 1;
    return rc;
}

const char *const H5LOG_SCHEMA_DATASETS[] = {
    "/metrics/ppl",           "/metrics/ppl_ref",          "/metrics/nll_mean",
    "/metrics/kl_mean",       "/metrics/top1_agree",       "/metrics/logit_rel_l2",
    "/per_token/nll",         "/per_token/nll_ref",        "/per_token/kl",
    "/logits/positions",      "/logits/test",              "/logits/ref",
    "/throughput/batch",      "/throughput/prefill_tok_s", "/throughput/decode_tok_s",
    "/throughput/latency_ms_p50", "/throughput/latency_ms_p99",
    "/weights/name",          "/weights/sparsity",         "/weights/rel_err",
    "/weights/scale_min",     "/weights/scale_max",        "/weights/bytes",
    "/kv/bytes_per_token",    "/kv/policy",                NULL,
};

const char *const H5LOG_SCHEMA_ATTRS[] = {
    "ternlab_version", "git_commit", "experiment", "factor",    "factor_value",
    "model",           "model_sha256", "tokens",   "window",    "quant_spec",
    "kv_policy",       "device",     "tp",         "created_utc", "host",
    "complete",        NULL,
};

/* ---- HDF5 error capture --------------------------------------------------- */

static void h5_quiet(void) {
    static int done;
    if (!done) {
        H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
        done = 1;
    }
}

typedef struct {
    char msg[512];
} H5Reason;

static herr_t h5_walk_cb(unsigned n, const H5E_error2_t *e, void *data) {
    H5Reason *r = data;
    /* Walking upward, entry 0 is the most specific (where the error arose).
     * The file driver's messages carry the OS error inside a long line
     * ("file write failed: time = ..., errno = 27, error message = 'File too
     * large', buf = ..."); keep its head and the OS error only. */
    if (n != 0 || !e->desc) return 0;
    const char *d = e->desc, *em = strstr(d, "error message = '");
    if (em) {
        const char *colon = strchr(d, ':');
        int head = colon && colon < em ? (int)(colon - d) : 0;
        const char *msg = em + strlen("error message = '");
        const char *end = strchr(msg, '\'');
        const char *en = strstr(d, "errno = ");
        int errnum = en ? atoi(en + strlen("errno = ")) : 0;
        snprintf(r->msg, sizeof r->msg, "%.*s: %.*s (errno %d, in %s)", head, d,
                 end ? (int)(end - msg) : 100, msg, errnum, e->func_name);
    } else {
        snprintf(r->msg, sizeof r->msg, "%s (in %s)", d, e->func_name);
    }
    for (char *c = r->msg; *c; c++)
        if (*c == '\n') *c = ' ';
    return 0;
}

/* The reason for the last HDF5 failure; clears the error stack. */
static const char *h5_reason(H5Reason *r) {
    r->msg[0] = 0;
    H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD, h5_walk_cb, r);
    H5Eclear2(H5E_DEFAULT);
    if (!r->msg[0]) snprintf(r->msg, sizeof r->msg, "unknown HDF5 error");
    return r->msg;
}

/* err_set("<file>: <what> <obj>: <hdf5 reason>"); returns -1. */
static int h5_fail(const char *file, const char *what, const char *obj) {
    H5Reason r;
    return err_set("%s: %s%s%s failed: %s", file, what, obj ? " " : "", obj ? obj : "",
                   h5_reason(&r));
}

/* ---- paths ---------------------------------------------------------------- */

/* An absolute HDF5 path: "/" or "/a/b" with no empty component, no trailing
 * slash. */
static int path_ok(const char *p) {
    if (!p || p[0] != '/') return 0;
    if (p[1] == 0) return 1;
    for (const char *s = p; *s; s++)
        if (s[0] == '/' && (s[1] == '/' || s[1] == 0)) return 0;
    return 1;
}

/* 1 when every component of `path` exists as a link, 0 when one does not.
 * (H5Lexists in 1.10 fails rather than answering when an intermediate group is
 * missing, so we walk the components.) */
static int path_exists(hid_t file, const char *path) {
    if (strcmp(path, "/") == 0) return 1;
    size_t n = strlen(path);
    char *buf = xmalloc(n + 1);
    int exists = 1;
    for (size_t i = 1; i <= n && exists; i++) {
        if (path[i] != '/' && path[i] != 0) continue;
        memcpy(buf, path, i);
        buf[i] = 0;
        htri_t e = H5Lexists(file, buf, H5P_DEFAULT);
        if (e <= 0) exists = 0;
    }
    H5Eclear2(H5E_DEFAULT);
    free(buf);
    return exists;
}

/* A link-creation property list that creates missing intermediate groups. */
static hid_t lcpl_intermediate(void) {
    hid_t lcpl = H5Pcreate(H5P_LINK_CREATE);
    if (lcpl < 0) return -1;
    if (H5Pset_create_intermediate_group(lcpl, 1) < 0) {
        H5Pclose(lcpl);
        return -1;
    }
    return lcpl;
}

/* Opens the object at path, creating it as a group (with its parents) when it
 * does not exist.  Returns the id or -1 with err_set. */
static hid_t open_or_create_object(H5Log *lg, const char *path) {
    if (!path_ok(path)) return err_set("%s: bad HDF5 path '%s'", lg->tmp_path, path ? path : "");
    if (path_exists(lg->file, path)) {
        hid_t o = H5Oopen(lg->file, path, H5P_DEFAULT);
        if (o < 0) return h5_fail(lg->tmp_path, "opening", path);
        return o;
    }
    hid_t lcpl = lcpl_intermediate();
    if (lcpl < 0) return h5_fail(lg->tmp_path, "property list for", path);
    hid_t g = H5Gcreate2(lg->file, path, lcpl, H5P_DEFAULT, H5P_DEFAULT);
    H5Pclose(lcpl);
    if (g < 0) return h5_fail(lg->tmp_path, "creating group", path);
    return g;
}

/* ---- create / commit / abort -------------------------------------------- */

/* The core driver grows its image in steps of this many bytes (a realloc per
 * step; run files are mostly smaller than one step). */
#define H5LOG_CORE_INCREMENT ((size_t)1 << 20)

/* Closes the in-memory file and the temporary's descriptor; no disk I/O, so
 * it cannot fail for a full disk.  Returns 0, or -1 with err_set. */
static int lg_close(H5Log *lg) {
    int rc = 0;
    if (lg->file >= 0 && H5Fclose(lg->file) < 0)
        rc = h5_fail(lg->tmp_path, "closing (in memory)", NULL);
    lg->file = H5I_INVALID_HID;
    H5Eclear2(H5E_DEFAULT);
    if (lg->fd >= 0 && close(lg->fd) != 0 && rc == 0)
        rc = err_set("%s: close: %s", lg->tmp_path, strerror(errno));
    lg->fd = -1;
    return rc;
}

static void lg_free(H5Log *lg) {
    free(lg->final_path);
    tmp_end(lg->tmp_path);
    free(lg->tmp_path);
    free(lg);
}

H5Log *h5log_create(const char *final_path) {
    h5_quiet();
    if (!final_path || !final_path[0]) {
        err_set("h5log_create: empty file name");
        return NULL;
    }
    if (file_out_check(final_path) != 0) return NULL;
    H5Log *lg = xcalloc(1, sizeof *lg);
    lg->file = H5I_INVALID_HID;
    lg->fd = -1;
    lg->final_path = xstrdup(final_path);
    size_t n = strlen(final_path) + 128;
    lg->tmp_path = xmalloc(n);
    tmp_begin(lg->tmp_path, n, final_path); /* (lg_free ends it) */

    /* The temporary is created now, empty, so that a missing or read-only
     * directory is reported before the run rather than after it. */
    lg->fd = tmp_open(lg->tmp_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
    if (lg->fd < 0) {
        err_set("%s: creating: %s (does the directory exist and is it writable?)", lg->tmp_path,
                strerror(errno));
        lg_free(lg);
        return NULL;
    }
    /* In memory (see the top of this file).  STRONG close degree: H5Fclose
     * releases the image even if an object id were left open. */
    hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
    if (fapl < 0 || H5Pset_fapl_core(fapl, H5LOG_CORE_INCREMENT, 0) < 0 ||
        H5Pset_fclose_degree(fapl, H5F_CLOSE_STRONG) < 0)
        h5_fail(lg->tmp_path, "file access property list for", NULL);
    else if ((lg->file = H5Fcreate(lg->tmp_path, H5F_ACC_TRUNC, H5P_DEFAULT, fapl)) < 0)
        h5_fail(lg->tmp_path, "creating", "(in memory)");
    if (fapl >= 0) H5Pclose(fapl);
    if (lg->file < 0) {
        h5log_abort(lg);
        return NULL;
    }
    return lg;
}

const char *h5log_tmp_path(const H5Log *lg) { return lg->tmp_path; }
const char *h5log_final_path(const H5Log *lg) { return lg->final_path; }

void h5log_abort(H5Log *lg) {
    if (!lg) return;
    lg_close(lg); /* (an error here changes nothing: the file is dropped) */
    unlink(lg->tmp_path);
    lg_free(lg);
}

/* fsync a file or directory by path. */
static int fsync_path(const char *path, int is_dir) {
    int fd = open(path, is_dir ? (O_RDONLY | O_DIRECTORY) : O_RDONLY);
    if (fd < 0) return err_set("%s: open for fsync: %s", path, strerror(errno));
    int rc = fsync(fd);
    int e = errno;
    close(fd);
    /* Some file systems cannot fsync a directory (EINVAL); nothing to do. */
    if (rc != 0 && !(is_dir && (e == EINVAL || e == ENOTSUP)))
        return err_set("%s: fsync: %s", path, strerror(e));
    return 0;
}

/* Writes n bytes to fd, through short writes and EINTR.  0, or -1 with errno. */
static int write_all(int fd, const unsigned char *p, size_t n) {
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) {
            if (w == 0) errno = EIO;
            return -1;
        }
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

/* The finished file's bytes, written to the temporary and synced; then the
 * in-memory file and the descriptor are closed.  0, or -1 with err_set. */
static int lg_write_image(H5Log *lg) {
    /* The flush puts every dirty object and the superblock into the image, so
     * that the image is the whole file. */
    if (H5Fflush(lg->file, H5F_SCOPE_GLOBAL) < 0) return h5_fail(lg->tmp_path, "flushing", NULL);
    ssize_t n = H5Fget_file_image(lg->file, NULL, 0);
    if (n <= 0) return h5_fail(lg->tmp_path, "size of the file image", NULL);
    unsigned char *img = mem_alloc((size_t)n, "HDF5 file image");
    if (!img) return err_prefix("%s: ", lg->tmp_path);
    int rc = 0;
    if (H5Fget_file_image(lg->file, img, (size_t)n) != n)
        rc = h5_fail(lg->tmp_path, "copying the file image", NULL);
    /* Release the in-memory file before the disk I/O (one copy less held). */
    int fd = lg->fd;
    lg->fd = -1;
    if (lg_close(lg) != 0 && rc == 0) rc = -1;
    if (rc == 0 && write_all(fd, img, (size_t)n) != 0)
        rc = err_set("%s: write of %lld bytes: %s (disk full or file size limit?)", lg->tmp_path,
                     (long long)n, strerror(errno));
    if (rc == 0 && fsync(fd) != 0) rc = err_set("%s: fsync: %s", lg->tmp_path, strerror(errno));
    if (close(fd) != 0 && rc == 0) rc = err_set("%s: close: %s", lg->tmp_path, strerror(errno));
    mem_free(img);
    return rc;
}

int h5log_commit(H5Log *lg) {
    if (!lg) return err_set("h5log_commit: NULL handle");
    int rc = 0;
    if (lg->failed) {
        rc = err_set("%s: not committed: an earlier write to it failed", lg->tmp_path);
        h5log_abort(lg);
        return rc;
    }
    /* `complete` last: a reader that finds it knows every other object was
     * written before (and, after the fsync, reached the disk). */
    if (h5log_attr_i64(lg, "/", "complete", 1) != 0) rc = -1;
    if (rc == 0) rc = lg_write_image(lg);
    if (lg_close(lg) != 0 && rc == 0) rc = -1; /* (after a failure above) */
    if (rc == 0 && rename(lg->tmp_path, lg->final_path) != 0)
        rc = err_set("renaming %s to %s: %s", lg->tmp_path, lg->final_path, strerror(errno));
    if (rc != 0) {
        err_prefix("writing %s: ", lg->final_path);
        unlink(lg->tmp_path);
        lg_free(lg);
        return -1;
    }
    /* The rename is durable once the directory entry is. */
    char *dir = xstrdup(lg->final_path);
    path_parent(dir);
    rc = fsync_path(dir, 1);
    if (rc) err_prefix("%s is in place but its directory could not be synced: ", lg->final_path);
    free(dir);
    lg_free(lg);
    return rc;
}

/* ---- attributes ----------------------------------------------------------- */

_Static_assert(sizeof(hid_t) == sizeof(int64_t), "h5log_vlen_str_type returns an hid_t as int64_t");
int64_t h5log_vlen_str_type(void) {
    hid_t t = H5Tcopy(H5T_C_S1);
    if (t < 0) return -1;
    if (H5Tset_size(t, H5T_VARIABLE) < 0 || H5Tset_cset(t, H5T_CSET_UTF8) < 0) {
        H5Tclose(t);
        return -1;
    }
    return t;
}

/* Writes one scalar attribute of file type ftype from memory type mtype. */
static int attr_write_(H5Log *lg, const char *obj_path, const char *name, hid_t ftype, hid_t mtype,
                       const void *buf) {
    if (!lg || lg->file < 0) return err_set("h5log: attribute %s on a closed log", name);
    if (!name || !name[0]) return err_set("%s: empty attribute name on %s", lg->tmp_path, obj_path);
    hid_t obj = open_or_create_object(lg, obj_path);
    if (obj < 0) return -1;
    int rc = 0;
    hid_t space = -1, attr = -1;
    htri_t ex = H5Aexists(obj, name);
    if (ex < 0) rc = h5_fail(lg->tmp_path, "checking attribute", name);
    else if (ex > 0 && H5Adelete(obj, name) < 0)
        rc = h5_fail(lg->tmp_path, "replacing attribute", name);
    if (rc == 0 && (space = H5Screate(H5S_SCALAR)) < 0)
        rc = h5_fail(lg->tmp_path, "dataspace for attribute", name);
    if (rc == 0 && (attr = H5Acreate2(obj, name, ftype, space, H5P_DEFAULT, H5P_DEFAULT)) < 0)
        rc = h5_fail(lg->tmp_path, "creating attribute", name);
    if (rc == 0 && H5Awrite(attr, mtype, buf) < 0)
        rc = h5_fail(lg->tmp_path, "writing attribute", name);
    if (attr >= 0) H5Aclose(attr);
    if (space >= 0) H5Sclose(space);
    H5Oclose(obj);
    if (rc) err_prefix("on %s: ", obj_path);
    return rc;
}

static int attr_write(H5Log *lg, const char *obj_path, const char *name, hid_t ftype, hid_t mtype,
                      const void *buf) {
    return lg_mark(lg, attr_write_(lg, obj_path, name, ftype, mtype, buf));
}

int h5log_attr_str(H5Log *lg, const char *obj_path, const char *name, const char *value) {
    if (!value) value = "";
    hid_t t = h5log_vlen_str_type();
    if (t < 0) return lg_mark(lg, h5_fail(lg->tmp_path, "string type for attribute", name));
    int rc = attr_write(lg, obj_path, name, t, t, &value);
    H5Tclose(t);
    return rc;
}

int h5log_attr_i64(H5Log *lg, const char *obj_path, const char *name, int64_t value) {
    return attr_write(lg, obj_path, name, H5T_STD_I64LE, H5T_NATIVE_INT64, &value);
}

int h5log_attr_f64(H5Log *lg, const char *obj_path, const char *name, double value) {
    return attr_write(lg, obj_path, name, H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, &value);
}

int h5log_write_provenance(H5Log *lg, const char *version, const char *git_commit) {
    char host[256] = "unknown", when[32] = "unknown";
    if (gethostname(host, sizeof host - 1) != 0) snprintf(host, sizeof host, "unknown");
    host[sizeof host - 1] = 0;
    time_t now = time(NULL);
    struct tm tm;
    if (gmtime_r(&now, &tm)) strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", &tm);
    if (h5log_attr_str(lg, "/", "ternlab_version", version ? version : "unknown")) return -1;
    if (h5log_attr_str(lg, "/", "git_commit", git_commit ? git_commit : "unknown")) return -1;
    if (h5log_attr_str(lg, "/", "created_utc", when)) return -1;
    return h5log_attr_str(lg, "/", "host", host);
}

/* ---- datasets ------------------------------------------------------------- */

/* Creates dataset `path` (parents too) with file type ftype and the given
 * shape, and writes buf (memory type mtype) unless it has no elements. */
static int dset_write_(H5Log *lg, const char *path, hid_t ftype, hid_t mtype, int rank,
                       const int64_t *dims, const void *buf) {
    if (!lg || lg->file < 0) return err_set("h5log: dataset %s on a closed log", path);
    if (!path_ok(path) || strcmp(path, "/") == 0)
        return err_set("%s: bad dataset path '%s'", lg->tmp_path, path ? path : "");
    if (rank < 0 || rank > 2)
        return err_set("%s: dataset %s: rank %d not supported (0, 1 or 2)", lg->tmp_path, path,
                       rank);
    hsize_t hd[2] = {0, 0};
    uint64_t count = 1;
    for (int i = 0; i < rank; i++) {
        if (!dims || dims[i] < 0)
            return err_set("%s: dataset %s: bad extent in dimension %d", lg->tmp_path, path, i);
        hd[i] = (hsize_t)dims[i];
        count *= (uint64_t)dims[i];
    }
    if (count > 0 && !buf) return err_set("%s: dataset %s: no data", lg->tmp_path, path);
    if (path_exists(lg->file, path))
        return err_set("%s: dataset %s already written", lg->tmp_path, path);

    int rc = 0;
    hid_t space = -1, lcpl = -1, ds = -1;
    space = rank == 0 ? H5Screate(H5S_SCALAR) : H5Screate_simple(rank, hd, NULL);
    if (space < 0) rc = h5_fail(lg->tmp_path, "dataspace for", path);
    if (rc == 0 && (lcpl = lcpl_intermediate()) < 0)
        rc = h5_fail(lg->tmp_path, "property list for", path);
    if (rc == 0 && (ds = H5Dcreate2(lg->file, path, ftype, space, lcpl, H5P_DEFAULT,
                                    H5P_DEFAULT)) < 0)
        rc = h5_fail(lg->tmp_path, "creating dataset", path);
    if (rc == 0 && count > 0 && H5Dwrite(ds, mtype, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf) < 0)
        rc = h5_fail(lg->tmp_path, "writing dataset", path);
    if (ds >= 0 && H5Dclose(ds) < 0 && rc == 0) rc = h5_fail(lg->tmp_path, "closing", path);
    if (lcpl >= 0) H5Pclose(lcpl);
    if (space >= 0) H5Sclose(space);
    return rc;
}

static int dset_write(H5Log *lg, const char *path, hid_t ftype, hid_t mtype, int rank,
                      const int64_t *dims, const void *buf) {
    return lg_mark(lg, dset_write_(lg, path, ftype, mtype, rank, dims, buf));
}

int h5log_dataset(H5Log *lg, const char *path, H5LogType type, int rank, const int64_t *dims,
                  const void *data) {
    hid_t ft, mt;
    switch (type) {
    case H5LOG_F32: ft = H5T_IEEE_F32LE, mt = H5T_NATIVE_FLOAT; break;
    case H5LOG_F64: ft = H5T_IEEE_F64LE, mt = H5T_NATIVE_DOUBLE; break;
    case H5LOG_I32: ft = H5T_STD_I32LE, mt = H5T_NATIVE_INT32; break;
    case H5LOG_I64: ft = H5T_STD_I64LE, mt = H5T_NATIVE_INT64; break;
    default: return lg_mark(lg, err_set("h5log: dataset %s: unknown element type %d", path, (int)type));
    }
    return dset_write(lg, path, ft, mt, rank, dims, data);
}

int h5log_scalar_f64(H5Log *lg, const char *path, double v) {
    return h5log_dataset(lg, path, H5LOG_F64, 0, NULL, &v);
}
int h5log_scalar_i64(H5Log *lg, const char *path, int64_t v) {
    return h5log_dataset(lg, path, H5LOG_I64, 0, NULL, &v);
}
int h5log_f32(H5Log *lg, const char *path, const float *v, int64_t n) {
    return h5log_dataset(lg, path, H5LOG_F32, 1, &n, v);
}
int h5log_f64(H5Log *lg, const char *path, const double *v, int64_t n) {
    return h5log_dataset(lg, path, H5LOG_F64, 1, &n, v);
}
int h5log_i32(H5Log *lg, const char *path, const int32_t *v, int64_t n) {
    return h5log_dataset(lg, path, H5LOG_I32, 1, &n, v);
}
int h5log_i64(H5Log *lg, const char *path, const int64_t *v, int64_t n) {
    return h5log_dataset(lg, path, H5LOG_I64, 1, &n, v);
}
int h5log_f32_2d(H5Log *lg, const char *path, const float *v, int64_t rows, int64_t cols) {
    int64_t d[2] = {rows, cols};
    return h5log_dataset(lg, path, H5LOG_F32, 2, d, v);
}

int h5log_scalar_str(H5Log *lg, const char *path, const char *s) {
    if (!s) s = "";
    hid_t t = h5log_vlen_str_type();
    if (t < 0) return lg_mark(lg, h5_fail(lg->tmp_path, "string type for", path));
    int rc = dset_write(lg, path, t, t, 0, NULL, &s);
    H5Tclose(t);
    return rc;
}

static int strings_(H5Log *lg, const char *path, const char *const *strs, int64_t n) {
    if (n < 0) return err_set("%s: dataset %s: negative count", lg->tmp_path, path);
    for (int64_t i = 0; i < n; i++)
        if (!strs[i]) return err_set("%s: dataset %s: string %lld is NULL", lg->tmp_path, path,
                                     (long long)i);
    hid_t t = h5log_vlen_str_type();
    if (t < 0) return h5_fail(lg->tmp_path, "string type for", path);
    int rc = dset_write(lg, path, t, t, 1, &n, strs);
    H5Tclose(t);
    return rc;
}

int h5log_strings(H5Log *lg, const char *path, const char *const *strs, int64_t n) {
    return lg_mark(lg, strings_(lg, path, strs, n));
}

static int strings_fixed_(H5Log *lg, const char *path, const char *const *strs, int64_t n,
                          size_t width) {
    if (n < 0) return err_set("%s: dataset %s: negative count", lg->tmp_path, path);
    size_t longest = 0;
    for (int64_t i = 0; i < n; i++) {
        if (!strs[i]) return err_set("%s: dataset %s: string %lld is NULL", lg->tmp_path, path,
                                     (long long)i);
        size_t l = strlen(strs[i]);
        if (l > longest) longest = l;
    }
    if (width == 0) width = longest ? longest : 1;
    if (longest > width)
        return err_set("%s: dataset %s: a string of %zu bytes does not fit width %zu",
                       lg->tmp_path, path, longest, width);
    char *buf = xcalloc(n ? (size_t)n : 1, width);
    for (int64_t i = 0; i < n; i++) memcpy(buf + (size_t)i * width, strs[i], strlen(strs[i]));
    int rc = 0;
    hid_t t = H5Tcopy(H5T_C_S1);
    if (t < 0 || H5Tset_size(t, width) < 0 || H5Tset_strpad(t, H5T_STR_NULLPAD) < 0 ||
        H5Tset_cset(t, H5T_CSET_UTF8) < 0)
        rc = h5_fail(lg->tmp_path, "string type for", path);
    if (rc == 0) rc = dset_write(lg, path, t, t, 1, &n, buf);
    if (t >= 0) H5Tclose(t);
    free(buf);
    return rc;
}

int h5log_strings_fixed(H5Log *lg, const char *path, const char *const *strs, int64_t n,
                        size_t width) {
    return lg_mark(lg, strings_fixed_(lg, path, strs, n, width));
}

/* ---- verification --------------------------------------------------------- */

static int too_large(const char *fname, const char *path, hssize_t n, size_t sz) {
    return err_set("%s: dataset %s claims %lld elements of %zu bytes: more than this machine can "
                   "read (not a run file, or a damaged one)", fname, path, (long long)n, sz);
}

/* A buffer for n elements of sz bytes (+1: never zero), or NULL + err_set:
 * the extent comes from the file, so its product may not fit a size_t. */
static void *read_buf(const char *fname, const char *path, hssize_t n, size_t sz) {
    if (sz == 0 || (uint64_t)n > (SIZE_MAX - 64) / sz) { /* (mem_alloc rounds up to 64 bytes) */
        too_large(fname, path, n, sz);
        return NULL;
    }
    void *b = mem_alloc((size_t)n * sz + 1, path);
    if (!b) err_prefix("%s: ", fname);
    return b;
}

/* Reads a whole dataset (any numeric or string type) to prove its data are
 * there; a file cut short or overwritten fails here. */
static int dset_readable(hid_t file, const char *fname, const char *path) {
    hid_t ds = H5Dopen2(file, path, H5P_DEFAULT);
    if (ds < 0) return h5_fail(fname, "opening dataset", path);
    int rc = 0;
    hid_t ft = H5Dget_type(ds), sp = H5Dget_space(ds), mt = -1;
    hssize_t n = sp >= 0 ? H5Sget_simple_extent_npoints(sp) : -1;
    if (ft < 0 || sp < 0 || n < 0) rc = h5_fail(fname, "reading the shape of", path);
    H5T_class_t cls = rc == 0 ? H5Tget_class(ft) : H5T_NO_CLASS;
    if (rc == 0 && cls == H5T_STRING) {
        htri_t vl = H5Tis_variable_str(ft);
        if (vl < 0) rc = h5_fail(fname, "string type of", path);
        else if (vl) {
            mt = h5log_vlen_str_type();
            char **s = (uint64_t)n <= SIZE_MAX / sizeof *s ? calloc(n ? (size_t)n : 1, sizeof *s) : NULL;
            if (!s) rc = too_large(fname, path, n, sizeof *s);
            else if (mt < 0) rc = h5_fail(fname, "string type for", path);
            else if (n > 0 && H5Dread(ds, mt, H5S_ALL, H5S_ALL, H5P_DEFAULT, s) < 0)
                rc = h5_fail(fname, "reading", path);
            else if (n > 0) H5Dvlen_reclaim(mt, sp, H5P_DEFAULT, s);
            free(s);
        } else {
            mt = H5Tcopy(ft);
            size_t sz = H5Tget_size(ft);
            void *b = read_buf(fname, path, n, sz);
            if (!b) rc = -1;
            else if (n > 0 && H5Dread(ds, mt, H5S_ALL, H5S_ALL, H5P_DEFAULT, b) < 0)
                rc = h5_fail(fname, "reading", path);
            mem_free(b);
        }
    } else if (rc == 0 && (cls == H5T_INTEGER || cls == H5T_FLOAT)) {
        mt = H5Tget_native_type(ft, H5T_DIR_ASCEND);
        size_t sz = mt >= 0 ? H5Tget_size(mt) : 0;
        void *b = mt >= 0 ? read_buf(fname, path, n, sz) : NULL;
        if (mt < 0) rc = h5_fail(fname, "native type of", path);
        else if (!b) rc = -1;
        else if (n > 0 && H5Dread(ds, mt, H5S_ALL, H5S_ALL, H5P_DEFAULT, b) < 0)
            rc = h5_fail(fname, "reading", path);
        mem_free(b);
    } else if (rc == 0) {
        rc = err_set("%s: dataset %s has a type class (%d) run files do not use", fname, path,
                     (int)cls);
    }
    if (mt >= 0) H5Tclose(mt);
    if (ft >= 0) H5Tclose(ft);
    if (sp >= 0) H5Sclose(sp);
    H5Dclose(ds);
    H5Eclear2(H5E_DEFAULT);
    return rc;
}

static int verify_complete(hid_t f, const char *path) {
    htri_t has = H5Aexists_by_name(f, "/", "complete", H5P_DEFAULT);
    if (has < 0) return h5_fail(path, "looking for attribute", "complete");
    if (has == 0)
        return err_set("%s: incomplete: no root attribute 'complete' (the writer did not "
                       "finish; rerun this point)",
                       path);
    hid_t a = H5Aopen_by_name(f, "/", "complete", H5P_DEFAULT, H5P_DEFAULT);
    if (a < 0) return h5_fail(path, "opening attribute", "complete");
    int rc = 0;
    int64_t v = 0;
    hid_t t = H5Aget_type(a), sp = H5Aget_space(a);
    if (t < 0 || H5Tget_class(t) != H5T_INTEGER)
        rc = err_set("%s: attribute 'complete' is not an integer", path);
    else if (sp < 0 || H5Sget_simple_extent_npoints(sp) != 1) /* (read into one value) */
        rc = err_set("%s: attribute 'complete' is not a single integer", path);
    else if (H5Aread(a, H5T_NATIVE_INT64, &v) < 0)
        rc = h5_fail(path, "reading attribute", "complete");
    else if (v != 1)
        rc = err_set("%s: incomplete: complete = %lld (expected 1)", path, (long long)v);
    if (t >= 0) H5Tclose(t);
    if (sp >= 0) H5Sclose(sp);
    H5Aclose(a);
    H5Eclear2(H5E_DEFAULT);
    return rc;
}

static int verify_open(const char *path, hid_t *out) {
    h5_quiet();
    struct stat st;
    if (stat(path, &st) != 0) return err_set("%s: %s", path, strerror(errno));
    if (!S_ISREG(st.st_mode)) return err_set("%s: not a regular file", path);
    hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    if (f < 0) {
        H5Reason r;
        return err_set("%s: cannot open as HDF5 (%lld bytes; truncated or corrupt?): %s", path,
                       (long long)st.st_size, h5_reason(&r));
    }
    *out = f;
    return 0;
}

int h5log_verify(const char *path, const char *const *required_datasets) {
    hid_t f;
    if (verify_open(path, &f)) return -1;
    int rc = verify_complete(f, path);
    for (int i = 0; rc == 0 && required_datasets && required_datasets[i]; i++) {
        const char *d = required_datasets[i];
        if (!path_ok(d) || !path_exists(f, d)) {
            rc = err_set("%s: missing dataset %s", path, d);
            break;
        }
        hid_t o = H5Oopen(f, d, H5P_DEFAULT);
        if (o < 0) {
            rc = h5_fail(path, "opening", d);
            break;
        }
        H5I_type_t ty = H5Iget_type(o);
        H5Oclose(o);
        if (ty != H5I_DATASET) rc = err_set("%s: %s is not a dataset", path, d);
        else rc = dset_readable(f, path, d);
    }
    if (H5Fclose(f) < 0 && rc == 0) rc = h5_fail(path, "closing", NULL);
    H5Eclear2(H5E_DEFAULT);
    return rc;
}

/* The dimensions of dataset d (at most 2) into dims and *rank: 0, or -1 with err_set. */
static int dset_dims(hid_t f, const char *path, const char *d, hsize_t dims[2], int *rank) {
    hid_t ds = H5Dopen2(f, d, H5P_DEFAULT);
    if (ds < 0) return h5_fail(path, "opening dataset", d);
    hid_t sp = H5Dget_space(ds);
    int r = sp >= 0 ? H5Sget_simple_extent_ndims(sp) : -1;
    int rc = 0;
    if (r < 0) rc = h5_fail(path, "reading the shape of", d);
    else if (r > 2) rc = err_set("%s: %s has %d dimensions (at most 2 in the schema)", path, d, r);
    else {
        dims[0] = dims[1] = 1;
        if (r > 0 && H5Sget_simple_extent_dims(sp, dims, NULL) < 0) rc = h5_fail(path, "reading the shape of", d);
        *rank = r;
    }
    if (sp >= 0) H5Sclose(sp);
    H5Dclose(ds);
    return rc;
}

/* The schema's shapes (paper/SCHEMA.md): /metrics and /kv/bytes_per_token
 * scalars; /per_token [N], /throughput [k], /weights [L] each one length;
 * /logits/positions [P], test and ref [P, V]. */
static int verify_shapes(hid_t f, const char *path) {
    static const char *const scalars[] = {"/metrics/ppl",      "/metrics/ppl_ref",     "/metrics/nll_mean",
                                          "/metrics/kl_mean",  "/metrics/top1_agree",  "/metrics/logit_rel_l2",
                                          "/kv/bytes_per_token", NULL};
    static const char *const per_token[] = {"/per_token/nll", "/per_token/nll_ref", "/per_token/kl", NULL};
    static const char *const throughput[] = {"/throughput/batch", "/throughput/prefill_tok_s",
                                             "/throughput/decode_tok_s", "/throughput/latency_ms_p50",
                                             "/throughput/latency_ms_p99", NULL};
    static const char *const weights[] = {"/weights/name",      "/weights/sparsity",  "/weights/rel_err",
                                          "/weights/scale_min", "/weights/scale_max", "/weights/bytes", NULL};
    static const char *const *const same_len[] = {per_token, throughput, weights, NULL};
    hsize_t dims[2], first[2];
    int rank;
    for (int i = 0; scalars[i]; i++) {
        if (dset_dims(f, path, scalars[i], dims, &rank)) return -1;
        if (dims[0] * dims[1] != 1) return err_set("%s: %s is not a scalar", path, scalars[i]);
        /* the six /metrics finite (a run whose forward overflowed had been written with
         * ppl NaN, kl 0 and top-1 1: perfect agreement, and verified) */
        if (strncmp(scalars[i], "/metrics/", 9) != 0) continue;
        double v = NAN;
        hid_t ds = H5Dopen2(f, scalars[i], H5P_DEFAULT);
        herr_t r = ds >= 0 ? H5Dread(ds, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, &v) : -1;
        if (ds >= 0) H5Dclose(ds);
        if (r < 0) return h5_fail(path, "reading", scalars[i]);
        if (!isfinite(v)) return err_set("%s: %s is %g (not a finite number)", path, scalars[i], v);
    }
    for (int g = 0; same_len[g]; g++)
        for (int i = 0; same_len[g][i]; i++) {
            if (dset_dims(f, path, same_len[g][i], dims, &rank)) return -1;
            if (rank != 1) return err_set("%s: %s has %d dimensions (1 expected)", path, same_len[g][i], rank);
            if (i == 0) first[0] = dims[0];
            else if (dims[0] != first[0])
                return err_set("%s: %s has %llu entries, %s %llu", path, same_len[g][i],
                               (unsigned long long)dims[0], same_len[g][0], (unsigned long long)first[0]);
        }
    if (dset_dims(f, path, "/logits/positions", first, &rank)) return -1;
    if (rank != 1) return err_set("%s: /logits/positions has %d dimensions (1 expected)", path, rank);
    hsize_t v = 0;
    for (int i = 0; i < 2; i++) {
        const char *d = i ? "/logits/ref" : "/logits/test";
        if (dset_dims(f, path, d, dims, &rank)) return -1;
        if (rank != 2 || dims[0] != first[0] || (i && dims[1] != v))
            return err_set("%s: %s is not [%llu positions, vocab] as /logits/positions and the other", path, d,
                           (unsigned long long)first[0]);
        v = dims[1];
    }
    return 0;
}

/* A scalar string attribute a of file type ft into buf (n bytes, truncated to
 * fit; variable or fixed length): 0, or -1 with err_set. */
static int attr_read_str(hid_t a, hid_t ft, const char *path, const char *name, char *buf, size_t n) {
    int rc = 0;
    hid_t mt = -1;
    if (n) buf[0] = 0;
    if (H5Tis_variable_str(ft) > 0) {
        char *v = NULL;
        if ((mt = h5log_vlen_str_type()) < 0 || H5Aread(a, mt, &v) < 0) rc = h5_fail(path, "reading attribute", name);
        else snprintf(buf, n, "%s", v ? v : "");
        if (v) H5free_memory(v);
    } else {
        size_t len = H5Tget_size(ft);
        char *v = calloc(len + 1, 1);
        if (!v || (mt = H5Tcopy(H5T_C_S1)) < 0 || H5Tset_size(mt, len + 1) < 0 || H5Aread(a, mt, v) < 0)
            rc = v ? h5_fail(path, "reading attribute", name) : err_set("out of memory");
        else snprintf(buf, n, "%s", v);
        free(v);
    }
    if (mt >= 0) H5Tclose(mt);
    return rc;
}

/* The root attributes' kinds: strings but window, tp and complete (integers);
 * and their values read (a damaged heap leaves the kind readable, not the
 * string, which every reader of the file then fails on). */
static int verify_attr_kind(hid_t f, const char *path, const char *name) {
    const int want_int = !strcmp(name, "window") || !strcmp(name, "tp") || !strcmp(name, "complete");
    hid_t a = H5Aopen_by_name(f, "/", name, H5P_DEFAULT, H5P_DEFAULT);
    if (a < 0) return h5_fail(path, "opening attribute", name);
    hid_t t = H5Aget_type(a), sp = H5Aget_space(a);
    H5T_class_t cls = t >= 0 ? H5Tget_class(t) : H5T_NO_CLASS;
    int rc = 0;
    int64_t iv;
    char sv[64];
    if (cls != (want_int ? H5T_INTEGER : H5T_STRING))
        rc = err_set("%s: root attribute %s is not %s", path, name, want_int ? "an integer" : "a string");
    else if (sp < 0 || H5Sget_simple_extent_npoints(sp) != 1) /* (read into one value) */
        rc = err_set("%s: root attribute %s is not a single value", path, name);
    else if (want_int ? H5Aread(a, H5T_NATIVE_INT64, &iv) < 0 : attr_read_str(a, t, path, name, sv, sizeof sv) != 0)
        rc = want_int ? h5_fail(path, "reading attribute", name) : -1;
    if (sp >= 0) H5Sclose(sp);
    if (t >= 0) H5Tclose(t);
    H5Aclose(a);
    return rc;
}

int h5log_verify_schema(const char *path) {
    char exp[16];
    if (h5log_root_attr_str(path, "experiment", exp, sizeof exp) == 0 && strcmp(exp, "diff") == 0)
        return err_set("%s: a ternlab diff file (its /diff group, paper/SCHEMA.md), not a run file", path);
    err_clear();
    if (h5log_verify(path, H5LOG_SCHEMA_DATASETS)) {
        /* (a benchmark's file had been named only by its first missing dataset, /metrics/ppl) */
        static const char *const bench[][2] = {{"/bench/rows", "ternlab bench's (its /bench group)"},
                                               {"/e2e/batch", "ternlab bench-e2e's (its /e2e group)"}};
        struct stat st; /* (a regular file only: HDF5 left to open a pipe waits for a writer) */
        const hid_t f = stat(path, &st) == 0 && S_ISREG(st.st_mode) ? H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT)
                                                                     : H5I_INVALID_HID; /* (quiet: h5_quiet) */
        const char *what = NULL;
        for (size_t i = 0; f >= 0 && !what && i < sizeof bench / sizeof bench[0]; i++)
            if (path_exists(f, bench[i][0])) what = bench[i][1];
        if (f >= 0) H5Fclose(f);
        H5Eclear2(H5E_DEFAULT);
        if (what) return err_set("%s: a benchmark file, %s, not a run file", path, what);
        return -1;
    }
    hid_t f;
    if (verify_open(path, &f)) return -1;
    int rc = 0;
    for (int i = 0; rc == 0 && H5LOG_SCHEMA_ATTRS[i]; i++) {
        htri_t has = H5Aexists_by_name(f, "/", H5LOG_SCHEMA_ATTRS[i], H5P_DEFAULT);
        if (has <= 0) rc = err_set("%s: missing root attribute %s", path, H5LOG_SCHEMA_ATTRS[i]);
        else rc = verify_attr_kind(f, path, H5LOG_SCHEMA_ATTRS[i]);
    }
    if (rc == 0) rc = verify_shapes(f, path);
    H5Fclose(f);
    H5Eclear2(H5E_DEFAULT);
    return rc;
}

int h5log_root_attr_str(const char *path, const char *name, char *buf, size_t n) {
    hid_t f;
    if (n) buf[0] = 0;
    if (verify_open(path, &f)) return -1;
    int rc = 0;
    const htri_t ex = name && name[0] ? H5Aexists_by_name(f, "/", name, H5P_DEFAULT) : -1;
    hid_t a = ex > 0 ? H5Aopen_by_name(f, "/", name, H5P_DEFAULT, H5P_DEFAULT) : -1;
    hid_t ft = a >= 0 ? H5Aget_type(a) : -1, sp = a >= 0 ? H5Aget_space(a) : -1;
    if (ex == 0) { /* (only a clean "no": -2) */
        err_set("%s: no root attribute %s", path, name);
        rc = -2;
    } else if (a < 0) {
        rc = err_set("%s: cannot read root attribute '%s'", path, name ? name : "");
    } else if (ft < 0 || H5Tget_class(ft) != H5T_STRING || sp < 0 || H5Sget_simple_extent_npoints(sp) != 1) {
        rc = err_set("%s: root attribute %s is not a string", path, name);
    } else {
        rc = attr_read_str(a, ft, path, name, buf, n);
    }
    if (sp >= 0) H5Sclose(sp);
    if (ft >= 0) H5Tclose(ft);
    if (a >= 0) H5Aclose(a);
    H5Fclose(f);
    H5Eclear2(H5E_DEFAULT);
    return rc;
}
