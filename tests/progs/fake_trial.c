/*
 * fake_trial.c — a real trial program for tests: behaves like a small
 * training run without doing any training, so the agent and scheduler can
 * be tested quickly and deterministically.
 *
 * Each "epoch" it sleeps, prints a metric line
 *     HYPERFARM {"step": 100*e, "epoch": e, "val_acc": ..., "train_loss": ..., "checkpoint": ...}
 * and writes <HYPERFARM_CHECKPOINT_DIR>/fake_trial.json ({"epoch": e})
 * atomically; at start it resumes after the epoch found there. The
 * objective is a smooth function of hparams "x" (best at 0.3) and "lr", so
 * searchers have something to find: val_acc = 0.9 - (x-0.3)^2 - 0.3*exp(-lr*e).
 *
 * Options, as flags or as keys of HYPERFARM_HPARAMS (flag --a-b = key a_b;
 * a flag wins):
 *   --epochs N          epochs (default HYPERFARM_MAX_EPOCHS, else 3)
 *   --sleep-ms N        sleep per epoch (default 50)
 *   --fail-at-epoch K   exit with --fail-code C (default 3) at epoch K, before
 *                       its checkpoint, so a retry resumes at epoch K
 *   --fail-once         fail only when HYPERFARM_ATTEMPT is 1 (or unset): the
 *                       retry then completes
 *   --flood-bytes N     first print N bytes of log lines as fast as possible
 *   --long-line N       print one line of N bytes (no newline inside)
 *   --ignore-sigterm    ignore SIGTERM (the agent must SIGKILL)
 *   --spawn-child       leave a sleeping grandchild in the process group
 *   --print-env         print "env NAME=VALUE" for the trial variables and "cwd DIR"
 *   --bad-metric        also print a malformed metric line per epoch
 *   --stderr-lines N    print N lines on stderr at start
 * On SIGTERM or a control file saying should_stop, it writes its
 * checkpoint and exits with 143.
 */
#include "hf_client.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct opts {
    long   epochs, sleep_ms, fail_at, fail_code, flood, long_line, stderr_lines;
    int    fail_once, ignore_term, spawn_child, print_env, bad_metric;
    double x, lr;
} opts;

static double hp_num(json_t *hp, const char *k, double def)
{
    json_t *v = hp ? json_object_get(hp, k) : NULL;
    if (json_is_number(v)) return json_number_value(v);
    if (json_is_boolean(v)) return json_is_true(v);
    return def;
}

static int write_ckpt(const char *dir, long epoch, char *path, size_t plen)
{
    char tmp[4200];
    snprintf(path, plen, "%s/fake_trial.json", dir);
    /* A temp name of its own: a stale copy of the trial on a partitioned
     * agent may still write into the same directory (test_fault_partition). */
    snprintf(tmp, sizeof tmp, "%s.tmp.%d", path, (int)getpid());
    FILE *f = fopen(tmp, "w");
    if (!f) return -1;
    fprintf(f, "{\"epoch\": %ld}\n", epoch);
    fflush(f);
    fsync(fileno(f));
    fclose(f);
    return rename(tmp, path);
}

static long read_ckpt(const char *dir)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/fake_trial.json", dir);
    json_t *j = json_load_file(path, 0, NULL);
    long e = j ? (long)json_integer_value(json_object_get(j, "epoch")) : 0;
    json_decref(j);
    return e;
}

/* Sleep ms in slices, returning 1 as soon as a stop is requested. */
static int nap(long ms)
{
    for (long t = 0; t < ms; t += 10) {
        if (hf_should_stop()) return 1;
        usleep(10000);
    }
    return hf_should_stop();
}

