/*
 * train.h — the single-process training loop and the pieces the
 * distributed modes reuse: evaluation, metric lines, stop requests.
 *
 * Exit statuses of hyperfarm-train (docs/trainer.md):
 *   0    completed the epoch budget, or stopped by SIGTERM/SIGINT after the
 *        searcher asked for it (control.json says "should_stop": true) —
 *        a checkpoint was written first
 *   143  stopped by SIGTERM without such a request (checkpoint written);
 *        the agent treats it as a failure and may restart from the checkpoint
 *   1    error (bad flags, missing data, no usable CUDA GPU, ...)
 */
#ifndef TR_TRAIN_H
#define TR_TRAIN_H

#include "data.h"
#include "model.h"
#include "options.h"

#include <stdint.h>
#include <stdio.h>

#define TR_EXIT_OK       0
#define TR_EXIT_ERROR    1
#define TR_EXIT_SIGTERM  143

/* A report line; members that are NaN (or < 0 for step/epoch) are left out. */
typedef struct tr_report {
    int64_t step;
    double  epoch;
    double  train_loss, train_acc, val_loss, val_acc, test_acc, samples_per_s, lr;
    const char *checkpoint;   /* path or NULL */
} tr_report;

/* All members NaN / -1 / NULL. */
void tr_report_init(tr_report *r);
/* Print "HYPERFARM {...}\n" to f and flush (DESIGN.md §4). */
void tr_report_print(FILE *f, const tr_report *r);

/* Mean loss and accuracy of m over ds in batches of m->max_batch
 * (inference mode: no dropout, BN running stats). */
void tr_evaluate(tr_model *m, const tr_dataset *ds, double *loss, double *acc);

/* SIGTERM/SIGINT set a flag the loop polls between steps. */
void tr_signals_install(void);
int  tr_stop_requested(void);
void tr_stop_request(void);   /* tests: behave as if SIGTERM arrived */
/* Did the searcher ask for the stop? Reads
 * $HYPERFARM_CHECKPOINT_DIR/../control.json ({"should_stop": true}). */
int  tr_stop_was_requested_by_searcher(const char *checkpoint_dir);

/* Run single-process training as the options say. RET an exit status above. */
int  tr_train_main(const tr_options *o);

#endif
