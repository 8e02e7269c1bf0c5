/*
 * report.c — metric lines and the evaluation behind them (report.h).
 *
 * Every line goes through tr_report_print, so the JSON shape is made in one
 * place: members are written in a fixed order, NaN members are left out,
 * and stdout is flushed after each line (the agent reads it live).
 */
#include "report.h"

#include "hf_json.h"
#include "hf_log.h"
#include "optim.h"

#include <math.h>
#include <stdlib.h>

void tr_report_init(tr_report *r)
{
    r->step = -1;
    r->epoch = -1;
    r->train_loss = r->train_acc = r->val_loss = r->val_acc = r->test_acc = r->samples_per_s = r->lr = NAN;
    r->epoch_seconds = NAN;
    r->checkpoint = NULL;
}

void tr_report_print(FILE *f, const tr_report *r)
{
    json_t *j = json_object();
    if (r->step >= 0) json_object_set_new(j, "step", json_integer(r->step));
    if (r->epoch >= 0) json_object_set_new(j, "epoch", json_real(r->epoch));
    struct { const char *k; double v; } m[] = {
        {"train_loss", r->train_loss}, {"train_acc", r->train_acc}, {"val_loss", r->val_loss},
        {"val_acc", r->val_acc}, {"test_acc", r->test_acc}, {"samples_per_s", r->samples_per_s}, {"lr", r->lr},
        {"epoch_seconds", r->epoch_seconds},
    };
    for (size_t i = 0; i < sizeof m / sizeof m[0]; i++)
        if (isfinite(m[i].v)) json_object_set_new(j, m[i].k, json_real(m[i].v));
    if (r->checkpoint) json_object_set_new(j, "checkpoint", json_string(r->checkpoint));
    char *s = json_dumps(j, JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(9));
    if (s) {
        fprintf(f, "HYPERFARM %s\n", s);
        fflush(f);
    }
    free(s);
    json_decref(j);
}

void tr_report_step(int64_t step, double epoch, double train_loss, double lr, double samples_per_s)
{
    tr_report rep = {.step = step, .epoch = epoch, .train_loss = train_loss, .train_acc = NAN, .val_loss = NAN,
                     .val_acc = NAN, .test_acc = NAN, .samples_per_s = samples_per_s, .lr = lr, .epoch_seconds = NAN,
                     .checkpoint = NULL};
    tr_report_print(stdout, &rep);
}

void tr_report_ckpt(const char *path, int64_t step, double epoch)
{
    tr_report rep;
    tr_report_init(&rep);
    rep.step = step;
    rep.epoch = epoch;
    rep.checkpoint = path;
    tr_report_print(stdout, &rep);
}

void tr_report_epoch(tr_report *rep, tr_backend *be, const tr_options *o, const tr_dataset *val,
                     const tr_dataset *test, int epoch, int target, int64_t step, int64_t spe,
                     const tr_epoch_sums *s, double samples_per_s, const char *where)
{
    tr_report_init(rep);
    rep->step = step;
    rep->epoch = epoch + 1;
    rep->train_loss = s->loss_count ? s->loss_sum / s->loss_count : NAN;
    rep->train_acc = s->seen ? (double)s->correct / s->seen : NAN;
    rep->samples_per_s = samples_per_s;
    rep->lr = tr_lr_at(o, step > 0 ? step - 1 : 0, spe);
    if (val->n > 0) tr_evaluate(be, val, &rep->val_loss, &rep->val_acc);
    if (o->eval_test || epoch + 1 == target) {
        double tl;
        tr_evaluate(be, test, &tl, &rep->test_acc);
    }
    hf_info("epoch %d/%d: train_loss %.4f val_acc %.4f test_acc %.4f, %.0f samples/s %s", epoch + 1, target,
            rep->train_loss, rep->val_acc, rep->test_acc, rep->samples_per_s, where);
}

void tr_evaluate(tr_backend *be, const tr_dataset *ds, double *loss, double *acc)
{
    tr_model *m = be->m;
    int B = m->max_batch;
    int32_t *idx = malloc((size_t)B * sizeof *idx), *y = malloc((size_t)B * sizeof *y);
    double lsum = 0;
    long hits = 0;
    if (!idx || !y || ds->n <= 0) {
        *loss = *acc = NAN;
        goto end;
    }
    for (int start = 0; start < ds->n; start += B) {
        int n = ds->n - start < B ? ds->n - start : B, c = 0;
        for (int i = 0; i < n; i++) idx[i] = start + i;
        tr_dataset_gather(ds, idx, n, m->act[0], y);
        double l;
        if (tr_backend_infer(be, m->act[0], y, n, &l, &c)) {
            tr_backend cpu;
            hf_warn("evaluation on the %s backend failed at row %d of %d; evaluating on the CPU", be->ops->name,
                    start, ds->n);
            tr_backend_cpu(&cpu, m);
            free(idx);
            free(y);
            tr_evaluate(&cpu, ds, loss, acc);
            return;
        }
        lsum += l * n;
        hits += c;
    }
    *loss = lsum / ds->n;
    *acc = (double)hits / ds->n;
end:
    free(idx);
    free(y);
}
