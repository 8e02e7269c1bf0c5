/*
 * dist_pipeline.c — --mode pipeline: model parallelism, GPipe style.
 *
 * The model's layers are cut into `world` consecutive ranges, balanced by
 * parameter count (a proxy for FLOPs in dense and conv layers); stage s
 * owns layers [a_s, b_s) and their contiguous slice of the parameters and
 * optimizer state. Each global batch of G rows is cut into M micro-batches
 * (default 2 x stages; tune.microbatches, HF_MICROBATCHES, overrides).
 * Per step:
 *
 *   forward phase   stage 0 loads the batch; each stage runs its layers on
 *                   micro-batch j and sends the output on, then goes on to
 *                   j+1 while the next stage works on j: stages overlap.
 *   backward phase  the last stage computes the loss on each micro-batch
 *                   as it arrives and runs its backward at once; the others
 *                   receive d(output) per micro-batch, re-run their forward
 *                   on the stashed input (GPipe re-materialisation: layer
 *                   scratch such as dropout masks and pooling argmax is
 *                   per forward, so it must be rebuilt), run backward and
 *                   pass d(input) back.
 *
 * Losses are scaled by 1/G and parameter gradients summed over the
 * micro-batches, so a step applies the single-process update (up to float
 * summation order). Dropout masks are keyed by the global row, so they
 * match too. Batch norm does not: its batch statistics are per micro-batch
 * (and the re-run forward updates running statistics a second time).
 *
 * The last stage sends its d(input) messages only after it has received
 * every micro-batch of the forward phase, so two neighbours never both
 * block on full socket buffers. One 5-float allreduce per step carries
 * (stop requested, squared gradient norm, loss sum, hits, rows): every
 * stage stops at the same step and gradient clipping uses the global norm.
 * At epoch ends the stages' slices are summed into full arrays so the chief
 * evaluates and checkpoints the whole model (same file format as a single
 * process: a pipeline run can resume a single-process checkpoint and back).
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

enum { TAG_ACT = 1, TAG_GRAD = 2 };

static size_t act_width(const tr_model *m, int i)
{
    return i < m->n_layers ? tr_shape_size(m->layers[i].in) : tr_shape_size(m->layers[m->n_layers - 1].out);
}

static size_t param_at(const tr_model *m, int i)
{
    return i < m->n_layers ? m->layers[i].param_off : m->n_params;
}

static size_t buf_at(const tr_model *m, int i)
{
    return i < m->n_layers ? m->layers[i].buf_off : m->n_bufs;
}

/* Cut n_layers into S ranges, balancing parameters: bounds[0..S]. */
static void partition(const tr_model *m, int S, int *bounds)
{
    int L = m->n_layers;
    double total = 0;
    for (int i = 0; i < L; i++) total += (double)m->layers[i].param_count + 1;
    bounds[0] = 0;
    double acc = 0;
    int i = 0;
    for (int s = 0; s < S - 1; s++) {
        double goal = total * (s + 1) / S;
        size_t mine = 0;
        /* at least one layer per stage (one with parameters when there is
         * one), parameter-free layers (ReLU, pooling) stay with the layer
         * before them, and every later stage keeps at least one layer */
        do {
            acc += (double)m->layers[i].param_count + 1;
            mine += m->layers[i].param_count;
            i++;
        } while (i < L - (S - 1 - s) &&
                 (!mine || !m->layers[i].param_count || acc + ((double)m->layers[i].param_count + 1) / 2 < goal));
        bounds[s + 1] = i;
    }
    bounds[S] = L;
}

/* Sum each stage's slice into full arrays on every rank: full = slices. */
static int gather_full(tr_coll *c, float *full, const float *mine, size_t n, size_t off, size_t cnt, float *tmp)
{
    memset(tmp, 0, n * sizeof(float));
    memcpy(tmp + off, mine, cnt * sizeof(float));
    int rc = tr_coll_allreduce(c, tmp, n, TR_COLL_SUM);
    if (!rc) memcpy(full, tmp, n * sizeof(float));
    return rc;
}

