/*
 * fake_trial.c — a real trial program for tests: behaves like a small
 * training run without doing any training, so the agent and scheduler can
 * be tested quickly and deterministically.
 *
 * Each "epoch" it sleeps, prints a metric line
 *     HYPERFARM {"step": 100*e, "epoch": e, "val_acc": ..., "train_loss": ..., "checkpoint": ...}
 * and writes <HYPERFARM_CHECKPOINT_DIR>/fake_trial.json atomically:
 *     {"epoch": e, "w": W, "trial": T, "pad": "..."}
 * where W is a stand-in for the model's weights, W_e = W_(e-1) + lr + x/e
 * (W_0 = 0), and T the HYPERFARM_TRIAL_ID of the trial that wrote it. At
 * start it resumes after the epoch found there, with its W; so a trial
 * started from another trial's checkpoint (PBT) or on another server
 * continues from exactly those "weights", and a test can compare what the
 * trial reports with the checkpoint it was given. The objective is a
 * smooth function of hparams "x" (best at 0.3) and "lr", so searchers have
 * something to find: val_acc = 0.9 - (x-0.3)^2 - 0.3*exp(-lr*e).
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
 *   --report-weights    add "w" (W after the epoch) to every metric line, and
 *                       "start_epoch", "start_w", "start_trial" (what the
 *                       checkpoint found at start held; 0 when none) to the
 *                       first one of the run
 *   --ckpt-bytes N      pad the checkpoint file to about N bytes (content
 *                       differs per trial and epoch), for upload tests
 *   --report-seconds    add "epoch_seconds" (the epoch's measured wall-clock
 *                       seconds: the sleep and the checkpoint, as the
 *                       trainer reports it) to every metric line
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
#include <time.h>
#include <unistd.h>

typedef struct opts {
    long   epochs, sleep_ms, fail_at, fail_code, flood, long_line, stderr_lines, ckpt_bytes;
    int    fail_once, ignore_term, spawn_child, print_env, bad_metric, report_weights, report_seconds;
    double x, lr;
} opts;

/* What a checkpoint holds (see the header). */
typedef struct ckpt {
    long   epoch;
    double w;
    long   trial;
} ckpt;

static double hp_num(json_t *hp, const char *k, double def)
{
    json_t *v = hp ? json_object_get(hp, k) : NULL;
    if (json_is_number(v)) return json_number_value(v);
    if (json_is_boolean(v)) return json_is_true(v);
    return def;
}

/* Write c (padded to about pad_bytes) to <dir>/fake_trial.json through a
 * temp file, fsync and rename. RET 0, or -1 with errno set. */
static int write_ckpt(const char *dir, const ckpt *c, long pad_bytes, char *path, size_t plen)
{
    char tmp[4200];
    snprintf(path, plen, "%s/fake_trial.json", dir);
    /* A temp name of its own: a stale copy of the trial on a partitioned
     * agent may still write into the same directory (test_fault_partition).
     * mkstemp, not the pid: in the agent's sandbox every trial is pid 2
     * (docs/agent.md, "Sandbox"). */
    snprintf(tmp, sizeof tmp, "%s.tmp.XXXXXX", path);
    int fd = mkstemp(tmp);
    FILE *f = fd >= 0 && fchmod(fd, 0644) == 0 ? fdopen(fd, "w") : NULL;
    if (!f) {
        if (fd >= 0) { close(fd); unlink(tmp); }
        return -1;
    }
    fprintf(f, "{\"epoch\": %ld, \"w\": %.17g, \"trial\": %ld, \"pad\": \"", c->epoch, c->w, c->trial);
    /* deterministic filler that differs per trial and epoch: distinct objects */
    for (long i = 0; i < pad_bytes; i++) fputc("0123456789abcdef"[(i * 7 + c->epoch * 131 + c->trial * 17) % 16], f);
    fputs("\"}\n", f);
    int bad = fflush(f) || fsync(fileno(f));
    if (fclose(f) || bad) {
        unlink(tmp);
        return -1;
    }
    return rename(tmp, path);
}

