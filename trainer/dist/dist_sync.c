/*
 * dist_sync.c — --mode sync: data parallel with a bucketed allreduce that
 * overlaps backward (docs/distributed.md, "Sync data parallel").
 *
 * Every rank holds the whole model; rank r takes rows [G r/p, G (r+1)/p)
 * of each global batch of G rows (tr_loader), computes gradients scaled by
 * 1/G, and the gradients are summed across ranks, so each rank applies
 * exactly the single-process update (up to the order of float additions).
 * The sum runs in buckets while backward is still going: the model calls
 * on_layer_grad as each layer's gradients are final (last layer first);
 * contiguous layers are gathered into a bucket of about tune.bucket_kib
 * (HF_BUCKET_KIB, default 128 KiB) and handed to a communication thread ("hf-bucketer")
 * that allreduces it while the main thread computes the layers below.
 * After the last bucket, a 4-float control allreduce carries (stop
 * requested, loss sum, hits, rows), so every rank stops at the same step
 * when any of them got SIGTERM. BN running statistics (per-shard) are
 * averaged before the chief evaluates.
 */
#include "trainer/dist/dist_modes.h"

#include "hf_err.h"
#include "hf_log.h"
#include "hf_thread.h"
#include "hf_time.h"
#include "trainer/optim.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- sync: the bucketed allreduce thread ------------------------------------ */

#define QMAX (TR_MAX_LAYERS + 8)

/* The bucket thread "hf-bucketer": mu guards the queue, quit and rc; the
 * main thread alone touches pend_* and the gradient ranges not yet queued. */
