/*
 * train.c — the single-process training loop (train.h).
 *
 * One step: draw a batch (deterministic from seed, epoch, batch index),
 * forward, softmax cross-entropy, backward, optional clipping, optimizer
 * step. Per epoch: validation and test evaluation, a metric line, and a
 * checkpoint. Everything that influences the weights is a function of the
 * options and the position (epoch, batch, step), which is what makes a
 * resumed run bit-identical to an uninterrupted one.
 */
#include "train.h"

#include "backend.h"
#include "blas.h"
#include "ckpt.h"
#include "device.h"
#include "hf_err.h"
#include "hf_json.h"
#include "hf_log.h"
#include "hf_time.h"
#include "optim.h"

#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>

/* ---- stop requests ------------------------------------------------------ */

static volatile sig_atomic_t stop_flag;

static void on_signal(int sig)
{
    (void)sig;
    stop_flag = 1;
}

void tr_signals_install(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
}

int tr_stop_requested(void) { return stop_flag != 0; }
void tr_stop_request(void) { stop_flag = 1; }

int tr_stop_was_requested_by_searcher(const char *dir)
{
    if (!dir || !*dir) return 0;
    char path[TR_PATH_MAX + 32];
    snprintf(path, sizeof path, "%s/../control.json", dir);
    json_error_t je;
    json_t *j = json_load_file(path, 0, &je);
    if (!j) return 0;
    int yes = json_is_true(json_object_get(j, "should_stop")) || json_is_true(json_object_get(j, "stop"));
    json_decref(j);
    return yes;
}

/* ---- the loop ------------------------------------------------------------ */

typedef struct run {
    const tr_options *o;
    tr_model *m;
    tr_backend be;            /* chosen once, from --device */
    tr_optim opt;
    tr_loader ld;
    tr_dataset all, test, train, val, test_view;
    int64_t step, spe;
    int epoch, target;
    double loss_sum;
    int64_t loss_count, correct, seen;
    int32_t *y;
    char path[TR_PATH_MAX + 64];   /* the last checkpoint written */
} run;

static int save_ckpt(run *r, int epoch, int64_t batch)
{
    const tr_options *o = r->o;
    tr_ckpt c = {
        .arch_hash = r->m->arch_hash, .epoch = epoch, .batch = batch, .step = r->step,
        .loss_sum = r->loss_sum, .loss_count = r->loss_count, .correct = r->correct, .seen = r->seen,
        .rng = {o->seed, 0, 0, 0}, .optim_t = r->opt.t,
        .n_params = r->m->n_params, .n_bufs = r->m->n_bufs, .n_state = r->opt.n_state,
        .params = r->m->params, .bufs = r->m->bufs, .state = r->opt.state,
    };
    return tr_ckpt_save(o->checkpoint_dir, o->keep_checkpoints, &c, r->path, sizeof r->path);
}

static int run_setup(run *r, const tr_options *o)
{
    char err[512];
    int rc;
    r->o = o;
    if ((rc = tr_data_load(o->data, &r->all, &r->test, err, sizeof err))) {
        fprintf(stderr, "hyperfarm-train: data: %s\n", err);
        return rc;
    }
    tr_dataset limited;
    tr_dataset_head(&r->all, o->limit_train, &limited);
    int val = o->val_size;
    if (val >= limited.n) {
        fprintf(stderr, "hyperfarm-train: --val-size %d leaves no training samples of %d\n", val, limited.n);
        return HF_EINVAL;
    }
    tr_dataset_split(&limited, val, &r->train, &r->val);
    tr_dataset_head(&r->test, o->limit_test, &r->test_view);
    r->m = tr_model_from_options(o, o->batch_size, err, sizeof err);
    if (!r->m) {
        fprintf(stderr, "hyperfarm-train: %s\n", err);
        return HF_EINVAL;
    }
    if (r->all.n_classes > r->m->n_classes || r->all.h != 28 || r->all.w != 28) {
        fprintf(stderr, "hyperfarm-train: data has %d classes of %dx%d images; models take 28x28, %d classes\n",
                r->all.n_classes, r->all.h, r->all.w, r->m->n_classes);
        return HF_EINVAL;
    }
    if ((rc = tr_optim_init(&r->opt, o, r->m->n_params))) {
        fprintf(stderr, "hyperfarm-train: optimizer: %s\n", hf_strerror(rc));
        return rc;
    }
    if ((rc = tr_loader_init(&r->ld, &r->train, o->batch_size, 0, 1, o->seed, 1))) return rc;
    r->ld.flip = o->flip;
    r->ld.shift = o->shift;
    r->spe = tr_loader_batches(&r->ld);
    r->y = malloc((size_t)o->batch_size * sizeof(int32_t));
    return r->y ? 0 : HF_ENOMEM;
}

