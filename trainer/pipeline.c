/*
 * pipeline.c — --mode pipeline: model parallelism, GPipe style.
 *
 * The model's layers are cut into `world` consecutive ranges, balanced by
 * parameter count (a proxy for FLOPs in dense and conv layers); stage s
 * owns layers [a_s, b_s) and their contiguous slice of the parameters and
 * optimizer state. Each global batch of G rows is cut into M micro-batches
 * (default 2 x stages, HF_MICROBATCHES overrides). Per step:
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
#include "dist_int.h"

#include "hf_err.h"
#include "hf_log.h"
#include "hf_time.h"
#include "optim.h"

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

int dist_run_pipeline(tr_rank *r)
{
    const tr_options *o = r->o;
    tr_model *m = r->m;
    tr_coll *c = r->coll;
    int S = r->world, s = r->rank, L = m->n_layers, status = TR_EXIT_ERROR, rc = 0;
    int chief = s == 0, first = s == 0, last = s == S - 1;
    if (S > L) {
        fprintf(stderr, "hyperfarm-train: pipeline of %d stages but the model has only %d layers\n", S, L);
        return TR_EXIT_ERROR;
    }
    int bounds[TR_MAX_LAYERS + 1];
    partition(m, S, bounds);
    int a = bounds[s], b = bounds[s + 1];
    size_t poff = param_at(m, a), pcnt = param_at(m, b) - poff;
    size_t boff = buf_at(m, a), bcnt = buf_at(m, b) - boff;
    int G = o->batch_size;
    const char *env = getenv("HF_MICROBATCHES");
    int M = env && atoi(env) > 0 ? atoi(env) : 2 * S;
    if (M > G) M = G;
    size_t win = act_width(m, a), wout = act_width(m, b), wx = act_width(m, 0);

    tr_optim opt;
    memset(&opt, 0, sizeof opt);
    tr_loader ld;
    memset(&ld, 0, sizeof ld);
    float *X = malloc((size_t)G * wx * sizeof(float));
    int32_t *Y = malloc((size_t)G * sizeof(int32_t));
    float *stash = malloc((size_t)G * win * sizeof(float));          /* inputs, or d(inputs) on the last stage */
    float *gacc = malloc((pcnt ? pcnt : 1) * sizeof(float));
    float *tmp = malloc((m->n_params + m->n_bufs + 1) * sizeof(float));
    float *full_state = NULL;
    if (!X || !Y || !stash || !gacc || !tmp || tr_optim_init(&opt, o, pcnt ? pcnt : 1)) {
        fprintf(stderr, "hyperfarm-train: out of memory\n");
        goto end;
    }
    size_t per = opt.n_state / opt.n;   /* state floats per parameter: 0, 1 or 2 (same on every stage) */
    full_state = calloc(per * m->n_params + 1, sizeof(float));
    if (!full_state || tr_loader_init(&ld, &r->train, G, 0, 1, o->seed, 1)) goto end;
    ld.flip = o->flip;
    ld.shift = o->shift;
    hf_info("pipeline stage %d/%d: layers [%d, %d), %zu params, %d micro-batches of a %d-row batch", s, S, a, b,
            pcnt, M, G);

    tr_resume res;
    memset(&res, 0, sizeof res);
    if (chief && o->resume) dist_ckpt_load(r, m->params, m->bufs, full_state, per * m->n_params, &res);
    {
        double v[9] = {res.found, res.epoch, (double)res.batch, (double)res.step, res.loss_sum,
                       (double)res.loss_count, (double)res.correct, (double)res.seen, (double)res.optim_t};
        if ((rc = tr_coll_broadcast(c, v, sizeof v, 0))) goto comm_fail;
        res.found = (int)v[0]; res.epoch = (int)v[1]; res.batch = (int64_t)v[2]; res.step = (int64_t)v[3];
        res.loss_sum = v[4]; res.loss_count = (int64_t)v[5]; res.correct = (int64_t)v[6];
        res.seen = (int64_t)v[7]; res.optim_t = (int64_t)v[8];
    }
    if ((rc = tr_coll_broadcast(c, m->params, m->n_params * 4, 0)) ||
        (m->n_bufs && (rc = tr_coll_broadcast(c, m->bufs, m->n_bufs * 4, 0))) ||
        (per && (rc = tr_coll_broadcast(c, full_state, per * m->n_params * 4, 0))))
        goto comm_fail;
    for (size_t k = 0; k < per && pcnt; k++)
        memcpy(opt.state + k * pcnt, full_state + k * m->n_params + poff, pcnt * sizeof(float));
    opt.t = res.optim_t;

    int64_t step = res.step, batch = res.batch, this_batch = batch;
    double loss_sum = res.loss_sum;
    int64_t loss_count = res.loss_count, correct = res.correct, seen = res.seen;
    int epoch = res.epoch, stopped = 0;
    char path[TR_PATH_MAX + 64];
    for (; epoch < r->target && !stopped; epoch++, batch = 0) {
        tr_loader_seek(&ld, epoch, batch);
        double t0 = hf_mono_s();
        int64_t samples = 0;
        for (;;) {
            if (ld.batch >= r->spe) break;
            this_batch = ld.batch;
            int local_stop = tr_stop_requested() || (o->max_steps > 0 && step >= o->max_steps);
            int gb = 0, rows;
            int64_t rb;
            double loss = 0;
            int hits = 0;
            if (!local_stop) {
                /* first and last stages draw the batch (the last needs labels only) */
                if ((first || last) && !tr_loader_next(&ld, X, Y, &rows, &gb, &rb)) goto end;
                if (!first && !last) { ld.batch++; gb = G; }
                if (!first && !last) {
                    /* middle stages only need the row count: the batch is full except the last */
                    int64_t left = (int64_t)r->train.n - this_batch * G;
                    gb = left < G ? (int)left : G;
                }
                memset(gacc, 0, pcnt * sizeof(float));
                int mb = M < gb ? M : gb;
                for (int j = 0; j < mb; j++) {
                    int r0 = (int)((int64_t)gb * j / mb), r1 = (int)((int64_t)gb * (j + 1) / mb), nr = r1 - r0;
                    tr_layer_ctx lc = {.train = 1, .seed = o->seed, .step = step, .row_base = r0};
                    if (first) memcpy(m->act[0], X + (size_t)r0 * wx, (size_t)nr * wx * sizeof(float));
                    else if ((rc = tr_coll_recv(c, s - 1, TAG_ACT, m->act[a], (size_t)nr * win * 4, NULL, NULL)))
                        goto comm_fail;
                    if (!last) {
                        memcpy(stash + (size_t)r0 * win, m->act[a], (size_t)nr * win * sizeof(float));
                        tr_model_forward(m, a, b, nr, &lc);
                        if ((rc = tr_coll_send(c, s + 1, TAG_ACT, m->act[b], (size_t)nr * wout * 4))) goto comm_fail;
                    } else {
                        int h = 0;
                        tr_model_forward(m, a, L, nr, &lc);
                        loss += tr_softmax_xent(m->act[L], Y + r0, nr, m->n_classes, m->dact[L], gb, &h) * nr;
                        hits += h;
                        tr_model_backward(m, a, L, nr, &lc, NULL, NULL);
                        for (size_t k = 0; k < pcnt; k++) gacc[k] += m->grads[poff + k];
                        if (!first) memcpy(stash + (size_t)r0 * win, m->dact[a], (size_t)nr * win * sizeof(float));
                    }
                }
                if (last && !first)
                    for (int j = 0; j < mb; j++) {
                        int r0 = (int)((int64_t)gb * j / mb), r1 = (int)((int64_t)gb * (j + 1) / mb);
                        if ((rc = tr_coll_send(c, s - 1, TAG_GRAD, stash + (size_t)r0 * win,
                                               (size_t)(r1 - r0) * win * 4)))
                            goto comm_fail;
                    }
                if (!last)
                    for (int j = 0; j < mb; j++) {
                        int r0 = (int)((int64_t)gb * j / mb), r1 = (int)((int64_t)gb * (j + 1) / mb), nr = r1 - r0;
                        tr_layer_ctx lc = {.train = 1, .seed = o->seed, .step = step, .row_base = r0};
                        if ((rc = tr_coll_recv(c, s + 1, TAG_GRAD, m->dact[b], (size_t)nr * wout * 4, NULL, NULL)))
                            goto comm_fail;
                        memcpy(m->act[a], stash + (size_t)r0 * win, (size_t)nr * win * sizeof(float));
                        tr_model_forward(m, a, b, nr, &lc);   /* re-materialise */
                        tr_model_backward(m, a, b, nr, &lc, NULL, NULL);
                        for (size_t k = 0; k < pcnt; k++) gacc[k] += m->grads[poff + k];
                        if (!first &&
                            (rc = tr_coll_send(c, s - 1, TAG_GRAD, m->dact[a], (size_t)nr * win * 4)))
                            goto comm_fail;
                    }
                memcpy(m->grads + poff, gacc, pcnt * sizeof(float));
            }
            double sq = 0;
            for (size_t k = 0; k < pcnt && !local_stop; k++) sq += (double)gacc[k] * gacc[k];
            float ctl[5] = {(float)local_stop, (float)sq, last ? (float)loss : 0, last ? (float)hits : 0,
                            last && !local_stop ? (float)gb : 0};
            if ((rc = tr_coll_allreduce(c, ctl, 5, TR_COLL_SUM))) goto comm_fail;
            if (ctl[0] > 0) { stopped = 1; break; }
            double norm = sqrt((double)ctl[1]);
            if (o->clip_norm > 0 && norm > o->clip_norm) {
                float f = (float)(o->clip_norm / (norm + 1e-6));
                for (size_t k = 0; k < pcnt; k++) m->grads[poff + k] *= f;
            }
            double lr = tr_lr_at(o, step, r->spe);
            if (pcnt) tr_optim_step(&opt, m->params + poff, m->grads + poff, (float)lr);
            loss_sum += ctl[2];
            correct += (int64_t)ctl[3];
            loss_count += (int64_t)ctl[4];
            seen += (int64_t)ctl[4];
            samples += (int64_t)ctl[4];
            step++;
            if (chief && o->log_every > 0 && step % o->log_every == 0) {
                dist_report_step(step, epoch + (double)ld.batch / r->spe,
                                 loss_count ? loss_sum / loss_count : NAN, lr, samples / (hf_mono_s() - t0));
            }
        }
        double train_time = hf_mono_s() - t0;
        /* whole model on every rank (the chief evaluates and saves it) */
        if ((rc = gather_full(c, m->params, m->params + poff, m->n_params, poff, pcnt, tmp))) goto comm_fail;
        if (m->n_bufs && (rc = gather_full(c, m->bufs, m->bufs + boff, m->n_bufs, boff, bcnt, tmp))) goto comm_fail;
        for (size_t k = 0; k < per; k++)
            if ((rc = gather_full(c, full_state + k * m->n_params, opt.state + k * pcnt, m->n_params, poff, pcnt, tmp)))
                goto comm_fail;
        int64_t cb = stopped ? this_batch : 0;
        int ce = stopped ? epoch : epoch + 1;
        if (chief) {
            tr_report rep;
            tr_report_init(&rep);
            rep.step = step;
            rep.epoch = stopped ? epoch + (double)cb / r->spe : epoch + 1;
            if (!stopped) {
                rep.train_loss = loss_count ? loss_sum / loss_count : NAN;
                rep.train_acc = seen ? (double)correct / seen : NAN;
                rep.samples_per_s = train_time > 0 ? samples / train_time : NAN;
                rep.lr = tr_lr_at(o, step > 0 ? step - 1 : 0, r->spe);
                if (r->val.n > 0) tr_evaluate(m, &r->val, &rep.val_loss, &rep.val_acc);
                if (o->eval_test || epoch + 1 == r->target) {
                    double tl;
                    tr_evaluate(m, &r->test_view, &tl, &rep.test_acc);
                }
                hf_info("epoch %d/%d: train_loss %.4f val_acc %.4f test_acc %.4f, %.0f samples/s on %d stages",
                        epoch + 1, r->target, rep.train_loss, rep.val_acc, rep.test_acc, rep.samples_per_s, S);
            }
            if (dist_ckpt_save(r, m->params, m->bufs, full_state, per * m->n_params, opt.t, ce, cb, step,
                               stopped ? loss_sum : 0, stopped ? loss_count : 0, stopped ? correct : 0,
                               stopped ? seen : 0, path, sizeof path) == 0)
                rep.checkpoint = path;
            tr_report_print(stdout, &rep);
        }
        if (stopped) break;
        loss_sum = 0;
        loss_count = correct = seen = 0;
    }
    status = stopped && tr_stop_requested() ? dist_stop_status(o) : TR_EXIT_OK;
    goto end;
comm_fail:
    fprintf(stderr, "hyperfarm-train: stage %d: %s\n", s, tr_coll_errmsg(c));
    status = TR_EXIT_ERROR;
end:
    tr_loader_free(&ld);
    tr_optim_free(&opt);
    free(X);
    free(Y);
    free(stash);
    free(gacc);
    free(tmp);
    free(full_state);
    return status;
}
