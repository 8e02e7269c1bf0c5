/*
 * dist_async.c — --mode async: asynchronous data parallelism with parameter
 * servers and a stale-synchronous-parallel (SSP) bound.
 *
 * The world is W workers (ranks 0..W-1) followed by P parameter servers
 * (ranks W..W+P-1; --ps P). The parameters are cut into P contiguous
 * shards; server k owns shard k and an optimizer for it. A worker's step:
 *
 *   pull   send PULL(clock) to every server, receive each shard and the
 *          server's version (updates applied so far)
 *   work   its rows of the global batch (rank w of W, as in sync mode):
 *          forward, backward, gradient = mean over its rows
 *   push   send PUSH(clock, version used, rows, gradient shard) to every
 *          server, which applies it at once with lr(step)/W
 *
 * so with one worker, or with K = 0 and plain SGD, the updates are those of
 * sync data parallel; workers never wait for each other otherwise.
 * SSP: a server answers a PULL with clock c only when c - (slowest
 * worker's clock) <= K (--staleness K; -1 unbounded): the fastest worker
 * is at most K steps ahead. A gradient is stale when the shard it was
 * computed on is older than the shard it is applied to; servers count
 * stale gradients and the total staleness, and the chief reports
 * `stale_grads` and `mean_staleness` with every epoch's metrics.
 *
 * The chief (rank 0, a worker) takes a SNAPSHOT of every shard at epoch
 * ends (parameters, optimizer state, counters) to evaluate and write the
 * checkpoint, in the single-process format, so --resume works across
 * modes. Gradient clipping, when asked, clips each shard by its own norm.
 * Batch-norm running statistics are the chief's own.
 * Servers serve until every worker has said DONE; a worker that dies
 * closes its connections, the servers fail on it and the launcher ends the
 * job.
 */
#include "trainer/dist/dist_modes.h"

#include "hf_err.h"
#include "hf_log.h"
#include "hf_time.h"
#include "trainer/optim.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { TAG_PULL = 10, TAG_PARAMS, TAG_PUSH, TAG_DONE, TAG_SNAP, TAG_SNAP_REPLY };

typedef struct shard { size_t off, cnt; } shard;

static shard shard_of(size_t n, int P, int k)
{
    shard s = {n * (size_t)k / (size_t)P, n * (size_t)(k + 1) / (size_t)P - n * (size_t)k / (size_t)P};
    return s;
}

/* ---- server ----------------------------------------------------------------- */

typedef struct server {
    tr_rank  *r;
    int       W, P, k;
    shard     sh;
    tr_optim  opt;
    float    *params;       /* (sh.cnt) */
    int64_t   version;      /* updates applied (all workers) */
    int64_t  *clock;        /* [W] pushes received per worker */
    int64_t  *pending;      /* [W] clock of a deferred PULL, -1 none */
    int      *done;         /* [W] */
    int64_t   stale, stale_sum, pushes;
    char     *msg;          /* receive / send buffer */
    size_t    msg_cap;
} server;

static int64_t min_clock(const server *s)
{
    int64_t mn = INT64_MAX;
    for (int w = 0; w < s->W; w++)
        if (!s->done[w] && s->clock[w] < mn) mn = s->clock[w];
    return mn;
}

static int send_params(server *s, int w)
{
    int64_t hdr[2] = {s->version, 0};
    memcpy(s->msg, hdr, sizeof hdr);
    memcpy(s->msg + sizeof hdr, s->params, s->sh.cnt * sizeof(float));
    return tr_coll_send(s->r->coll, w, TAG_PARAMS, s->msg, sizeof hdr + s->sh.cnt * sizeof(float));
}

static int serve_pending(server *s, int K)
{
    int64_t mn = min_clock(s);
    for (int w = 0; w < s->W; w++) {
        if (s->pending[w] < 0 || (K >= 0 && s->pending[w] - mn > K)) continue;
        s->pending[w] = -1;
        int rc = send_params(s, w);
        if (rc) return rc;
    }
    return 0;
}

