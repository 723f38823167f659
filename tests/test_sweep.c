/* Sweeps (scripts/sweep.sh): a sweep killed midway and started again ends with
 * every point's file present exactly once, verified, no temporary left, the
 * points finished before the kill not rerun, and the joblog showing the
 * resume; corrupt files and failed points are rerun; the grid and overrides
 * expand as documented.
 *
 * The experiment programs are stood in for by tests/tools/fake_exp.py (same
 * command line, writes every schema dataset to a temporary name and renames
 * it), through the TERNLAB_EXP_CMD template that sweep.sh honours.  It needs
 * Debian's /usr/bin/python3 with h5py (scripts/deps.sh installs it): without
 * it these tests fail rather than skip. */
#include "test.h"
#include "fixtures.h"
#include "core/err.h"
#include "log/h5log.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define FAKE_CMD "/usr/bin/python3 tests/tools/fake_exp.py --model {model} --value {value} --out {out}"

static const char *const POINTS6[] = {"m1__a.h5", "m1__b.h5", "m1__c.h5",
                                      "m2__a.h5", "m2__b.h5", "m2__c.h5", NULL};

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* Writes dir/name (a bash script: fmt and its arguments, the text having
 * quotes the shell needs) and runs it with bash through test_run (out: its
 * output, or NULL).  Returns test_run's exit status, -1 where the script
 * cannot be written. */
__attribute__((format(printf, 4, 5))) static int run_bash(const char *dir, const char *name, char **out,
                                                          const char *fmt, ...) {
    char script[700], cmd[800];
    snprintf(script, sizeof script, "%s/%s", dir, name);
    FILE *f = fopen(script, "w");
    if (!f) return -1;
    va_list ap;
    va_start(ap, fmt);
    vfprintf(f, fmt, ap);
    va_end(ap);
    if (fclose(f) != 0) return -1;
    snprintf(cmd, sizeof cmd, "bash '%s'", script);
    return test_run(cmd, out);
}

/* Writes a sweep config with the given values into dir/fake.conf. */
static void write_conf(const char *dir, const char *values, char *path, size_t n) {
    snprintf(path, n, "%s/fake.conf", dir);
    FILE *f = fopen(path, "w");
    if (!f) return;
    fprintf(f, "# test config\nfactor = value\nvalues = %s\nmodels = data/m1 data/m2\n"
               "tokens = none\nwindow = 16   # a comment\nmax_windows = 1\n",
            values);
    fclose(f);
}

/* res = dir/results, out_dir = its exp-fake, and the fake point command
 * (no sleep, no failure, the real verification); with values, also the
 * config dir/fake.conf of those values into conf. */
static void fake_sweep_env(const char *dir, const char *values, char *conf, size_t nconf, char *res,
                           size_t nres, char *out_dir, size_t nout) {
    if (values) write_conf(dir, values, conf, nconf);
    snprintf(res, nres, "%s/results", dir);
    snprintf(out_dir, nout, "%s/exp-fake", res);
    setenv("TERNLAB_EXP_CMD", FAKE_CMD, 1);
    setenv("FAKE_SLEEP", "0", 1);
    unsetenv("FAKE_FAIL");
    unsetenv("TERNLAB_VERIFY_CMD");
}

/* The repository's absolute path into root (PATH_MAX bytes): 1, or 0. */
static int repo_root(char *root) {
    if (!realpath(test_path("scripts/sweep.sh"), root)) return 0;
    *strrchr(root, '/') = 0;
    *strrchr(root, '/') = 0;
    return 1;
}

/* Counts run files (*.h5) and temporaries (*.tmp*) in dir. */
static void count_files(const char *dir, int *h5, int *tmp) {
    *h5 = *tmp = 0;
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *e;
    while ((e = readdir(d))) {
        size_t l = strlen(e->d_name);
        if (strstr(e->d_name, ".tmp")) (*tmp)++;
        else if (l > 3 && strcmp(e->d_name + l - 3, ".h5") == 0) (*h5)++;
    }
    closedir(d);
}

static int deps_ok(void) {
    if (test_run("/usr/bin/python3 -c 'import h5py'", NULL) != 0) {
        test_fail(__FILE__, __LINE__,
                  "/usr/bin/python3 cannot import h5py (install python3-h5py: scripts/deps.sh)");
        return 0;
    }
    if (test_run("command -v parallel", NULL) != 0) {
        test_fail(__FILE__, __LINE__, "GNU parallel is missing (scripts/deps.sh)");
        return 0;
    }
    return 1;
}

/* Seq -> count of successful joblog lines (exit 0, no signal); returns the
 * number of lines. */
static int read_joblog(const char *path, int *ok_count, int max_seq) {
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    char line[4096];
    int lines = 0;
    for (int i = 0; i <= max_seq; i++) ok_count[i] = 0;
    if (!fgets(line, sizeof line, f)) {
        fclose(f);
        return -1;
    }
    while (fgets(line, sizeof line, f)) {
        int seq = 0, exitval = -1, sig = -1;
        /* Seq Host Starttime JobRuntime Send Receive Exitval Signal Command (tabs) */
        char *fld[8] = {0}, *save = NULL, *p = strtok_r(line, "\t", &save);
        for (int i = 0; p && i < 8; i++, p = strtok_r(NULL, "\t", &save)) fld[i] = p;
        if (!fld[7]) continue;
        seq = atoi(fld[0]);
        exitval = atoi(fld[6]);
        sig = atoi(fld[7]);
        lines++;
        if (seq >= 1 && seq <= max_seq && exitval == 0 && sig == 0) ok_count[seq]++;
    }
    fclose(f);
    return lines;
}

/* A fake sweep under dir (config values a b c; FAKE_CMD as the point
 * command, no verify command): its config, results folder, the experiment's
 * folder in it, the first run's log and the script. */
typedef struct {
    char conf[600], res[600], out_dir[700], logp[700], script[1024];
} SweepFiles;

static void sweep_files(const char *dir, SweepFiles *f) {
    write_conf(dir, "a b c", f->conf, sizeof f->conf);
    snprintf(f->res, sizeof f->res, "%s/results", dir);
    snprintf(f->out_dir, sizeof f->out_dir, "%s/exp-fake", f->res);
    snprintf(f->logp, sizeof f->logp, "%s/first.log", dir);
    snprintf(f->script, sizeof f->script, "%s", test_path("scripts/sweep.sh"));
    setenv("TERNLAB_EXP_CMD", FAKE_CMD, 1);
    unsetenv("TERNLAB_VERIFY_CMD");
}

/* scripts/sweep.sh exp-fake (--config conf --results res --jobs 1) in a
 * process group of its own, its output in logp, once out_dir holds at least
 * min_h5 finished files: its pid; -1 (the group killed) when that takes over
 * 30 s or the fork fails. */
static pid_t sweep_running(const char *script, const char *conf, const char *res, const char *logp,
                           const char *out_dir, int min_h5) {
    pid_t pid = fork();
    if (pid < 0) return -1;
    if (pid == 0) {
        setpgid(0, 0);
        signal(SIGTERM, SIG_DFL);
        int fd = open(logp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fd >= 0) {
            dup2(fd, 1);
            dup2(fd, 2);
        }
        execl("/bin/bash", "bash", script, "exp-fake", "--config", conf, "--results", res, "--jobs", "1",
              (char *)NULL);
        _exit(127);
    }
    setpgid(pid, pid);
    int h5 = 0, tmp = 0;
    double t0 = now_s();
    while (now_s() - t0 < 30) {
        count_files(out_dir, &h5, &tmp);
        if (h5 >= min_h5) break;
        usleep(50 * 1000);
    }
    if (h5 < min_h5) {
        kill(-pid, SIGKILL);
        waitpid(pid, NULL, 0);
        return -1;
    }
    return pid;
}

/* GNU Parallel killed (SIGKILL) under its running point: the sweep says the point still runs
 * and holds the folder's lock (it had said only "run the same command again", which was then
 * refused as another sweep until the point ended). */
TEST(sweep_says_points_outlive_a_killed_parallel) {
    if (!deps_ok()) return;
    const char *dir = test_tmpdir();
    SweepFiles sf;
    sweep_files(dir, &sf);
    setenv("FAKE_SLEEP", "5.0", 1); /* (the point outlives the sweep's end by seconds) */
    const pid_t pid = sweep_running(sf.script, sf.conf, sf.res, sf.logp, sf.out_dir, 0);
    REQUIRE(pid > 0);
    int h5 = 0, tmp = 0;
    double t0 = now_s();
    while (tmp == 0 && now_s() - t0 < 20) { /* a point writing its file */
        count_files(sf.out_dir, &h5, &tmp);
        usleep(50 * 1000);
    }
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "pkill -KILL -g %d -x parallel", (int)pid);
    const int killed = tmp > 0 && test_run(cmd, NULL) == 0;
    int st = 0;
    t0 = now_s();
    while (waitpid(pid, &st, WNOHANG) == 0 && now_s() - t0 < 20) usleep(50 * 1000);
    const int ended = now_s() - t0 < 20;
    char *log = NULL;
    snprintf(cmd, sizeof cmd, "cat '%s'", sf.logp);
    test_run(cmd, &log);
    CHECK_MSG(killed && ended && WIFEXITED(st) && WEXITSTATUS(st) == 1 && log &&
                  strstr(log, "points of this sweep are still running") && strstr(log, "was it killed?"),
              "killed %d, ended %d, status %d:\n%s", killed, ended, st, log ? log : "");
    free(log);
    kill(-pid, SIGKILL); /* (the point that ran on) */
    if (!ended) waitpid(pid, NULL, 0);
    setenv("FAKE_SLEEP", "0", 1);
}

TEST(sweep_resume_after_kill) {
    if (!deps_ok()) return;
    const char *dir = test_tmpdir();
    SweepFiles sf;
    sweep_files(dir, &sf);
    const char *conf = sf.conf, *res = sf.res, *out_dir = sf.out_dir, *logp = sf.logp, *script = sf.script;
    setenv("FAKE_SLEEP", "1.0", 1); /* long enough to be killed inside a job */

    /* First run, in its own process group, killed after >= 2 points. */
    const pid_t pid = sweep_running(script, conf, res, logp, out_dir, 2);
    REQUIRE(pid > 0);
    int h5 = 0, tmp = 0;
    double t0;
    usleep(300 * 1000); /* into the next job's sleep: its temporary exists */
    kill(-pid, SIGTERM);
    int st = 0;
    /* (bounded: a sweep that does not exit on TERM fails the test, not hangs it) */
    t0 = now_s();
    while (waitpid(pid, &st, WNOHANG) == 0 && now_s() - t0 < 15) usleep(50 * 1000);
    if (now_s() - t0 >= 15) {
        kill(-pid, SIGKILL);
        waitpid(pid, &st, 0);
        test_fail(__FILE__, __LINE__, "the sweep did not exit within 15 s of SIGTERM");
    }
    t0 = now_s();
    while (kill(-pid, 0) == 0 && now_s() - t0 < 10) usleep(50 * 1000);
    if (kill(-pid, 0) == 0) {
        kill(-pid, SIGKILL);
        test_fail(__FILE__, __LINE__, "the killed sweep did not stop within 10 s");
    }
    usleep(200 * 1000);
    count_files(out_dir, &h5, &tmp);
    CHECK_MSG(h5 >= 2 && h5 < 6, "%d points finished before the kill (want 2..5)", h5);
    CHECK_MSG(tmp == 0, "%d temporary file(s) left by the killed sweep", tmp);

    /* Remember the finished files: the resumed sweep must not redo them. */
    struct stat before[6];
    int had[6];
    for (int i = 0; POINTS6[i]; i++) {
        char p[800];
        snprintf(p, sizeof p, "%s/%s", out_dir, POINTS6[i]);
        had[i] = stat(p, &before[i]) == 0;
    }

    /* Restart: finishes the rest. */
    setenv("FAKE_SLEEP", "0.05", 1);
    char cmd[2400], *out = NULL;
    snprintf(cmd, sizeof cmd, "bash '%s' exp-fake --config '%s' --results '%s' --jobs 1", script,
             conf, res);
    int rc = test_run(cmd, &out);
    CHECK_MSG(rc == 0, "restarted sweep exit %d:\n%s", rc, out);
    CHECK_MSG(out && strstr(out, "already complete") && strstr(out, "resume: joblog keeps"),
              "restart output:\n%s", out ? out : "");
    free(out);

    count_files(out_dir, &h5, &tmp);
    CHECK_MSG(h5 == 6, "%d run files after the restart (want 6)", h5);
    CHECK_MSG(tmp == 0, "%d temporary files after the restart", tmp);
    for (int i = 0; POINTS6[i]; i++) {
        char p[800];
        snprintf(p, sizeof p, "%s/%s", out_dir, POINTS6[i]);
        CHECK_MSG(h5log_verify_schema(p) == 0, "%s", err_msg());
        struct stat now;
        if (had[i] && stat(p, &now) == 0)
            CHECK_MSG(now.st_ino == before[i].st_ino &&
                          now.st_mtim.tv_sec == before[i].st_mtim.tv_sec &&
                          now.st_mtim.tv_nsec == before[i].st_mtim.tv_nsec,
                      "%s was rewritten by the resumed sweep", POINTS6[i]);
    }
    /* The joblog: every point exactly once, successful. */
    char jl[800];
    snprintf(jl, sizeof jl, "%s/joblog", out_dir);
    int okc[7];
    int lines = read_joblog(jl, okc, 6);
    CHECK_MSG(lines == 6, "joblog has %d job lines (want 6)", lines);
    for (int s = 1; s <= 6; s++) CHECK_MSG(okc[s] == 1, "joblog: seq %d succeeded %d times", s, okc[s]);

    /* A third run does nothing. */
    rc = test_run(cmd, &out);
    CHECK_MSG(rc == 0 && strstr(out, "6 points, 6 already complete"), "third run:\n%s", out);
    free(out);
}

