/*
 * dist.c — the launcher, the set-up every rank shares, and --mode sync.
 *
 * Launcher (torchrun-like): --nproc N without a rank in the environment.
 * It binds the rendezvous listener itself (127.0.0.1, a free port) and
 * hands the open socket to rank 0 (HYPERFARM_MASTER_FD), so no port can be
 * stolen between choosing and binding it; then fork/execs this program N
 * times (plus --ps servers in async mode) with HYPERFARM_RANK, _WORLD_SIZE,
 * _LOCAL_RANK and _MASTER set. It forwards SIGTERM/SIGINT to its children
 * and, as soon as one of them dies or fails, stops the others (SIGTERM,
 * then SIGKILL after 5 s) and exits non-zero, naming the rank: a broken
 * job never lingers. Its exit status is rank 0's when all ranks finish.
 *
 * Sync data parallel: every rank holds the whole model; rank r takes rows
 * [G r/p, G (r+1)/p) of each global batch of G rows (tr_loader), computes
 * gradients scaled by 1/G, and the gradients are summed across ranks, so
 * each rank applies exactly the single-process update (up to the order of
 * float additions). The sum runs in buckets while backward is still going:
 * the model calls on_layer_grad as each layer's gradients are final (last
 * layer first); contiguous layers are gathered into a bucket of about
 * HF_BUCKET_KIB (default 128 KiB) and handed to a communication thread that
 * allreduces it while the main thread computes the layers below. After the
 * last bucket, a 4-float control allreduce carries (stop requested, loss
 * sum, hits, rows), so every rank stops at the same step when any of them
 * got SIGTERM. BN running statistics (per-shard) are averaged before the
 * chief evaluates.
 */
#include "dist.h"
#include "dist_int.h"

#include "blas.h"
#include "hf_err.h"
#include "hf_log.h"
#include "hf_time.h"
#include "optim.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

/* ---- launcher ----------------------------------------------------------- */

static volatile sig_atomic_t launcher_sig;
static void launcher_on_signal(int sig) { launcher_sig = sig; }

/* argv of this process from /proc/self/cmdline. RET count or -1. */
static int self_argv(char *buf, size_t len, char **argv, int max)
{
    FILE *f = fopen("/proc/self/cmdline", "rb");
    if (!f) return -1;
    size_t n = fread(buf, 1, len - 1, f);
    fclose(f);
    buf[n] = 0;
    int argc = 0;
    for (size_t i = 0; i < n && argc < max - 1; i += strlen(buf + i) + 1) argv[argc++] = buf + i;
    argv[argc] = NULL;
    return argc;
}

static void describe_status(int st, char *out, size_t len)
{
    if (WIFSIGNALED(st)) snprintf(out, len, "was killed by signal %d (%s)", WTERMSIG(st), strsignal(WTERMSIG(st)));
    else snprintf(out, len, "exited with status %d", WEXITSTATUS(st));
}

