/*
 * test_trainer_dist.c — distributed training against the single-process
 * trainer, the oracle (STYLE.md 9).
 *
 * Each case trains the same MLP on the first 1800 Fashion-MNIST training
 * samples (global batch 60, 200 held out, 1 epoch = 30 steps, SGD with momentum) once in
 * one process (tr_train_main) and once as p real processes (fork, each a
 * rank calling tr_dist_main with HYPERFARM_MASTER set, rank 0 handed the
 * listening socket), then compares the final checkpoints' parameters.
 *
 * Stated tolerance: max |param difference| <= 2e-5 after 30 steps (the
 * parameters are O(0.05); the only difference allowed is the order of
 * float additions in the gradient sums). Async with one worker applies the
 * same updates as the single process (K = 0, plain momentum SGD), so it is
 * held to the same tolerance; async with 2 workers (K = 1, plain SGD) must
 * reach at least the single process's validation accuracy minus 0.05.
 * Skips (exit 77 semantics via cmocka skip) when the dataset is missing.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "hf_err.h"
#include "hf_log.h"
#include "trainer/ckpt.h"
#include "trainer/dist/dist.h"
#include "trainer/model.h"
#include "trainer/options.h"
#include "trainer/train.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <math.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define DATA "/usr/share/datasets/fashion-mnist"
#define TOL 2e-5

static char tmpdir[256];

static void base_options(tr_options *o, const char *ckdir)
{
    tr_options_defaults(o);
    snprintf(o->model, sizeof o->model, "mlp");
    o->hidden[0] = 64;
    o->hidden[1] = 32;
    o->n_hidden = 2;
    o->epochs = 1;
    o->batch_size = 60;
    o->lr = 0.05;
    snprintf(o->optimizer, sizeof o->optimizer, "sgd");
    o->momentum = 0.9;
    snprintf(o->data, sizeof o->data, DATA);
    o->limit_train = 2000;
    o->val_size = 200;
    o->limit_test = 500;
    o->threads = 1;
    o->seed = 7;
    snprintf(o->checkpoint_dir, sizeof o->checkpoint_dir, "%s", ckdir);
    snprintf(o->log_level, sizeof o->log_level, "warn");
    o->timeout = 20;
}

static int listen_any(int *port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t l = sizeof a;
    if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof a) || listen(fd, 64) ||
        getsockname(fd, (struct sockaddr *)&a, &l))
        return -1;
    *port = ntohs(a.sin_port);
    return fd;
}

/* Silence a child's stdout (metric lines) into a file in tmpdir. */
static void child_stdout(const char *tag, int rank)
{
    char p[512];
    snprintf(p, sizeof p, "%s/%s-%d.out", tmpdir, tag, rank);
    int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) { dup2(fd, 1); close(fd); }
}