TEST(sweep_reruns_corrupt_and_failed_points) {
    if (!deps_ok()) return;
    const char *dir = test_tmpdir();
    char conf[600], res[600], cmd[2400], *out = NULL;
    write_conf(dir, "a b", conf, sizeof conf);
    snprintf(res, sizeof res, "%s/results", dir);
    setenv("TERNLAB_EXP_CMD", FAKE_CMD, 1);
    unsetenv("TERNLAB_VERIFY_CMD");
    setenv("FAKE_SLEEP", "0", 1);
    setenv("FAKE_FAIL", "b", 1); /* the b points fail */
    snprintf(cmd, sizeof cmd, "bash '%s' exp-fake --config '%s' --results '%s' --jobs 2",
             test_path("scripts/sweep.sh"), conf, res);
    int rc = test_run(cmd, &out);
    CHECK_MSG(rc == 1 && strstr(out, "2 of 4 point(s) have no finished file") &&
                  strstr(out, "m1__b.h5") && strstr(out, "m2__b.h5"),
              "sweep with failing points (rc %d):\n%s", rc, out);
    free(out);

    char a1[800], a2[800], b1[800];
    snprintf(a1, sizeof a1, "%s/exp-fake/m1__a.h5", res);
    snprintf(a2, sizeof a2, "%s/exp-fake/m2__a.h5", res);
    snprintf(b1, sizeof b1, "%s/exp-fake/m1__b.h5", res);
    CHECK(h5log_verify_schema(a1) == 0);
    CHECK(access(b1, F_OK) != 0);
    /* Half of m1__a.h5 is lost; m2__a.h5 stays as it is. */
    struct stat sa, sa2;
    REQUIRE(stat(a1, &sa) == 0 && stat(a2, &sa2) == 0);
    REQUIRE(truncate(a1, sa.st_size / 2) == 0);
    CHECK(h5log_verify(a1, NULL) != 0);

    unsetenv("FAKE_FAIL");
    rc = test_run(cmd, &out);
    CHECK_MSG(rc == 0 && strstr(out, "m1__a.h5: ") && strstr(out, "will rerun") &&
                  strstr(out, "all 4 points complete"),
              "rerun (rc %d):\n%s", rc, out);
    free(out);
    CHECK_MSG(h5log_verify_schema(a1) == 0, "%s", err_msg());
    CHECK_MSG(h5log_verify_schema(b1) == 0, "%s", err_msg());
    struct stat now;
    CHECK(stat(a2, &now) == 0 && now.st_ino == sa2.st_ino);
    int okc[5];
    char jl[800];
    snprintf(jl, sizeof jl, "%s/exp-fake/joblog", res);
    CHECK(read_joblog(jl, okc, 4) == 4);
    for (int s = 1; s <= 4; s++) CHECK_MSG(okc[s] == 1, "joblog: seq %d ok %d times", s, okc[s]);
}

/* The joblog keeps one successful line for every finished point, whatever
 * left a point's line out: its job killed by a signal while the run it
 * started went on to finish the file (Parallel logs exit 0, signal 9; it had
 * been kept, so --resume-failed ran the point again and logged it twice), a
 * line lost with Parallel killed under its jobs, or one of a command spelt
 * differently.  With every file present nothing had run, and the next sweep
 * copied the short joblog over joblog.prev: the points' record was gone.
 * Finished files are not rewritten. */
/* A results folder whose path holds a backslash, a value with an &: the points run as named
 * (bash 5.2's patsub_replacement had taken printf %q's escapes out of the command: the
 * backslash lost, the & unquoted), and the resume keeps the joblog's finished lines (awk -v
 * had read "\\t" in the jobs file's path as a tab, found no jobs, and kept none). */
TEST(sweep_joblog_kept_under_a_backslash_path) {
    if (!deps_ok()) return;
    const char *dir = test_tmpdir();
    char conf[600], res[600], out_dir[700], cmd[3000], *out = NULL;
    fake_sweep_env(dir, "a x&y", conf, sizeof conf, res, sizeof res, out_dir, sizeof out_dir);
    snprintf(res, sizeof res, "%s/re\\tsults", dir);
    snprintf(cmd, sizeof cmd, "bash '%s' exp-fake --config '%s' --results '%s' 2>&1", test_path("scripts/sweep.sh"),
             conf, res);
    int rc = test_run(cmd, &out);
    CHECK_MSG(rc == 0 && strstr(out, "all 4 points complete"), "first sweep (rc %d):\n%s", rc, out);
    free(out);
    rc = test_run(cmd, &out);
    CHECK_MSG(rc == 0 && strstr(out, "joblog keeps 4 finished") && !strstr(out, "no joblog line"), "again (rc %d):\n%s",
              rc, out);
    free(out);
}

TEST(sweep_joblog_keeps_every_finished_point) {
    if (!deps_ok()) return;
    const char *dir = test_tmpdir();
    char conf[600], res[600], out_dir[700], cmd[3000], jl[800], *out = NULL;
    fake_sweep_env(dir, "a b c", conf, sizeof conf, res, sizeof res, out_dir, sizeof out_dir);
    snprintf(cmd, sizeof cmd, "bash '%s' exp-fake --config '%s' --results '%s' --jobs 2 2>&1",
             test_path("scripts/sweep.sh"), conf, res);
    snprintf(jl, sizeof jl, "%s/joblog", out_dir);
    int rc = test_run(cmd, &out);
    CHECK_MSG(rc == 0 && strstr(out, "all 6 points complete"), "first sweep (rc %d):\n%s", rc, out);
    free(out);
    int okc[7];
    REQUIRE(read_joblog(jl, okc, 6) == 6);
    struct stat before[6];
    for (int i = 0; POINTS6[i]; i++) {
        char p[800];
        snprintf(p, sizeof p, "%s/%s", out_dir, POINTS6[i]);
        REQUIRE(stat(p, &before[i]) == 0);
    }
    /* seq 2 killed by SIGKILL (its file finished anyway), seq 5's line lost,
     * seq 6's command spelt otherwise */
    REQUIRE(run_bash(dir, "edit_joblog.sh", NULL,
                     "awk -F '\\t' -v OFS='\\t' 'NR == 1 { print; next } $1 == 2 { $8 = 9 } $1 == 5 { next }"
                     " $1 == 6 { $9 = $9 \" --old-spelling\" } { print }' '%s' > '%s.new' && mv '%s.new' '%s'\n",
                     jl, jl, jl, jl) == 0);
    REQUIRE(read_joblog(jl, okc, 6) == 5 && okc[2] == 0 && okc[5] == 0 && okc[6] == 1);

    for (int round = 0; round < 2; round++) {
        rc = test_run(cmd, &out);
        CHECK_MSG(rc == 0 && strstr(out, "6 points, 6 already complete") && strstr(out, "all 6 points complete"),
                  "round %d (rc %d):\n%s", round, rc, out);
        /* the first round records the three points (each job skips its file); the second has nothing to do */
        CHECK_MSG(round == 0 ? strstr(out, "3 of them have no joblog line") != NULL
                             : strstr(out, "no joblog line") == NULL && strstr(out, "joblog keeps 6 finished"),
                  "round %d:\n%s", round, out);
        free(out);
        const int lines = read_joblog(jl, okc, 6);
        CHECK_MSG(lines == 6, "round %d: joblog has %d job lines (want 6)", round, lines);
        for (int s = 1; s <= 6; s++)
            CHECK_MSG(okc[s] == 1, "round %d: joblog: seq %d succeeded %d times", round, s, okc[s]);
    }
    for (int i = 0; POINTS6[i]; i++) {
        char p[800];
        struct stat now;
        snprintf(p, sizeof p, "%s/%s", out_dir, POINTS6[i]);
        CHECK_MSG(stat(p, &now) == 0 && now.st_ino == before[i].st_ino &&
                      now.st_mtim.tv_sec == before[i].st_mtim.tv_sec &&
                      now.st_mtim.tv_nsec == before[i].st_mtim.tv_nsec,
                  "%s was rewritten", POINTS6[i]);
    }
}

TEST(sweep_grid_and_overrides) {
    const char *dir = test_tmpdir();
    char conf[600], res[600], cmd[2400], *out = NULL;
    write_conf(dir, "x all@layers=0-1", conf, sizeof conf);
    snprintf(res, sizeof res, "%s/results", dir);
    setenv("TERNLAB_EXP_CMD", "prog --model {model} --value {value} --out {out} --exp {exp}", 1);
    const char *sweep = test_path("scripts/sweep.sh");

    snprintf(cmd, sizeof cmd, "bash '%s' exp-fake --config '%s' --results '%s' --dry-run window=8",
             sweep, conf, res);
    int rc = test_run(cmd, &out);
    CHECK_MSG(rc == 0, "dry run rc %d:\n%s", rc, out);
    CHECK_MSG(strstr(out, "4 points (0 complete)"), "%s", out);
    CHECK_MSG(strstr(out, "m2__all_layers_0-1.h5 --device cpu --expect experiment=exp-fake --expect "
                          "factor_value=all@layers=0-1 --expect model/=m2 --tag ") &&
                  strstr(out, " -- prog --model data/m2 --value all@layers=0-1 --out ") &&
                  strstr(out, "--exp exp-fake window=8"),
              "%s", out);
    CHECK(strstr(out, "--joblog") && strstr(out, "--resume-failed"));
    free(out);
    CHECK(access(res, F_OK) != 0); /* a dry run changes nothing */

    /* --model replaces the config's models; values= changes the grid. */
    snprintf(cmd, sizeof cmd,
             "bash '%s' exp-fake --config '%s' --results '%s' --dry-run --model /x/mA --model "
             "mB 'values=p q r'",
             sweep, conf, res);
    rc = test_run(cmd, &out);
    CHECK_MSG(rc == 0 && strstr(out, "6 points") && strstr(out, "mA__r.h5") &&
                  strstr(out, "--model mB --value q"),
              "rc %d:\n%s", rc, out);
    free(out);

    /* Errors: unknown key, unknown option, no config, two points one file. */
    snprintf(cmd, sizeof cmd, "bash '%s' exp-fake --config '%s' --dry-run windw=8", sweep, conf);
    rc = test_run(cmd, &out);
    CHECK_MSG(rc == 2 && strstr(out, "unknown key 'windw'"), "rc %d:\n%s", rc, out);
    free(out);
    snprintf(cmd, sizeof cmd, "bash '%s' exp-fake --config '%s' --bogus", sweep, conf);
    rc = test_run(cmd, &out);
    CHECK_MSG(rc == 2 && strstr(out, "unknown option --bogus"), "rc %d:\n%s", rc, out);
    free(out);
    snprintf(cmd, sizeof cmd, "bash '%s' exp-nope --dry-run", sweep);
    rc = test_run(cmd, &out);
    CHECK_MSG(rc == 2 && strstr(out, "no config"), "rc %d:\n%s", rc, out);
    free(out);
    snprintf(cmd, sizeof cmd,
             "bash '%s' exp-fake --config '%s' --dry-run --model a/m --model b/m", sweep, conf);
    rc = test_run(cmd, &out);
    CHECK_MSG(rc == 2 && strstr(out, "two points write"), "rc %d:\n%s", rc, out);
    free(out);
    /* an option or a setting given twice, or a setting without a key: usage errors (the
     * last had won) */
    const struct {
        const char *args, *want;
    } twice[] = {
        {"--jobs 1 --jobs 2", "--jobs is given more than once"},
        {"--jobs=1 --jobs 2", "--jobs is given more than once"},
        {"--results a --results b", "--results is given more than once"},
        {"window=8 ' window = 9'", "setting 'window' is given more than once"},
        {"' =8'", "has no key"},
    };
    for (size_t i = 0; i < sizeof twice / sizeof twice[0]; i++) {
        snprintf(cmd, sizeof cmd, "bash '%s' exp-fake --config '%s' --dry-run %s", sweep, conf, twice[i].args);
        rc = test_run(cmd, &out);
        CHECK_MSG(rc == 2 && strstr(out, twice[i].want), "%s: rc %d:\n%s", twice[i].args, rc, out);
        free(out);
    }
    /* --results a file: a usage error said plainly (it had been a raw mkdir error, exit 1) */
    snprintf(cmd, sizeof cmd, "touch '%s/afile' && bash '%s' exp-fake --config '%s' --results '%s/afile'", dir,
             sweep, conf, dir);
    rc = test_run(cmd, &out);
    CHECK_MSG(rc == 2 && strstr(out, "afile is not a folder"), "rc %d:\n%s", rc, out);
    free(out);

    /* The shipped configs expand to models x values with the real programs. */
    unsetenv("TERNLAB_EXP_CMD");
    snprintf(cmd, sizeof cmd, "bash '%s' exp-group-size --dry-run --results '%s'", sweep, res);
    rc = test_run(cmd, &out);
    CHECK_MSG(rc == 0 && strstr(out, "12 points") &&
                  strstr(out, "build/exp_group_size --model data/bitnet-tiny --value 32 --out "),
              "rc %d:\n%s", rc, out);
    free(out);
}