static int launch(const tr_options *o)
{
    int async = !strcmp(o->mode, "async");
    int nps = async ? (o->ps > 0 ? o->ps : 1) : 0;
    int world = o->nproc + nps;
    static char cmdline[65536];
    char *argv[1024];
    if (self_argv(cmdline, sizeof cmdline, argv, 1024) < 1) {
        fprintf(stderr, "hyperfarm-train: cannot read /proc/self/cmdline\n");
        return TR_EXIT_ERROR;
    }
    int lfd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t al = sizeof a;
    if (lfd < 0 || bind(lfd, (struct sockaddr *)&a, sizeof a) || listen(lfd, 256) ||
        getsockname(lfd, (struct sockaddr *)&a, &al)) {
        fprintf(stderr, "hyperfarm-train: launcher cannot listen on 127.0.0.1: %s\n", strerror(errno));
        return TR_EXIT_ERROR;
    }
    char master[64], wstr[16], lfdstr[16];
    snprintf(master, sizeof master, "127.0.0.1:%d", ntohs(a.sin_port));
    snprintf(wstr, sizeof wstr, "%d", world);
    snprintf(lfdstr, sizeof lfdstr, "%d", lfd);
    hf_info("launching %d workers%s%.0d%s (mode %s), rendezvous at %s", o->nproc, nps ? " + " : "", nps,
            nps ? " parameter servers" : "", o->mode[0] ? o->mode : "sync", master);

    struct sigaction sa = {0};
    sa.sa_handler = launcher_on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);

    pid_t *pids = calloc((size_t)world, sizeof *pids);
    int *done = calloc((size_t)world, sizeof *done);
    int status = TR_EXIT_ERROR, rank0_status = -1;
    if (!pids || !done) goto end;
    fflush(stdout);
    fflush(stderr);
    int alive = 0, failed = 0;
    int64_t kill_at = 0;
    for (int r = 0; r < world; r++) {
        pid_t pid = fork();
        if (pid < 0) {
            fprintf(stderr, "hyperfarm-train: fork: %s\n", strerror(errno));
            world = r;
            failed = 1;
            for (int q = 0; q < r; q++) kill(pids[q], SIGTERM);
            kill_at = hf_mono_ms() + 5000;
            break;
        }
        if (pid == 0) {
            char rs[16];
            snprintf(rs, sizeof rs, "%d", r);
            setenv("HYPERFARM_RANK", rs, 1);
            setenv("HYPERFARM_LOCAL_RANK", rs, 1);
            setenv("HYPERFARM_WORLD_SIZE", wstr, 1);
            setenv("HYPERFARM_MASTER", master, 1);
            if (r == 0) setenv("HYPERFARM_MASTER_FD", lfdstr, 1);
            else { close(lfd); unsetenv("HYPERFARM_MASTER_FD"); }
            signal(SIGTERM, SIG_DFL);
            signal(SIGINT, SIG_DFL);
            execv("/proc/self/exe", argv);
            fprintf(stderr, "hyperfarm-train: exec: %s\n", strerror(errno));
            _exit(127);
        }
        pids[r] = pid;
    }
    close(lfd);
    lfd = -1;
    alive = world;
    while (alive > 0) {
        if (launcher_sig) {
            hf_info("launcher: got signal %d, forwarding to the ranks", (int)launcher_sig);
            for (int r = 0; r < world; r++) if (!done[r]) kill(pids[r], SIGTERM);
            launcher_sig = 0;
        }
        int st;
        pid_t p = waitpid(-1, &st, kill_at ? WNOHANG : 0);
        if (p < 0) {
            if (errno == EINTR) continue;
            break;
        }
        if (p == 0) {
            if (hf_mono_ms() >= kill_at) {
                for (int r = 0; r < world; r++) if (!done[r]) kill(pids[r], SIGKILL);
                kill_at = 0;
            } else {
                hf_sleep_ms(20);
            }
            continue;
        }
        int r = 0;
        while (r < world && pids[r] != p) r++;
        if (r == world) continue;
        done[r] = 1;
        alive--;
        if (r == 0) rank0_status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
        int ok = WIFEXITED(st) && (WEXITSTATUS(st) == 0 || WEXITSTATUS(st) == TR_EXIT_SIGTERM);
        if (!ok && !failed) {
            char why[96];
            describe_status(st, why, sizeof why);
            fprintf(stderr, "hyperfarm-train: rank %d (pid %d) %s: stopping the job\n", r, (int)p, why);
            failed = 1;
            /* the job is broken: a short grace (a stopped rank only dies by SIGKILL) */
            for (int q = 0; q < world; q++) if (!done[q] && pids[q] > 0) kill(pids[q], SIGTERM);
            kill_at = hf_mono_ms() + 2000;
        }
    }
    status = failed ? TR_EXIT_ERROR : rank0_status >= 0 ? rank0_status : TR_EXIT_ERROR;
end:
    if (lfd >= 0) close(lfd);
    free(pids);
    free(done);
    return status;
}

/* ---- shared set-up --------------------------------------------------------- */