typedef struct bucketer {
    hf_thread      *th;
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

static void bucketer_main(hf_thread *t, void *arg)
{
    (void)t;   /* stopped by quit under mu, which its waits watch */
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

typedef struct sync_run {
    tr_rank      *r;
    tr_optim      opt;
    tr_loader     ld;
    bucketer      b;
    int32_t      *y;
    dist_pos      pos;
    char          path[TR_PATH_MAX + 64];
} sync_run;

/* The optimizer state as a checkpoint holds it (here: all of it). */
static dist_optstate sync_optstate(const sync_run *s)
{
    return (dist_optstate){s->opt.state, s->opt.n_state, s->opt.t};
}

/* Forward and backward of this rank's rows, handing gradients to the
 * bucketer. OUT *loss (mean over rows), *hits. */
static void sync_compute(sync_run *s, int rows, int gb, int64_t row_base, double *loss, int *hits)
{
    tr_model *m = s->r->m;
    tr_layer_ctx lc = {.train = 1, .seed = s->r->o->seed, .step = s->pos.step, .row_base = row_base};
    if (rows > 0) {
        /* the CPU backend: no failure to report */
        tr_backend_step(&s->r->be, m->act[0], s->y, rows, gb, &lc, bucketer_on_grad, &s->b, loss, hits);
        return;
    }
    /* empty share of a short last batch: zero gradients, handed over layer
     * by layer as backward would, so the buckets (and so the collectives)
     * are the same on every rank */
    memset(m->grads, 0, m->n_params * sizeof(float));
    for (int li = m->n_layers - 1; li >= 0; li--)
        if (m->layers[li].param_count) bucketer_on_grad(&s->b, m->layers[li].param_off, m->layers[li].param_count);
}

/* dist_loop.step: one global step on every rank; when any rank stops, all
 * stop here, before updating. */
static int sync_step(tr_rank *r, void *ctx, double t0, int64_t *samples)
{
    sync_run *s = ctx;
    int local_stop = dist_should_stop(r, s->pos.step);
    const tr_options *o = r->o;
    tr_model *m = r->m;
    int rows = 0, gb = 0, hits = 0;
    int64_t row_base = 0;
    int more = !local_stop && tr_loader_next(&s->ld, m->act[0], s->y, &rows, &gb, &row_base);
    if (!more && !local_stop) {
        fprintf(stderr, "hyperfarm-train: rank %d: loader ended early at batch %lld\n", r->rank,
                (long long)s->pos.this_batch);
        return DIST_STEP_FAIL;
    }
    double loss = 0;
    if (more) sync_compute(s, rows, gb, row_base, &loss, &hits);
    float *ctl = s->b.ctl;
    ctl[0] = (float)local_stop;
    ctl[1] = (float)(loss * rows * more);
    ctl[2] = (float)hits;
    ctl[3] = (float)(more ? rows : 0);
    if (bucketer_finish(&s->b)) return DIST_STEP_COMM;
    if (ctl[0] > 0) return DIST_STEP_STOP;
    if (o->clip_norm > 0) tr_backend_clip(&r->be, o->clip_norm, NULL);
    double lr = tr_lr_at(o, s->pos.step, r->spe);
    tr_backend_optim_step(&r->be, &s->opt, 0, (float)lr);
    if (!isfinite(ctl[1])) {
        fprintf(stderr, "hyperfarm-train: loss is not finite at step %lld (lr too high?)\n",
                (long long)s->pos.step);
        return DIST_STEP_FAIL;
    }
    dist_step_done(r, &s->pos, ctl[1], (int64_t)ctl[2], (int64_t)ctl[3], samples, s->ld.batch, lr, t0, 1);
    if (r->rank != 0) return DIST_STEP_OK;
    dist_optstate os = sync_optstate(s);
    if (o->checkpoint_every > 0 && s->pos.step % o->checkpoint_every == 0 && s->ld.batch < r->spe &&
        dist_ckpt_save(r, &os, s->pos.epoch, s->ld.batch, s->pos.step, &s->pos.sums, s->path, sizeof s->path) == 0)
        tr_report_ckpt(s->path, s->pos.step, s->pos.epoch + (double)s->ld.batch / r->spe);
    return DIST_STEP_OK;
}

/* dist_loop.epoch_end: average BN statistics; the chief evaluates,
 * checkpoints and reports. A stopped run is reported by dist_sync_run. */
static int sync_epoch_end(tr_rank *r, void *ctx, int stopped, double train_time, int64_t samples)
{
    sync_run *s = ctx;
    tr_model *m = r->m;
    if (stopped) return DIST_STEP_OK;
    if (m->n_bufs && tr_coll_allreduce(r->coll, m->bufs, m->n_bufs, TR_COLL_AVG)) return DIST_STEP_COMM;
    if (r->rank == 0) {
        tr_report rep;
        char where[32];
        snprintf(where, sizeof where, "on %d ranks", r->world);
        dist_optstate os = sync_optstate(s);
        dist_report_epoch(r, &os, &s->pos, train_time > 0 ? samples / train_time : NAN, train_time, where, &rep,
                          s->path, sizeof s->path);
    }
    s->pos.sums = (tr_epoch_sums){0};
    return DIST_STEP_OK;
}

int dist_sync_run(tr_rank *r)
{
    const tr_options *o = r->o;
    tr_model *m = r->m;
    tr_coll *c = r->coll;
    int status = TR_EXIT_ERROR, thread_up = 0, stopped = 0, st;
    sync_run s;
    memset(&s, 0, sizeof s);
    s.r = r;
    s.y = malloc((size_t)o->batch_size * sizeof *s.y);
    if (!s.y || tr_optim_init(&s.opt, o, m->n_params)) goto end;
    if (tr_loader_init(&s.ld, &r->train, o->batch_size, r->rank, r->world, o->seed, 1)) goto end;
    s.ld.flip = o->flip;
    s.ld.shift = o->shift;

    /* identical start: the chief's parameters (fresh or resumed) everywhere */
    tr_resume res;
    if (dist_start(r, s.opt.state, s.opt.n_state, &res)) {
        status = dist_exit_status(r, DIST_STEP_COMM, 0, "rank");
        goto end;
    }
    s.opt.t = res.optim_t;

    s.b.cap = (size_t)r->tune.bucket_kib * 256;
    s.b.c = c;
    s.b.grads = m->grads;
    pthread_mutex_init(&s.b.mu, NULL);
    pthread_cond_init(&s.b.cv, NULL);
    if (hf_thread_start(&s.b.th, "hf-bucketer", bucketer_main, &s.b)) goto end;
    thread_up = 1;

    s.pos = res.pos;
    if (r->rank == 0)
        hf_info("sync data parallel: %d ranks, model %s (%zu params), global batch %d, %lld steps/epoch, "
                "buckets of %zu floats, backend %s", r->world, m->desc, m->n_params, o->batch_size,
                (long long)r->spe, s.b.cap, tr_coll_backend_name(tr_coll_backend(c)));
    dist_loop lp = {.ctx = &s, .step = sync_step, .epoch_end = sync_epoch_end};
    st = dist_epochs(r, &s.ld, &s.pos, &lp, &stopped);
    if (st == DIST_STEP_OK && stopped && r->rank == 0) {
        dist_optstate os = sync_optstate(&s);
        dist_report_stop(r, &os, &s.pos, 0);
    }
    status = dist_exit_status(r, st, stopped, "rank");
end:
    if (thread_up) {
        pthread_mutex_lock(&s.b.mu);
        s.b.quit = 1;
        pthread_cond_broadcast(&s.b.cv);
        pthread_mutex_unlock(&s.b.mu);
        hf_thread_stop_join(s.b.th);
        pthread_mutex_destroy(&s.b.mu);
        pthread_cond_destroy(&s.b.cv);
    }
    tr_loader_free(&s.ld);
    tr_optim_free(&s.opt);
    free(s.y);
    return status;
}
