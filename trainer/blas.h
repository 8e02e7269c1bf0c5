/*
 * blas.h — choosing and reporting the OpenBLAS kernel, and thread count.
 *
 * Debian's OpenBLAS 0.3.21 (DYNAMIC_ARCH) may pick a slow kernel on CPUs it
 * does not know (Prescott: ~6x slower sgemm). The kernel is chosen when the
 * library loads, from OPENBLAS_CORETYPE, so the only fix from inside a
 * running process is to set the variable and exec ourselves again.
 * tr_blas_setup does that once (guarded by HF_BLAS_REEXEC) when the CPU has
 * AVX-512 (wants SkylakeX) or AVX2 (wants Haswell or better) and the loaded
 * kernel is weaker; OPENBLAS_CORETYPE set by the user is respected.
 */
#ifndef TR_BLAS_H
#define TR_BLAS_H

/* Best core type name for this CPU per cpuid: "SkylakeX", "Haswell",
 * "Sandybridge" or NULL when nothing better than the default is known. */
const char *tr_blas_wanted_core(void);
/* The kernel OpenBLAS is running. */
const char *tr_blas_core(void);

/* Call first thing in main. May not return (re-exec with the right
 * OPENBLAS_CORETYPE). Logs the kernel in use. RET 0. */
int  tr_blas_setup(char **argv);

/* Set BLAS threads (0 = $OPENBLAS_NUM_THREADS if set, else online CPUs). */
void tr_blas_threads(int n);
int  tr_blas_get_threads(void);

#endif