int dist_setup(tr_rank *r, const tr_options *o, int max_batch)
{
    char err[512];
    int rc;
    r->o = o;
    if ((rc = tr_data_load(o->data, &r->all, &r->test, err, sizeof err))) {
        fprintf(stderr, "hyperfarm-train: rank %d: data: %s\n", r->rank, err);
        return rc;
    }
    tr_dataset limited;
    tr_dataset_head(&r->all, o->limit_train, &limited);
    if (o->val_size >= limited.n) {
        fprintf(stderr, "hyperfarm-train: --val-size %d leaves no training samples of %d\n", o->val_size, limited.n);
        return HF_EINVAL;
    }
    tr_dataset_split(&limited, o->val_size, &r->train, &r->val);
    tr_dataset_head(&r->test, o->limit_test, &r->test_view);
    r->m = tr_model_from_options(o, max_batch, err, sizeof err);
    if (!r->m) {
        fprintf(stderr, "hyperfarm-train: %s\n", err);
        return HF_EINVAL;
    }
    tr_loader tmp;
    if ((rc = tr_loader_init(&tmp, &r->train, o->batch_size, 0, 1, o->seed, 0))) return rc;
    r->spe = tr_loader_batches(&tmp);
    tr_loader_free(&tmp);
    r->target = tr_options_target_epochs(o);
    return 0;
}

void dist_free(tr_rank *r)
{
    tr_model_free(r->m);
    tr_dataset_free(&r->all);
    tr_dataset_free(&r->test);
    r->m = NULL;
}

int dist_ckpt_save(tr_rank *r, const float *params, const float *bufs, const float *state, size_t n_state,
                   int64_t optim_t, int epoch, int64_t batch, int64_t step, double loss_sum, int64_t loss_count,
                   int64_t correct, int64_t seen, char *path, size_t pathlen)
{
    const tr_options *o = r->o;
    if (!o->checkpoint_dir[0]) return HF_ENOTFOUND;
    tr_ckpt c = {
        .arch_hash = r->m->arch_hash, .epoch = epoch, .batch = batch, .step = step,
        .loss_sum = loss_sum, .loss_count = loss_count, .correct = correct, .seen = seen,
        .rng = {o->seed, 0, 0, 0}, .optim_t = optim_t,
        .n_params = r->m->n_params, .n_bufs = r->m->n_bufs, .n_state = n_state,
        .params = (float *)params, .bufs = (float *)bufs, .state = (float *)state,
    };
    char err[512];
    int rc = tr_ckpt_write(o->checkpoint_dir, &c, o->keep_checkpoints, path, pathlen, err, sizeof err);
    if (rc) hf_error("checkpoint failed: %s", err);
    else hf_info("checkpoint %s (epoch %d, batch %lld, step %lld)", path, epoch, (long long)batch, (long long)step);
    return rc;
}

int dist_ckpt_load(tr_rank *r, float *params, float *bufs, float *state, size_t n_state, tr_resume *res)
{
    memset(res, 0, sizeof *res);
    if (!r->o->checkpoint_dir[0]) return 0;
    tr_ckpt c;
    char path[TR_PATH_MAX + 64];
    if (tr_ckpt_load_latest(r->o->checkpoint_dir, r->m->arch_hash, r->m->n_params, r->m->n_bufs, n_state, &c, path,
                            sizeof path)) {
        hf_info("no usable checkpoint in %s: starting from scratch", r->o->checkpoint_dir);
        return 0;
    }
    if (params) memcpy(params, c.params, c.n_params * sizeof(float));
    if (bufs && c.n_bufs) memcpy(bufs, c.bufs, c.n_bufs * sizeof(float));
    if (state && c.n_state) memcpy(state, c.state, c.n_state * sizeof(float));
    res->found = 1;
    res->epoch = (int)c.epoch;
    res->batch = c.batch;
    res->step = c.step;
    res->loss_sum = c.loss_sum;
    res->loss_count = c.loss_count;
    res->correct = c.correct;
    res->seen = c.seen;
    res->optim_t = c.optim_t;
    hf_info("resumed from %s: epoch %d, batch %lld, step %lld", path, res->epoch, (long long)res->batch,
            (long long)res->step);
    tr_ckpt_clear(&c);
    return 0;
}

void dist_report_step(int64_t step, double epoch, double train_loss, double lr, double samples_per_s)
{
    tr_report rep;
    tr_report_init(&rep);
    rep.step = step;
    rep.epoch = epoch;
    rep.train_loss = train_loss;
    rep.lr = lr;
    rep.samples_per_s = samples_per_s;
    tr_report_print(stdout, &rep);
}

void dist_report_ckpt(const char *path, int64_t step, double epoch)
{
    tr_report rep;
    tr_report_init(&rep);
    rep.step = step;
    rep.epoch = epoch;
    rep.checkpoint = path;
    tr_report_print(stdout, &rep);
}

