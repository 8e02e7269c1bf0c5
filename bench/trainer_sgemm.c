/*
 * trainer_sgemm.c — the machine's sgemm rate, the yardstick for the
 * trainer benchmark's "fraction of peak" (bench/trainer/run.sh).
 *
 *   trainer_sgemm [THREADS [N]]    prints "sgemm N^3 THREADS threads KERNEL: X GFLOP/s"
 *
 * Uses the same kernel choice as hyperfarm-train (tr_blas_setup: re-exec
 * with OPENBLAS_CORETYPE when OpenBLAS picked a weak kernel).
 */
#include "trainer/blas.h"

#include "hf_log.h"
#include "hf_time.h"

#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv)
{
    hf_log_init("trainer_sgemm");
    tr_blas_setup(argv);
    int threads = argc > 1 ? atoi(argv[1]) : 2, n = argc > 2 ? atoi(argv[2]) : 2048;
    if (threads < 1 || n < 16 || n > 8192) {
        fprintf(stderr, "usage: trainer_sgemm [THREADS [N]]\n");
        return 2;
    }
    tr_blas_threads(threads);
    size_t nn = (size_t)n * n;
    float *a = malloc(nn * 4), *b = malloc(nn * 4), *c = malloc(nn * 4);
    if (!a || !b || !c) return 1;
    for (size_t i = 0; i < nn; i++) { a[i] = (float)(i % 7) * 1e-3f; b[i] = (float)(i % 5) * 1e-3f; }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1, a, n, b, n, 0, c, n);   /* warm-up */
    double best = 0;
    for (int rep = 0; rep < 5; rep++) {
        double t0 = hf_mono_s();
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1, a, n, b, n, 0, c, n);
        double gf = 2.0 * n * (double)nn / (hf_mono_s() - t0) / 1e9;
        if (gf > best) best = gf;
    }
    printf("sgemm %d^3 %d threads %s: %.1f GFLOP/s\n", n, threads, tr_blas_core(), best);
    free(a); free(b); free(c);
    return 0;
}