/* A point still being written elsewhere (a Slurm task, or the orphan of a
 * SIGKILLed sweep: its lock held, its temporary there) is not run a second
 * time nor its temporary removed: that point fails with the reason, the
 * others finish; once it ends, the sweep completes it. */
TEST(sweep_point_held_elsewhere) {
    if (!deps_ok()) return;
    const char *dir = test_tmpdir();
    char conf[600], res[600], out_dir[700], cmd[6000], *out = NULL;
    fake_sweep_env(dir, "a b", conf, sizeof conf, res, sizeof res, out_dir, sizeof out_dir);
    snprintf(cmd, sizeof cmd,
             "mkdir -p '%s/.locks' && : > '%s/m1__a.h5.tmp.999999' && echo junk > '%s/m1__a.h5' && "
             "(flock '%s/.locks/m1__a.h5.lock' sleep 4 >/dev/null 2>&1 &) && sleep 0.5 && "
             "bash '%s' exp-fake --config '%s' --results '%s' --jobs 2 2>&1",
             out_dir, out_dir, out_dir, out_dir, test_path("scripts/sweep.sh"), conf, res);
    int rc = test_run(cmd, &out);
    /* (the junk m1__a.h5 is not removed either while its point's lock is held:
     * the writer may be about to rename its finished file there) */
    CHECK_MSG(rc != 0 && strstr(out, "m1__a.h5 is being written by another process") &&
                  strstr(out, "left 1 temporary") && strstr(out, "another process is writing it"),
              "rc %d:\n%s", rc, out);
    free(out);
    int h5 = 0, tmp = 0;
    count_files(out_dir, &h5, &tmp);
    CHECK_MSG(h5 == 4 && tmp == 1, "%d run files, %d temporaries (want 4 with the junk, 1: the live one kept)", h5,
              tmp);
    snprintf(cmd, sizeof cmd,
             "flock '%s/.locks/m1__a.h5.lock' true && bash '%s' exp-fake --config '%s' --results '%s' --jobs 2 2>&1",
             out_dir, test_path("scripts/sweep.sh"), conf, res);
    rc = test_run(cmd, &out);
    CHECK_MSG(rc == 0 && strstr(out, "removed 1 temporary"), "rc %d:\n%s", rc, out);
    free(out);
    count_files(out_dir, &h5, &tmp);
    CHECK_MSG(h5 == 4 && tmp == 0, "%d run files, %d temporaries after the point ended (want 4, 0)", h5, tmp);
}

/* A finished run another process holds open for writing (h5py's "r+", a
 * viewer annotating it: HDF5's flock lock) fails a reader's open as a damaged
 * file does, and the sweep had removed it and run the point again: now verify
 * exits 5, the file is left as it is (same inode) and its point fails saying
 * why; once closed, the next sweep finds every point complete. */
TEST(sweep_leaves_a_run_open_for_writing) {
    if (!deps_ok()) return;
    const char *dir = test_tmpdir();
    char conf[600], res[600], out_dir[700], cmd[6000], p[800], *out = NULL;
    fake_sweep_env(dir, "a b", conf, sizeof conf, res, sizeof res, out_dir, sizeof out_dir);
    snprintf(cmd, sizeof cmd, "bash '%s' exp-fake --config '%s' --results '%s' >/dev/null 2>&1",
             test_path("scripts/sweep.sh"), conf, res);
    REQUIRE(test_run(cmd, NULL) == 0);
    snprintf(p, sizeof p, "%s/hold.py", dir);
    FILE *f = fopen(p, "w");
    REQUIRE(f != NULL);
    fprintf(f, "import h5py, os, sys, time\n"
               "f = h5py.File(sys.argv[1], 'r+')\n"
               "open(sys.argv[2] + '/held', 'w').close()\n"
               "t = time.time()\n"
               "while not os.path.exists(sys.argv[2] + '/release') and time.time() - t < 60:\n"
               "    time.sleep(0.05)\n"
               "f.close()\n"
               "os.remove(sys.argv[2] + '/held')\n");
    REQUIRE(fclose(f) == 0);
    struct stat st0, st1;
    snprintf(p, sizeof p, "%s/m1__a.h5", out_dir);
    REQUIRE(stat(p, &st0) == 0);
    snprintf(cmd, sizeof cmd,
             "(/usr/bin/python3 '%s/hold.py' '%s' '%s' >/dev/null 2>&1 &); "
             "for i in $(seq 200); do [ -e '%s/held' ] && break; sleep 0.05; done; "
             "'%s' verify '%s' 2>&1; echo \"verify rc=$?\"; bash '%s' '%s'; echo \"verify_run rc=$?\"; "
             "bash '%s' exp-fake --config '%s' --results '%s' 2>&1; echo \"sweep rc=$?\"; "
             "TERNLAB_VERIFY_CMD='%s verify' bash '%s' exp-fake --config '%s' --results '%s' 2>&1; "
             "echo \"sweep2 rc=$?\"; "
             "touch '%s/release'; for i in $(seq 200); do [ -e '%s/held' ] || break; sleep 0.05; done",
             dir, p, dir, dir, bin_path("ternlab"), p, test_path("scripts/verify_run.sh"), p,
             test_path("scripts/sweep.sh"), conf, res, bin_path("ternlab"), test_path("scripts/sweep.sh"), conf, res,
             dir, dir);
    int rc = test_run(cmd, &out);
    /* (twice: with ternlab verify, and through verify_run.sh under TERNLAB_VERIFY_CMD) */
    CHECK_MSG(rc == 0 && out && strstr(out, "verify rc=5") && strstr(out, "verify_run rc=5") &&
                  strstr(out, "open for writing in another process (its HDF5 file lock is held): not checked") &&
                  strstr(out, "left ") && strstr(out, "its point fails until that process closes it") &&
                  strstr(out, "m1__a.h5 is open for writing in another process") && !strstr(out, "sweep rc=0") &&
                  strstr(out, "(open for writing in another process: its HDF5 file lock is held; not checked)") &&
                  !strstr(out, "sweep2 rc=0") && !strstr(out, "removed") && !strstr(out, "check that the login"),
              "rc %d:\n%s", rc, out ? out : "");
    free(out);
    CHECK_MSG(stat(p, &st1) == 0 && st1.st_ino == st0.st_ino, "the run held open was replaced");
    /* opened for writing between the point's command and its check: left too (it had been
     * removed as a file that does not verify) */
    char p2[800];
    snprintf(p2, sizeof p2, "%s/m9__z.h5", out_dir);
    snprintf(cmd, sizeof cmd,
             "rm -f '%s/release' && cd '%s' && bash scripts/sweep_point.sh '%s' -- bash -c \"/usr/bin/python3 tests/tools/fake_exp.py "
             "--model data/m9 --value z --out '%s' && (/usr/bin/python3 '%s/hold.py' '%s' '%s' >/dev/null 2>&1 &) && "
             "for i in \\$(seq 200); do [ -e '%s/held' ] && break; sleep 0.05; done\" 2>&1; echo \"point rc=$?\"; "
             "ls '%s'; touch '%s/release'; for i in $(seq 200); do [ -e '%s/held' ] || break; sleep 0.05; done",
             dir, test_path(""), p2, p2, dir, p2, dir, dir, p2, dir, dir);
    rc = test_run(cmd, &out);
    CHECK_MSG(rc == 0 && out && strstr(out, "point rc=75") && strstr(out, "m9__z.h5 is open for writing") &&
                  !strstr(out, "No such file"),
              "rc %d:\n%s", rc, out ? out : "");
    free(out);
    unlink(p2);
    snprintf(cmd, sizeof cmd, "bash '%s' exp-fake --config '%s' --results '%s' 2>&1",
             test_path("scripts/sweep.sh"), conf, res);
    rc = test_run(cmd, &out);
    CHECK_MSG(rc == 0 && out && strstr(out, "4 points, 4 already complete"), "rc %d:\n%s", rc, out ? out : "");
    free(out);
}

/* A second sweep on a results folder whose sweep lock is held is refused with
 * exit 2 and says why (its messages once went to /dev/null: the lock's exec
 * kept a 2>/dev/null for the rest of the script), and runs nothing. */
TEST(sweep_refuses_a_locked_folder_and_says_so) {
    if (!deps_ok()) return;
    const char *dir = test_tmpdir();
    char conf[600], res[600], out_dir[700], cmd[6000], *out = NULL;
    fake_sweep_env(dir, "a b", conf, sizeof conf, res, sizeof res, out_dir, sizeof out_dir);
    char lock[800];
    snprintf(cmd, sizeof cmd, "mkdir -p '%s'", out_dir);
    REQUIRE(test_run(cmd, NULL) == 0);
    snprintf(lock, sizeof lock, "%s/.lock", out_dir);
    const int fd = open(lock, O_WRONLY | O_CREAT | O_CLOEXEC, 0644); /* held here: as a running sweep holds it */
    REQUIRE(fd >= 0 && flock(fd, LOCK_EX) == 0);
    snprintf(cmd, sizeof cmd, "bash '%s' exp-fake --config '%s' --results '%s' --jobs 2 2>&1",
             test_path("scripts/sweep.sh"), conf, res);
    int rc = test_run(cmd, &out);
    close(fd);
    CHECK_MSG(rc == 2 && out && strstr(out, "another sweep is running on") && strstr(out, ".lock"), "rc %d:\n%s",
              rc, out ? out : "");
    free(out);
    int h5 = 0, tmp = 0;
    count_files(out_dir, &h5, &tmp);
    CHECK_MSG(h5 == 0 && tmp == 0, "%d run files, %d temporaries from a refused sweep (want 0, 0)", h5, tmp);
}

/* A finished file under a CPU point's name that ran on CUDA (as files were
 * named before CUDA runs had __cuda in their names) is not that point: the
 * dry run says so and moves nothing; the sweep moves it to its CUDA name —
 * into misplaced/ where that name is taken — and runs the CPU point, so every
 * run is kept and each point's file is of its device.  A file of another
 * value under a point's name (copied by hand) goes into misplaced/ too: it
 * had counted as the point. */
TEST(sweep_moves_a_file_of_another_device_or_point) {
    if (!deps_ok()) return;
    const char *dir = test_tmpdir();
    char conf[600], res[600], out_dir[700], cmd[4000], *out = NULL;
    fake_sweep_env(dir, "a b", conf, sizeof conf, res, sizeof res, out_dir, sizeof out_dir);
    /* m1__a.h5 and m1__b.h5 ran on cuda; m1__b__cuda.h5 exists too */
    snprintf(cmd, sizeof cmd,
             "mkdir -p '%s' && cd '%s' && for f in m1__a m1__b m1__b__cuda; do v=${f#m1__}; FAKE_DEVICE=cuda "
             "/usr/bin/python3 tests/tools/fake_exp.py --model data/m1 --value ${v%%__cuda} --out '%s'/$f.h5 || exit 1; done",
             out_dir, test_path(""), out_dir);
    REQUIRE(test_run(cmd, NULL) == 0);
    snprintf(cmd, sizeof cmd, "cd '%s' && /usr/bin/python3 tests/tools/fake_exp.py --model data/m2 --value b --out '%s'/m2__a.h5",
             test_path(""), out_dir);
    REQUIRE(test_run(cmd, NULL) == 0);
    char a[800], acuda[800], b[800];
    snprintf(a, sizeof a, "%s/m1__a.h5", out_dir);
    snprintf(acuda, sizeof acuda, "%s/m1__a__cuda.h5", out_dir);
    snprintf(b, sizeof b, "%s/m1__b.h5", out_dir);
    struct stat sa;
    REQUIRE(stat(a, &sa) == 0);
    const char *sweep = test_path("scripts/sweep.sh");
    snprintf(cmd, sizeof cmd, "bash '%s' exp-fake --config '%s' --results '%s' --dry-run 2>&1", sweep, conf, res);
    int rc = test_run(cmd, &out);
    CHECK_MSG(rc == 0 && strstr(out, "4 points (0 complete)") && strstr(out, "A cuda RUN: moved, run") &&
                  strstr(out, "ANOTHER POINT'S RUN: moved, run"),
              "dry run (rc %d):\n%s", rc, out);
    free(out);
    CHECK(access(acuda, F_OK) != 0);
    snprintf(cmd, sizeof cmd, "bash '%s' exp-fake --config '%s' --results '%s' --jobs 2 2>&1", sweep, conf, res);
    rc = test_run(cmd, &out);
    CHECK_MSG(rc == 0 && strstr(out, "m1__a__cuda.h5: a run on cuda, not cpu") &&
                  strstr(out, "/misplaced/m1__b.cuda.") && strstr(out, "factor_value is 'b', not 'a'") &&
                  strstr(out, "/misplaced/m2__a.point.") && strstr(out, "all 4 points complete"),
              "sweep (rc %d):\n%s", rc, out);
    free(out);
    /* the CUDA run kept under its own name (the same file), the CPU points run */
    struct stat now;
    CHECK(stat(acuda, &now) == 0 && now.st_ino == sa.st_ino);
    char dev[32];
    CHECK(h5log_root_attr_str(acuda, "device", dev, sizeof dev) == 0 && strcmp(dev, "cuda") == 0);
    CHECK(h5log_root_attr_str(a, "device", dev, sizeof dev) == 0 && strcmp(dev, "cpu") == 0);
    CHECK(h5log_root_attr_str(b, "device", dev, sizeof dev) == 0 && strcmp(dev, "cpu") == 0);
    snprintf(cmd, sizeof cmd, "ls '%s/misplaced' | wc -l", out_dir);
    CHECK(test_run(cmd, &out) == 0 && atoi(out) == 2);
    free(out);
    char a2[800], val[32];
    snprintf(a2, sizeof a2, "%s/m2__a.h5", out_dir);
    CHECK(h5log_root_attr_str(a2, "factor_value", val, sizeof val) == 0 && strcmp(val, "a") == 0);
    /* and a second sweep has nothing to do */
    snprintf(cmd, sizeof cmd, "bash '%s' exp-fake --config '%s' --results '%s' 2>&1", sweep, conf, res);
    rc = test_run(cmd, &out);
    CHECK_MSG(rc == 0 && strstr(out, "4 points, 4 already complete"), "second sweep (rc %d):\n%s", rc, out);
    free(out);
}

