/*
 * c_trial.c — a hyperfarm trial written in C with common/hf_client.h, the
 * one-file client (copy it next to your program; libc only).
 *
 * It trains a logistic-regression classifier with mini-batch SGD on a
 * synthetic two-class problem (two Gaussian blobs in 8 dimensions, fixed
 * seed), so it needs no data files and finishes in milliseconds per epoch.
 *
 *   reads     HYPERFARM_HPARAMS         lr (default 0.1), l2 (0), batch_size (32),
 *                                       sleep_ms (0: pause after each epoch, for
 *                                       demos and stop/resume tests)
 *             HYPERFARM_MAX_EPOCHS      epoch budget (default 5)
 *             HYPERFARM_CHECKPOINT_DIR  checkpoint directory (survives restarts)
 *   reports   HYPERFARM {"step": S, "epoch": E, "train_loss": .., "val_loss": .., "val_acc": ..}
 *             and the checkpoint path, after each epoch
 *   resumes   from $HYPERFARM_CHECKPOINT_DIR/c_trial.ckpt: a small binary file
 *             (magic, epoch, step, weights) written atomically (temp file,
 *             fsync, rename), so a kill at any instant leaves the old or the
 *             new checkpoint, never a torn one
 *   stops     when hf_should_stop() (SIGTERM or the agent's control file):
 *             exits 0, keeping the last checkpoint
 *
 * Build:  `make` builds it as experiments/examples/c_trial, the command of
 *         experiments/c-trial.json (which ships this folder as its context);
 *         by hand: cc -O2 -Icommon -o c_trial experiments/examples/c_trial.c -lm
 *
 * hf_client.h uses POSIX calls (sigaction, clock_gettime): with a strict
 * -std=c11 they need a feature-test macro before the first #include.
 */
#define _POSIX_C_SOURCE 200809L
#include "hf_client.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <unistd.h>

#define DIM      8
#define NTRAIN   4000
#define NVAL     1000
#define MAGIC    0x48464354u   /* "HFCT" */

typedef struct {
    uint32_t magic;
    uint32_t dim;
    int64_t  epoch;     /* epochs completed */
    int64_t  step;
    double   w[DIM + 1];   /* weights, bias last */
} ckpt;

/* xorshift64*: the same data on every run and every restart. */
static uint64_t rng_next(uint64_t *s)
{
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    return *s * 2685821657736338717ull;
}

static double rng_normal(uint64_t *s)
{
    double u1 = ((double)(rng_next(s) >> 11) + 1.0) / 9007199254740993.0;
    double u2 = (double)(rng_next(s) >> 11) / 9007199254740992.0;
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

/* n points: label i % 2, mean +-0.4 on every axis, unit variance. */
static void make_data(uint64_t seed, int n, double (*x)[DIM], int *y)
{
    for (int i = 0; i < n; i++) {
        y[i] = i % 2;
        for (int d = 0; d < DIM; d++) x[i][d] = (y[i] ? 0.4 : -0.4) + rng_normal(&seed);
    }
}

static double predict(const double *w, const double *x)
{
    double z = w[DIM];
    for (int d = 0; d < DIM; d++) z += w[d] * x[d];
    return 1.0 / (1.0 + exp(-z));
}

static void evaluate(const double *w, int n, double (*x)[DIM], const int *y, double *loss, double *acc)
{
    double l = 0;
    int ok = 0;
    for (int i = 0; i < n; i++) {
        double p = predict(w, x[i]);
        l -= y[i] ? log(p + 1e-12) : log(1 - p + 1e-12);
        ok += (p >= 0.5) == (y[i] == 1);
    }
    *loss = l / n;
    *acc = (double)ok / n;
}

/* RET 0 and *c filled, 1 if there is no checkpoint, -1 if it is unreadable. */
static int ckpt_load(const char *path, ckpt *c)
{
    FILE *f = fopen(path, "rb");
    if (!f) return errno == ENOENT ? 1 : -1;
    size_t n = fread(c, 1, sizeof *c, f);
    fclose(f);
    return n == sizeof *c && c->magic == MAGIC && c->dim == DIM ? 0 : -1;
}

/* Write to path.tmp, fsync, rename over path. RET 0 or -1. */
static int ckpt_save(const char *path, const ckpt *c)
{
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) return -1;
    int ok = write(fd, c, sizeof *c) == (ssize_t)sizeof *c && fsync(fd) == 0;
    if (close(fd)) ok = 0;
    if (!ok || rename(tmp, path)) return -1;
    return 0;
}