/* One stage's state for the whole run. */
typedef struct pipe_run {
    tr_rank      *r;
    int           S, s, a, b;       /* stages, this stage, its layers [a, b) */
    int           first, last;
    size_t        poff, pcnt;       /* its parameters */
    size_t        boff, bcnt;       /* its BN buffers */
    size_t        win, wout, wx;    /* floats per row: its input, its output, the model's input */
    int           G, M;             /* global batch, micro-batches */
    size_t        per;              /* optimizer state floats per parameter */
    tr_optim      opt;              /* over [poff, +pcnt) */
    tr_loader     ld;
    float        *X;                /* (G, wx) the batch (first stage) */
    int32_t      *Y;                /* (G) its labels (last stage) */
    float        *stash;            /* (G, win) inputs, or d(inputs) on the last stage */
    float        *gacc;             /* (pcnt) gradients summed over micro-batches */
    float        *tmp;              /* (n_params + n_bufs + 1) gather scratch */
    float        *full_state;       /* (per * n_params) the whole optimizer state */
    dist_pos      pos;
    char          path[TR_PATH_MAX + 64];
} pipe_run;

static void mb_rows(int gb, int mb, int j, int *r0, int *nr)
{
    *r0 = (int)((int64_t)gb * j / mb);
    *nr = (int)((int64_t)gb * (j + 1) / mb) - *r0;
}

/* Forward phase over mb micro-batches of gb rows; the last stage also
 * computes the loss and runs its backward per micro-batch.
 * OUT *loss (sum over rows), *hits. RET 0 or HF_E*. */
static int pipe_forward(pipe_run *p, int gb, int mb, double *loss, int *hits)
{
    tr_model *m = p->r->m;
    tr_coll *c = p->r->coll;
    int a = p->a, L = m->n_layers, rc;
    for (int j = 0; j < mb; j++) {
        int r0, nr;
        mb_rows(gb, mb, j, &r0, &nr);
        tr_layer_ctx lc = {.train = 1, .seed = p->r->o->seed, .step = p->pos.step, .row_base = r0};
        if (p->first) memcpy(m->act[0], p->X + (size_t)r0 * p->wx, (size_t)nr * p->wx * sizeof(float));
        else if ((rc = tr_coll_recv(c, p->s - 1, TAG_ACT, m->act[a], (size_t)nr * p->win * 4, NULL, NULL)))
            return rc;
        if (!p->last) {
            memcpy(p->stash + (size_t)r0 * p->win, m->act[a], (size_t)nr * p->win * sizeof(float));
            tr_backend_forward(&p->r->be, a, p->b, nr, &lc);
            if ((rc = tr_coll_send(c, p->s + 1, TAG_ACT, m->act[p->b], (size_t)nr * p->wout * 4))) return rc;
        } else {
            int h = 0;
            double l = 0;
            tr_backend_forward(&p->r->be, a, L, nr, &lc);
            tr_backend_xent(&p->r->be, p->Y + r0, nr, gb, 1, &l, &h);
            *loss += l * nr;
            *hits += h;
            tr_backend_backward(&p->r->be, a, L, nr, &lc, NULL, NULL);
            for (size_t k = 0; k < p->pcnt; k++) p->gacc[k] += m->grads[p->poff + k];
            if (!p->first) memcpy(p->stash + (size_t)r0 * p->win, m->dact[a], (size_t)nr * p->win * sizeof(float));
        }
    }
    return 0;
}

/* Backward phase: the last stage sends the d(input)s it stashed; the
 * others receive d(output), re-run forward on the stashed input (GPipe
 * re-materialisation), run backward and pass d(input) on. RET 0 or HF_E*. */
static int pipe_backward(pipe_run *p, int gb, int mb)
{
    tr_model *m = p->r->m;
    tr_coll *c = p->r->coll;
    int a = p->a, b = p->b, rc;
    if (p->last) {
        for (int j = 0; j < mb && !p->first; j++) {
            int r0, nr;
            mb_rows(gb, mb, j, &r0, &nr);
            if ((rc = tr_coll_send(c, p->s - 1, TAG_GRAD, p->stash + (size_t)r0 * p->win, (size_t)nr * p->win * 4)))
                return rc;
        }
        return 0;
    }
    for (int j = 0; j < mb; j++) {
        int r0, nr;
        mb_rows(gb, mb, j, &r0, &nr);
        tr_layer_ctx lc = {.train = 1, .seed = p->r->o->seed, .step = p->pos.step, .row_base = r0};
        if ((rc = tr_coll_recv(c, p->s + 1, TAG_GRAD, m->dact[b], (size_t)nr * p->wout * 4, NULL, NULL))) return rc;
        memcpy(m->act[a], p->stash + (size_t)r0 * p->win, (size_t)nr * p->win * sizeof(float));
        tr_backend_forward(&p->r->be, a, b, nr, &lc);   /* re-materialise */
        tr_backend_backward(&p->r->be, a, b, nr, &lc, NULL, NULL);
        for (size_t k = 0; k < p->pcnt; k++) p->gacc[k] += m->grads[p->poff + k];
        if (!p->first && (rc = tr_coll_send(c, p->s - 1, TAG_GRAD, m->dact[a], (size_t)nr * p->win * 4)))
            return rc;
    }
    return 0;
}