static void run_free(run *r)
{
    tr_backend_close(&r->be);
    tr_model_free(r->m);
    tr_optim_free(&r->opt);
    tr_loader_free(&r->ld);
    tr_dataset_free(&r->all);
    tr_dataset_free(&r->test);
    free(r->y);
}

static int run_resume(run *r, int64_t *batch)
{
    tr_ckpt c;
    char path[TR_PATH_MAX + 64];
    *batch = 0;
    if (!r->o->checkpoint_dir[0]) return 0;
    if (tr_ckpt_load_latest(r->o->checkpoint_dir, r->m->arch_hash, r->m->n_params, r->m->n_bufs, r->opt.n_state, &c,
                            path, sizeof path)) {
        hf_info("no usable checkpoint in %s: starting from scratch", r->o->checkpoint_dir);
        return 0;
    }
    memcpy(r->m->params, c.params, c.n_params * sizeof(float));
    memcpy(r->m->bufs, c.bufs, c.n_bufs * sizeof(float));
    if (c.n_state) memcpy(r->opt.state, c.state, c.n_state * sizeof(float));
    r->opt.t = c.optim_t;
    r->epoch = (int)c.epoch;
    *batch = c.batch;
    r->step = c.step;
    r->loss_sum = c.loss_sum;
    r->loss_count = c.loss_count;
    r->correct = c.correct;
    r->seen = c.seen;
    hf_info("resumed from %s: epoch %d, batch %lld, step %lld", path, r->epoch, (long long)*batch,
            (long long)r->step);
    tr_ckpt_clear(&c);
    return 0;
}

/* Copy the backend's params, BN buffers and optimizer state into the host
 * model before the host reads them (evaluation, checkpoint). */
static int run_sync(run *r)
{
    if (tr_backend_sync(&r->be, &r->opt) == 0) return 0;
    fprintf(stderr, "hyperfarm-train: cannot copy the model back from the %s backend\n", r->be.ops->name);
    return HF_EIO;
}

/* Save a checkpoint at (epoch, batch) after syncing; RET 0 when written. */
static int run_ckpt(run *r, int epoch, int64_t batch)
{
    return run_sync(r) == 0 && save_ckpt(r, epoch, batch) == 0 ? 0 : -1;
}

/* One step on the batch the loader drew (rows of gb, from row_base):
 * forward, loss, backward, clipping, optimizer. RET 0, or -1 (printed). */
static int run_step(run *r, int rows, int gb, int64_t row_base, double lr, double *loss, int *hits)
{
    const tr_options *o = r->o;
    tr_layer_ctx c = {.train = 1, .seed = o->seed, .step = r->step, .row_base = row_base};
    int rc = tr_backend_step(&r->be, r->m->act[0], r->y, rows, gb, &c, NULL, NULL, loss, hits);
    if (!rc && o->clip_norm > 0) rc = tr_backend_clip(&r->be, o->clip_norm, NULL);
    if (!rc) rc = tr_backend_optim_step(&r->be, &r->opt, 0, (float)lr);
    if (rc) {
        fprintf(stderr, "hyperfarm-train: %s step failed at step %lld\n", r->be.ops->name, (long long)r->step);
        return -1;
    }
    if (!isfinite(*loss)) {
        fprintf(stderr, "hyperfarm-train: loss is %g at step %lld (lr too high?)\n", *loss, (long long)r->step);
        return -1;
    }
    return 0;
}

/* The steps of one epoch from the loader's position, until its end, a stop
 * request or --max-steps (*stopped). OUT *busy (seconds computing),
 * *samples. RET 0 or -1 (failed, printed). */
static int run_epoch_steps(run *r, int *stopped, double *busy, int64_t *samples)
{
    const tr_options *o = r->o;
    for (;;) {
        if (tr_stop_requested() || (o->max_steps > 0 && r->step >= o->max_steps)) {
            *stopped = 1;
            return 0;
        }
        double ts = hf_mono_s(), loss = 0;
        int rows, gb, hits = 0;
        int64_t row_base;
        if (!tr_loader_next(&r->ld, r->m->act[0], r->y, &rows, &gb, &row_base)) return 0;
        double lr = tr_lr_at(o, r->step, r->spe);
        if (run_step(r, rows, gb, row_base, lr, &loss, &hits)) return -1;
        *busy += hf_mono_s() - ts;
        r->loss_sum += loss * rows;
        r->loss_count += rows;
        r->correct += hits;
        r->seen += rows;
        *samples += rows;
        r->step++;
        if (o->log_every > 0 && r->step % o->log_every == 0)
            tr_report_step(r->step, r->epoch + (double)r->ld.batch / r->spe, r->loss_sum / r->loss_count, lr,
                           *busy > 0 ? *samples / *busy : NAN);
        if (o->checkpoint_every > 0 && r->step % o->checkpoint_every == 0 && r->ld.batch < r->spe &&
            run_ckpt(r, r->epoch, r->ld.batch) == 0)
            tr_report_ckpt(r->path, r->step, r->epoch + (double)r->ld.batch / r->spe);
    }
}