int main(void)
{
    static double xtr[NTRAIN][DIM], xva[NVAL][DIM];
    static int ytr[NTRAIN], yva[NVAL];
    static const char *names[3] = {"train_loss", "val_loss", "val_acc"};
    char path[4096];
    ckpt c;

    hf_client_init();
    double lr = hf_hparam_double("lr", 0.1), l2 = hf_hparam_double("l2", 0);
    long batch = hf_hparam_int("batch_size", 32), sleep_ms = hf_hparam_int("sleep_ms", 0);
    long epochs = hf_max_epochs(5);
    if (batch < 1 || batch > NTRAIN || !(lr > 0)) {
        fprintf(stderr, "c_trial: bad hyperparameters %s\n", hf_hparams_json());
        return 2;
    }
    snprintf(path, sizeof path, "%s/c_trial.ckpt", hf_checkpoint_dir());
    make_data(1, NTRAIN, xtr, ytr);
    make_data(2, NVAL, xva, yva);

    int rc = ckpt_load(path, &c);
    if (rc < 0) {
        fprintf(stderr, "c_trial: %s: unreadable checkpoint\n", path);
        return 1;
    }
    if (rc == 1) {
        memset(&c, 0, sizeof c);
        c.magic = MAGIC;
        c.dim = DIM;
    } else {
        printf("resuming from %s: epoch %lld done, step %lld\n", path, (long long)c.epoch, (long long)c.step);
        fflush(stdout);
    }

    for (long e = c.epoch + 1; e <= epochs; e++) {
        /* a fixed shuffle per epoch, so a resumed run repeats an uninterrupted one */
        uint64_t s = 1000 + (uint64_t)e;
        static int order[NTRAIN];
        for (int i = 0; i < NTRAIN; i++) order[i] = i;
        for (int i = NTRAIN - 1; i > 0; i--) {
            int j = (int)(rng_next(&s) % (uint64_t)(i + 1)), t = order[i];
            order[i] = order[j];
            order[j] = t;
        }
        for (int i = 0; i < NTRAIN; i += (int)batch) {
            double g[DIM + 1] = {0};
            int m = 0;
            for (int k = i; k < NTRAIN && k < i + batch; k++, m++) {
                const double *x = xtr[order[k]];
                double err = predict(c.w, x) - ytr[order[k]];
                for (int d = 0; d < DIM; d++) g[d] += err * x[d];
                g[DIM] += err;
            }
            for (int d = 0; d <= DIM; d++) c.w[d] -= lr * (g[d] / m + (d < DIM ? l2 * c.w[d] : 0));
            c.step++;
        }
        double v[3], train_acc;
        evaluate(c.w, NTRAIN, xtr, ytr, &v[0], &train_acc);
        evaluate(c.w, NVAL, xva, yva, &v[1], &v[2]);
        c.epoch = e;
        if (ckpt_save(path, &c)) {
            fprintf(stderr, "c_trial: cannot write %s: %s\n", path, strerror(errno));
            return 1;
        }
        hf_report(c.step, (double)e, 3, names, v);
        hf_report_checkpoint(c.step, path);
        struct timespec tick = {0, 20 * 1000 * 1000};
        for (long t = 0; e < epochs && t < sleep_ms && !hf_should_stop(); t += 20) nanosleep(&tick, NULL);
        if (hf_should_stop()) {
            printf("stop requested: checkpoint at epoch %ld kept\n", e);
            return 0;
        }
    }
    return 0;
}
