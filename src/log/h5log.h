/* HDF5 run files: one file per run, written under a temporary name and renamed
 * into place only when complete, so that a killed writer or a full disk never
 * leaves a file that looks finished.  The schema (which groups, datasets and
 * attributes a run file holds, with dtypes and units) is paper/SCHEMA.md.
 *
 * Life of a run file:
 *   H5Log *lg = h5log_create("results/exp-threshold/llama-tiny__twn.h5");
 *   h5log_attr_str(lg, "/", "experiment", "exp-threshold");
 *   h5log_scalar_f64(lg, "/metrics/ppl", 12.3);
 *   ...
 *   if (h5log_commit(lg)) -> error (the temporary file is gone, the previous
 *                            file at the final path, if any, is untouched)
 * On an error from any writer the caller calls h5log_abort(lg) (or still
 * h5log_commit, which then fails); both free the handle.
 *
 * Paths are absolute HDF5 paths ("/metrics/ppl"); missing intermediate groups
 * are created.  Writing a dataset that already exists is an error; writing an
 * attribute that already exists replaces it.  Every failure returns -1 (or
 * NULL) with err_set naming the file, the object and the HDF5 reason.
 *
 * libhdf5 here is the serial build: it is not thread-safe, so one thread at a
 * time may call into this module (the experiment programs log from main). */
#ifndef TL_H5LOG_H
#define TL_H5LOG_H

#include <stddef.h>
#include <stdint.h>

typedef struct H5Log H5Log;

typedef enum { H5LOG_F32, H5LOG_F64, H5LOG_I32, H5LOG_I64 } H5LogType;

/* Creates "<final_path>.tmp.<host>.<pid>" (tmp_begin) next to final_path (same directory, so the
 * final rename is atomic), empty: the file is built in memory and its bytes
 * written there by commit, so disk errors (full disk, file size limit) come
 * out of h5log_commit.  NULL + err_set when it cannot be created. */
H5Log *h5log_create(const char *final_path);
/* Writes the root attribute complete = 1 (last), writes the file to the
 * temporary and fsyncs it, renames it to the final path and fsyncs the
 * directory.  Memory: briefly a second copy of the file.  Returns 0, or
 * -1 with err_set; on failure before the rename the temporary file is removed
 * and the final path keeps whatever it held before.  Frees lg either way. */
int h5log_commit(H5Log *lg);
/* Closes and removes the temporary file; frees lg.  NULL is allowed. */
void h5log_abort(H5Log *lg);
/* The temporary file's path (valid until commit/abort). */
const char *h5log_tmp_path(const H5Log *lg);
const char *h5log_final_path(const H5Log *lg);

/* Attributes on the root ("/"), a group or a dataset; a missing group is
 * created (a missing dataset is an error).  Strings are stored as
 * variable-length UTF-8 (h5py reads them as str). */
int h5log_attr_str(H5Log *lg, const char *obj_path, const char *name, const char *value);
int h5log_attr_i64(H5Log *lg, const char *obj_path, const char *name, int64_t value);
int h5log_attr_f64(H5Log *lg, const char *obj_path, const char *name, double value);
/* The memory type these strings are read back with (variable-length UTF-8: an
 * ASCII one has no conversion path from them); an hid_t (int64_t since HDF5
 * 1.10) the caller closes with H5Tclose, or -1. */
int64_t h5log_vlen_str_type(void);

/* Root attributes every run file carries that do not depend on the run:
 * ternlab_version, git_commit (as given; NULL -> "unknown"), created_utc
 * ("YYYY-MM-DDTHH:MM:SSZ", now) and host (gethostname). */
int h5log_write_provenance(H5Log *lg, const char *version, const char *git_commit);

/* A numeric dataset of rank 0, 1 or 2 (dims[0] x dims[1], row-major; dims may
 * be NULL for rank 0; a zero extent is allowed and writes an empty dataset).
 * data holds elements of the C type matching `type` (float, double, int32_t,
 * int64_t), stored little-endian whatever the host. */
int h5log_dataset(H5Log *lg, const char *path, H5LogType type, int rank, const int64_t *dims,
                  const void *data);
/* Shorthands. */
int h5log_scalar_f64(H5Log *lg, const char *path, double v);   /* rank 0 */
int h5log_scalar_i64(H5Log *lg, const char *path, int64_t v);  /* rank 0 */
int h5log_f32(H5Log *lg, const char *path, const float *v, int64_t n);
int h5log_f64(H5Log *lg, const char *path, const double *v, int64_t n);
int h5log_i32(H5Log *lg, const char *path, const int32_t *v, int64_t n);
int h5log_i64(H5Log *lg, const char *path, const int64_t *v, int64_t n);
int h5log_f32_2d(H5Log *lg, const char *path, const float *v, int64_t rows, int64_t cols);

/* Strings: a rank-0 string dataset, and a rank-1 array of n strings, either
 * variable-length UTF-8 (h5log_strings) or fixed-width, NUL-padded
 * (h5log_strings_fixed; width 0 = the longest string's length, a longer
 * string than a given width is an error). */
int h5log_scalar_str(H5Log *lg, const char *path, const char *s);
int h5log_strings(H5Log *lg, const char *path, const char *const *strs, int64_t n);
int h5log_strings_fixed(H5Log *lg, const char *path, const char *const *strs, int64_t n,
                        size_t width);

/* Checks a finished run file: it opens (a truncated file does not), its root
 * attribute `complete` is the integer 1, and every path of the NULL-terminated
 * list `required_datasets` (may be NULL) is a dataset whose data can be read.
 * Returns 0, or -1 with err_set giving the reason (cannot open / truncated,
 * incomplete, missing X, unreadable X). */
int h5log_verify(const char *path, const char *const *required_datasets);
/* The same against the whole schema: H5LOG_SCHEMA_DATASETS and
 * H5LOG_SCHEMA_ATTRS, the attributes' kinds (one string or one integer, its
 * value readable) and the datasets' shapes (scalars; one length per group;
 * logits [P, V]). */
int h5log_verify_schema(const char *path);
/* The string root attribute `name` of the HDF5 file at path into buf (n
 * bytes, truncated to fit).  Returns 0; -2 with err_set where the file has
 * no such attribute; -1 with err_set otherwise (no such file, not a string). */
int h5log_root_attr_str(const char *path, const char *name, char *buf, size_t n);

/* The schema of a run file (DESIGN.md, paper/SCHEMA.md); NULL-terminated. */
extern const char *const H5LOG_SCHEMA_DATASETS[];
extern const char *const H5LOG_SCHEMA_ATTRS[];

#endif