static int run_single(const tr_options *o)
{
    pid_t pid = fork();
    if (pid == 0) {
        child_stdout("single", 0);
        _exit(tr_train_main(o));
    }
    int st;
    waitpid(pid, &st, 0);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* world ranks of mode; returns the number of ranks that failed */
static int run_dist(const tr_options *base, const char *mode, int world, int ps)
{
    int port = 0, lfd = listen_any(&port);
    assert_true(lfd >= 0);
    char master[64], fdstr[16];
    snprintf(master, sizeof master, "127.0.0.1:%d", port);
    snprintf(fdstr, sizeof fdstr, "%d", lfd);
    pid_t pids[16];
    for (int r = 0; r < world; r++) {
        pids[r] = fork();
        if (pids[r] == 0) {
            alarm(120);
            child_stdout(mode, r);
            setenv("HYPERFARM_MASTER", master, 1);
            if (r == 0) setenv("HYPERFARM_MASTER_FD", fdstr, 1);
            else close(lfd);
            tr_options o = *base;
            snprintf(o.mode, sizeof o.mode, "%s", mode);
            o.rank = r;
            o.world = world;
            o.ps = ps;
            _exit(tr_dist_main(&o));
        }
    }
    close(lfd);
    int failed = 0;
    for (int r = 0; r < world; r++) {
        int st;
        waitpid(pids[r], &st, 0);
        if (!WIFEXITED(st) || WEXITSTATUS(st)) failed++;
    }
    return failed;
}

/* Newest checkpoint's params in dir (caller frees). */
static float *load_params_at(const tr_options *o, const char *dir, size_t *n, int64_t want_step)
{
    char err[256];
    tr_model *m = tr_model_from_options(o, 8, err, sizeof err);
    assert_non_null(m);
    size_t per = o->momentum > 0 ? 1 : 0;
    tr_ckpt c;
    char path[512];
    int rc = tr_ckpt_load_latest(dir, m->arch_hash, m->n_params, m->n_bufs, per * m->n_params, &c, path, sizeof path);
    assert_int_equal(rc, 0);
    float *p = malloc(c.n_params * sizeof(float));
    memcpy(p, c.params, c.n_params * sizeof(float));
    *n = c.n_params;
    assert_int_equal(c.step, want_step);   /* the whole epoch ran */
    tr_ckpt_clear(&c);
    tr_model_free(m);
    return p;
}

static float *load_params(const tr_options *o, const char *dir, size_t *n)
{
    return load_params_at(o, dir, n, 30);   /* 1800 / 60 */
}

static double max_diff(const float *a, const float *b, size_t n)
{
    double d = 0;
    for (size_t i = 0; i < n; i++) d = fmax(d, fabs((double)a[i] - (double)b[i]));
    return d;
}

static float *ref_params;
static size_t ref_n;

static int setup(void **state)
{
    (void)state;
    if (access(DATA "/train-images-idx3-ubyte.gz", R_OK)) return 0;
    snprintf(tmpdir, sizeof tmpdir, "/tmp/test_trainer_dist.XXXXXX");
    if (!mkdtemp(tmpdir)) return -1;
    char d[512];
    snprintf(d, sizeof d, "%s/single", tmpdir);
    tr_options o;
    base_options(&o, d);
    if (run_single(&o)) return -1;
    ref_params = load_params(&o, d, &ref_n);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    free(ref_params);
    if (tmpdir[0]) {
        char cmd[600];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
        if (system(cmd)) return -1;
    }
    return 0;
}

static void check_mode(const char *mode, int world, int ps, double tol)
{
    if (!ref_params) { print_message("dataset %s missing: skipped\n", DATA); skip(); }
    char d[512];
    snprintf(d, sizeof d, "%s/%s-%d-%d", tmpdir, mode, world, ps);
    tr_options o;
    base_options(&o, d);
    o.staleness = 0;
    assert_int_equal(run_dist(&o, mode, world, ps), 0);
    size_t n;
    float *p = load_params(&o, d, &n);
    assert_int_equal(n, ref_n);
    double diff = max_diff(p, ref_params, n);
    print_message("%s p=%d ps=%d: max |param - single| = %.3g (tolerance %.1g)\n", mode, world, ps, diff, tol);
    assert_true(diff <= tol);
    free(p);
}

static void test_sync_p2(void **s) { (void)s; check_mode("sync", 2, 0, TOL); }
static void test_sync_p3(void **s) { (void)s; check_mode("sync", 3, 0, TOL); }
static void test_sync_p4(void **s) { (void)s; check_mode("sync", 4, 0, TOL); }
static void test_pipeline_p2(void **s) { (void)s; check_mode("pipeline", 2, 0, TOL); }
static void test_pipeline_p3(void **s) { (void)s; check_mode("pipeline", 3, 0, TOL); }
static void test_pipeline_p4(void **s) { (void)s; check_mode("pipeline", 4, 0, TOL); }
/* one worker, two servers: the same updates as one process */
static void test_async_one_worker(void **s) { (void)s; check_mode("async", 3, 2, TOL); }

/* A short last batch of 2 rows: two of four ranks get no rows at all and
 * must still take part in the same buckets (1 KiB buckets: several per
 * step). */
static void test_sync_p4_short_last_batch(void **s)
{
    (void)s;
    if (!ref_params) { print_message("dataset missing: skipped\n"); skip(); }
    char d[512], ds[512];
    snprintf(d, sizeof d, "%s/sync-short", tmpdir);
    snprintf(ds, sizeof ds, "%s/single-short", tmpdir);
    tr_options o;
    base_options(&o, ds);
    o.limit_train = 2002;
    assert_int_equal(run_single(&o), 0);
    size_t n;
    float *ref = load_params_at(&o, ds, &n, 31);
    snprintf(o.checkpoint_dir, sizeof o.checkpoint_dir, "%s", d);
    setenv("HF_BUCKET_KIB", "1", 1);
    int failed = run_dist(&o, "sync", 4, 0);
    unsetenv("HF_BUCKET_KIB");
    assert_int_equal(failed, 0);
    float *p = load_params_at(&o, d, &n, 31);
    double diff = max_diff(p, ref, n);
    print_message("sync p=4, last batch of 2 rows, 1 KiB buckets: max |param - single| = %.3g\n", diff);
    assert_true(diff <= TOL);
    free(p);
    free(ref);
}

/* The value after key in the last line of tmpdir/file that has it; -1 if none. */
static double last_metric(const char *file, const char *key)
{
    char path[600], line[4096];
    snprintf(path, sizeof path, "%s/%s", tmpdir, file);
    FILE *f = fopen(path, "r");
    double v = -1;
    if (!f) return v;
    while (fgets(line, sizeof line, f)) {
        char *p = strstr(line, key);
        if (p) v = atof(p + strlen(key));
    }
    fclose(f);
    return v;
}

static void test_async_two_workers_train(void **s)
{
    (void)s;
    if (!ref_params) { print_message("dataset missing: skipped\n"); skip(); }
    /* plain SGD: stale momentum makes 30-step runs erratic; the momentum
     * and Adam cases are measured on full runs (docs/distributed.md) */
    char d[512], ds[512];
    snprintf(d, sizeof d, "%s/async-2w", tmpdir);
    snprintf(ds, sizeof ds, "%s/single-sgd", tmpdir);
    tr_options o;
    base_options(&o, ds);
    o.momentum = 0;
    o.lr = 0.1;
    assert_int_equal(run_single(&o), 0);
    size_t n;
    float *ref = load_params(&o, ds, &n);
    snprintf(o.checkpoint_dir, sizeof o.checkpoint_dir, "%s", d);
    o.staleness = 1;
    assert_int_equal(run_dist(&o, "async", 3, 1), 0);
    float *p = load_params(&o, d, &n);
    /* different updates than the single process, but as good a model */
    double diff = max_diff(p, ref, n);
    double acc_async = last_metric("async-0.out", "\"val_acc\":"), acc_single = last_metric("single-0.out", "\"val_acc\":");
    print_message("async 2 workers K=1: max |param - single| = %.3g, val_acc %.3f vs single %.3f\n", diff, acc_async,
                  acc_single);
    assert_true(diff > 0);
    /* not worse than one process (early on it is often better: the second
     * worker's half-step already sees the first one's) */
    assert_true(acc_single > 0.6 && acc_async >= acc_single - 0.05);
    free(ref);
    /* the chief reported staleness */
    assert_true(last_metric("async-0.out", "\"stale_grads\":") >= 0);
    free(p);
}

int main(void)
{
    hf_log_init("test_trainer_dist");
    hf_log_set_level(HF_LOG_WARN);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sync_p2),
        cmocka_unit_test(test_sync_p3),
        cmocka_unit_test(test_sync_p4),
        cmocka_unit_test(test_sync_p4_short_last_batch),
        cmocka_unit_test(test_pipeline_p2),
        cmocka_unit_test(test_pipeline_p3),
        cmocka_unit_test(test_pipeline_p4),
        cmocka_unit_test(test_async_one_worker),
        cmocka_unit_test(test_async_two_workers_train),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