static int server_run(tr_rank *r, const float *init_params, const float *init_state, size_t per, int64_t version0,
                      int64_t optim_t)
{
    const tr_options *o = r->o;
    tr_coll *c = r->coll;
    server s;
    memset(&s, 0, sizeof s);
    s.r = r;
    s.P = o->ps;
    s.W = r->world - o->ps;
    s.k = r->rank - s.W;
    s.sh = shard_of(r->m->n_params, s.P, s.k);
    s.version = version0;
    int rc = HF_ENOMEM, K = o->staleness;
    int *peers = calloc((size_t)s.W, sizeof *peers);
    s.clock = calloc((size_t)s.W, sizeof *s.clock);
    s.pending = calloc((size_t)s.W, sizeof *s.pending);
    s.done = calloc((size_t)s.W, sizeof *s.done);
    s.params = malloc((s.sh.cnt + 1) * sizeof(float));
    s.msg_cap = 64 + (s.sh.cnt * (2 + per) + 8) * sizeof(float);
    s.msg = malloc(s.msg_cap);
    if (!peers || !s.clock || !s.pending || !s.done || !s.params || !s.msg) goto end;
    if ((rc = tr_optim_init(&s.opt, o, s.sh.cnt ? s.sh.cnt : 1))) goto end;
    memcpy(s.params, init_params + s.sh.off, s.sh.cnt * sizeof(float));
    for (size_t q = 0; q < per && s.sh.cnt; q++)
        memcpy(s.opt.state + q * s.sh.cnt, init_state + q * r->m->n_params + s.sh.off, s.sh.cnt * sizeof(float));
    s.opt.t = optim_t;
    for (int w = 0; w < s.W; w++) s.pending[w] = -1;
    hf_info("parameter server %d/%d: params [%zu, +%zu), staleness %s%d", s.k, s.P, s.sh.off, s.sh.cnt,
            K < 0 ? "unbounded " : "", K < 0 ? 0 : K);
    int ndone = 0;
    while (ndone < s.W) {
        int w, tag;
        size_t got;
        /* workers may be evaluating or blocked by SSP: wait a long time, but not forever */
        /* only workers that have not said DONE: a finished worker's next
         * bytes belong to the closing barrier, not to us */
        int np = 0;
        for (int q = 0; q < s.W; q++) if (!s.done[q]) peers[np++] = q;
        rc = tr_coll_wait_any(c, peers, np, -1, &w);
        if (rc == HF_ETIMEOUT) {
            hf_error("parameter server %d: no message from any worker for %.0f s", s.k, o->timeout);
            goto end;
        }
        if (rc) goto end;
        if ((rc = tr_coll_recv(c, w, -1, s.msg, s.msg_cap, &tag, &got))) goto end;
        if (tag == TAG_PULL && got == 8) {
            int64_t clk;
            memcpy(&clk, s.msg, 8);
            if (K >= 0 && clk - min_clock(&s) > K) s.pending[w] = clk;
            else if ((rc = send_params(&s, w))) goto end;
        } else if (tag == TAG_PUSH && got == 32 + s.sh.cnt * sizeof(float)) {
            int64_t h[4];   /* clock, version used, rows, unused */
            memcpy(h, s.msg, sizeof h);
            float *g = (float *)(s.msg + 32);
            if (h[2] > 0) {
                int64_t lag = s.version - h[1];
                if (lag > 0) { s.stale++; s.stale_sum += lag; }
                if (o->clip_norm > 0) tr_grad_clip(g, s.sh.cnt, o->clip_norm);
                double lr = tr_lr_at(o, s.version / s.W, r->spe) / s.W;
                if (s.sh.cnt) tr_optim_step(&s.opt, s.params, g, (float)lr);
                s.version++;
                s.pushes++;
            }
            s.clock[w]++;
            if ((rc = serve_pending(&s, K))) goto end;
        } else if (tag == TAG_SNAP) {
            double st[4] = {(double)s.version, (double)s.stale, (double)s.stale_sum, (double)s.opt.t};
            size_t n = 0;
            memcpy(s.msg, st, sizeof st);
            n += sizeof st;
            memcpy(s.msg + n, s.params, s.sh.cnt * sizeof(float));
            n += s.sh.cnt * sizeof(float);
            if (per && s.sh.cnt) memcpy(s.msg + n, s.opt.state, per * s.sh.cnt * sizeof(float));
            n += per * s.sh.cnt * sizeof(float);
            if ((rc = tr_coll_send(c, w, TAG_SNAP_REPLY, s.msg, n))) goto end;
        } else if (tag == TAG_DONE) {
            s.done[w] = 1;
            ndone++;
            if ((rc = serve_pending(&s, K))) goto end;
        } else {
            hf_error("parameter server %d: unexpected message tag %d (%zu bytes) from rank %d", s.k, tag, got, w);
            rc = HF_EPEER;
            goto end;
        }
    }
    hf_info("parameter server %d: %lld updates, %lld stale (mean staleness %.2f)", s.k, (long long)s.pushes,
            (long long)s.stale, s.stale ? (double)s.stale_sum / (double)s.stale : 0.0);
    rc = 0;
end:
    if (rc && tr_coll_errmsg(c)[0])
        fprintf(stderr, "hyperfarm-train: parameter server %d: %s\n", s.k, tr_coll_errmsg(c));
    tr_optim_free(&s.opt);
    free(peers);
    free(s.clock);
    free(s.pending);
    free(s.done);
    free(s.params);
    free(s.msg);
    return rc ? TR_EXIT_ERROR : TR_EXIT_OK;
}