/* The end of epoch r->epoch: evaluate, checkpoint, print the epoch line.
 * t0: when the epoch began. RET 0 or -1 (the backend failed, printed). */
static int run_epoch_end(run *r, double t0, double busy, int64_t samples)
{
    double train_time = hf_mono_s() - t0;
    if (run_sync(r)) return -1;
    tr_report rep;
    char where[32];
    snprintf(where, sizeof where, "(%.1f s)", train_time);
    tr_epoch_sums sums = {r->loss_sum, r->loss_count, r->correct, r->seen};
    tr_report_epoch(&rep, &r->be, r->o, &r->val, &r->test_view, r->epoch, r->target, r->step, r->spe, &sums,
                    busy > 0 ? samples / busy : NAN, where);
    r->loss_sum = 0;
    r->loss_count = r->correct = r->seen = 0;
    if (save_ckpt(r, r->epoch + 1, 0) == 0) rep.checkpoint = r->path;
    /* What the epoch cost the slot: training, evaluation and checkpoint
     * (from the resume point when the run resumed mid-epoch). */
    rep.epoch_seconds = hf_mono_s() - t0;
    tr_report_print(stdout, &rep);
    return 0;
}

/* A stop before the epoch budget: checkpoint where the run stands. RET the
 * exit status. */
static int run_stopped(run *r)
{
    const tr_options *o = r->o;
    int by_signal = tr_stop_requested();
    if (run_ckpt(r, r->epoch, r->ld.batch) == 0)
        tr_report_ckpt(r->path, r->step, r->epoch + (double)r->ld.batch / r->spe);
    if (!by_signal) {
        hf_info("stopped at --max-steps %d", o->max_steps);
        return TR_EXIT_OK;
    }
    int asked = tr_stop_was_requested_by_searcher(o->checkpoint_dir);
    hf_info("stopped by signal at step %lld%s", (long long)r->step,
            asked ? " (requested by the searcher): exit 0" : ": exit 143");
    return asked ? TR_EXIT_OK : TR_EXIT_SIGTERM;
}

/* Set up data, model, backend (dev as tr_device_select resolved it) and
 * the resume point. OUT *batch (the batch to resume at). RET 0 or -1 (printed). */
static int run_start(run *r, const tr_options *o, int dev, int64_t *batch)
{
    char err[512];
    if (run_setup(r, o)) return -1;
    if (tr_backend_select(&r->be, dev, o->device, r->m, err, sizeof err)) {
        fprintf(stderr, "hyperfarm-train: --device cuda: %s\n", err);
        return -1;
    }
    hf_info("model %s: %zu parameters; %d train / %d val / %d test samples; %lld steps per epoch; %d BLAS threads",
            r->m->desc, r->m->n_params, r->train.n, r->val.n, r->test_view.n, (long long)r->spe,
            tr_blas_get_threads());
    *batch = 0;
    if (o->resume) run_resume(r, batch);
    if (tr_backend_load(&r->be, &r->opt)) {
        fprintf(stderr, "hyperfarm-train: cannot copy the model to the %s backend\n", r->be.ops->name);
        return -1;
    }
    r->target = tr_options_target_epochs(o);
    return 0;
}

int tr_train_main(const tr_options *o)
{
    char err[512];
    run r;
    memset(&r, 0, sizeof r);
    int status = TR_EXIT_ERROR, stopped = 0;
    int dev = tr_device_select(o->device, err, sizeof err);
    if (dev < 0) {
        fprintf(stderr, "hyperfarm-train: %s\n", err);
        return TR_EXIT_ERROR;
    }
    tr_blas_threads(o->threads);
    tr_signals_install();
    int64_t batch = 0;
    if (run_start(&r, o, dev, &batch)) goto end;
    for (; r.epoch < r.target && !stopped; r.epoch++, batch = 0) {
        tr_loader_seek(&r.ld, r.epoch, batch);
        double t0 = hf_mono_s(), busy = 0;
        int64_t samples = 0;
        if (run_epoch_steps(&r, &stopped, &busy, &samples)) goto end;
        if (stopped) break;
        if (run_epoch_end(&r, t0, busy, samples)) goto end;
    }
    status = stopped ? run_stopped(&r) : TR_EXIT_OK;
end:
    run_free(&r);
    return status;
}