/* The read-and-draw scripts on a sweep's output: a figure, the tables (with
 * the number the run wrote, 1.5 -> "1.500") and the paper that includes them. */
TEST(sweep_results_to_figures_tables_paper) {
    if (!deps_ok()) return;
    const char *dir = test_tmpdir();
    char conf[600], res[600], cmd[8000], *out = NULL;
    write_conf(dir, "a b", conf, sizeof conf);
    snprintf(res, sizeof res, "%s/results", dir);
    setenv("TERNLAB_EXP_CMD", FAKE_CMD, 1);
    setenv("FAKE_SLEEP", "0", 1);
    unsetenv("FAKE_FAIL");
    snprintf(cmd, sizeof cmd, "bash '%s' exp-fake --config '%s' --results '%s' --jobs 2",
             test_path("scripts/sweep.sh"), conf, res);
    REQUIRE(test_run(cmd, NULL) == 0);
    snprintf(cmd, sizeof cmd,
             "cd '%s' && /usr/bin/python3 scripts/figures.py --results '%s' --out '%s/paper/figures'"
             " && /usr/bin/python3 scripts/tables.py --results '%s' --out '%s/paper/tables'"
             " && /usr/bin/python3 scripts/paper.py --results '%s' --paper '%s/paper'",
             test_path(""), res, dir, res, dir, res, dir);
    int rc = test_run(cmd, &out);
    CHECK_MSG(rc == 0, "scripts failed (%d):\n%s", rc, out);
    free(out);
    char p[800];
    struct stat st;
    snprintf(p, sizeof p, "%s/paper/figures/exp-fake.png", dir);
    CHECK_MSG(stat(p, &st) == 0 && st.st_size > 1000, "no figure %s", p);
    snprintf(p, sizeof p, "%s/paper/tables/exp-fake.tex", dir);
    CHECK(stat(p, &st) == 0);
    snprintf(cmd, sizeof cmd, "cat '%s/paper/tables/exp-fake.md'", dir);
    CHECK(test_run(cmd, &out) == 0 && strstr(out, "| m1 | a | 1.500 | 1.500 |"));
    free(out);
    snprintf(cmd, sizeof cmd, "cat '%s/paper/paper.md'", dir);
    CHECK(test_run(cmd, &out) == 0 && strstr(out, "## Setup") &&
          strstr(out, "| m2 | b | 1.500") && strstr(out, "figures/exp-fake.png") &&
          strstr(out, "`data/m1`") && strstr(out, "; CPU threads: 3"));
    free(out);

    /* A run file of another experiment among these (here a copy with its experiment
     * attribute changed), and a point gone: skipped and named on stderr, the table
     * without them.  An experiment of the paper with no runs here keeps the table
     * already in paper/ (not "no results yet"). */
    snprintf(cmd, sizeof cmd,
             "cd '%s' && mv '%s/exp-fake/m2__b.h5' '%s/gone.h5' && cp '%s/gone.h5' '%s/exp-fake/other.h5' && "
             "/usr/bin/python3 -c \"import h5py; f = h5py.File('%s/exp-fake/other.h5', 'r+'); "
             "f.attrs['experiment'] = 'exp-threshold'; f.close()\" && "
             "printf '| x |\\n| --- |\\n| kept |\\n' > '%s/paper/tables/exp-threshold.md' && "
             "mkdir -p '%s/configs' && cp '%s' '%s/configs/exp-fake.conf' && "
             "/usr/bin/python3 scripts/tables.py --results '%s' --out '%s/paper/tables' --configs '%s/configs' "
             "exp-fake 2>&1 && /usr/bin/python3 scripts/paper.py --results '%s' --paper '%s/paper' 2>&1 && "
             "cat '%s/paper/tables/exp-fake.md' '%s/paper/paper.md'",
             test_path(""), res, dir, dir, res, res, dir, dir, conf, dir, res, dir, dir, res, dir, dir, dir);
    rc = test_run(cmd, &out);
    CHECK_MSG(rc == 0 && strstr(out, "skipping") && strstr(out, "a run of 'exp-threshold'") &&
                  strstr(out, "m2 has no run for b") && !strstr(out, "| m2 | b |") &&
                  strstr(out, "*No run file for m2: b.*") &&
                  strstr(out, "| kept |") && strstr(out, "not regenerated"),
              "rc %d:\n%s", rc, out);
    free(out);

    /* bad input to the scripts is an error, and paper.md is not rewritten from
     * nothing (they had exited 0 having done nothing, and paper.py had replaced
     * the Setup section's provenance with "no run files yet") */
    snprintf(cmd, sizeof cmd, "cd '%s' && cp '%s/paper/paper.md' '%s/paper.before'", test_path(""), dir, dir);
    REQUIRE(test_run(cmd, NULL) == 0);
    const struct {
        const char *fmt; /* %1$s the tmp folder, %2$s the results folder */
        int rc;
        const char *want;
    } bad[] = {
        {"figures.py --results '%1$s/typo' --out '%1$s/paper/figures'%2$.0s", 2, "--results"},
        {"tables.py --results '%2$s' --out '%1$s/paper/tables' exp-thresold", 2, "unknown experiment 'exp-thresold'"},
        {"tables.py --results '%2$s/exp-fake' --out '%1$s/paper/tables'", 2, "holds run files itself"},
        {"paper.py --results '%1$s/typo' --paper '%1$s/paper'%2$.0s", 2, "no such folder"},
        {"paper.py --results '%1$s/empty' --paper '%1$s/paper'%2$.0s", 1, "left as it is"},
        {"tables.py --results '%2$s' --out '%1$s/paper.before/x'", 1, "Not a directory"},
    };
    snprintf(cmd, sizeof cmd, "mkdir -p '%s/empty'", dir);
    REQUIRE(test_run(cmd, NULL) == 0);
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char args[1600];
        snprintf(args, sizeof args, bad[i].fmt, dir, res);
        snprintf(cmd, sizeof cmd, "cd '%s' && /usr/bin/python3 scripts/%s 2>&1", test_path(""), args);
        rc = test_run(cmd, &out);
        CHECK_MSG(rc == bad[i].rc && out && strstr(out, bad[i].want), "%s: rc %d (want %d):\n%s", args, rc,
                  bad[i].rc, out ? out : "");
        free(out);
    }
    snprintf(cmd, sizeof cmd, "cmp -s '%s/paper/paper.md' '%s/paper.before'", dir, dir);
    CHECK_MSG(test_run(cmd, NULL) == 0, "paper.md was rewritten by a failed paper.py");

    /* one point in two files (a copy by hand): one row, the other named; runs
     * evaluated differently (a window changed by hand; another token file's contents
     * under the same path): said on stderr */
    snprintf(cmd, sizeof cmd,
             "cd '%s' && cp '%s/exp-fake/m1__a.h5' '%s/exp-fake/m1__a_copy.h5' && "
             "/usr/bin/python3 -c \"import h5py, numpy; f = h5py.File('%s/exp-fake/m2__a.h5', 'r+'); "
             "f.attrs['window'] = numpy.int64(32); f.attrs['tokens_sha256'] = 'f' * 64; f.close()\" && "
             "/usr/bin/python3 scripts/tables.py --results '%s' --out '%s/paper/tables' --configs '%s/configs' "
             "exp-fake 2>&1 && grep -c '^| m1 | a |' '%s/paper/tables/exp-fake.md'",
             test_path(""), res, res, res, res, dir, dir, dir);
    rc = test_run(cmd, &out);
    CHECK_MSG(rc == 0 && strstr(out, "m1__a.h5 is the same point as") && strstr(out, "m1__a_copy.h5") &&
                  strstr(out, "differ in window (16: ") && strstr(out, "32: m2__a.h5") && strstr(out, "\n1\n") &&
                  strstr(out, "differ in tokens_sha256 (000000000000: ") && strstr(out, "ffffffffffff: m2__a.h5"),
              "rc %d:\n%s", rc, out);
    free(out);

    /* a model of the sweep's plan (RESULTS/EXP/jobs) with no run file left at all: named
     * with its values, on stderr and under the table (it had been left out silently, the
     * caption counting the other model's runs as if they were all) */
    snprintf(cmd, sizeof cmd,
             "cd '%s' && mv '%s/exp-fake/m2__a.h5' '%s/gone_a.h5' && "
             "/usr/bin/python3 scripts/tables.py --results '%s' --out '%s/paper/tables' --configs '%s/configs' "
             "exp-fake 2>&1 && cat '%s/paper/tables/exp-fake.md'",
             test_path(""), res, dir, res, dir, dir, dir);
    rc = test_run(cmd, &out);
    CHECK_MSG(rc == 0 && strstr(out, "m2 has no run file at all") && strstr(out, "planned a, b") &&
                  strstr(out, "*No run file for m2: a, b.*") && !strstr(out, "| m2 |"),
              "rc %d:\n%s", rc, out);
    free(out);
}

/* TERM to the sweep script alone (kill PID, Slurm's scancel, a supervisor)
 * stops the sweep: GNU Parallel and the running point go too, no temporary
 * is left, the folder's lock is free when the script exits 143, and a
 * restart finishes the grid with every point once.  (Without the trap the
 * shell died alone and Parallel ran the rest of the grid headless, refusing
 * a restart until it ended.) */
TEST(sweep_term_to_the_script_stops_it) {
    if (!deps_ok()) return;
    const char *dir = test_tmpdir();
    SweepFiles sf;
    sweep_files(dir, &sf);
    const char *conf = sf.conf, *res = sf.res, *out_dir = sf.out_dir, *logp = sf.logp, *script = sf.script;
    char lock[800];
    snprintf(lock, sizeof lock, "%s/.lock", out_dir);
    unsetenv("FAKE_FAIL");
    setenv("FAKE_SLEEP", "4.0", 1); /* the rest of the grid takes ~20 s: longer than the 12 s allowed */

    const int stop_s = 12; /* TERM, 2 s, TERM, 1 s, KILL: the points' stop takes 3.2 s at most, more when loaded */
    const pid_t pid = sweep_running(script, conf, res, logp, out_dir, 1);
    REQUIRE(pid > 0);
    int h5 = 0, tmp = 0;
    double t0;
    usleep(400 * 1000); /* into the second point's sleep: its temporary exists */
    count_files(out_dir, &h5, &tmp);
    const int h5_at_kill = h5;
    kill(pid, SIGTERM); /* the script only, not its process group */

    /* the script ends, non-zero, and with it Parallel (same process group) */
    int st = 0, reaped = 0;
    t0 = now_s();
    while (now_s() - t0 < stop_s && !reaped) {
        if (waitpid(pid, &st, WNOHANG) == pid) reaped = 1;
        else usleep(50 * 1000);
    }
    CHECK_MSG(reaped, "the sweep script did not exit within %d s of SIGTERM", stop_s);
    if (!reaped) {
        kill(-pid, SIGKILL);
        waitpid(pid, &st, 0);
    }
    CHECK_MSG(WIFEXITED(st) && WEXITSTATUS(st) == 143, "status %s %d (want exit 143)",
              WIFEXITED(st) ? "exit" : "signal", WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st));
    while (kill(-pid, 0) == 0 && now_s() - t0 < stop_s) usleep(50 * 1000);
    const int group_alive = kill(-pid, 0) == 0;
    CHECK_MSG(!group_alive, "GNU Parallel (or tee) still runs %d s after SIGTERM to the sweep script", stop_s);
    /* nothing holds the folder's lock once the script has exited: it waits for the
     * points of Parallel's own process groups, which inherit the lock, to be gone */
    char cmd[2400], *out = NULL;
    snprintf(cmd, sizeof cmd, "flock -n '%s' true", lock);
    const int lock_free = test_run(cmd, NULL) == 0;
    CHECK_MSG(lock_free, "the sweep lock %s is still held after the stopped script exited (points still running)",
              lock);
    if (group_alive || !lock_free) { /* (the old behaviour: stop it, then wait out the running point) */
        kill(-pid, SIGKILL);
        snprintf(cmd, sizeof cmd, "flock '%s' true", lock);
        test_run(cmd, NULL);
    }
    count_files(out_dir, &h5, &tmp);
    CHECK_MSG(tmp == 0, "%d temporary file(s) left by the stopped sweep", tmp);
    CHECK_MSG(h5 <= h5_at_kill + 1 && h5 < 6, "%d points finished after the stop (%d at the kill)", h5, h5_at_kill);
    snprintf(cmd, sizeof cmd, "cat '%s'", logp);
    CHECK(test_run(cmd, &out) == 0 && strstr(out, "stopped by SIGTERM"));
    free(out);

    /* the restart is not refused and completes the grid, each point once */
    setenv("FAKE_SLEEP", "0.05", 1);
    snprintf(cmd, sizeof cmd, "bash '%s' exp-fake --config '%s' --results '%s' --jobs 1", script, conf, res);
    int rc = test_run(cmd, &out);
    CHECK_MSG(rc == 0 && strstr(out, "all 6 points complete"), "restart: rc %d:\n%s", rc, out);
    free(out);
    count_files(out_dir, &h5, &tmp);
    CHECK_MSG(h5 == 6 && tmp == 0, "%d run files, %d temporaries after the restart (want 6, 0)", h5, tmp);
    char jl[800];
    snprintf(jl, sizeof jl, "%s/joblog", out_dir);
    int okc[7];
    CHECK(read_joblog(jl, okc, 6) == 6);
    for (int s = 1; s <= 6; s++) CHECK_MSG(okc[s] == 1, "joblog: seq %d succeeded %d times", s, okc[s]);
}

