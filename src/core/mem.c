#include "mem.h"
#include "err.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* Exit status 1, a failed run (2 is the CLI's usage error). */
static void oom(size_t n) {
    fprintf(stderr, "ternlab: out of memory allocating %zu bytes\n", n);
    exit(1);
}

void *xmalloc(size_t n) {
    void *p = malloc(n ? n : 1);
    if (!p) oom(n);
    return p;
}

void *xcalloc(size_t n, size_t size) {
    void *p = calloc(n ? n : 1, size ? size : 1);
    if (!p) oom(n * size);
    return p;
}

void *xrealloc(void *p, size_t n) {
    void *q = realloc(p, n ? n : 1);
    if (!q) oom(n);
    return q;
}

char *xstrdup(const char *s) {
    size_t n = strlen(s) + 1;
    char *p = xmalloc(n);
    memcpy(p, s, n);
    return p;
}

static char fail_prefix[64];
static atomic_int fail_left;

int mem_fail_next(const char *what_prefix, int count) {
    snprintf(fail_prefix, sizeof fail_prefix, "%s", what_prefix ? what_prefix : "");
    return atomic_exchange(&fail_left, count > 0 ? count : 0);
}

/* Whether this allocation is one the test hook makes fail (at most fail_left of them). */
static int injected_failure(const char *what) {
    if (atomic_load_explicit(&fail_left, memory_order_relaxed) <= 0) return 0;
    if (strncmp(what ? what : "", fail_prefix, strlen(fail_prefix)) != 0) return 0;
    int left = atomic_load(&fail_left);
    while (left > 0 && !atomic_compare_exchange_weak(&fail_left, &left, left - 1)) {
    }
    return left > 0;
}

void *mem_alloc(size_t n, const char *what) {
    void *p = NULL;
    if (n > SIZE_MAX - 63) { /* (rounding it up would wrap to 0: a 64-byte block) */
        err_set("cannot allocate %zu bytes for %s", n, what);
        return NULL;
    }
    size_t rounded = (n + 63) & ~(size_t)63;
    if (injected_failure(what) || posix_memalign(&p, 64, rounded ? rounded : 64) != 0) {
        err_set("cannot allocate %zu bytes for %s", n, what);
        return NULL;
    }
    return p;
}

void mem_free(void *p) { free(p); }

/* A read-only descriptor of a regular file, its size into *size; -1 with
 * err_set otherwise.  Opened without blocking, so that a FIFO (or a device)
 * is refused instead of waiting for a writer; the flag is cleared after. */
static int open_regular(const char *path, size_t *size) {
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) return err_set("%s: cannot open: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) {
        const int e = errno;
        close(fd);
        return err_set("%s: cannot stat: %s", path, strerror(e));
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return err_set("%s: not a regular file%s", path, S_ISDIR(st.st_mode) ? " (a directory)" : "");
    }
    /* blocking again for the reads (a FUSE file system may pass the flag on to them) */
    const int fl = fcntl(fd, F_GETFL);
    if (fl < 0 || fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) != 0) {
        const int e = errno;
        close(fd);
        return err_set("%s: cannot open: %s", path, strerror(e));
    }
    *size = (size_t)st.st_size;
    return fd;
}