int dist_stop_status(const tr_options *o)
{
    return tr_stop_was_requested_by_searcher(o->checkpoint_dir) ? TR_EXIT_OK : TR_EXIT_SIGTERM;
}

/* Broadcast the resume position (doubles) from rank 0. */
static int resume_bcast(tr_coll *c, tr_resume *res)
{
    double v[9] = {res->found, res->epoch, (double)res->batch, (double)res->step, res->loss_sum,
                   (double)res->loss_count, (double)res->correct, (double)res->seen, (double)res->optim_t};
    int rc = tr_coll_broadcast(c, v, sizeof v, 0);
    if (rc) return rc;
    res->found = (int)v[0];
    res->epoch = (int)v[1];
    res->batch = (int64_t)v[2];
    res->step = (int64_t)v[3];
    res->loss_sum = v[4];
    res->loss_count = (int64_t)v[5];
    res->correct = (int64_t)v[6];
    res->seen = (int64_t)v[7];
    res->optim_t = (int64_t)v[8];
    return 0;
}

/* ---- sync: the bucketed allreduce thread ------------------------------------ */

#define QMAX (TR_MAX_LAYERS + 8)

typedef struct bucketer {
    pthread_t       th;
    pthread_mutex_t mu;
    pthread_cond_t  cv;
    tr_coll        *c;
    float          *grads;
    float           ctl[4];
    size_t          q_off[QMAX], q_cnt[QMAX];   /* q_cnt == SIZE_MAX: the control vector */
    int             q_n, q_head;                /* queue [q_head, q_n) */
    int             quit;
    int             rc;
    size_t          pend_off, pend_cnt;         /* main thread's open bucket */
    size_t          cap;                        /* floats per bucket */
    int64_t         buckets;
} bucketer;

static void *bucketer_main(void *arg)
{
    bucketer *b = arg;
    pthread_mutex_lock(&b->mu);
    for (;;) {
        while (b->q_head == b->q_n && !b->quit) pthread_cond_wait(&b->cv, &b->mu);
        if (b->q_head == b->q_n && b->quit) break;
        size_t off = b->q_off[b->q_head], cnt = b->q_cnt[b->q_head];
        int failed = b->rc != 0;
        pthread_mutex_unlock(&b->mu);
        int rc = 0;
        if (!failed) {
            if (cnt == SIZE_MAX) rc = tr_coll_allreduce(b->c, b->ctl, 4, TR_COLL_SUM);
            else rc = tr_coll_allreduce(b->c, b->grads + off, cnt, TR_COLL_SUM);
        }
        pthread_mutex_lock(&b->mu);
        if (rc && !b->rc) b->rc = rc;
        b->q_head++;
        pthread_cond_broadcast(&b->cv);
    }
    pthread_mutex_unlock(&b->mu);
    return NULL;
}

static void bucketer_push(bucketer *b, size_t off, size_t cnt)
{
    pthread_mutex_lock(&b->mu);
    if (b->q_n < QMAX) {
        b->q_off[b->q_n] = off;
        b->q_cnt[b->q_n] = cnt;
        b->q_n++;
        if (cnt != SIZE_MAX) b->buckets++;
    } else if (!b->rc) {
        b->rc = HF_ETOOBIG;   /* cannot happen: at most one bucket per layer + control */
    }
    pthread_cond_broadcast(&b->cv);
    pthread_mutex_unlock(&b->mu);
}

/* on_layer_grad: layers arrive last first, so buckets grow downwards. */
static void bucketer_on_grad(void *ctx, size_t off, size_t cnt)
{
    bucketer *b = ctx;
    if (!cnt) return;
    if (b->pend_cnt && off + cnt != b->pend_off) {
        bucketer_push(b, b->pend_off, b->pend_cnt);
        b->pend_cnt = 0;
    }
    b->pend_off = off;
    b->pend_cnt += cnt;
    if (b->pend_cnt >= b->cap) {
        bucketer_push(b, b->pend_off, b->pend_cnt);
        b->pend_cnt = 0;
    }
}

/* End of backward: flush, reduce the control vector, wait for all. */
static int bucketer_finish(bucketer *b)
{
    if (b->pend_cnt) bucketer_push(b, b->pend_off, b->pend_cnt);
    b->pend_cnt = 0;
    bucketer_push(b, 0, SIZE_MAX);
    pthread_mutex_lock(&b->mu);
    while (b->q_head < b->q_n) pthread_cond_wait(&b->cv, &b->mu);
    b->q_head = b->q_n = 0;
    int rc = b->rc;
    pthread_mutex_unlock(&b->mu);
    return rc;
}