/* dist_loop.step: one global step on every stage (DIST_STEP_FAIL: the
 * loader failed). */
static int pipe_step(tr_rank *r, void *ctx, double t0, int64_t *samples)
{
    pipe_run *p = ctx;
    int local_stop = dist_should_stop(r, p->pos.step);
    const tr_options *o = r->o;
    tr_model *m = r->m;
    int gb = 0, rows, hits = 0;
    int64_t rb;
    double loss = 0;
    if (!local_stop) {
        /* first and last stages draw the batch (the last needs labels only) */
        if ((p->first || p->last) && !tr_loader_next(&p->ld, p->X, p->Y, &rows, &gb, &rb)) return DIST_STEP_FAIL;
        if (!p->first && !p->last) {
            /* middle stages only need the row count: the batch is full except the last */
            p->ld.batch++;
            int64_t left = (int64_t)r->train.n - p->pos.this_batch * p->G;
            gb = left < p->G ? (int)left : p->G;
        }
        memset(p->gacc, 0, p->pcnt * sizeof(float));
        int mb = p->M < gb ? p->M : gb;
        if (pipe_forward(p, gb, mb, &loss, &hits) || pipe_backward(p, gb, mb)) return DIST_STEP_COMM;
        memcpy(m->grads + p->poff, p->gacc, p->pcnt * sizeof(float));
    }
    double sq = 0;
    for (size_t k = 0; k < p->pcnt && !local_stop; k++) sq += (double)p->gacc[k] * p->gacc[k];
    float ctl[5] = {(float)local_stop, (float)sq, p->last ? (float)loss : 0, p->last ? (float)hits : 0,
                    p->last && !local_stop ? (float)gb : 0};
    if (tr_coll_allreduce(r->coll, ctl, 5, TR_COLL_SUM)) return DIST_STEP_COMM;
    if (ctl[0] > 0) return DIST_STEP_STOP;
    double norm = sqrt((double)ctl[1]);
    if (o->clip_norm > 0 && norm > o->clip_norm) {
        float f = (float)(o->clip_norm / (norm + 1e-6));
        for (size_t k = 0; k < p->pcnt; k++) m->grads[p->poff + k] *= f;
    }
    double lr = tr_lr_at(o, p->pos.step, r->spe);
    if (p->pcnt) tr_backend_optim_step(&r->be, &p->opt, p->poff, (float)lr);
    dist_step_done(r, &p->pos, ctl[2], (int64_t)ctl[3], (int64_t)ctl[4], samples, p->ld.batch, lr, t0, 1);
    return DIST_STEP_OK;
}

/* dist_loop.epoch_end: the whole model on every rank (the chief evaluates
 * and saves it); then the chief reports and checkpoints an epoch's end, or
 * where a stopped run stands. */
static int pipe_epoch_end(tr_rank *r, void *ctx, int stopped, double train_time, int64_t samples)
{
    pipe_run *p = ctx;
    tr_model *m = r->m;
    tr_coll *c = r->coll;
    if (gather_full(c, m->params, m->params + p->poff, m->n_params, p->poff, p->pcnt, p->tmp) ||
        (m->n_bufs && gather_full(c, m->bufs, m->bufs + p->boff, m->n_bufs, p->boff, p->bcnt, p->tmp)))
        return DIST_STEP_COMM;
    for (size_t k = 0; k < p->per; k++)
        if (gather_full(c, p->full_state + k * m->n_params, p->opt.state + k * p->pcnt, m->n_params, p->poff,
                        p->pcnt, p->tmp))
            return DIST_STEP_COMM;
    if (r->rank == 0) {
        dist_optstate os = {p->full_state, p->per * m->n_params, p->opt.t};
        tr_report rep;
        char where[32];
        snprintf(where, sizeof where, "on %d stages", p->S);
        if (stopped) dist_report_stop(r, &os, &p->pos, 1);
        else dist_report_epoch(r, &os, &p->pos, train_time > 0 ? samples / train_time : NAN, train_time, where, &rep,
                               p->path, sizeof p->path);
    }
    if (!stopped) p->pos.sums = (tr_epoch_sums){0};
    return DIST_STEP_OK;
}