/* The checkpoint in dir, or all zeros when there is none. */
static ckpt read_ckpt(const char *dir)
{
    char path[4200];
    ckpt c = {0, 0.0, 0};
    snprintf(path, sizeof path, "%s/fake_trial.json", dir);
    json_t *j = json_load_file(path, 0, NULL);
    if (j) {
        c.epoch = (long)json_integer_value(json_object_get(j, "epoch"));
        c.w = json_number_value(json_object_get(j, "w"));
        c.trial = (long)json_integer_value(json_object_get(j, "trial"));
    }
    json_decref(j);
    return c;
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

static double mono_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
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
    o.ckpt_bytes = (long)hp_num(hp, "ckpt_bytes", 0);
    o.ignore_term = (int)hp_num(hp, "ignore_sigterm", 0);
    o.spawn_child = (int)hp_num(hp, "spawn_child", 0);
    o.print_env = (int)hp_num(hp, "print_env", 0);
    o.bad_metric = (int)hp_num(hp, "bad_metric", 0);
    o.report_weights = (int)hp_num(hp, "report_weights", 0);
    o.report_seconds = (int)hp_num(hp, "report_seconds", 0);
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
        NUMOPT("--ckpt-bytes", ckpt_bytes)
#undef NUMOPT
        if (!strcmp(a, "--fail-once")) o.fail_once = 1;
        else if (!strcmp(a, "--ignore-sigterm")) o.ignore_term = 1;
        else if (!strcmp(a, "--spawn-child")) o.spawn_child = 1;
        else if (!strcmp(a, "--print-env")) o.print_env = 1;
        else if (!strcmp(a, "--bad-metric")) o.bad_metric = 1;
        else if (!strcmp(a, "--report-weights")) o.report_weights = 1;
        else if (!strcmp(a, "--report-seconds")) o.report_seconds = 1;
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
    const char *tid = getenv("HYPERFARM_TRIAL_ID");
    long trial = tid ? atol(tid) : 0;
    if (o.print_env) {
        static const char *const names[] = {"HYPERFARM_TRIAL_ID", "HYPERFARM_EXPERIMENT_ID", "HYPERFARM_HPARAMS",
            "HYPERFARM_RANK", "HYPERFARM_WORLD_SIZE", "HYPERFARM_LOCAL_RANK", "HYPERFARM_MASTER",
            "HYPERFARM_CHECKPOINT_DIR", "HYPERFARM_CONTROL_FILE", "HYPERFARM_MAX_EPOCHS", "HYPERFARM_BUDGET",
            "HYPERFARM_ATTEMPT", "HYPERFARM_SEED", "CUDA_VISIBLE_DEVICES", "PATH", NULL};
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

    const ckpt from = read_ckpt(ck);
    ckpt cur = from;
    long start = from.epoch;
    if (start > 0)
        printf("resuming after epoch %ld from %s (w %.17g, written by trial %ld)\n", start, ck, from.w, from.trial);
    for (long e = start + 1; e <= o.epochs; e++) {
        double t0 = mono_s();
        if (nap(o.sleep_ms) && !o.ignore_term) goto stopped;
        if (e == o.fail_at && (!o.fail_once || attempt <= 1)) {
            fprintf(stderr, "fake_trial: failing at epoch %ld with code %ld\n", e, o.fail_code);
            return (int)o.fail_code;
        }
        char path[4300];
        cur.epoch = e;
        cur.w += o.lr + o.x / (double)e;
        cur.trial = trial;
        if (write_ckpt(ck, &cur, o.ckpt_bytes, path, sizeof path)) {
            fprintf(stderr, "fake_trial: cannot write checkpoint in %s: %s\n", ck, strerror(errno));
            return 4;
        }
        double val = 0.9 - (o.x - 0.3) * (o.x - 0.3) - 0.3 * exp(-o.lr * (double)e);
        double loss = 1.0 - val;
        char extra[256] = "";
        if (o.report_weights && e == start + 1)
            snprintf(extra, sizeof extra, ", \"w\": %.17g, \"start_epoch\": %ld, \"start_w\": %.17g, \"start_trial\": %ld",
                     cur.w, from.epoch, from.w, from.trial);
        else if (o.report_weights)
            snprintf(extra, sizeof extra, ", \"w\": %.17g", cur.w);
        if (o.report_seconds)
            snprintf(extra + strlen(extra), sizeof extra - strlen(extra), ", \"epoch_seconds\": %.6f", mono_s() - t0);
        printf("HYPERFARM {\"step\": %ld, \"epoch\": %ld, \"val_acc\": %.6f, \"train_loss\": %.6f%s, "
               "\"checkpoint\": \"%s\"}\n", e * 100, e, val, loss, extra, path);
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
        ckpt c = read_ckpt(ck);
        if (c.epoch > 0) write_ckpt(ck, &c, o.ckpt_bytes, path, sizeof path);
        printf("stop requested: checkpoint at epoch %ld saved, exiting\n", c.epoch);
        fflush(stdout);
        return 143;
    }
}