/* ---- worker ------------------------------------------------------------------- */

typedef struct snapshot {
    int64_t version, stale, stale_sum, optim_t;
} snapshot;

/* Chief: gather every shard's params and optimizer state. */
static int take_snapshot(tr_rank *r, int P, size_t per, float *params, float *state, char *msg, snapshot *sn)
{
    int W = r->world - P, rc;
    memset(sn, 0, sizeof *sn);
    for (int k = 0; k < P; k++)
        if ((rc = tr_coll_send(r->coll, W + k, TAG_SNAP, NULL, 0))) return rc;
    for (int k = 0; k < P; k++) {
        shard sh = shard_of(r->m->n_params, P, k);
        size_t want = 32 + sh.cnt * (1 + per) * sizeof(float), got;
        if ((rc = tr_coll_recv(r->coll, W + k, TAG_SNAP_REPLY, msg, want, NULL, &got))) return rc;
        double st[4];
        memcpy(st, msg, sizeof st);
        /* every shard sees every push: report the mean over shards */
        sn->version += (int64_t)st[0] / P;
        sn->stale += (int64_t)st[1] / P;
        sn->stale_sum += (int64_t)st[2] / P;
        sn->optim_t = (int64_t)st[3];
        memcpy(params + sh.off, msg + 32, sh.cnt * sizeof(float));
        for (size_t q = 0; q < per; q++)
            memcpy(state + q * r->m->n_params + sh.off, msg + 32 + (1 + q) * sh.cnt * sizeof(float),
                   sh.cnt * sizeof(float));
    }
    return 0;
}

/* One worker's state for the whole run. */
typedef struct worker {
    tr_rank      *r;
    int           P, W;           /* servers, workers */
    size_t        per;            /* optimizer state floats per parameter */
    float        *full_state;     /* (per * n_params) snapshot target */
    tr_loader     ld;
    char         *msg;            /* message buffer */
    int64_t      *ver;            /* [P] version of each shard pulled */
    int32_t      *y;
    int64_t       clock;          /* pushes so far */
    dist_pos      pos;
    char          path[TR_PATH_MAX + 64];
} worker;