/* An absolute path of a repository file (these commands run from elsewhere). */
static const char *repo_abs(const char *rel, char *buf) {
    if (!realpath(test_path(rel), buf)) snprintf(buf, PATH_MAX, "%s", test_path(rel));
    return buf;
}

/* Paths in overrides are from the caller's directory, as --model, --results
 * and --config are (a relative tokens= had been looked up from the repository
 * root, where the points run); a config given with --config reaches every
 * point.  The real exp-threshold on one point reads the caller's token file. */
TEST(sweep_override_paths_from_the_callers_directory) {
    const char *dir = test_tmpdir();
    char conf[600], cmd[16384], *out = NULL, want[1400], sweep[PATH_MAX], p[PATH_MAX];
    write_conf(dir, "a b", conf, sizeof conf);
    snprintf(cmd, sizeof cmd, "head -c 4096 '%s' > '%s/tk.i32' && mkdir -p '%s/mdir'", repo_abs("data/wikitext2-test.tokens.i32", p),
             dir, dir);
    REQUIRE(test_run(cmd, NULL) == 0);
    setenv("TERNLAB_EXP_CMD", "prog --model {model} --value {value} --out {out}", 1);
    repo_abs("scripts/sweep.sh", sweep);

    snprintf(cmd, sizeof cmd, "cd '%s' && bash '%s' exp-fake --config fake.conf --results res --dry-run "
             "tokens=tk.i32 'models=mdir'", dir, sweep);
    int rc = test_run(cmd, &out);
    CHECK_MSG(rc == 0, "rc %d:\n%s", rc, out);
    snprintf(want, sizeof want, "tokens=%s/tk.i32", dir);
    CHECK_MSG(out && strstr(out, want), "want '%s' in:\n%s", want, out);
    snprintf(want, sizeof want, "--model %s/mdir --value a", dir);
    CHECK_MSG(out && strstr(out, want), "want '%s' in:\n%s", want, out);
    free(out);
    /* --model . inside the model's folder: the folder by its own path, so its points are named
     * after it (they had been ".__a.h5", hidden from the tables, and their runs taken for
     * another point's) */
    snprintf(cmd, sizeof cmd, "mkdir -p '%s/cdp/mdir' && cd '%s/mdir' && CDPATH='%s/cdp' bash '%s' exp-fake "
             "--config ../fake.conf --results ../res --dry-run --model .", dir, dir, dir, sweep);
    rc = test_run(cmd, &out);
    snprintf(want, sizeof want, "--model %s/mdir --value a --out ", dir);
    CHECK_MSG(rc == 0 && strstr(out, want) && strstr(out, "/exp-fake/mdir__a.h5") && !strstr(out, ".__a"),
              "want '%s': rc %d:\n%s", want, rc, out);
    free(out);
    /* a value with backslashes reaches the settings as written (awk -v had read "\n" in
     * C:\new as a line break, a new key "ew") */
    snprintf(cmd, sizeof cmd, "cd '%s' && bash '%s' exp-fake --config fake.conf --results bs --prepare "
             "'window=C:\\new\\table' >/dev/null 2>&1; cat bs/exp-fake/config/*.conf", dir, sweep);
    rc = test_run(cmd, &out);
    CHECK_MSG(rc == 0 && strstr(out, "\nwindow = C:\\new\\table\n") && !strstr(out, "ew = "), "rc %d:\n%s", rc, out);
    free(out);
    /* a folder named from here with CDPATH set: this folder's, not CDPATH's */
    snprintf(cmd, sizeof cmd, "cd '%s' && CDPATH='%s/cdp' bash '%s' exp-fake --config fake.conf --results res --dry-run "
             "--model mdir", dir, dir, sweep);
    rc = test_run(cmd, &out);
    snprintf(want, sizeof want, "--model %s/mdir --value a --out ", dir);
    CHECK_MSG(rc == 0 && strstr(out, want) && !strstr(out, "/cdp/"), "want '%s': rc %d:\n%s", want, rc, out);
    free(out);
    /* a parallel first on PATH that is not GNU Parallel (moreutils'): refused up front (every
     * point had failed with its usage) */
    snprintf(cmd, sizeof cmd, "mkdir -p '%s/fakebin' && printf '#!/bin/sh\\necho \"usage: parallel [OPTIONS] "
             "command -- arguments\" >&2; exit 1\\n' > '%s/fakebin/parallel' && chmod +x '%s/fakebin/parallel' && "
             "cd '%s' && PATH='%s/fakebin':\"$PATH\" bash '%s' exp-fake --config fake.conf --results mp", dir, dir, dir,
             dir, dir, sweep);
    rc = test_run(cmd, &out);
    CHECK_MSG(rc == 2 && strstr(out, "is not GNU Parallel"), "rc %d:\n%s", rc, out);
    free(out);
    /* a folder where a point's run file goes: refused, named (it had been reported as a file
     * another process was writing, and the point failed on every run) */
    snprintf(cmd, sizeof cmd, "cd '%s' && mkdir -p fold/exp-fake/mdir__b.h5 && bash '%s' exp-fake --config fake.conf "
             "--results fold --dry-run --model mdir", dir, sweep);
    rc = test_run(cmd, &out);
    CHECK_MSG(rc == 2 && strstr(out, "mdir__b.h5 is a folder where point 2's run file goes"), "rc %d:\n%s", rc, out);
    free(out);
    /* models= with --model: refused (the override had been dropped without a word) */
    snprintf(cmd, sizeof cmd, "cd '%s' && bash '%s' exp-fake --config fake.conf --dry-run --model mdir 'models=mdir'",
             dir, sweep);
    rc = test_run(cmd, &out);
    CHECK_MSG(rc == 2 && strstr(out, "both name the models"), "rc %d:\n%s", rc, out);
    free(out);
    /* a token file that is not there from here: a usage error naming where it looked */
    snprintf(cmd, sizeof cmd, "cd '%s' && bash '%s' exp-fake --config fake.conf --dry-run tokens=nope.i32", dir, sweep);
    rc = test_run(cmd, &out);
    CHECK_MSG(rc == 2 && strstr(out, "no token file") && strstr(out, "nope.i32") && strstr(out, dir), "rc %d:\n%s",
              rc, out);
    free(out);
    /* inside the repository: a path from the root (the points run there, on every machine):
     * tokens=, models= (made absolute, a checkout under a folder with a blank had split each
     * model path in two in the blank-separated list) and --model (absolute, a machine of an
     * --sshloginfile sweep whose home path differs had not found it) */
    const struct {
        const char *args, *want[2];
    } inside[] = {{"tokens=wikitext2-test.tokens.i32", {" tokens=data/wikitext2-test.tokens.i32", NULL}},
                  {"models=llama-tiny", {"--model data/llama-tiny --value a", " models=data/llama-tiny"}},
                  {"--model llama-tiny", {"--model data/llama-tiny --value a", NULL}}};
    for (size_t i = 0; i < sizeof inside / sizeof inside[0]; i++) {
        snprintf(cmd, sizeof cmd, "cd '%s' && bash '%s' exp-fake --config '%s' --dry-run %s", repo_abs("data", p),
                 sweep, conf, inside[i].args);
        rc = test_run(cmd, &out);
        const char *w1 = inside[i].want[1];
        CHECK_MSG(rc == 0 && out && strstr(out, inside[i].want[0]) && (!w1 || strstr(out, w1)), "%s: rc %d:\n%s",
                  inside[i].args, rc, out ? out : "");
        free(out);
    }
    /* a model path with a blank in models=: refused */
    snprintf(cmd, sizeof cmd, "mkdir -p '%s/sp ace/mdir' && cd '%s/sp ace' && bash '%s' exp-fake --config ../fake.conf "
             "--dry-run models=mdir", dir, dir, sweep);
    rc = test_run(cmd, &out);
    CHECK_MSG(rc == 2 && strstr(out, "has a blank") && strstr(out, "give it with --model"), "rc %d:\n%s", rc, out);
    free(out);

    /* --config reaches the programs (they read configs/EXP.conf otherwise), through the
     * snapshot of its settings after the overrides in RESULTS/EXP/config/, which the
     * points read (the dry run names it; the run writes it) */
    unsetenv("TERNLAB_EXP_CMD");
    snprintf(cmd, sizeof cmd, "cp '%s' '%s/thr.conf' && echo 'window = 99' >> '%s/thr.conf' && sed -i '0,/^window/{/^window/d}' "
             "'%s/thr.conf' && cd '%s' && bash '%s' exp-threshold --config thr.conf --results res --dry-run max_windows=3",
             repo_abs("configs/exp-threshold.conf", p), dir, dir, dir, dir, sweep);
    rc = test_run(cmd, &out);
    snprintf(want, sizeof want, "--config %s/res/exp-threshold/config/", dir);
    CHECK_MSG(rc == 0 && strstr(out, "build/exp_threshold --model data/llama-tiny --value absmean") &&
                  strstr(out, want) && !strstr(out, "max_windows=3"), "rc %d:\n%s", rc, out);
    free(out);
    snprintf(cmd, sizeof cmd, "cd '%s' && bash '%s' exp-threshold --config thr.conf --results res --prepare max_windows=3 "
             ">/dev/null 2>&1; cat res/exp-threshold/config/*.conf", dir, sweep);
    rc = test_run(cmd, &out);
    CHECK_MSG(rc == 0 && strstr(out, "\nwindow = 99\n") && strstr(out, "\nmax_windows = 3\n") &&
                  strstr(out, "\nvalues = absmean twn std l2opt absmax\n") && strstr(out, "thr.conf after the overrides"),
              "rc %d:\n%s", rc, out);
    free(out);

    /* one real point, run from the caller's directory with its own token file */
    const char *bd = getenv("TERNLAB_BUILD");
    snprintf(cmd, sizeof cmd, "%s/exp_threshold --model {model} --value {value} --out {out}",
             bd && *bd ? bd : repo_abs("build", p));
    setenv("TERNLAB_EXP_CMD", cmd, 1);
    snprintf(cmd, sizeof cmd, "cd '%s' && bash '%s' exp-threshold --results res --model '%s' tokens=tk.i32 "
             "values=absmean window=32 max_windows=1 logit_rows=2", dir, sweep, repo_abs("data/llama-tiny", p));
    rc = test_run(cmd, &out);
    CHECK_MSG(rc == 0 && strstr(out, "all 1 points complete"), "rc %d:\n%s", rc, out);
    free(out);
    char h5[800];
    snprintf(h5, sizeof h5, "%s/res/exp-threshold/llama-tiny__absmean.h5", dir);
    CHECK_MSG(h5log_verify_schema(h5) == 0, "%s", err_msg());
    unsetenv("TERNLAB_EXP_CMD");
}

/* device=cuda on a config whose device is cpu: its points are
 * <model>__<value>__cuda.h5, neither skipped as complete because the CPU file
 * of the point exists (they had been, `sweep.sh --dry-run device=cuda` said
 * "complete, skipped") nor written over it; the tables then show both
 * devices' rows, told apart by a device column. */
