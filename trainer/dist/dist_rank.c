/*
 * dist_rank.c — one rank's set-up and the chief's checkpoints, shared by
 * every distributed mode (dist_rank.h). Calls no mode and nothing of
 * dist.c.
 *
 * Checkpoints are written in the single-process format (ckpt.h) with the
 * whole model, so a run can resume in any mode from any other's files.
 */
#include "trainer/dist/dist_rank.h"

#include "hf_err.h"
#include "hf_log.h"
#include "hf_time.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

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
    tr_backend_cpu(&r->be, r->m);
    if (strcmp(o->device, "cpu") != 0 && r->rank == 0)
        hf_info("--device %s: the distributed modes compute on the CPU backend", o->device);
    tr_loader tmp;
    if ((rc = tr_loader_init(&tmp, &r->train, o->batch_size, 0, 1, o->seed, 0))) return rc;
    r->spe = tr_loader_batches(&tmp);
    tr_loader_free(&tmp);
    r->target = tr_options_target_epochs(o);
    return 0;
}

void dist_free(tr_rank *r)
{
    tr_backend_close(&r->be);
    tr_model_free(r->m);
    tr_dataset_free(&r->all);
    tr_dataset_free(&r->test);
    r->m = NULL;
}

int dist_ckpt_save(tr_rank *r, const dist_optstate *os, int epoch, int64_t batch, int64_t step,
                   const tr_epoch_sums *sums, char *path, size_t pathlen)
{
    const tr_options *o = r->o;
    if (!o->checkpoint_dir[0]) return HF_ENOTFOUND;
    tr_ckpt c = {
        .arch_hash = r->m->arch_hash, .epoch = epoch, .batch = batch, .step = step,
        .loss_sum = sums->loss_sum, .loss_count = sums->loss_count, .correct = sums->correct, .seen = sums->seen,
        .rng = {o->seed, 0, 0, 0}, .optim_t = os->t,
        .n_params = r->m->n_params, .n_bufs = r->m->n_bufs, .n_state = os->n,
        .params = r->m->params, .bufs = r->m->bufs, .state = (float *)os->state,
    };
    return tr_ckpt_save(o->checkpoint_dir, o->keep_checkpoints, &c, path, pathlen);
}

void dist_report_epoch(tr_rank *r, const dist_optstate *os, const dist_pos *pos, double samples_per_s,
                       double train_time, const char *where, tr_report *rep, char *path, size_t pathlen)
{
    double t0 = hf_mono_s();
    tr_report_epoch(rep, &r->be, r->o, &r->val, &r->test_view, pos->epoch, r->target, pos->step, r->spe,
                    &pos->sums, samples_per_s, where);
    tr_epoch_sums none = {0};
    if (dist_ckpt_save(r, os, pos->epoch + 1, 0, pos->step, &none, path, pathlen) == 0) rep->checkpoint = path;
    rep->epoch_seconds = train_time + (hf_mono_s() - t0);
    tr_report_print(stdout, rep);
}

void dist_report_stop(tr_rank *r, const dist_optstate *os, const dist_pos *pos, int always)
{
    char path[TR_PATH_MAX + 64];
    int saved = dist_ckpt_save(r, os, pos->epoch, pos->this_batch, pos->step, &pos->sums, path, sizeof path) == 0;
    if (saved || always) tr_report_ckpt(saved ? path : NULL, pos->step, pos->epoch + (double)pos->this_batch / r->spe);
}

int dist_should_stop(const tr_rank *r, int64_t step)
{
    return tr_stop_requested() || (r->o->max_steps > 0 && step >= r->o->max_steps);
}

void dist_step_done(const tr_rank *r, dist_pos *pos, double loss_sum, int64_t hits, int64_t rows, int64_t *samples,
                    int64_t next_batch, double lr, double t0, double scale)
{
    pos->sums.loss_sum += loss_sum;
    pos->sums.loss_count += rows;
    pos->sums.correct += hits;
    pos->sums.seen += rows;
    *samples += rows;
    pos->step++;
    if (r->rank != 0 || r->o->log_every <= 0 || pos->step % r->o->log_every) return;
    const tr_epoch_sums *s = &pos->sums;
    tr_report_step(pos->step, pos->epoch + (double)next_batch / r->spe,
                   s->loss_count ? s->loss_sum / s->loss_count : NAN, lr, *samples / (hf_mono_s() - t0) * scale);
}