/* Pull every shard (requests first, so servers work in parallel). RET 0 or HF_E*. */
static int worker_pull(worker *w)
{
    tr_coll *c = w->r->coll;
    tr_model *m = w->r->m;
    int rc;
    for (int k = 0; k < w->P; k++)
        if ((rc = tr_coll_send(c, w->W + k, TAG_PULL, &w->clock, sizeof w->clock))) return rc;
    for (int k = 0; k < w->P; k++) {
        shard sh = shard_of(m->n_params, w->P, k);
        size_t got;
        if ((rc = tr_coll_recv(c, w->W + k, TAG_PARAMS, w->msg, 16 + sh.cnt * sizeof(float), NULL, &got))) return rc;
        memcpy(&w->ver[k], w->msg, 8);
        memcpy(m->params + sh.off, w->msg + 16, sh.cnt * sizeof(float));
    }
    return 0;
}

/* Push this worker's gradient of rows rows, shard by shard. RET 0 or HF_E*. */
static int worker_push(worker *w, int rows)
{
    tr_model *m = w->r->m;
    int rc;
    for (int k = 0; k < w->P; k++) {
        shard sh = shard_of(m->n_params, w->P, k);
        int64_t h[4] = {w->clock, w->ver[k], rows, 0};
        memcpy(w->msg, h, sizeof h);
        memcpy(w->msg + 32, m->grads + sh.off, sh.cnt * sizeof(float));
        if ((rc = tr_coll_send(w->r->coll, w->W + k, TAG_PUSH, w->msg, 32 + sh.cnt * sizeof(float)))) return rc;
    }
    return 0;
}

/* dist_loop.step: pull, work, push. */
static int worker_step(tr_rank *r, void *ctx, double t0, int64_t *samples)
{
    worker *w = ctx;
    if (dist_should_stop(r, w->pos.step)) return DIST_STEP_STOP;
    const tr_options *o = r->o;
    tr_model *m = r->m;
    if (worker_pull(w)) return DIST_STEP_COMM;
    int rows, gb, hits = 0;
    int64_t row_base;
    if (!tr_loader_next(&w->ld, m->act[0], w->y, &rows, &gb, &row_base)) return DIST_STEP_END;
    double loss = 0;
    tr_layer_ctx lc = {.train = 1, .seed = o->seed, .step = w->pos.step, .row_base = row_base};
    if (rows > 0) tr_backend_step(&r->be, m->act[0], w->y, rows, rows, &lc, NULL, NULL, &loss, &hits);
    if (!isfinite(loss)) {
        fprintf(stderr, "hyperfarm-train: worker %d: loss is not finite at step %lld\n", r->rank,
                (long long)w->pos.step);
        return DIST_STEP_FAIL;
    }
    if (worker_push(w, rows)) return DIST_STEP_COMM;
    w->clock++;
    dist_step_done(r, &w->pos, loss * rows, hits, rows, samples, w->ld.batch, NAN, t0, w->W);
    return DIST_STEP_OK;
}

/* dist_loop.epoch_end: the chief snapshots the servers, then reports and
 * checkpoints the epoch's end (or where a stopped run stands), with the
 * staleness line. */
