/*
 * train.h — the single-process training loop, and the stop requests the
 * distributed modes share with it (metric lines and evaluation are in
 * report.h, included here).
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
#include "report.h"

#define TR_EXIT_OK       0
#define TR_EXIT_ERROR    1
#define TR_EXIT_SIGTERM  143

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
