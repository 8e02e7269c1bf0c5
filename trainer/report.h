/*
 * report.h — the metric lines of hyperfarm-train ("HYPERFARM {json}" on
 * stdout, docs/trainer.md "Output") and the evaluation behind them, one
 * builder per kind of line, shared by the single-process loop (train.c)
 * and every distributed mode (dist_sync.c, dist_async.c, dist_pipeline.c):
 *
 *   step line        every --log-every steps: step, epoch, train_loss,
 *                    lr, samples_per_s
 *   checkpoint line  a checkpoint written between epoch ends (or the
 *                    position where a stopped run ended)
 *   epoch line       at each epoch's end: train loss and accuracy, lr,
 *                    validation and test metrics, throughput, the epoch's
 *                    wall-clock seconds, checkpoint
 */
#ifndef TR_REPORT_H
#define TR_REPORT_H

#include "backend.h"
#include "data.h"
#include "model.h"
#include "options.h"

#include <stdint.h>
#include <stdio.h>

/* A report line; members that are NaN (or < 0 for step/epoch) are left out. */
typedef struct tr_report {
    int64_t step;
    double  epoch;
    double  train_loss, train_acc, val_loss, val_acc, test_acc, samples_per_s, lr;
    double  epoch_seconds;    /* epoch lines: wall-clock seconds the epoch cost (training,
                                 evaluation, checkpoint), what a cost-aware searcher reads */
    const char *checkpoint;   /* path or NULL */
} tr_report;

/* The running sums of the training rows since the epoch began (or since
 * the checkpoint it resumed from). */
typedef struct tr_epoch_sums {
    double  loss_sum;      /* sum over rows of the loss */
    int64_t loss_count;    /* rows in loss_sum */
    int64_t correct;       /* rows predicted right */
    int64_t seen;          /* rows */
} tr_epoch_sums;

/* All members NaN / -1 / NULL. */
void tr_report_init(tr_report *r);
/* Print "HYPERFARM {...}\n" to f and flush. */
void tr_report_print(FILE *f, const tr_report *r);

/* Print a step line (lr NaN: left out). */
void tr_report_step(int64_t step, double epoch, double train_loss, double lr, double samples_per_s);
/* Print a line with the position and the checkpoint path (NULL: none). */
void tr_report_ckpt(const char *path, int64_t step, double epoch);

/*
 * Fill rep for the end of epoch `epoch` (0-based) of `target`: step,
 * epoch + 1, train loss/accuracy from s, lr of the last step (schedule of
 * spe steps per epoch), samples_per_s as given, val_loss/val_acc on val
 * (when it has rows) and test_acc on test (with --eval-test, or at the
 * last epoch), evaluated on the backend be (tr_evaluate).
 * Logs "epoch e/target: ... samples/s <where>". The caller adds the
 * checkpoint and prints rep.
 */
void tr_report_epoch(tr_report *rep, tr_backend *be, const tr_options *o, const tr_dataset *val,
                     const tr_dataset *test, int epoch, int target, int64_t step, int64_t spe,
                     const tr_epoch_sums *s, double samples_per_s, const char *where);

/* Mean loss and accuracy of be's model over ds in batches of its
 * max_batch (inference mode: no dropout, BN running stats), on the
 * backend's copy of the model (tr_backend_infer); should a batch fail
 * there, the evaluation is redone on the CPU backend with the host model,
 * which the caller has synced, and a warning says so. */
void tr_evaluate(tr_backend *be, const tr_dataset *ds, double *loss, double *acc);

#endif
