/* Hugging Face safetensors: single file or sharded (model.safetensors.index.json).
 * Files are mmap'd; tensors point into the mapping (no copies).  The header is
 * validated in full before any tensor is handed out: JSON well-formed, known
 * dtype, shape × dtype size == byte range, every range inside the file's data
 * section and no two ranges overlapping. */
#ifndef TL_SAFETENSORS_H
#define TL_SAFETENSORS_H

#include "core/dtype.h"
#include "core/mem.h"

#include <stdint.h>

#define ST_MAX_DIMS 8

typedef struct {
    char *name;
    DType dtype;
    int ndim;
    int64_t shape[ST_MAX_DIMS];
    int64_t numel;
    const void *data; /* into the mapping of files[file] */
    size_t nbytes;
    int file;
} StTensor;

typedef struct {
    MappedFile *files;
    int n_files;
    StTensor *tensors; /* sorted by name */
    int n_tensors;
    int index_ignored; /* st_open_dir read model.safetensors with an index beside it */
} SafeTensors;

/* Opens one .safetensors file.  Returns 0, or -1 with err_set naming the file
 * (and the tensor, when one is at fault). */
int st_open_file(const char *path, SafeTensors *st);
/* Opens a checkpoint folder: model.safetensors when present (transformers'
 * order: an index beside it is not read, and index_ignored says so), else
 * model.safetensors.index.json (every shard it names, every tensor in the file
 * the index says). */
int st_open_dir(const char *dir, SafeTensors *st);
/* Which files st_open_dir reads from dir: 1 the index and its shards (no
 * model.safetensors there), 0 model.safetensors (transformers' order: it is
 * looked for first); *index_beside (may be NULL) 1 where an index lies beside
 * a model.safetensors and is not read. */
int st_dir_files(const char *dir, int *index_beside);
/* The distinct shard file names (in `dir`) that dir's model.safetensors.index.json
 * names, in order of first mention, checked as st_open_dir checks them: *names
 * (n strings; free each and the array) on 0, -1 with err_set. */
int st_index_shards(const char *dir, char ***names, int *n);
void st_close(SafeTensors *st);
const StTensor *st_find(const SafeTensors *st, const char *name);
/* The format's name of a dtype the reader gives ("F8_E8M0" for DT_E8M0), NULL for
 * one it never gives. */
const char *st_dtype_name(DType t);

/* Parses and validates a header held in memory (used by st_open_file and the
 * fuzzing harness).  `file_size` is the size of the whole file; tensors are
 * appended to *st with file index `file`. */
int st_parse_header(const uint8_t *buf, size_t file_size, const char *path, int file,
                    SafeTensors *st);

#endif