int file_map(const char *path, MappedFile *mf) {
    memset(mf, 0, sizeof *mf);
    int fd = open_regular(path, &mf->size);
    if (fd < 0) return -1;
    if (mf->size > 0) {
        void *p = mmap(NULL, mf->size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (p == MAP_FAILED) {
            close(fd);
            return err_set("%s: cannot mmap %zu bytes: %s", path, mf->size, strerror(errno));
        }
        mf->data = p;
    }
    close(fd);
    mf->path = xstrdup(path);
    return 0;
}

void file_unmap(MappedFile *mf) {
    if (mf->data) munmap((void *)mf->data, mf->size);
    free(mf->path);
    memset(mf, 0, sizeof *mf);
}

int file_out_check(const char *path) {
    struct stat st;
    /* a symbolic link would be replaced by the rename, its target left as it was
     * (--out /dev/stdout had replaced the link itself, exit 0, nothing written) */
    if (lstat(path, &st) == 0 && S_ISLNK(st.st_mode)) {
        char target[512];
        const ssize_t tl = readlink(path, target, sizeof target - 1);
        target[tl > 0 ? tl : 0] = 0;
        return err_set("%s is a symbolic link (to %s): results are written to a temporary file and "
                       "renamed over the path, which would replace the link and leave its target as it "
                       "was; give the target's path", path, target[0] ? target : "?");
    }
    if (stat(path, &st) != 0 || S_ISREG(st.st_mode)) return 0;
    return err_set("%s exists and is not a regular file (%s): results are written to a temporary "
                   "file and renamed over the path, which would replace it; give a file path",
                   path, S_ISDIR(st.st_mode) ? "a folder" : S_ISCHR(st.st_mode) || S_ISBLK(st.st_mode) ? "a device"
                                                : S_ISFIFO(st.st_mode) ? "a pipe" : "not a file");
}

int file_out_folder_check(const char *path, const char *opt) {
    char dir[4096];
    struct stat st;
    snprintf(dir, sizeof dir, "%s", path);
    path_parent(dir);
    if (stat(dir, &st) != 0)
        return err_set("%s %s: folder %s: %s (create it first)", opt, path, dir, strerror(errno));
    if (!S_ISDIR(st.st_mode)) return err_set("%s %s: %s is not a folder", opt, path, dir);
    if (access(dir, W_OK | X_OK) != 0)
        return err_set("%s %s: folder %s: cannot create files there: %s", opt, path, dir, strerror(errno));
    return 0;
}

int file_out_path_check(const char *path, const char *opt) {
    if (file_out_folder_check(path, opt) != 0) return -1;
    return file_out_check(path) != 0 ? err_prefix("%s: ", opt) : 0;
}

void path_parent(char *p) {
    char *s = strrchr(p, '/');
    if (!s) strcpy(p, ".");
    else if (s == p) p[1] = 0;
    else *s = 0;
}

/* path with its folder resolved (the file itself need not exist): 0 or -1 */
static int resolve_parent(const char *path, char *out, size_t n) {
    char dir[4096], real[4096];
    const char *slash = strrchr(path, '/');
    const char *base = slash ? slash + 1 : path;
    snprintf(dir, sizeof dir, "%s", path);
    path_parent(dir);
    if (!realpath(dir, real)) return -1;
    snprintf(out, n, "%s/%s", real, base);
    return 0;
}

int file_same(const char *a, const char *b) {
    struct stat sa, sb;
    const int ea = stat(a, &sa) == 0, eb = stat(b, &sb) == 0;
    if (ea && eb) return sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
    if (ea || eb) return 0;
    char ra[4200], rb[4200];
    if (resolve_parent(a, ra, sizeof ra) != 0 || resolve_parent(b, rb, sizeof rb) != 0) return strcmp(a, b) == 0;
    return strcmp(ra, rb) == 0;
}

/* the registry: slot i holds a path while live[i] (set after the path is
 * written, cleared before it is reused: the handler reads only whole paths);
 * live 1 a temporary file, 2 a folder the call made (removed if empty) */
enum { TMP_SLOTS = 16, TMP_PATH = 4400 };
static char tmp_paths[TMP_SLOTS][TMP_PATH];
static volatile sig_atomic_t tmp_live[TMP_SLOTS];

static void tmp_register(const char *path, int kind) {
    if (!path || strlen(path) >= TMP_PATH) return;
    int free_slot = -1;
    for (int i = 0; i < TMP_SLOTS; i++) {
        if (tmp_live[i] && strcmp(tmp_paths[i], path) == 0) return;
        if (!tmp_live[i] && free_slot < 0) free_slot = i;
    }
    if (free_slot < 0) return;
    memcpy(tmp_paths[free_slot], path, strlen(path) + 1);
    tmp_live[free_slot] = kind;
}

void tmp_begin(char *buf, size_t n, const char *final) {
    char host[65] = "";
    if (gethostname(host, sizeof host - 1) != 0 || !host[0]) snprintf(host, sizeof host, "host");
    host[sizeof host - 1] = 0;
    for (char *c = host; *c; c++)
        if (!((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9') || *c == '.' ||
              *c == '-' || *c == '_'))
            *c = '_';
    snprintf(buf, n, "%s.tmp.%s.%ld", final, host, (long)getpid());
    tmp_register(buf, 1);
}

void tmp_dir_begin(const char *dir) { tmp_register(dir, 2); }

void tmp_end(const char *path) {
    for (int i = 0; path && i < TMP_SLOTS; i++)
        if (tmp_live[i] && strcmp(tmp_paths[i], path) == 0) tmp_live[i] = 0;
}

/* Who has the registry: 0 nobody, 1 files_commit renaming a set (a TERM, INT
 * or HUP that reaches another thread then — one the committing thread's mask
 * does not cover — is kept in tmp_held_sig and raised again after the set), 2
 * a handler removing the temporaries before the process ends (files_commit
 * then renames nothing).  Taken by compare-and-swap, so that no rename runs
 * beside the removal on another thread (a temporary renamed before the handler
 * reached it had stayed as its final, the set half done). */
static atomic_int tmp_state, tmp_held_sig;
/* Creations of registered paths in progress (tmp_make_begin to tmp_make_end),
 * and whether this thread is in one: a handler that begins the removal waits
 * for the other threads' (which, having seen no removal begun, make their path
 * and register it), so that none is made behind the removal */
static atomic_int tmp_making;
static _Thread_local volatile sig_atomic_t tmp_making_here;
/* (tests: TERNLAB_TEST_STOP_DELAY_US, a pause after the removal; TERNLAB_TEST_MAKE_DELAY_US,
 * a pause before and after each creation) */
static struct timespec tmp_stop_delay, tmp_make_delay;

/* TERM, INT and HUP blocked on this thread, its mask before into old */
static void block_stops(sigset_t *old) {
    sigset_t s;
    sigemptyset(&s);
    sigaddset(&s, SIGTERM);
    sigaddset(&s, SIGINT);
    sigaddset(&s, SIGHUP);
    pthread_sigmask(SIG_BLOCK, &s, old);
}

static void tmp_on_signal(int sig) {
    for (;;) {
        int was = 0;
        if (atomic_compare_exchange_strong(&tmp_state, &was, 2)) break;
        if (was == 2) { /* another thread is removing them and ending the process */
            if (tmp_making_here) tmp_making_here = 0, atomic_fetch_sub(&tmp_making, 1); /* (not waited for) */
            for (;;) pause();
        }
        /* 1: kept for files_commit, which raises it after the set; where the set was
         * done before the signal was kept (files_commit read no signal), taken here */
        atomic_store(&tmp_held_sig, sig);
        if (atomic_load(&tmp_state) == 1) return;
    }
    /* the creations in progress on other threads end first (2 s at most: an open that
     * blocks — a FIFO at the name — does not keep the stop back) */
    const struct timespec ms = {0, 1000000};
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    while (atomic_load(&tmp_making) > tmp_making_here && clock_gettime(CLOCK_MONOTONIC, &t) == 0 &&
           (t.tv_sec - t0.tv_sec) * 1000000000L + (t.tv_nsec - t0.tv_nsec) < 2000000000L)
        nanosleep(&ms, NULL);
    atomic_thread_fence(memory_order_seq_cst);
    for (int k = 1; k <= 2; k++) /* (unlink and rmdir are async-signal-safe) */
        for (int i = 0; i < TMP_SLOTS; i++)
            if (tmp_live[i] == k) k == 1 ? unlink(tmp_paths[i]) : rmdir(tmp_paths[i]);
    if (tmp_stop_delay.tv_sec || tmp_stop_delay.tv_nsec) nanosleep(&tmp_stop_delay, NULL); /* (tests) */
    signal(sig, SIG_DFL);
    raise(sig);
}

/* The registry taken (1) by this thread (files_commit), its TERM / INT / HUP
 * blocked: a stop reaching another thread meanwhile is kept in tmp_held_sig
 * and sent again by tmp_give.  Where a handler is already removing the temporaries (2) the
 * thread waits to be ended with the process. */
static void tmp_take(sigset_t *old) {
    block_stops(old);
    for (;;) {
        int was = 0;
        if (atomic_compare_exchange_strong(&tmp_state, &was, 1)) break;
        if (was == 2)
            for (;;) pause(); /* a stop's handler on another thread is removing the temporaries */
        usleep(1000);         /* (1: another thread's set or creation) */
    }
}

static void tmp_give(const sigset_t *old) {
    const int e = errno;
    atomic_store(&tmp_state, 0);
    pthread_sigmask(SIG_SETMASK, old, NULL); /* (one held for this thread is handled here) */
    const int held = atomic_exchange(&tmp_held_sig, 0);
    if (held) kill(getpid(), held); /* (to the process: this thread may block it, another not) */
    errno = e;
}

/* A creation of a registered path: none once a stop's removal has begun (the
 * thread waits to end with the process); otherwise counted until made and
 * registered, which the removal waits for. */
static void tmp_make_begin(void) {
    atomic_fetch_add(&tmp_making, 1);
    tmp_making_here = 1;
    if (atomic_load(&tmp_state) == 2) {
        tmp_making_here = 0;
        atomic_fetch_sub(&tmp_making, 1);
        for (;;) pause();
    }
    if (tmp_make_delay.tv_sec || tmp_make_delay.tv_nsec) nanosleep(&tmp_make_delay, NULL);
}

static void tmp_make_end(void) { /* (errno as the creation left it) */
    const int e = errno;
    if (tmp_make_delay.tv_sec || tmp_make_delay.tv_nsec) nanosleep(&tmp_make_delay, NULL);
    tmp_making_here = 0;
    atomic_fetch_sub(&tmp_making, 1);
    errno = e;
}

FILE *tmp_fopen(const char *tmp, const char *mode) {
    tmp_make_begin();
    FILE *f = fopen(tmp, mode);
    tmp_make_end();
    return f;
}

int tmp_open(const char *tmp, int flags, mode_t mode) {
    tmp_make_begin();
    const int fd = open(tmp, flags, mode);
    tmp_make_end();
    return fd;
}

int tmp_mkdir(const char *dir, mode_t mode) {
    /* (made, then registered: a stop on this thread between the two waits — a file's
     * name is registered before it is made, a folder's only once it is ours) */
    sigset_t old;
    block_stops(&old);
    tmp_make_begin();
    const int rc = mkdir(dir, mode);
    const int e = errno;
    if (rc == 0) tmp_register(dir, 2);
    tmp_make_end();
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    errno = e; /* (mkdir's, not the registration's) */
    return rc;
}

/* A child of fork() starts with an empty registry: the temporaries are the
 * parent's (a stopped child had removed them), and a registry the parent held
 * at the fork (files_commit on another thread) would stay held for ever. */
static _Thread_local sigset_t tmp_fork_mask;

static void tmp_atfork_prepare(void) { /* (a stop pending in the child waits for its empty registry) */
    block_stops(&tmp_fork_mask);
}

static void tmp_atfork_parent(void) { pthread_sigmask(SIG_SETMASK, &tmp_fork_mask, NULL); }

static void tmp_atfork_child(void) {
    for (int i = 0; i < TMP_SLOTS; i++) tmp_live[i] = 0;
    atomic_store(&tmp_state, 0);
    atomic_store(&tmp_held_sig, 0);
    atomic_store(&tmp_making, 0); /* (the other threads are not in the child) */
    pthread_sigmask(SIG_SETMASK, &tmp_fork_mask, NULL);
}

/* a test's pause: the environment variable name, in µs, into ts (unset: none) */
static void env_delay(const char *name, struct timespec *ts) {
    const char *d = getenv(name);
    const long us = d ? atol(d) : 0;
    if (us > 0) ts->tv_sec = us / 1000000, ts->tv_nsec = us % 1000000 * 1000;
}

void tmp_cleanup_on_signals(void) {
    const int sigs[] = {SIGTERM, SIGINT, SIGHUP};
    env_delay("TERNLAB_TEST_STOP_DELAY_US", &tmp_stop_delay);
    env_delay("TERNLAB_TEST_MAKE_DELAY_US", &tmp_make_delay);
    static atomic_flag atfork = ATOMIC_FLAG_INIT;
    if (!atomic_flag_test_and_set(&atfork)) pthread_atfork(tmp_atfork_prepare, tmp_atfork_parent, tmp_atfork_child);
    for (int i = 0; i < 3; i++) {
        struct sigaction sa, was;
        /* one ignored (nohup; a background job of a non-interactive shell gets INT
         * ignored) stays ignored: it does not end the process, so has nothing to
         * clean up (handled, it had ended a nohup run on HUP) */
        if (sigaction(sigs[i], NULL, &was) == 0 && was.sa_handler == SIG_IGN) continue;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = tmp_on_signal;
        sa.sa_flags = SA_RESTART; /* (a stop held for files_commit returns: the call it cut goes on) */
        sigemptyset(&sa.sa_mask);
        for (int j = 0; j < 3; j++) sigaddset(&sa.sa_mask, sigs[j]); /* (one handler at a time) */
        sigaction(sigs[i], &sa, NULL);
    }
}

int file_stage_parts(const char *path, int parts, const void *const *data, const size_t *len, char *tmp,
                     size_t tn) {
    if (file_out_check(path) != 0) return -1;
    if (strlen(path) > 4000) return err_set("%.100s...: path too long", path);
    tmp_begin(tmp, tn, path);
    FILE *f = tmp_fopen(tmp, "wb");
    if (!f) {
        int e = errno;
        tmp_end(tmp);
        return err_set("%s: cannot create: %s", tmp, strerror(e));
    }
    int ok = 1;
    for (int i = 0; i < parts && ok; i++) ok = fwrite(data[i], 1, len[i], f) == len[i];
    if (fflush(f) != 0 || fsync(fileno(f)) != 0) ok = 0;
    if (fclose(f) != 0) ok = 0;
    if (!ok) {
        int e = errno;
        remove(tmp);
        tmp_end(tmp);
        return err_set("%s: write failed: %s", path, strerror(e));
    }
    return 0;
}

int file_stage(const char *path, const void *data, size_t n, char *tmp, size_t tn) {
    return file_stage_parts(path, 1, &data, &n, tmp, tn);
}

int file_write_atomic(const char *path, const void *data, size_t n) {
    char tmp[4200];
    if (file_stage(path, data, n, tmp, sizeof tmp) != 0) return -1;
    if (rename(tmp, path) != 0) {
        int e = errno;
        remove(tmp);
        tmp_end(tmp);
        return err_set("%s: write failed: %s", path, strerror(e));
    }
    tmp_end(tmp);
    return 0;
}

int files_commit(int n, char *const *tmp, char *const *final) {
    sigset_t old;
    tmp_take(&old);
    /* a final that is there is kept under a second name (a hard link) until the
     * set is in: a failed rename puts it back.  had: 0 not there, 1 there without
     * a second name (link failed: link_err), 2 kept, 3 not known (lstat failed:
     * left as it is by an undo) */
    enum { MAXN = 16 };
    char backup[MAXN][4400], msg[8192] = "";
    int had[MAXN] = {0}, link_err[MAXN] = {0};
    int rc = 0, i = 0;
    if (n > MAXN) {
        snprintf(msg, sizeof msg, "files_commit: %d files, at most %d", n, MAXN);
        rc = -1;
    }
    /* (tests: a pause after each rename, so that a stop lands inside the set) */
    const char *delay = getenv("TERNLAB_TEST_COMMIT_DELAY_US");
    const long delay_us = delay ? atol(delay) : 0;
    for (; rc == 0 && i < n; i++) {
        struct stat st;
        char name[4300];
        snprintf(name, sizeof name, "%s.old", final[i]);
        tmp_begin(backup[i], sizeof backup[i], name);
        unlink(backup[i]); /* (ours: one a killed run of this host and pid left) */
        if (lstat(final[i], &st) != 0) had[i] = errno == ENOENT ? 0 : 3;
        else if (link(final[i], backup[i]) == 0) had[i] = 2;
        else had[i] = 1, link_err[i] = errno;
        if (had[i] != 2) tmp_end(backup[i]);
        if (rename(tmp[i], final[i]) != 0) {
            snprintf(msg, sizeof msg, "cannot rename %.1500s to %.1500s: %s", tmp[i], final[i], strerror(errno));
            rc = -1;
            if (had[i] == 2) unlink(backup[i]), tmp_end(backup[i]);
            break;
        }
        tmp_end(tmp[i]);
        if (delay_us > 0) usleep((useconds_t)delay_us);
    }
    const int renamed = rc == 0 ? n : i;
    for (int j = 0; j < renamed; j++) {
        size_t l = strlen(msg);
        if (rc == 0) { /* in: the second names go */
            if (had[j] == 2) unlink(backup[j]), tmp_end(backup[j]);
            continue;
        }
        /* failed: each renamed one undone, and what could not be said */
        if (had[j] == 2 && rename(backup[j], final[j]) != 0)
            snprintf(msg + l, sizeof msg - l, "; %.1000s not put back (%s): its old contents are %.1000s", final[j],
                     strerror(errno), backup[j]);
        else if (had[j] == 0 && unlink(final[j]) != 0)
            snprintf(msg + l, sizeof msg - l, "; %.1000s, new, not removed: %s", final[j], strerror(errno));
        else if (had[j] == 1)
            snprintf(msg + l, sizeof msg - l, "; %.1000s stays replaced (no second name for its old contents: %s)",
                     final[j], strerror(link_err[j]));
        else if (had[j] == 3)
            snprintf(msg + l, sizeof msg - l, "; %.1000s left as renamed (whether it was there before is not known)",
                     final[j]);
        if (had[j] == 2) tmp_end(backup[j]); /* (put back, or kept: not a temporary to remove) */
    }
    for (int j = renamed; j < n; j++) {
        remove(tmp[j]);
        tmp_end(tmp[j]);
    }
    tmp_give(&old);
    return rc ? err_set("%s", msg) : 0;
}

void exe_side_line(const char *name, int up, char *out, size_t n) {
    char dir[4096], p[4400];
    if (n) out[0] = 0;
    ssize_t len = readlink("/proc/self/exe", dir, sizeof dir - 1);
    if (len <= 0 || !n) return;
    dir[len] = 0;
    for (int u = 0; u <= up; u++) {
        char *slash = strrchr(dir, '/');
        if (!slash) return;
        *slash = 0;
        snprintf(p, sizeof p, "%s/%s", dir[0] ? dir : "", name);
        FILE *f = fopen(p, "r");
        if (!f) continue;
        if (!fgets(out, (int)n, f)) out[0] = 0;
        fclose(f);
        out[strcspn(out, "\r\n")] = 0;
        if (out[0]) return;
    }
}

int file_read_all(const char *path, char **out, size_t *size) {
    size_t sz;
    int fd = open_regular(path, &sz);
    if (fd < 0) return -1;
    FILE *f = fdopen(fd, "rb");
    if (!f) {
        const int e = errno;
        close(fd);
        return err_set("%s: cannot open: %s", path, strerror(e));
    }
    char *buf = NULL;
    size_t n = 0, cap = 0;
    for (;;) {
        if (cap - n < 65536) {
            cap = cap ? cap * 2 : 65536;
            buf = xrealloc(buf, cap + 1);
        }
        size_t got = fread(buf + n, 1, cap - n, f);
        n += got;
        if (got == 0) break;
    }
    int bad = ferror(f);
    fclose(f);
    if (bad) {
        free(buf);
        return err_set("%s: read error", path);
    }
    buf[n] = 0;
    *out = buf;
    if (size) *size = n;
    return 0;
}