static int worker_epoch_end(tr_rank *r, void *ctx, int stopped, double train_time, int64_t samples)
{
    worker *w = ctx;
    tr_model *m = r->m;
    dist_pos pos = w->pos;   /* as it was when the epoch ended */
    if (!stopped) w->pos.sums = (tr_epoch_sums){0};
    if (r->rank != 0) return DIST_STEP_OK;
    snapshot sn;
    if (take_snapshot(r, w->P, w->per, m->params, w->full_state, w->msg, &sn)) return DIST_STEP_COMM;
    dist_optstate os = {w->full_state, w->per * m->n_params, sn.optim_t};
    double epoch = w->pos.epoch + 1;
    if (stopped) {
        epoch = w->pos.epoch + (double)w->pos.this_batch / r->spe;
        dist_report_stop(r, &os, &pos, 1);
    } else {
        tr_report rep;
        char where[64];
        snprintf(where, sizeof where, "on %d workers, %lld stale gradients", w->W, (long long)sn.stale);
        /* the chief's rate times the workers: every worker runs the same steps */
        dist_report_epoch(r, &os, &pos, train_time > 0 ? samples / train_time * w->W : NAN, train_time, where, &rep,
                          w->path, sizeof w->path);
    }
    /* staleness as its own line: tr_report has no member for it */
    printf("HYPERFARM {\"step\":%lld,\"epoch\":%g,\"stale_grads\":%lld,\"mean_staleness\":%.4f,\"updates\":%lld}\n",
           (long long)w->pos.step, epoch, (long long)sn.stale, sn.stale ? (double)sn.stale_sum / (double)sn.stale : 0.0,
           (long long)sn.version);
    fflush(stdout);
    return DIST_STEP_OK;
}

static int worker_run(tr_rank *r, size_t per, float *full_state, const tr_resume *res)
{
    const tr_options *o = r->o;
    int status = TR_EXIT_ERROR, stopped = 0, st;
    worker w;
    memset(&w, 0, sizeof w);
    w.r = r;
    w.P = o->ps;
    w.W = r->world - w.P;
    w.per = per;
    w.full_state = full_state;
    size_t maxshard = r->m->n_params / (size_t)w.P + 2;
    w.msg = malloc(64 + maxshard * (2 + per) * sizeof(float));
    w.ver = calloc((size_t)w.P, sizeof *w.ver);
    w.y = malloc((size_t)o->batch_size * sizeof *w.y);
    if (!w.msg || !w.ver || !w.y || tr_loader_init(&w.ld, &r->train, o->batch_size, r->rank, w.W, o->seed, 1))
        goto end;
    w.ld.flip = o->flip;
    w.ld.shift = o->shift;
    w.pos = res->pos;
    dist_loop lp = {.ctx = &w, .step = worker_step, .epoch_end = worker_epoch_end};
    st = dist_epochs(r, &w.ld, &w.pos, &lp, &stopped);
    for (int k = 0; k < w.P && st == DIST_STEP_OK; k++)
        if (tr_coll_send(r->coll, w.W + k, TAG_DONE, &w.clock, sizeof w.clock)) st = DIST_STEP_COMM;
    status = dist_exit_status(r, st, stopped, "worker");
end:
    tr_loader_free(&w.ld);
    free(w.msg);
    free(w.ver);
    free(w.y);
    return status;
}

int dist_async_run(tr_rank *r)
{
    const tr_options *o = r->o;
    tr_model *m = r->m;
    int P = o->ps, W = r->world - P;
    tr_optim probe;
    memset(&probe, 0, sizeof probe);
    if (tr_optim_init(&probe, o, 1)) return TR_EXIT_ERROR;
    size_t per = probe.n_state;   /* state floats per parameter */
    tr_optim_free(&probe);
    float *full_state = calloc(per * m->n_params + 1, sizeof(float));
    if (!full_state) return TR_EXIT_ERROR;
    int status = TR_EXIT_ERROR;
    tr_resume res;
    if (dist_start(r, full_state, per * m->n_params, &res)) {
        fprintf(stderr, "hyperfarm-train: rank %d: %s\n", r->rank, tr_coll_errmsg(r->coll));
        goto end;
    }
    if (r->rank == 0)
        hf_info("async data parallel: %d workers, %d parameter servers, staleness %d, model %s", W, P, o->staleness,
                m->desc);
    if (r->rank >= W) status = server_run(r, m->params, full_state, per, res.pos.step * W, res.optim_t);
    else status = worker_run(r, per, full_state, &res);
end:
    free(full_state);
    return status;
}
