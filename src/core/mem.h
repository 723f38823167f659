/* Memory helpers and read-only file mapping. */
#ifndef TL_MEM_H
#define TL_MEM_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

/* Small bookkeeping allocations: on failure print what was asked and exit(1)
 * (a failed run, as the CLI's exit status says).
 * Big buffers (weights, KV cache, workspaces) use mem_alloc, which returns NULL
 * with err_set so the caller can report needed vs available. */
void *xmalloc(size_t n);
void *xcalloc(size_t n, size_t size);
void *xrealloc(void *p, size_t n);
char *xstrdup(const char *s);

/* 64-byte aligned (SIMD loads, cache lines); NULL + err_set on failure. */
void *mem_alloc(size_t n, const char *what);
void mem_free(void *p);

/* Fault injection for tests of the out-of-memory paths: the next `count`
 * mem_alloc calls whose `what` starts with `what_prefix` fail as a refused
 * allocation would (NULL + err_set); count 0 clears it.  Set it before the
 * threads that allocate start (the count itself is atomic: of several threads
 * asking at once, exactly `count` fail).  Returns how many injected failures
 * were still pending. */
int mem_fail_next(const char *what_prefix, int count);

typedef struct {
    const uint8_t *data; /* read-only mapping, NULL for an empty file */
    size_t size;
    char *path;
} MappedFile;

/* Maps a whole file read-only. Returns 0 or -1 with err_set naming the file. */
int file_map(const char *path, MappedFile *mf);
void file_unmap(MappedFile *mf);

/* Writes n bytes to path.tmp.<host>.<pid> in the same folder, fsyncs and renames it
 * over path, so a reader sees the old file or the whole new one.  Returns 0, or
 * -1 with err_set (the temporary is removed). */
int file_write_atomic(const char *path, const void *data, size_t n);
/* Its first half, for a result of several files that appear together: n bytes
 * written and fsynced to the registered temporary of path (named into tmp, as
 * tmp_begin), left for files_commit.  Returns 0, or -1 with err_set (nothing
 * left, path checked by file_out_check first). */
int file_stage(const char *path, const void *data, size_t n, char *tmp, size_t tn);
/* The same for a file written from `parts` pieces in order (data[i], len[i] bytes). */
int file_stage_parts(const char *path, int parts, const void *const *data, const size_t *len, char *tmp,
                     size_t tn);
/* Renames tmp[i] over final[i] in order (at most 16) with SIGTERM, SIGINT and
 * SIGHUP held back, so that a sweep's stop lands before the set or after it,
 * not inside (a held signal ends the process once the set is in place, or once
 * a failed one is undone); each temporary is unregistered as it is renamed.
 * On a failed rename the set is undone — the temporaries left removed, the
 * finals renamed so far removed or, where a file was there before, put back
 * (kept under a hard link "<final>.old.tmp.<host>.<pid>" until the set is in;
 * on a file system without hard links it stays replaced) — and -1 returned
 * with err_set. */
int files_commit(int n, char *const *tmp, char *const *final);

/* The temporary a result is written to before it is renamed over `final`,
 * named into buf and registered (below) until tmp_end(buf):
 * "<final>.tmp.<host>.<pid>" — the host too, as a results folder shared over
 * NFS may see writers on several machines, and processes in containers have
 * small pids that repeat between machines (two writers of one reference
 * cache had truncated one temporary).  Non [A-Za-z0-9._-] bytes of the host
 * name become '_'. */
void tmp_begin(char *buf, size_t n, const char *final);
/* Temporaries in progress (tmp_begin to tmp_end, whether renamed or removed)
 * are registered, so that a TERM, INT or HUP — a sweep stopping a point —
 * removes them before the process ends (tmp_cleanup_on_signals, in the
 * programs' main).  Up to 16 at once (more: not registered). */
void tmp_end(const char *path);
/* A folder the call made for its output, registered as the temporaries are
 * (until tmp_end(dir)): a stop removes it after them when it is empty. */
void tmp_dir_begin(const char *dir);
/* fopen / open of a registered temporary, and mkdir of a folder registered
 * (tmp_dir_begin) when made.  A stop's handler on another thread waits for
 * the creations in progress (2 s at most) before it removes the registered
 * paths, and none begins once it has (the thread waits to end with the
 * process): a path made behind the removal had been left.  As fopen, open and
 * mkdir (errno set).  A child of fork() starts with an empty registry. */
FILE *tmp_fopen(const char *tmp, const char *mode);
int tmp_open(const char *tmp, int flags, mode_t mode);
int tmp_mkdir(const char *dir, mode_t mode);
/* Handlers for SIGTERM, SIGINT and SIGHUP that unlink every registered
 * temporary (and remove every registered folder left empty), then end the
 * process by the same signal (default action).  A signal the process was
 * started with ignored (nohup) stays ignored. */
void tmp_cleanup_on_signals(void);

/* For a path that a result will be renamed over: 0 when it does not exist or
 * is a regular file, else -1 with err_set (a device such as /dev/null, a
 * folder, a pipe, a symbolic link — /dev/stdout among them: the rename would
 * replace it with a file). */
int file_out_check(const char *path);

/* The folder a result at path goes into exists, is a folder and this process may
 * create files in it: 0, else -1 with err_set naming opt (the option, "--out")
 * and the path (checked before any work: a missing or read-only folder had been
 * found only when the finished result was written). */
int file_out_folder_check(const char *path, const char *opt);

/* Both checks of an output path before any work: file_out_folder_check, then
 * file_out_check with its message prefixed "opt: ". 0, or -1 with err_set. */
int file_out_path_check(const char *path, const char *opt);

/* p (a path) cut to its folder in place: "a/b" -> "a", "/b" -> "/", "b" -> "." */
void path_parent(char *p);

/* Whether paths a and b name one file: both existing and the same (device,
 * inode), or neither existing and the same path once their folders are
 * resolved (two outputs of one run given one name). */
int file_same(const char *a, const char *b);

/* The first line (without its end) of the file `name` in this program's
 * folder or, failing that, in up to `up` folders above it (the Makefile's
 * git_commit: build/ternlab -> build/git_commit, build/gpu/bench_gpu ->
 * build/git_commit with up = 1) into out; "" where there is none. */
void exe_side_line(const char *name, int up, char *out, size_t n);

/* Reads a whole file into a NUL-terminated heap buffer. Returns 0 or -1. */
int file_read_all(const char *path, char **out, size_t *size);

#endif