int dist_epochs(tr_rank *r, tr_loader *ld, dist_pos *pos, const dist_loop *lp, int *stopped)
{
    *stopped = 0;
    for (int64_t batch = pos->this_batch; pos->epoch < r->target; pos->epoch++, batch = 0) {
        tr_loader_seek(ld, pos->epoch, batch);
        double t0 = hf_mono_s();
        int64_t samples = 0;
        int st = DIST_STEP_OK;
        while (ld->batch < r->spe) {
            pos->this_batch = ld->batch;
            if ((st = lp->step(r, lp->ctx, t0, &samples)) != DIST_STEP_OK) break;
        }
        if (st == DIST_STEP_FAIL || st == DIST_STEP_COMM) return st;
        *stopped = st == DIST_STEP_STOP;
        if ((st = lp->epoch_end(r, lp->ctx, *stopped, hf_mono_s() - t0, samples))) return st;
        if (*stopped) break;
    }
    return DIST_STEP_OK;
}

/* Chief: load the newest usable checkpoint into params/bufs/state (any may
 * be NULL to skip). RET 0 with res->found set (0 when there is none). */
static int ckpt_load(tr_rank *r, float *params, float *bufs, float *state, size_t n_state, tr_resume *res)
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
    res->pos = (dist_pos){(int)c.epoch, c.step, c.batch, {c.loss_sum, c.loss_count, c.correct, c.seen}};
    res->optim_t = c.optim_t;
    hf_info("resumed from %s: epoch %d, batch %lld, step %lld", path, res->pos.epoch, (long long)c.batch,
            (long long)c.step);
    tr_ckpt_clear(&c);
    return 0;
}

int dist_exit_status(const tr_rank *r, int st, int stopped, const char *who)
{
    if (st == DIST_STEP_COMM) fprintf(stderr, "hyperfarm-train: %s %d: %s\n", who, r->rank, tr_coll_errmsg(r->coll));
    if (st == DIST_STEP_COMM || st == DIST_STEP_FAIL) return TR_EXIT_ERROR;
    if (!stopped || !tr_stop_requested()) return TR_EXIT_OK;
    return tr_stop_was_requested_by_searcher(r->o->checkpoint_dir) ? TR_EXIT_OK : TR_EXIT_SIGTERM;
}

/* Broadcast the resume position (doubles) from rank 0. */
static int resume_bcast(tr_coll *c, tr_resume *res)
{
    const dist_pos *p = &res->pos;
    double v[9] = {res->found, p->epoch, (double)p->this_batch, (double)p->step, p->sums.loss_sum,
                   (double)p->sums.loss_count, (double)p->sums.correct, (double)p->sums.seen, (double)res->optim_t};
    int rc = tr_coll_broadcast(c, v, sizeof v, 0);
    if (rc) return rc;
    res->found = (int)v[0];
    res->pos = (dist_pos){(int)v[1], (int64_t)v[3], (int64_t)v[2], {v[4], (int64_t)v[5], (int64_t)v[6], (int64_t)v[7]}};
    res->optim_t = (int64_t)v[8];
    return 0;
}

int dist_start(tr_rank *r, float *state, size_t n_state, tr_resume *res)
{
    tr_model *m = r->m;
    tr_coll *c = r->coll;
    int rc;
    memset(res, 0, sizeof *res);
    if (r->rank == 0 && r->o->resume) ckpt_load(r, m->params, m->bufs, state, n_state, res);
    if ((rc = resume_bcast(c, res)) || (rc = tr_coll_broadcast(c, m->params, m->n_params * 4, 0)) ||
        (m->n_bufs && (rc = tr_coll_broadcast(c, m->bufs, m->n_bufs * 4, 0))) ||
        (n_state && (rc = tr_coll_broadcast(c, state, n_state * 4, 0))))
        return rc;
    return 0;
}
