/* OpenBLAS core selection.
 *
 * Debian's OpenBLAS is built with DYNAMIC_ARCH and picks its kernels from cpuid
 * when the library loads.  On some virtual machines that detection falls back
 * to "Prescott" (SSE3) on an AVX-512 CPU, which makes sgemm about 6x slower
 * (measured here: 33 vs 200 GFLOP/s on 2 cores).  The only way to choose the
 * core is the OPENBLAS_CORETYPE variable, read before main() runs, so
 * blas_setup() sets it from our own cpuid check and re-executes the program
 * once (also setting OMP_WAIT_POLICY=passive, and OMP_NUM_THREADS /
 * OPENBLAS_NUM_THREADS to a cgroup CPU quota below the CPUs the process may
 * run on, see blas_setup).  Variables the
 * user set are always respected; TERNLAB_BLAS_AUTO=0
 * turns this off. */
#ifndef TL_BLAS_SETUP_H
#define TL_BLAS_SETUP_H

#include <stddef.h>

void blas_setup(int argc, char **argv);
/* The process's cgroup CPU quota in whole CPUs, rounded up (1000000 for a
 * quota of a million CPUs or more); 0 when none (see blas_setup.c).  `what` gets the file and its numbers. */
int cgroup_cpu_limit(char *what, size_t n);
/* "SkylakeX (set by ternlab: library detected Prescott)" etc., for load reports. */
const char *blas_core_report(void);
/* OpenMP's thread count, and whether ternlab set it from a cgroup CPU quota. */
const char *threads_report(void);
/* "N of M CPUs (FILE: Q CPUs)" where ternlab set OMP_NUM_THREADS and/or
 * OPENBLAS_NUM_THREADS (each still N) from a cgroup CPU quota, else NULL. */
const char *cpu_quota_report(void);
/* Which of them ternlab set: "OMP_NUM_THREADS and OPENBLAS_NUM_THREADS", or one. */
const char *cpu_quota_vars(void);
/* The CPU's model name (/proc/cpuinfo), "unknown" where it cannot be read:
 * run files record it next to the BLAS core, whose kernels round dense
 * results differently from one CPU to another. */
const char *cpu_model_report(void);

#endif