/* Cut the model, allocate, draw nothing yet. RET 0 or TR_EXIT_ERROR (printed). */
static int pipe_init(pipe_run *p, tr_rank *r)
{
    const tr_options *o = r->o;
    tr_model *m = r->m;
    p->r = r;
    p->S = r->world;
    p->s = r->rank;
    p->first = p->s == 0;
    p->last = p->s == p->S - 1;
    if (p->S > m->n_layers) {
        fprintf(stderr, "hyperfarm-train: pipeline of %d stages but the model has only %d layers\n", p->S,
                m->n_layers);
        return TR_EXIT_ERROR;
    }
    int bounds[TR_MAX_LAYERS + 1];
    partition(m, p->S, bounds);
    p->a = bounds[p->s];
    p->b = bounds[p->s + 1];
    p->poff = param_at(m, p->a);
    p->pcnt = param_at(m, p->b) - p->poff;
    p->boff = buf_at(m, p->a);
    p->bcnt = buf_at(m, p->b) - p->boff;
    p->G = o->batch_size;
    p->M = r->tune.microbatches > 0 ? r->tune.microbatches : 2 * p->S;
    if (p->M > p->G) p->M = p->G;
    p->win = act_width(m, p->a);
    p->wout = act_width(m, p->b);
    p->wx = act_width(m, 0);
    p->X = malloc((size_t)p->G * p->wx * sizeof(float));
    p->Y = malloc((size_t)p->G * sizeof(int32_t));
    p->stash = malloc((size_t)p->G * p->win * sizeof(float));
    p->gacc = malloc((p->pcnt ? p->pcnt : 1) * sizeof(float));
    p->tmp = malloc((m->n_params + m->n_bufs + 1) * sizeof(float));
    if (!p->X || !p->Y || !p->stash || !p->gacc || !p->tmp || tr_optim_init(&p->opt, o, p->pcnt ? p->pcnt : 1)) {
        fprintf(stderr, "hyperfarm-train: out of memory\n");
        return TR_EXIT_ERROR;
    }
    p->per = p->opt.n_state / p->opt.n;   /* 0, 1 or 2 (same on every stage) */
    p->full_state = calloc(p->per * m->n_params + 1, sizeof(float));
    if (!p->full_state || tr_loader_init(&p->ld, &r->train, p->G, 0, 1, o->seed, 1)) return TR_EXIT_ERROR;
    p->ld.flip = o->flip;
    p->ld.shift = o->shift;
    hf_info("pipeline stage %d/%d: layers [%d, %d), %zu params, %d micro-batches of a %d-row batch", p->s, p->S,
            p->a, p->b, p->pcnt, p->M, p->G);
    return 0;
}

static void pipe_free(pipe_run *p)
{
    void *arrays[] = {p->X, p->Y, p->stash, p->gacc, p->tmp, p->full_state};
    tr_loader_free(&p->ld);
    tr_optim_free(&p->opt);
    for (size_t i = 0; i < sizeof arrays / sizeof arrays[0]; i++) free(arrays[i]);
}

int dist_pipeline_run(tr_rank *r)
{
    tr_model *m = r->m;
    int status = TR_EXIT_ERROR, stopped = 0, st;
    pipe_run p;
    memset(&p, 0, sizeof p);
    if (pipe_init(&p, r)) goto end;
    tr_resume res;
    if (dist_start(r, p.full_state, p.per * m->n_params, &res)) {
        status = dist_exit_status(r, DIST_STEP_COMM, 0, "stage");
        goto end;
    }
    for (size_t k = 0; k < p.per && p.pcnt; k++)
        memcpy(p.opt.state + k * p.pcnt, p.full_state + k * m->n_params + p.poff, p.pcnt * sizeof(float));
    p.opt.t = res.optim_t;
    p.pos = res.pos;
    dist_loop lp = {.ctx = &p, .step = pipe_step, .epoch_end = pipe_epoch_end};
    st = dist_epochs(r, &p.ld, &p.pos, &lp, &stopped);
    status = dist_exit_status(r, st, stopped, "stage");
end:
    pipe_free(&p);
    return status;
}
