/*
 * blas.c — make OpenBLAS run its fast kernel on this CPU (blas.h).
 *
 * OpenBLAS (DYNAMIC_ARCH) reads OPENBLAS_CORETYPE in its load-time
 * constructor, before main. When cpuid says the CPU can do better than
 * the kernel OpenBLAS picked, we set the variable and exec
 * /proc/self/exe with the same argv; HF_BLAS_REEXEC stops a second try.
 *
 * OpenBLAS starts its worker threads itself (at load, and when the count
 * grows), unnamed: they would carry the process's name ("hyperfarm-train",
 * or "exe" after a re-exec through /proc/self/exe). tr_blas_threads names
 * them "hf-openblas" so /proc/PID/task/TID/comm says what they are
 * (docs/trainer.md, "Threads").
 */
#include "blas.h"

#include "hf_log.h"

#include <cblas.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/syscall.h>
#include <unistd.h>

/* Rank of a core type: higher is a wider/faster sgemm kernel. */
static int core_rank(const char *name)
{
    static const struct { const char *n; int r; } t[] = {
        {"SkylakeX", 4}, {"Cooperlake", 4}, {"SapphireRapids", 4},
        {"Haswell", 3}, {"Zen", 3},
        {"Sandybridge", 2},
    };
    if (!name) return 0;
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++)
        if (!strcasecmp(name, t[i].n)) return t[i].r;
    return 1;   /* Prescott, Core2, Nehalem, Barcelona, ...: SSE-only kernels */
}

const char *tr_blas_wanted_core(void)
{
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq"))
        return "SkylakeX";
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return "Haswell";
    if (__builtin_cpu_supports("avx")) return "Sandybridge";
    return NULL;
}

const char *tr_blas_core(void)
{
    const char *c = openblas_get_corename();
    return c ? c : "unknown";
}

int tr_blas_setup(char **argv)
{
    const char *cur = tr_blas_core(), *want = tr_blas_wanted_core();
    const char *env = getenv("OPENBLAS_CORETYPE");
    if (want && core_rank(cur) < core_rank(want)) {
        const char *keep = getenv("HYPERFARM_KEEP_OPENBLAS_CORETYPE");
        if (env && *env && keep && *keep == '1') {
            hf_warn("OPENBLAS_CORETYPE=%s gives kernel %s; this CPU could run %s (kept: "
                    "HYPERFARM_KEEP_OPENBLAS_CORETYPE=1)", env, cur, want);
        } else if (!getenv("HF_BLAS_REEXEC")) {
            hf_info("OpenBLAS runs kernel %s%s%s%s but the CPU supports %s: re-executing with OPENBLAS_CORETYPE=%s",
                    cur, env ? " (OPENBLAS_CORETYPE=" : "", env ? env : "", env ? ")" : "", want, want);
            setenv("OPENBLAS_CORETYPE", want, 1);
            setenv("HF_BLAS_REEXEC", "1", 1);
            execv("/proc/self/exe", argv);
            hf_warn("re-exec failed; continuing on the slow kernel %s", cur);
        } else {
            hf_warn("OpenBLAS still runs kernel %s after re-exec (wanted %s)", cur, want);
        }
    }
    /* children (--nproc workers) make their own check */
    unsetenv("HF_BLAS_REEXEC");
    hf_info("OpenBLAS kernel %s (cpu wants %s)", tr_blas_core(), want ? want : "default");
    return 0;
}

/* Name every thread of this process but the caller that has no hf- name
 * yet "hf-openblas": called right after OpenBLAS sized its pool, when its
 * workers are the only other threads. Best effort (a /proc that refuses
 * the write leaves the names as they were). */
static void name_workers(void)
{
    DIR *d = opendir("/proc/self/task");
    if (!d) return;
    long self = (long)syscall(SYS_gettid);
    struct dirent *e;
    while ((e = readdir(d))) {
        long tid = atol(e->d_name);
        if (tid <= 0 || tid == self) continue;
        char path[64], comm[32] = "";
        snprintf(path, sizeof path, "/proc/self/task/%ld/comm", tid);
        FILE *f = fopen(path, "r+");
        if (!f) continue;
        if (fgets(comm, sizeof comm, f) && strncmp(comm, "hf-", 3) != 0) {
            rewind(f);
            fputs("hf-openblas", f);
        }
        fclose(f);
    }
    closedir(d);
}

void tr_blas_threads(int n)
{
    if (n <= 0) {   /* OPENBLAS_NUM_THREADS (the test runner sets 1), else every online CPU */
        const char *e = getenv("OPENBLAS_NUM_THREADS");
        long c = e && atoi(e) > 0 ? atoi(e) : sysconf(_SC_NPROCESSORS_ONLN);
        n = c > 0 ? (int)c : 1;
    }
    openblas_set_num_threads(n);
    name_workers();
}

int tr_blas_get_threads(void)
{
    return openblas_get_num_threads();
}