/* ---- sync: the loop ------------------------------------------------------------ */

int dist_run_sync(tr_rank *r)
{
    const tr_options *o = r->o;
    tr_model *m = r->m;
    tr_coll *c = r->coll;
    int chief = r->rank == 0, status = TR_EXIT_ERROR, rc;
    tr_optim opt;
    memset(&opt, 0, sizeof opt);
    tr_loader ld;
    memset(&ld, 0, sizeof ld);
    bucketer b;
    memset(&b, 0, sizeof b);
    int thread_up = 0;
    int32_t *y = malloc((size_t)o->batch_size * sizeof *y);
    if (!y || tr_optim_init(&opt, o, m->n_params)) goto end;
    if (tr_loader_init(&ld, &r->train, o->batch_size, r->rank, r->world, o->seed, 1)) goto end;
    ld.flip = o->flip;
    ld.shift = o->shift;

    /* identical start: the chief's parameters (fresh or resumed) everywhere */
    tr_resume res;
    memset(&res, 0, sizeof res);
    if (chief && o->resume) dist_ckpt_load(r, m->params, m->bufs, opt.state, opt.n_state, &res);
    if ((rc = resume_bcast(c, &res)) || (rc = tr_coll_broadcast(c, m->params, m->n_params * 4, 0)) ||
        (m->n_bufs && (rc = tr_coll_broadcast(c, m->bufs, m->n_bufs * 4, 0))) ||
        (opt.n_state && (rc = tr_coll_broadcast(c, opt.state, opt.n_state * 4, 0))))
        goto comm_fail;
    opt.t = res.optim_t;

    const char *env = getenv("HF_BUCKET_KIB");
    b.cap = (size_t)(env && atoi(env) > 0 ? atoi(env) : 128) * 256;
    b.c = c;
    b.grads = m->grads;
    pthread_mutex_init(&b.mu, NULL);
    pthread_cond_init(&b.cv, NULL);
    if (pthread_create(&b.th, NULL, bucketer_main, &b)) goto end;
    thread_up = 1;

    int64_t step = res.step, batch = res.batch;
    double loss_sum = res.loss_sum;
    int64_t loss_count = res.loss_count, correct = res.correct, seen = res.seen;
    int epoch = res.epoch, stopped = 0;
    int64_t this_batch = batch;
    char path[TR_PATH_MAX + 64];
    if (chief)
        hf_info("sync data parallel: %d ranks, model %s (%zu params), global batch %d, %lld steps/epoch, "
                "buckets of %zu floats, backend %s", r->world, m->desc, m->n_params, o->batch_size,
                (long long)r->spe, b.cap, tr_coll_backend_name(tr_coll_backend(c)));
    for (; epoch < r->target && !stopped; epoch++, batch = 0) {
        tr_loader_seek(&ld, epoch, batch);
        double t0 = hf_mono_s();
        int64_t samples = 0;
        for (;;) {
            /* the end of an epoch is decided by position only: the same on every rank */
            if (ld.batch >= r->spe) break;
            this_batch = ld.batch;
            int local_stop = tr_stop_requested() || (o->max_steps > 0 && step >= o->max_steps);
            int rows = 0, gb = 0;
            int64_t row_base = 0;
            int more = !local_stop && tr_loader_next(&ld, m->act[0], y, &rows, &gb, &row_base);
            if (!more && !local_stop) {
                fprintf(stderr, "hyperfarm-train: rank %d: loader ended early at batch %lld\n", r->rank,
                        (long long)this_batch);
                goto end;
            }
            double loss = 0;
            int hits = 0;
            if (more) {
                tr_layer_ctx lc = {.train = 1, .seed = o->seed, .step = step, .row_base = row_base};
                if (rows > 0) {
                    loss = tr_model_step(m, y, rows, gb, &lc, bucketer_on_grad, &b, &hits);
                } else {
                    /* empty share of a short last batch: zero gradients, handed
                     * over layer by layer as backward would, so the buckets (and
                     * so the collectives) are the same on every rank */
                    memset(m->grads, 0, m->n_params * sizeof(float));
                    for (int li = m->n_layers - 1; li >= 0; li--)
                        if (m->layers[li].param_count)
                            bucketer_on_grad(&b, m->layers[li].param_off, m->layers[li].param_count);
                }
            }
            b.ctl[0] = (float)local_stop;
            b.ctl[1] = (float)(loss * rows * more);
            b.ctl[2] = (float)hits;
            b.ctl[3] = (float)(more ? rows : 0);
            if ((rc = bucketer_finish(&b))) goto comm_fail;
            if (b.ctl[0] > 0) {   /* some rank stops: all stop here, before updating */
                stopped = 1;
                break;
            }
            if (o->clip_norm > 0) tr_grad_clip(m->grads, m->n_params, o->clip_norm);
            double lr = tr_lr_at(o, step, r->spe);
            tr_optim_step(&opt, m->params, m->grads, (float)lr);
            if (!isfinite(b.ctl[1])) {
                fprintf(stderr, "hyperfarm-train: loss is not finite at step %lld (lr too high?)\n", (long long)step);
                goto end;
            }
            loss_sum += b.ctl[1];
            loss_count += (int64_t)b.ctl[3];
            correct += (int64_t)b.ctl[2];
            seen += (int64_t)b.ctl[3];
            samples += (int64_t)b.ctl[3];
            step++;
            if (chief && o->log_every > 0 && step % o->log_every == 0) {
                dist_report_step(step, epoch + (double)ld.batch / r->spe,
                                 loss_count ? loss_sum / loss_count : NAN, lr, samples / (hf_mono_s() - t0));
            }
            if (chief && o->checkpoint_every > 0 && step % o->checkpoint_every == 0 && ld.batch < r->spe &&
                dist_ckpt_save(r, m->params, m->bufs, opt.state, opt.n_state, opt.t, epoch, ld.batch, step, loss_sum,
                               loss_count, correct, seen, path, sizeof path) == 0)
                dist_report_ckpt(path, step, epoch + (double)ld.batch / r->spe);
        }
        if (stopped) break;
        double train_time = hf_mono_s() - t0;
        if (m->n_bufs && (rc = tr_coll_allreduce(c, m->bufs, m->n_bufs, TR_COLL_AVG))) goto comm_fail;
        if (chief) {
            tr_report rep;
            tr_report_init(&rep);
            rep.step = step;
            rep.epoch = epoch + 1;
            rep.train_loss = loss_count ? loss_sum / loss_count : NAN;
            rep.train_acc = seen ? (double)correct / seen : NAN;
            rep.samples_per_s = train_time > 0 ? samples / train_time : NAN;
            rep.lr = tr_lr_at(o, step > 0 ? step - 1 : 0, r->spe);
            if (r->val.n > 0) tr_evaluate(m, &r->val, &rep.val_loss, &rep.val_acc);
            if (o->eval_test || epoch + 1 == r->target) {
                double tl;
                tr_evaluate(m, &r->test_view, &tl, &rep.test_acc);
            }
            hf_info("epoch %d/%d: train_loss %.4f val_acc %.4f test_acc %.4f, %.0f samples/s on %d ranks",
                    epoch + 1, r->target, rep.train_loss, rep.val_acc, rep.test_acc, rep.samples_per_s, r->world);
            if (dist_ckpt_save(r, m->params, m->bufs, opt.state, opt.n_state, opt.t, epoch + 1, 0, step, 0, 0, 0, 0,
                               path, sizeof path) == 0)
                rep.checkpoint = path;
            tr_report_print(stdout, &rep);
        }
        loss_sum = 0;
        loss_count = correct = seen = 0;
    }
    if (stopped) {
        /* this_batch was not applied: a resumed run starts with it */
        if (chief && dist_ckpt_save(r, m->params, m->bufs, opt.state, opt.n_state, opt.t, epoch, this_batch, step,
                                    loss_sum, loss_count, correct, seen, path, sizeof path) == 0)
            dist_report_ckpt(path, step, epoch + (double)this_batch / r->spe);
        if (tr_stop_requested()) {
            status = dist_stop_status(o);
            goto end;
        }
    }
    status = TR_EXIT_OK;
    goto end;
comm_fail:
    fprintf(stderr, "hyperfarm-train: rank %d: %s\n", r->rank, tr_coll_errmsg(c));
    status = TR_EXIT_ERROR;
end:
    if (thread_up) {
        pthread_mutex_lock(&b.mu);
        b.quit = 1;
        pthread_cond_broadcast(&b.cv);
        pthread_mutex_unlock(&b.mu);
        pthread_join(b.th, NULL);
        pthread_mutex_destroy(&b.mu);
        pthread_cond_destroy(&b.cv);
    }
    tr_loader_free(&ld);
    tr_optim_free(&opt);
    free(y);
    return status;
}