TEST(sweep_device_in_run_file_name) {
    if (!deps_ok()) return;
    const char *dir = test_tmpdir();
    char conf[600], res[600], out_dir[700], cmd[8000], *out = NULL, *st0 = NULL, *st1 = NULL;
    snprintf(conf, sizeof conf, "%s/fake.conf", dir);
    FILE *f = fopen(conf, "w");
    REQUIRE(f);
    fprintf(f, "factor = value\nvalues = a b\nmodels = data/m1 data/m2\ntokens = none\nwindow = 16\n"
               "max_windows = 1\ndevice = cpu\n");
    fclose(f);
    fake_sweep_env(dir, NULL, NULL, 0, res, sizeof res, out_dir, sizeof out_dir);
    const char *sweep = test_path("scripts/sweep.sh");
    snprintf(cmd, sizeof cmd, "bash '%s' exp-fake --config '%s' --results '%s' --jobs 2 >/dev/null 2>&1 && "
             "stat -c '%%n %%Y %%i' '%s'/*.h5", sweep, conf, res, out_dir);
    REQUIRE(test_run(cmd, &st0) == 0);
    snprintf(cmd, sizeof cmd, "bash '%s' exp-fake --config '%s' --results '%s' --dry-run device=cuda 2>&1",
             sweep, conf, res);
    int rc = test_run(cmd, &out);
    CHECK_MSG(rc == 0 && strstr(out, "4 points (0 complete)") && !strstr(out, "complete, skipped") &&
                  strstr(out, "exp-fake/m2__b__cuda.h5 --device cuda --expect experiment=exp-fake "
                              "--expect factor_value=b --expect model/=m2 --tag "),
              "rc %d:\n%s", rc, out);
    free(out);
    /* the CUDA sweep (the stand-in records the device a CUDA run would) */
    snprintf(cmd, sizeof cmd,
             "FAKE_DEVICE=cuda bash '%s' exp-fake --config '%s' --results '%s' --jobs 2 device=cuda >/dev/null 2>&1 && "
             "bash '%s' exp-fake --config '%s' --results '%s' --dry-run device=cuda 2>&1",
             sweep, conf, res, sweep, conf, res);
    rc = test_run(cmd, &out);
    CHECK_MSG(rc == 0 && strstr(out, "4 points (4 complete)"), "rc %d:\n%s", rc, out);
    free(out);
    int h5 = 0, tmp = 0;
    count_files(out_dir, &h5, &tmp);
    CHECK_MSG(h5 == 8 && tmp == 0, "%d run files, %d temporaries (want 8, 0)", h5, tmp);
    snprintf(cmd, sizeof cmd, "stat -c '%%n %%Y %%i' '%s'/m?__?.h5", out_dir);
    REQUIRE(test_run(cmd, &st1) == 0);
    CHECK_MSG(strcmp(st0, st1) == 0, "the CPU files changed:\n%s\n%s", st0, st1);
    free(st0);
    free(st1);
    snprintf(cmd, sizeof cmd,
             "cd '%s' && /usr/bin/python3 scripts/tables.py --results '%s' --out '%s/tables' exp-fake >/dev/null && "
             "cat '%s/tables/exp-fake.md'", test_path(""), res, dir, dir);
    rc = test_run(cmd, &out);
    CHECK_MSG(rc == 0 && strstr(out, "| m1 | a | cpu | 1.500 |") && strstr(out, "| m1 | a | cuda | 1.500 |") &&
                  strstr(out, "| m2 | b | cuda | 1.500 |"),
              "rc %d:\n%s", rc, out);
    free(out);
}

/* The tables' escaping: LaTeX specials once each (a backslash had become
 * \textbackslash\{\}, ^ and ~ were left raw; < > | printed as other glyphs in
 * OT1) and '|' inside a Markdown cell. */
TEST(tables_escape_cells) {
    if (!deps_ok()) return;
    char cmd[2048], *out = NULL;
    snprintf(cmd, sizeof cmd,
             "cd '%s' && /usr/bin/python3 -c \"import sys; sys.path.insert(0, 'scripts'); import tables; "
             "print(tables.latex_escape(sys.argv[1])); print(tables.markdown(['m', 'v'], [['a|b', '1']]), end='')\" "
             "'a\\b_c^d~e{f}%%&#$<>|'", test_path(""));
    int rc = test_run(cmd, &out);
    CHECK_MSG(rc == 0 && out &&
                  strstr(out, "a\\textbackslash{}b\\_c\\textasciicircum{}d\\textasciitilde{}e\\{f\\}\\%\\&\\#\\$"
                         "\\textless{}\\textgreater{}\\textbar{}\n") &&
                  strstr(out, "| a\\|b | 1 |"),
              "rc %d: %s", rc, out ? out : "");
    free(out);
}

/* make exp-<name> draws its own figure and table only (it had redrawn every
 * experiment's from whatever run files RESULTS held, overwriting the committed
 * ones of the others); make figures / tables draw them all. */
TEST(make_experiment_draws_its_own_figure_and_table) {
    char cmd[1024], *out = NULL;
    snprintf(cmd, sizeof cmd, "make -s -n -C '%s' exp-group-size RESULTS=r 2>&1 | grep -E 'figures.py|tables.py'",
             test_path(""));
    int rc = test_run(cmd, &out);
    CHECK_MSG(rc == 0 && out && strstr(out, "scripts/figures.py --results 'r' --out paper/figures exp-group-size\n") &&
                  strstr(out, "scripts/tables.py --results 'r' --out paper/tables exp-group-size\n"),
              "rc %d: %s", rc, out ? out : "");
    free(out);
    /* make sweep with an experiment that is not one: said with the list (make's "No rule to
     * make target 'build/exp_bogus'" had been all) */
    snprintf(cmd, sizeof cmd, "make -s -C '%s' sweep EXP=exp-bogus 2>&1", test_path(""));
    rc = test_run(cmd, &out);
    CHECK_MSG(rc != 0 && out && strstr(out, "unknown experiment 'exp-bogus'") && strstr(out, "exp-kv-ternary"),
              "rc %d: %s", rc, out ? out : "");
    free(out);
}

/* sweep_point.sh given the point's device and expectations: a finished file
 * under the point's name that is another device's run (one the sweep could
 * not move, its lock held then) is moved into misplaced/ and the point runs
 * (it had been "complete, skipped", and the sweep ended with a CUDA run as
 * the CPU point); its own finished file is still skipped. */
TEST(sweep_point_moves_another_points_file) {
    if (!deps_ok()) return;
    const char *dir = test_tmpdir();
    char out_dir[700], f[800], cmd[6000], *out = NULL, dev[32];
    snprintf(out_dir, sizeof out_dir, "%s/exp-fake", dir);
    snprintf(f, sizeof f, "%s/m1__a.h5", out_dir);
    setenv("FAKE_SLEEP", "0", 1);
    unsetenv("FAKE_FAIL");
    snprintf(cmd, sizeof cmd, "mkdir -p '%s' && cd '%s' && FAKE_DEVICE=cuda /usr/bin/python3 tests/tools/fake_exp.py "
             "--model data/m1 --value a --out '%s'", out_dir, test_path(""), f);
    REQUIRE(test_run(cmd, NULL) == 0);
    for (int round = 0; round < 2; round++) {
        snprintf(cmd, sizeof cmd, "cd '%s' && bash scripts/sweep_point.sh '%s' --device cpu --expect experiment=exp-fake "
                 "--expect factor_value=a -- /usr/bin/python3 tests/tools/fake_exp.py --model data/m1 --value a --out '%s' 2>&1",
                 test_path(""), f, f);
        int rc = test_run(cmd, &out);
        const char *want = round ? "complete, skipped" : "/misplaced/m1__a.point.";
        CHECK_MSG(rc == 0 && out && strstr(out, want) && (round || strstr(out, "a run on cuda, not cpu")),
                  "round %d rc %d: %s", round, rc, out ? out : "");
        free(out);
        CHECK(h5log_root_attr_str(f, "device", dev, sizeof dev) == 0 && strcmp(dev, "cpu") == 0);
    }
    snprintf(cmd, sizeof cmd, "ls '%s/misplaced' | wc -l", out_dir);
    CHECK(test_run(cmd, &out) == 0 && atoi(out) == 1);
    free(out);
}

/* A finished file of other settings under a point's name is not that point's
 * (a sweep audit: a second sweep with window=32 over a folder of window=16
 * runs, an edited config, another checkpoint of the same folder name had each
 * ended "all points complete" with the old runs, which the tables then mixed
 * silently): each sweep's run file records the point's digest (sweep_point),
 * a file of another one goes into misplaced/ (kept) and the point runs; the
 * same settings again skip every point; a run file without the attribute (a
 * program run by hand) still counts as the point's. */
TEST(sweep_reruns_points_of_other_settings) {
    const char *dir = test_tmpdir();
    char conf[600], res[600], out_dir[700], cmd[3000], other[700], *out = NULL;
    fake_sweep_env(dir, "a b", conf, sizeof conf, res, sizeof res, out_dir, sizeof out_dir);
    snprintf(other, sizeof other, "--model %s/other/m1", dir);
    const char *sweep = test_path("scripts/sweep.sh");
    const char *base = "bash '%s' exp-fake --config '%s' --results '%s' %s 2>&1";
    snprintf(cmd, sizeof cmd, base, sweep, conf, res, "--model data/m1");
    REQUIRE(test_run(cmd, &out) == 0);
    free(out);
    struct {
        const char *args, *want;
        int moved;
    } steps[] = {
        {"--model data/m1 window=32", "all 2 points complete", 2},        /* a setting changed on the command line */
        {"--model data/m1 window=32", "2 points, 2 already complete", 0}, /* the same again: nothing runs */
        {"--model data/m1", "all 2 points complete", 2},                  /* back to the config's window */
        {"--model data/../data/m1", "2 points, 2 already complete", 0},   /* the same checkpoint */
        {other, "all 2 points complete", 2},                              /* another one, same folder name */
    };
    int moved_total = 0;
    for (size_t i = 0; i < sizeof steps / sizeof steps[0]; i++) {
        snprintf(cmd, sizeof cmd, base, sweep, conf, res, steps[i].args);
        const int rc = test_run(cmd, &out);
        moved_total += steps[i].moved;
        char cnt[1200], *n = NULL;
        snprintf(cnt, sizeof cnt, "ls '%s/misplaced' 2>/dev/null | grep -c '\\.point\\.'", out_dir);
        test_run(cnt, &n);
        CHECK_MSG(rc == 0 && strstr(out, steps[i].want) && n && atoi(n) == moved_total,
                  "step %zu (%s): rc %d, %s files in misplaced/, want %d:\n%s", i, steps[i].args, rc, n ? n : "?",
                  moved_total, out);
        free(n);
        free(out);
    }
    /* a file without sweep_point (written by the program alone) counts as the point's */
    unsetenv("TERNLAB_SWEEP_POINT");
    snprintf(cmd, sizeof cmd, "/usr/bin/python3 '%s' --model data/m1 --value a --out '%s/m1__a.h5'",
             test_path("tests/tools/fake_exp.py"), out_dir);
    REQUIRE(test_run(cmd, NULL) == 0);
    snprintf(cmd, sizeof cmd, base, sweep, conf, res, "--model data/m1 window=32");
    REQUIRE(test_run(cmd, &out) == 0);
    CHECK_MSG(strstr(out, "1 already complete"), "%s", out);
    free(out);
}

/* The caches' temporaries of this machine's processes that are gone (a
 * SIGKILLed point; TERM removes its own) are removed when a sweep starts;
 * a live process's and another machine's are left (a sweep audit: a 71 MB
 * reference-cache temporary had stayed for good). */
TEST(sweep_removes_dead_cache_temporaries) {
    const char *dir = test_tmpdir();
    char conf[600], res[600], out_dir[700], cmd[3000], *out = NULL;
    fake_sweep_env(dir, "a", conf, sizeof conf, res, sizeof res, out_dir, sizeof out_dir);
    /* a pid that has ended (a shell's child, waited for); pid 1 runs */
    REQUIRE(run_bash(dir, "mk.sh", NULL,
                     "h=$(hostname); h=${h:0:64}; h=${h//[^A-Za-z0-9._-]/_}; sh -c 'exit 0' & p=$!; wait $p\n"
                     "mkdir -p '%s/cache' && cd '%s/cache' && : > ref-x.h5.tmp.$h.$p && : > ref-y.h5.tmp.$h.1 && "
                     ": > ref-z.h5.tmp.elsewhere.$p && : > sha.tmp.$h.$p\n",
                     res, res) == 0);
    snprintf(cmd, sizeof cmd, "bash '%s' exp-fake --config '%s' --results '%s' --model data/m1 2>&1 && ls '%s/cache'",
             test_path("scripts/sweep.sh"), conf, res, res);
    const int rc = test_run(cmd, &out);
    CHECK_MSG(rc == 0 && strstr(out, "removed 2 temporary file(s)") && !strstr(out, "ref-x.h5.tmp") &&
                  !strstr(out, "\nsha.tmp") && strstr(out, "ref-y.h5.tmp") && strstr(out, "ref-z.h5.tmp.elsewhere"),
              "rc %d:\n%s", rc, out ? out : "");
    free(out);
}

/* The scripts on a folder of hand-made and swept runs: the figure's axis in the
 * config's order when each model has other points (it had taken the values in
 * the runs' order: m1's a c, then m2's b), the paper's provenance from what the
 * files record (it had said "Sweeps ran under GNU Parallel" of hand-made runs),
 * and a results folder holding only bench files is "no results", not "holds run
 * files itself" (make bench writes results/bench_cpu.h5). */