int main(int argc, char **argv)
{
    json_t *hp = json_loads(hf_hparams_json(), 0, NULL);
    opts o;
    o.epochs = hf_max_epochs((long)hp_num(hp, "epochs", 3));
    o.sleep_ms = (long)hp_num(hp, "sleep_ms", 50);
    o.fail_at = (long)hp_num(hp, "fail_at_epoch", -1);
    o.fail_code = (long)hp_num(hp, "fail_code", 3);
    o.fail_once = (int)hp_num(hp, "fail_once", 0);
    o.flood = (long)hp_num(hp, "flood_bytes", 0);
    o.long_line = (long)hp_num(hp, "long_line", 0);
    o.stderr_lines = (long)hp_num(hp, "stderr_lines", 0);
    o.ignore_term = (int)hp_num(hp, "ignore_sigterm", 0);
    o.spawn_child = (int)hp_num(hp, "spawn_child", 0);
    o.print_env = (int)hp_num(hp, "print_env", 0);
    o.bad_metric = (int)hp_num(hp, "bad_metric", 0);
    o.x = hp_num(hp, "x", 0.5);
    o.lr = hp_num(hp, "lr", 0.5);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : "0";
#define NUMOPT(flag, field) if (!strcmp(a, flag)) { o.field = atol(v); i++; continue; }
        NUMOPT("--epochs", epochs)
        NUMOPT("--sleep-ms", sleep_ms)
        NUMOPT("--fail-at-epoch", fail_at)
        NUMOPT("--fail-code", fail_code)
        NUMOPT("--flood-bytes", flood)
        NUMOPT("--long-line", long_line)
        NUMOPT("--stderr-lines", stderr_lines)
#undef NUMOPT
        if (!strcmp(a, "--fail-once")) o.fail_once = 1;
        else if (!strcmp(a, "--ignore-sigterm")) o.ignore_term = 1;
        else if (!strcmp(a, "--spawn-child")) o.spawn_child = 1;
        else if (!strcmp(a, "--print-env")) o.print_env = 1;
        else if (!strcmp(a, "--bad-metric")) o.bad_metric = 1;
        else if (!strcmp(a, "--x")) { o.x = atof(v); i++; }
        else if (!strcmp(a, "--lr")) { o.lr = atof(v); i++; }
        else {
            fprintf(stderr, "fake_trial: unknown option %s\n", a);
            return 2;
        }
    }
    json_decref(hp);

    if (o.ignore_term) signal(SIGTERM, SIG_IGN);
    else hf_client_init();

    const char *ck = hf_checkpoint_dir();
    const char *att = getenv("HYPERFARM_ATTEMPT");
    long attempt = att ? atol(att) : 1;
    if (o.print_env) {
        static const char *const names[] = {"HYPERFARM_TRIAL_ID", "HYPERFARM_EXPERIMENT_ID", "HYPERFARM_HPARAMS",
            "HYPERFARM_RANK", "HYPERFARM_WORLD_SIZE", "HYPERFARM_LOCAL_RANK", "HYPERFARM_MASTER",
            "HYPERFARM_CHECKPOINT_DIR", "HYPERFARM_CONTROL_FILE", "HYPERFARM_MAX_EPOCHS", "HYPERFARM_BUDGET",
            "HYPERFARM_ATTEMPT", "CUDA_VISIBLE_DEVICES", "PATH", NULL};
        char cwd[4096];
        for (int i = 0; names[i]; i++) {
            const char *v = getenv(names[i]);
            if (v) printf("env %s=%s\n", names[i], v);
        }
        printf("cwd %s\n", getcwd(cwd, sizeof cwd) ? cwd : "?");
        fflush(stdout);
    }
    if (o.spawn_child && fork() == 0) {
        /* a grandchild that would outlive the trial if nobody killed the group */
        for (int i = 0; i < 600; i++) sleep(1);
        _exit(0);
    }
    for (long i = 0; i < o.stderr_lines; i++) fprintf(stderr, "stderr line %ld\n", i);
    if (o.flood > 0) {
        char line[81];
        memset(line, 'f', 79);
        line[79] = '\n';
        line[80] = '\0';
        for (long n = 0; n < o.flood; n += 80) fputs(line, stdout);
        fflush(stdout);
    }
    if (o.long_line > 0) {
        for (long n = 0; n < o.long_line; n++) fputc('L', stdout);
        fputc('\n', stdout);
        fflush(stdout);
    }

    long start = read_ckpt(ck);
    if (start > 0) printf("resuming after epoch %ld from %s\n", start, ck);
    for (long e = start + 1; e <= o.epochs; e++) {
        if (nap(o.sleep_ms) && !o.ignore_term) goto stopped;
        if (e == o.fail_at && (!o.fail_once || attempt <= 1)) {
            fprintf(stderr, "fake_trial: failing at epoch %ld with code %ld\n", e, o.fail_code);
            return (int)o.fail_code;
        }
        char path[4300];
        if (write_ckpt(ck, e, path, sizeof path)) {
            fprintf(stderr, "fake_trial: cannot write checkpoint in %s: %s\n", ck, strerror(errno));
            return 4;
        }
        double val = 0.9 - (o.x - 0.3) * (o.x - 0.3) - 0.3 * exp(-o.lr * (double)e);
        double loss = 1.0 - val;
        printf("HYPERFARM {\"step\": %ld, \"epoch\": %ld, \"val_acc\": %.6f, \"train_loss\": %.6f, "
               "\"checkpoint\": \"%s\"}\n", e * 100, e, val, loss, path);
        if (o.bad_metric) printf("HYPERFARM {\"val_acc\": oops}\n");
        printf("epoch %ld done\n", e);
        fflush(stdout);
    }
    if (o.ignore_term) {
        /* keep running until killed: the test wants SIGKILL to be needed */
        for (;;) pause();
    }
    return 0;
stopped:
    {
        char path[4300];
        long e = read_ckpt(ck);
        write_ckpt(ck, e, path, sizeof path);
        printf("stop requested: checkpoint at epoch %ld saved, exiting\n", e);
        fflush(stdout);
        return 143;
    }
}
