/*
 * bench/scaling.c — training throughput of hyperfarm-train's distributed
 * modes for 1, 2 and 4 workers, in one run.
 *
 *   bin/bench/scaling [--workers 1,2,4] [--limit-train N] [--epochs N]
 *
 * Each configuration runs the real program (../hyperfarm-train next to
 * this binary, or $HF_BIN/hyperfarm-train) on the same MLP 784-256-128-10,
 * global batch 128, one BLAS thread per process, and reports the
 * samples_per_s of the chief's last epoch line (all workers together) and
 * the speed-up over 1 worker. Async runs add one parameter server (a
 * process of its own). On a machine with C cores, more than C processes
 * share them: the figures say how each mode's overheads grow, not how it
 * would scale on one host per worker.
 */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static double run_one(const char *train, const char *mode, int workers, int limit, int epochs, double *acc)
{
    char cmd[PATH_MAX + 512];
    int n = snprintf(cmd, sizeof cmd,
                     "OPENBLAS_NUM_THREADS=1 '%s' --model mlp --hidden 256,128 --batch-size 128 --threads 1 "
                     "--epochs %d --limit-train %d --val-size 2000 --limit-test 2000 --seed 1 --log-level warn",
                     train, epochs, limit);
    if (workers > 1 || strcmp(mode, "single"))
        n += snprintf(cmd + n, sizeof cmd - (size_t)n, " --nproc %d --mode %s%s", workers,
                      strcmp(mode, "single") ? mode : "sync", strcmp(mode, "async") ? "" : " --ps 1");
    snprintf(cmd + n, sizeof cmd - (size_t)n, " 2>/dev/null");
    FILE *f = popen(cmd, "r");
    if (!f) return -1;
    char line[4096];
    double sps = -1;
    *acc = -1;
    while (fgets(line, sizeof line, f)) {
        char *p = strstr(line, "\"samples_per_s\":");
        char *q = strstr(line, "\"val_acc\":");
        if (p && q) {
            sps = atof(p + 16);
            *acc = atof(q + 10);
        }
    }
    if (pclose(f) != 0) return -1;
    return sps;
}

int main(int argc, char **argv)
{
    int workers[8] = {1, 2, 4}, nw = 3, limit = 20000, epochs = 1;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--workers")) {
            nw = 0;
            for (char *s = argv[i + 1]; *s && nw < 8; s++) {
                workers[nw++] = atoi(s);
                while (s[1] && s[1] != ',') s++;
                if (s[1] == ',') s++;
            }
        } else if (!strcmp(argv[i], "--limit-train")) limit = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--epochs")) epochs = atoi(argv[i + 1]);
        else { fprintf(stderr, "usage: scaling [--workers 1,2,4] [--limit-train N] [--epochs N]\n"); return 2; }
    }
    char train[PATH_MAX + 32];
    const char *bin = getenv("HF_BIN");
    if (bin) snprintf(train, sizeof train, "%s/hyperfarm-train", bin);
    else {
        char self[PATH_MAX];
        ssize_t k = readlink("/proc/self/exe", self, sizeof self - 1);
        if (k <= 0) return 1;
        self[k] = 0;
        char *sl = strrchr(self, '/');
        if (sl) *sl = 0;
        snprintf(train, sizeof train, "%s/../hyperfarm-train", self);
    }
    if (access(train, X_OK)) { fprintf(stderr, "scaling: %s not found (set HF_BIN)\n", train); return 1; }
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    printf("# samples/s of hyperfarm-train, MLP 784-256-128-10, global batch 128, %d training samples x %d epoch(s), "
           "%ld cores\n", limit - 2000, epochs, cores);
    const char *modes[] = {"sync", "async", "pipeline"};
    double base = run_one(train, "single", 1, limit, epochs, &(double){0});
    printf("%-8s workers=1 samples_per_s %9.0f speedup 1.00\n", "single", base);
    int bad = base <= 0;
    for (int mi = 0; mi < 3; mi++)
        for (int k = 0; k < nw; k++) {
            double acc;
            double s = run_one(train, modes[mi], workers[k], limit, epochs, &acc);
            if (s <= 0) { printf("%-8s workers=%d FAILED\n", modes[mi], workers[k]); bad = 1; continue; }
            printf("%-8s workers=%d samples_per_s %9.0f speedup %.2f val_acc %.4f\n", modes[mi], workers[k], s,
                   base > 0 ? s / base : 0, acc);
            fflush(stdout);
        }
    return bad;
}