TEST(scripts_value_order_provenance_and_bench_files) {
    if (!deps_ok()) return;
    const char *dir = test_tmpdir();
    char conf[600], res[600], cmd[8000], *out = NULL;
    write_conf(dir, "a b c", conf, sizeof conf);
    snprintf(res, sizeof res, "%s/results", dir);
    unsetenv("TERNLAB_SWEEP_POINT");
    snprintf(cmd, sizeof cmd,
             "cd '%s' && mkdir -p '%s/exp-fake' '%s/configs' && cp '%s' '%s/configs/exp-fake.conf' && "
             "for p in m1:a m1:c m2:b; do /usr/bin/python3 tests/tools/fake_exp.py --model data/${p%%:*} "
             "--value ${p#*:} --out '%s/exp-fake/'${p%%:*}__${p#*:}.h5 || exit 1; done && "
             "/usr/bin/python3 -c \"import sys; sys.path.insert(0, 'scripts'); import ternlab_runs as tr; "
             "print('order', ' '.join(tr.values_in_order(tr.load('%s', 'exp-fake', '%s/configs'))))\" 2>/dev/null && "
             "/usr/bin/python3 scripts/paper.py --results '%s' --paper '%s/paper' --configs '%s/configs' >/dev/null 2>&1 && "
             "cat '%s/paper/paper.md'",
             test_path(""), res, dir, conf, dir, res, res, dir, res, dir, dir, dir);
    int rc = test_run(cmd, &out);
    CHECK_MSG(rc == 0 && strstr(out, "order a b c\n") && strstr(out, "made one by one") &&
                  !strstr(out, "Sweeps ran under") && !strstr(out, "[1] O. Tange"),
              "rc %d:\n%s", rc, out);
    free(out);
    /* the sweep adds the other three points: now 3 of the 6 runs by sweeps */
    setenv("TERNLAB_EXP_CMD", FAKE_CMD, 1);
    setenv("FAKE_SLEEP", "0", 1);
    unsetenv("FAKE_FAIL");
    snprintf(cmd, sizeof cmd,
             "bash '%s' exp-fake --config '%s' --results '%s' >/dev/null 2>&1 && cd '%s' && "
             "/usr/bin/python3 scripts/paper.py --results '%s' --paper '%s/paper' --configs '%s/configs' >/dev/null 2>&1 && "
             "cat '%s/paper/paper.md'",
             test_path("scripts/sweep.sh"), conf, res, test_path(""), res, dir, dir, dir);
    rc = test_run(cmd, &out);
    CHECK_MSG(rc == 0 && strstr(out, "Sweeps ran under scripts/sweep.sh (GNU Parallel [1]") &&
                  strstr(out, "3 of 6 runs made by sweeps") && strstr(out, "[1] O. Tange"),
              "rc %d:\n%s", rc, out);
    free(out);
    snprintf(cmd, sizeof cmd,
             "mkdir -p '%s/benchonly' && cp '%s/exp-fake/m1__a.h5' '%s/benchonly/bench_cpu.h5' && cd '%s' && "
             "/usr/bin/python3 scripts/tables.py --results '%s/benchonly' --out '%s/t' 2>&1",
             dir, res, dir, test_path(""), dir, dir);
    rc = test_run(cmd, &out);
    CHECK_MSG(rc == 0 && strstr(out, "no results under"), "rc %d:\n%s", rc, out);
    free(out);
}

/* A sweep's `values=` override is the grid the tables hold the runs to: the
 * config's other values had been named as missing for every model, and the
 * override's values outside the config had been put in string order (here
 * z y after a, not y z).  A planned point gone is still named, with the plan. */
TEST(tables_grid_is_the_sweeps_values_override) {
    if (!deps_ok()) return;
    const char *dir = test_tmpdir();
    char conf[600], res[600], out_dir[700], cmd[4000], *out = NULL;
    fake_sweep_env(dir, "a b c", conf, sizeof conf, res, sizeof res, out_dir, sizeof out_dir);
    snprintf(cmd, sizeof cmd,
             "bash '%s' exp-fake --config '%s' --results '%s' 'values=z y a' >/dev/null 2>&1 && cd '%s' && "
             "mkdir -p '%s/configs' && cp '%s' '%s/configs/exp-fake.conf' && "
             "/usr/bin/python3 scripts/tables.py --results '%s' --out '%s/t' --configs '%s/configs' exp-fake 2>&1 && "
             "grep '^| m1 |' '%s/t/exp-fake.md' | cut -d '|' -f 3 | tr -d ' \n'",
             test_path("scripts/sweep.sh"), conf, res, test_path(""), dir, conf, dir, res, dir, dir, dir);
    int rc = test_run(cmd, &out);
    CHECK_MSG(rc == 0 && out && !strstr(out, "has no run") && strstr(out, "azy"), "rc %d:\n%s", rc,
              out ? out : "");
    free(out);
    snprintf(cmd, sizeof cmd,
             "rm '%s/m2__y.h5' && cd '%s' && "
             "/usr/bin/python3 scripts/tables.py --results '%s' --out '%s/t' --configs '%s/configs' exp-fake 2>&1",
             out_dir, test_path(""), res, dir, dir);
    rc = test_run(cmd, &out);
    CHECK_MSG(rc == 0 && out && strstr(out, "m2 has no run for y (of the last sweep's plan") &&
                  !strstr(out, "m1 has no run"),
              "rc %d:\n%s", rc, out ? out : "");
    free(out);
}

/* The points read the settings the sweep planned: a config edited after
 * `--prepare` (a Slurm array waiting in the queue), or while a sweep runs,
 * had reached the points still to run, whose files then recorded the old
 * settings' digest (sweep_point) over the new settings, and a later sweep of
 * the original config took them as complete.  They read the snapshot in
 * RESULTS/EXP/config/ instead.  And a file written by hand for another model
 * under a point's name (no sweep_point: not checked by digest) had counted as
 * that point's for good: the model folder's name is checked too. */
TEST(sweep_points_read_the_planned_settings) {
    if (!deps_ok()) return;
    const char *dir = test_tmpdir();
    char conf[600], res[600], out_dir[700], cmd[4000], *out = NULL;
    fake_sweep_env(dir, "a b", conf, sizeof conf, res, sizeof res, out_dir, sizeof out_dir);
    setenv("TERNLAB_EXP_CMD", FAKE_CMD " --config {config}", 1);
    const char *sweep = test_path("scripts/sweep.sh");
    snprintf(cmd, sizeof cmd, "bash '%s' exp-fake --config '%s' --results '%s' --prepare 2>&1", sweep, conf, res);
    int rc = test_run(cmd, &out);
    CHECK_MSG(rc == 0 && strstr(out, "prepared"), "prepare (rc %d):\n%s", rc, out);
    free(out);
    /* the config edited, then the prepared lines run (as the Slurm array would) */
    snprintf(cmd, sizeof cmd, "sed -i 's/^window = 16/window = 99/' '%s' && grep -q 'window = 99' '%s' && cd '%s' && "
             "while IFS= read -r l; do bash -c \"$l\" || exit 1; done < '%s/jobs'", conf, conf, test_path(""), out_dir);
    rc = test_run(cmd, &out);
    CHECK_MSG(rc == 0, "the jobs (rc %d):\n%s", rc, out);
    free(out);
    static const char *const points[] = {"m1__a.h5", "m1__b.h5", "m2__a.h5", "m2__b.h5"};
    for (int i = 0; i < 4; i++) {
        char p[900];
        snprintf(p, sizeof p, "%s/%s", out_dir, points[i]);
        const double w = h5_attr_f64(p, "/", "window");
        CHECK_MSG(w == 16, "%s: window %g, the planned 16", points[i], w);
    }
    snprintf(cmd, sizeof cmd, "grep -h '^window' '%s'/config/*.conf", out_dir);
    CHECK(test_run(cmd, &out) == 0 && strstr(out, "window = 16"));
    free(out);
    /* the edited config is other settings: nothing of it is complete; the original, all */
    snprintf(cmd, sizeof cmd, "bash '%s' exp-fake --config '%s' --results '%s' --dry-run 2>&1", sweep, conf, res);
    CHECK(test_run(cmd, &out) == 0 && strstr(out, "4 points (0 complete)"));
    free(out);
    snprintf(cmd, sizeof cmd, "sed -i 's/^window = 99/window = 16/' '%s' && bash '%s' exp-fake --config '%s' "
             "--results '%s' --dry-run 2>&1", conf, sweep, conf, res);
    CHECK(test_run(cmd, &out) == 0 && strstr(out, "4 points (4 complete)"));
    free(out);
    /* another model's run written by hand under m1__a's name */
    unsetenv("TERNLAB_SWEEP_POINT");
    snprintf(cmd, sizeof cmd, "cd '%s' && /usr/bin/python3 tests/tools/fake_exp.py --model data/m2 --value a --out "
             "'%s/m1__a.h5' && bash '%s' exp-fake --config '%s' --results '%s' 2>&1", test_path(""), out_dir, sweep,
             conf, res);
    rc = test_run(cmd, &out);
    CHECK_MSG(rc == 0 && strstr(out, "model's last component is 'm2', not 'm1'") && strstr(out, "all 4 points complete"),
              "sweep (rc %d):\n%s", rc, out);
    free(out);
    char a[900], model[64];
    snprintf(a, sizeof a, "%s/m1__a.h5", out_dir);
    CHECK(h5log_root_attr_str(a, "model", model, sizeof model) == 0 && strcmp(model, "data/m1") == 0);
    setenv("TERNLAB_EXP_CMD", FAKE_CMD, 1);
}

/* A run file damaged so that reading it crashes libhdf5 itself (a byte of
 * the global heap of its string attributes changed; tests/data/): ternlab
 * verify had died with SIGSEGV (a sweep's check with it), and make tables on a
 * folder holding it had ended in a segfault, no table written.  verify says
 * the file is damaged (exit 1); the tables skip it with a warning. */
TEST(verify_and_tables_survive_a_file_that_crashes_hdf5) {
    if (!deps_ok()) return;
    const char *dir = test_tmpdir();
    char conf[600], res[600], out_dir[700], cmd[6000], *out = NULL;
    fake_sweep_env(dir, "a b", conf, sizeof conf, res, sizeof res, out_dir, sizeof out_dir);
    const char *bad = test_path("tests/data/run-damaged-global-heap.h5");
    int rc;
#if TL_ASAN_BUILD
    /* (in an AddressSanitizer build the sanitizer stops the check at libhdf5's own
     * overlapping copy, before the crash, and files that as a report against the
     * run: verify is checked in the plain build) */
#else
    snprintf(cmd, sizeof cmd, "'%s' verify '%s' 2>&1", bin_path("ternlab"), bad);
    rc = test_run(cmd, &out);
    /* (Debian's libhdf5 crashes on this file: tests/data/README.md) */
    CHECK_MSG(rc == 1 && out && strstr(out, "damaged: reading it crashed the HDF5 library"), "verify (rc %d):\n%s",
              rc, out);
    free(out);
#endif
    snprintf(cmd, sizeof cmd,
             "mkdir -p '%s' && cd '%s' && /usr/bin/python3 tests/tools/fake_exp.py --model data/m1 --value a --out "
             "'%s/m1__a.h5' && cp '%s' '%s/m1__b.h5' && mkdir -p '%s/configs' && cp '%s' '%s/configs/exp-fake.conf' && "
             "/usr/bin/python3 scripts/tables.py --results '%s' --out '%s/tables' --configs '%s/configs' exp-fake 2>&1 && "
             "cat '%s/tables/exp-fake.md'",
             out_dir, test_path(""), out_dir, bad, out_dir, dir, conf, dir, res, dir, dir, dir);
    rc = test_run(cmd, &out);
    CHECK_MSG(rc == 0 && strstr(out, "m1__b.h5: damaged: reading it crashed the HDF5 library") &&
                  strstr(out, "| m1 | a | 1.500"), "tables (rc %d):\n%s", rc, out);
    free(out);
}

/* A sweep whose standard output closes (`sweep.sh ... | head -1`) goes on into
 * sweep.log and completes: it had died with SIGPIPE through its tee and GNU
 * Parallel after one point (exit 141), leaving the point being run alone. */
TEST(sweep_survives_a_closed_stdout) {
    if (!deps_ok()) return;
    const char *dir = test_tmpdir();
    char conf[600], res[600], out_dir[700], *out = NULL;
    fake_sweep_env(dir, "a b c", conf, sizeof conf, res, sizeof res, out_dir, sizeof out_dir);
    setenv("FAKE_SLEEP", "0.2", 1);
    const int rc =
        run_bash(dir, "closed.sh", &out,
                 "bash '%s' exp-fake --config '%s' --results '%s' 2>/dev/null | head -1 >/dev/null\n"
                 "for i in $(seq 50); do [ \"$(ls '%s'/*.h5 2>/dev/null | wc -l)\" = 6 ] && break; sleep 0.2; done\n"
                 "sleep 0.5; ls '%s'/*.h5 | wc -l; tail -1 '%s/sweep.log'\n",
                 test_path("scripts/sweep.sh"), conf, res, out_dir, out_dir, out_dir);
    CHECK_MSG(rc == 0 && out && strstr(out, "6\n") && strstr(out, "all 6 points complete"), "rc %d:\n%s", rc,
              out ? out : "");
    free(out);
    setenv("FAKE_SLEEP", "0", 1);
    /* its help to a full disk: exit 1 with a message (sed's 4 had come out); to a pipe, 0 */
    char cmd[1200];
    for (int k = 0; k < 2; k++) {
        snprintf(cmd, sizeof cmd, "{ bash '%s' %s--help > /dev/full; }", test_path("scripts/sweep.sh"),
                 k ? "exp-fake " : "");
        CHECK_MSG(test_run(cmd, &out) == 1 && out && strstr(out, "sweep: cannot write the help to standard output"),
                  "%s: %s", cmd, out ? out : "");
        free(out);
    }
    snprintf(cmd, sizeof cmd, "bash '%s' --help | cat > /dev/null", test_path("scripts/sweep.sh"));
    CHECK(test_run(cmd, NULL) == 0);
    /* to a reader that stops reading (`| head`): 0, quietly (sed's SIGPIPE had made it 1 or 141) */
    snprintf(cmd, sizeof cmd,
             "bash -c 'for i in 1 2 3 4 5; do bash \"%s\" --help 2>&1 | true; echo \"rc=${PIPESTATUS[0]}\"; done'",
             test_path("scripts/sweep.sh"));
    CHECK_MSG(test_run(cmd, &out) == 0 && out && !strstr(out, "rc=1") && !strstr(out, "rc=141") && strstr(out, "rc=0"),
              "%s", out ? out : "");
    free(out);
}