/* ---- entry ------------------------------------------------------------------------ */

int tr_dist_main(const tr_options *opt)
{
    tr_options o = *opt;
    if (!o.mode[0]) snprintf(o.mode, sizeof o.mode, "sync");
    if (strcmp(o.mode, "sync") && strcmp(o.mode, "async") && strcmp(o.mode, "pipeline")) {
        fprintf(stderr, "hyperfarm-train: --mode '%s': want sync, async or pipeline\n", o.mode);
        return TR_EXIT_ERROR;
    }
    int backend;
    if (tr_coll_backend_parse(o.backend, &backend)) {
        fprintf(stderr, "hyperfarm-train: --backend '%s': want tcp, mpi or nccl\n", o.backend);
        return TR_EXIT_ERROR;
    }
    if (backend != TR_COLL_TCP && strcmp(o.mode, "sync")) {
        fprintf(stderr, "hyperfarm-train: --mode %s runs over --backend tcp only\n", o.mode);
        return TR_EXIT_ERROR;
    }
    int under_mpi = getenv("OMPI_COMM_WORLD_SIZE") != NULL;
    if (o.world <= 1 && !under_mpi) {
        if (o.nproc > 1 || !strcmp(o.mode, "async")) return launch(&o);   /* async: + servers */
        /* a --mode with one process: run it as a world of one */
    }
    if (!strcmp(o.mode, "async") && o.ps <= 0) o.ps = 1;

    tr_rank r;
    memset(&r, 0, sizeof r);
    int status = TR_EXIT_ERROR;
    tr_coll_config cfg;
    tr_coll_config_init(&cfg);
    cfg.backend = backend;
    cfg.rank = o.rank;
    cfg.world = o.world > 0 ? o.world : 1;
    cfg.master = getenv("HYPERFARM_MASTER");
    const char *mfd = getenv("HYPERFARM_MASTER_FD");
    cfg.master_fd = o.rank == 0 && mfd ? atoi(mfd) : -1;
    cfg.timeout_ms = (int)(o.timeout * 1000);
    const char *lr = getenv("HYPERFARM_LOCAL_RANK");
    cfg.nccl_device = lr ? atoi(lr) : -1;
    char err[320];
    if (cfg.world > 1 && backend != TR_COLL_MPI && !cfg.master) {
        fprintf(stderr, "hyperfarm-train: rank %d of %d: HYPERFARM_MASTER (host:port of rank 0) is not set\n",
                o.rank, cfg.world);
        return TR_EXIT_ERROR;
    }
    tr_signals_install();
    tr_blas_threads(o.threads);
    int rc = tr_coll_open(&cfg, &r.coll, err, sizeof err);
    if (rc) {
        fprintf(stderr, "hyperfarm-train: rank %d: %s\n", o.rank, err);
        return TR_EXIT_ERROR;
    }
    r.rank = tr_coll_rank(r.coll);
    r.world = tr_coll_world(r.coll);
    o.rank = r.rank;
    o.world = r.world;
    if (!strcmp(o.mode, "async") && o.ps >= r.world) {
        fprintf(stderr, "hyperfarm-train: --ps %d leaves no worker in a world of %d\n", o.ps, r.world);
        goto end;
    }
    if (dist_setup(&r, &o, o.batch_size)) goto end;
    if (!strcmp(o.mode, "sync")) status = dist_run_sync(&r);
    else if (!strcmp(o.mode, "pipeline")) status = dist_run_pipeline(&r);
    else status = dist_run_async(&r);
    /* leave together, so no rank sees its peers vanish as a failure */
    if ((status == TR_EXIT_OK || status == TR_EXIT_SIGTERM) && tr_coll_barrier(r.coll)) status = TR_EXIT_ERROR;
end:
    dist_free(&r);
    tr_coll_close(r.coll);
    return status;
}