/* scripts/ternlab_runs.py's helpers, each against what a wrong one had done
 * (tests/tools/test_ternlab_runs.py): an inline "# comment" in a config's
 * values, a run file without complete = 1, a writer failing half way under
 * replace_atomic, a file crashing libhdf5 among good ones in crash_free (the
 * files after it kept). */
TEST(scripts_ternlab_runs_helpers) {
    if (!deps_ok()) return;
    char cmd[2048], *out = NULL;
    snprintf(cmd, sizeof cmd, "/usr/bin/python3 '%s' '%s' '%s'", test_path("tests/tools/test_ternlab_runs.py"),
             test_path("."), test_tmpdir());
    const int rc = test_run(cmd, &out);
    CHECK_MSG(rc == 0 && out && strstr(out, "0 failed"), "rc %d: %s", rc, out ? out : "");
    free(out);
}

/* d/fake_ssh, a stand-in for ssh that runs the command here (logging the host
 * into d/hosts.log; where d/HOST is a folder, in it, as that machine's home),
 * and d/logins naming it for two machines, nodeA and nodeB (GNU Parallel's
 * "/path/ssh host" login form).  0, or -1. */
static int write_fake_ssh(const char *d) {
    char p[800];
    snprintf(p, sizeof p, "%s/fake_ssh", d);
    FILE *f = fopen(p, "w");
    if (!f) return -1;
    fputs("#!/bin/bash\n"
          "while [ $# -gt 0 ]; do case $1 in -l|-p|-o|-i|-S) shift 2 ;; -*) shift ;; *) break ;; esac; done\n"
          "h=$1; shift\n"
          "d=$(dirname \"$0\")\n"
          "echo \"$h\" >> \"$d/hosts.log\"\n"
          "[ \"${1:-}\" = -- ] && shift\n"
          "export SHELL=/bin/bash\n" /* as sshd sets it (the login's shell); Parallel's remote */
          /* wrapper runs the command with $SHELL, and the caller's may be unset (CI) */
          "[ -d \"$d/$h\" ] && { cd \"$d/$h\" && export HOME=$PWD || exit 255; }\n"
          "exec bash -c \"$*\"\n",
          f);
    if (fclose(f) != 0 || chmod(p, 0755) != 0) return -1;
    snprintf(p, sizeof p, "%s/logins", d);
    f = fopen(p, "w");
    if (!f) return -1;
    fprintf(f, "1/%s/fake_ssh nodeA\n1/%s/fake_ssh nodeB\n", d, d);
    return fclose(f) != 0 ? -1 : 0;
}

/* A sweep over machines (--sshloginfile) with a stand-in for ssh that runs the
 * command here (each login line names it: GNU Parallel's "/path/ssh host"
 * form), so that Parallel's remote path — its perl wrapper, --workdir ., the
 * quoting of every jobs line through ssh — runs as on a cluster with a shared
 * folder: every point present once, both "machines" used, none run twice on
 * resume; a login without SHELL named as the likely cause of its points' missing
 * files; then --return (the files copied back by rsync through the same ssh,
 * the settings' snapshot sent first) where rsync is installed. */
TEST(sweep_over_ssh_logins) {
    if (!deps_ok()) return;
    const char *dir = test_tmpdir();
    char conf[600], res[600], out_dir[700], *out = NULL;
    fake_sweep_env(dir, "a b c", conf, sizeof conf, res, sizeof res, out_dir, sizeof out_dir);
    REQUIRE(write_fake_ssh(dir) == 0);
    const int rc =
        run_bash(dir, "ssh.sh", &out,
                 "set -u\n"
                 "d='%s'\n"
                 "bash '%s' exp-fake --config '%s' --results '%s' --jobs 2 --sshloginfile \"$d/logins\" > \"$d/s1.log\" 2>&1\n"
                 "echo \"first=$?\"\n"
                 "ls '%s'/*.h5 | wc -l | sed 's/^/files=/'\n"
                 "sort -u \"$d/hosts.log\" | tr '\\n' ' ' | sed 's/^/hosts=/'; echo\n"
                 "rm '%s/m1__b.h5'; : > \"$d/hosts.log\"\n"
                 "bash '%s' exp-fake --config '%s' --results '%s' --jobs 2 --sshloginfile \"$d/logins\" > \"$d/s2.log\" 2>&1\n"
                 "echo \"second=$?\"; ls '%s'/*.h5 | wc -l | sed 's/^/files2=/'\n"
                 "grep -c . \"$d/hosts.log\" | sed 's/^/ssh_jobs2=/'\n"
                 "ls -a '%s' | grep -c '\\.tmp' | sed 's/^/tmps=/'\n"
                 "tail -1 \"$d/s2.log\"\n"
                 "grep -q 'all 6 points complete' \"$d/s2.log\" || tail -5 \"$d/s1.log\" \"$d/s2.log\"\n",
                 dir, test_path("scripts/sweep.sh"), conf, res, out_dir, out_dir, test_path("scripts/sweep.sh"), conf,
                 res, out_dir, out_dir);
    CHECK_MSG(rc == 0 && out && strstr(out, "first=0\n") && strstr(out, "files=6\n") &&
                  strstr(out, "hosts=nodeA nodeB \n") && strstr(out, "second=0\n") && strstr(out, "files2=6\n") &&
                  strstr(out, "tmps=0\n") && strstr(out, "all 6 points complete"),
              "rc %d:\n%s", rc, out ? out : "");
    /* the resume ran the one missing point over ssh (and whatever Parallel's own
     * checks send: fewer than a run of six) */
    const char *j = out ? strstr(out, "ssh_jobs2=") : NULL;
    CHECK_MSG(j && atoi(j + 10) >= 1 && atoi(j + 10) < 6, "%s", out ? out : "");
    if (j) printf("    resume: %d ssh call(s) for the one missing point\n", atoi(j + 10));
    free(out);
    out = NULL;
    /* --return alone is refused (it had been ignored) */
    char cmd[2400];
    snprintf(cmd, sizeof cmd, "bash '%s' exp-fake --config '%s' --results '%s' --return 2>&1", test_path("scripts/sweep.sh"),
             conf, res);
    CHECK_MSG(test_run(cmd, &out) == 2 && out && strstr(out, "give --sshloginfile too"), "%s", out ? out : "");
    free(out);
    out = NULL;
    /* a login without SHELL: Parallel runs nothing there and reports success; the
     * sweep fails (no files) and says that the jobs exited 0 without them */
    const int rc1 =
        run_bash(dir, "noshell.sh", &out,
                 "set -u\n"
                 "d='%s'; sed 's/^export SHELL=.*/unset SHELL/' \"$d/fake_ssh\" > \"$d/ssh_noshell\"\n"
                 "chmod +x \"$d/ssh_noshell\"; sed 's/fake_ssh/ssh_noshell/' \"$d/logins\" > \"$d/logins_noshell\"\n"
                 "bash '%s' exp-fake --config '%s' --results '%s/noshell' --sshloginfile \"$d/logins_noshell\" 2>&1\n"
                 "echo \"rc=$?\"\n",
                 dir, test_path("scripts/sweep.sh"), conf, dir);
    CHECK_MSG(rc1 == 0 && out && strstr(out, "rc=1\n") && strstr(out, "6 of 6 point(s) have no finished file") &&
                  strstr(out, "m2__c.h5 (its job exited 0 without it: the command did not run there; over ssh, check "
                              "that the login sets SHELL)"),
              "rc %d:\n%s", rc1, out ? out : "");
    free(out);
    out = NULL;
    if (test_run("command -v rsync", NULL) != 0) {
        printf("    --return not run: no rsync here (GNU Parallel's --return and --basefile need it)\n");
        return;
    }
    /* --return: machines without the shared folder — each "machine" a folder of its own
     * (its home) holding the repository's parts as links and its own results/, the
     * sweep run from a home of its own, so that Parallel's --workdir . is the same
     * relative folder in each: the settings' snapshot goes there first (the points
     * read it: --config {config}), the points' files written there come back */
    char repo[PATH_MAX], rdir[700];
    REQUIRE(repo_root(repo));
    snprintf(rdir, sizeof rdir, "%s/ret", dir);
    REQUIRE(mkdir(rdir, 0777) == 0 && write_fake_ssh(rdir) == 0);
    const int rc2 = run_bash(
        dir, "ret.sh", &out,
        "set -u\n"
        "d='%s'; repo='%s'\n"
        "for n in home nodeA nodeB; do mkdir -p \"$d/$n/proj\"; for l in scripts tests build data; do\n"
        "  ln -s \"$repo/$l\" \"$d/$n/proj/$l\"; done; done\n"
        "cp '%s' \"$d/home/proj/fake.conf\"\n"
        "cd \"$d/home/proj\" && HOME=\"$d/home\" TERNLAB_EXP_CMD=\"$TERNLAB_EXP_CMD --config {config}\" "
        "bash scripts/sweep.sh exp-fake --config fake.conf --results results "
        "--jobs 2 --sshloginfile \"$d/logins\" --return > \"$d/s.log\" 2>&1\n"
        "echo \"ret=$?\"\n"
        "ls \"$d/home/proj/results/exp-fake\"/*.h5 | wc -l | sed 's/^/back=/'\n"
        "ls \"$d\"/node?/proj/results/exp-fake/*.h5 | wc -l | sed 's/^/node_files=/'\n"
        "tail -1 \"$d/s.log\"\n",
        rdir, repo, conf);
    CHECK_MSG(rc2 == 0 && out && strstr(out, "ret=0\n") && strstr(out, "back=6\n") && strstr(out, "node_files=6\n") &&
                  strstr(out, "all 6 points complete"),
              "--return: rc %d:\n%s", rc2, out ? out : "");
    free(out);
}

/* scripts/slurm/sweep.sbatch as a Slurm array runs it (SLURM_ARRAY_TASK_ID,
 * SLURM_SUBMIT_DIR set, no Slurm needed): the prepared jobs' tasks but the
 * fourth leave five points, which the sweep's dry run counts; the whole array
 * again runs the missing point and skips the others (their files untouched);
 * a task past the jobs file or outside an array is refused by name. */
TEST(sweep_slurm_array_script) {
    if (!deps_ok()) return;
    const char *dir = test_tmpdir();
    char conf[600], res[600], out_dir[700], root[PATH_MAX], *out = NULL;
    fake_sweep_env(dir, "a b c", conf, sizeof conf, res, sizeof res, out_dir, sizeof out_dir);
    REQUIRE(repo_root(root));
    const int rc = run_bash(
        dir, "slurm.sh", &out,
        "set -u\n"
        "cd /; sweep='%s/scripts/sweep.sh'; sb='%s/scripts/slurm/sweep.sbatch'; jobs='%s/jobs'\n"
        "bash \"$sweep\" exp-fake --config '%s' --results '%s' --prepare > /dev/null 2>&1 || echo prepare-failed\n"
        "wc -l < \"$jobs\" | sed 's/^/lines=/'\n"
        "for i in 1 2 3 5 6; do SLURM_ARRAY_TASK_ID=$i SLURM_SUBMIT_DIR='%s' bash \"$sb\" \"$jobs\" > /dev/null 2>&1 "
        "|| echo \"task $i failed\"; done\n"
        "bash \"$sweep\" exp-fake --config '%s' --results '%s' --dry-run 2>&1 | grep -o '[0-9]* points ([0-9]* complete)'\n"
        "stat -c %%Y:%%i '%s'/m1__a.h5 '%s'/m2__c.h5 > \"%s/before\"\n"
        "sleep 1.1\n"
        "for i in 1 2 3 4 5 6; do SLURM_ARRAY_TASK_ID=$i SLURM_SUBMIT_DIR='%s' bash \"$sb\" \"$jobs\" >> \"%s/again.log\" 2>&1 "
        "|| echo \"again $i failed\"; done\n"
        "stat -c %%Y:%%i '%s'/m1__a.h5 '%s'/m2__c.h5 | cmp -s - \"%s/before\" && echo untouched\n"
        "grep -c 'complete, skipped' \"%s/again.log\" | sed 's/^/skipped=/'\n"
        "ls '%s'/*.h5 | wc -l | sed 's/^/files=/'\n"
        "SLURM_ARRAY_TASK_ID=7 SLURM_SUBMIT_DIR='%s' bash \"$sb\" \"$jobs\" 2>&1; echo \"task7=$?\"\n"
        "(unset SLURM_ARRAY_TASK_ID; bash \"$sb\" \"$jobs\" 2>&1; echo \"noarray=$?\")\n",
        root, root, out_dir, conf, res, root, conf, res, out_dir, out_dir, dir, root, dir, out_dir, out_dir, dir, dir,
        out_dir, root);
    CHECK_MSG(rc == 0 && out && strstr(out, "lines=6\n") && !strstr(out, "failed") &&
                  strstr(out, "6 points (5 complete)") && strstr(out, "untouched\n") && strstr(out, "skipped=5\n") &&
                  strstr(out, "files=6\n") && strstr(out, "has no line 7") && strstr(out, "task7=2\n") &&
                  strstr(out, "not inside a Slurm array job") && !strstr(out, "noarray=0\n"),
              "rc %d:\n%s", rc, out ? out : "");
    free(out);
}
