/*
 * dist_int.h — what the distributed modes share: one rank's state (its
 * communicator, data, model) and the chief's helpers for reports and
 * checkpoints. dist.c holds the launcher, the common set-up and --mode
 * sync; pipeline.c --mode pipeline; ps.c --mode async.
 */
#ifndef TR_DIST_INT_H
#define TR_DIST_INT_H

#include "ckpt.h"
#include "coll.h"
#include "data.h"
#include "model.h"
#include "options.h"
#include "train.h"

#include <stdint.h>

typedef struct tr_rank {
    const tr_options *o;
    tr_coll   *coll;
    int        rank, world;
    tr_dataset all, test, train, val, test_view;
    tr_model  *m;
    int64_t    spe;          /* global batches per epoch */
    int        target;       /* epochs to reach */
} tr_rank;

/* Position and running sums restored from a checkpoint (or zeros). */
typedef struct tr_resume {
    int      found;
    int      epoch;
    int64_t  batch, step;
    double   loss_sum;
    int64_t  loss_count, correct, seen;
    int64_t  optim_t;
} tr_resume;

/* Load data and build the model for max_batch rows. RET 0 or HF_E*
 * (message printed). */
int  dist_setup(tr_rank *r, const tr_options *o, int max_batch);
void dist_free(tr_rank *r);

/* Chief: write a checkpoint of full-model params/bufs and optimizer state
 * (laid out as a single-process optimizer over all parameters would be).
 * path receives the file name. RET 0 or HF_E*. */
int  dist_ckpt_save(tr_rank *r, const float *params, const float *bufs, const float *state, size_t n_state,
                    int64_t optim_t, int epoch, int64_t batch, int64_t step, double loss_sum,
                    int64_t loss_count, int64_t correct, int64_t seen, char *path, size_t pathlen);
/* Chief: load the newest usable checkpoint into params/bufs/state (any may
 * be NULL to skip). RET 0 with res->found set (0 when there is none). */
int  dist_ckpt_load(tr_rank *r, float *params, float *bufs, float *state, size_t n_state, tr_resume *res);

/* Chief: print the every --log-every steps metric line (step, epoch, loss, lr, rate). */
void dist_report_step(int64_t step, double epoch, double train_loss, double lr, double samples_per_s);

/* Chief: print a "checkpoint" metric line. */
void dist_report_ckpt(const char *path, int64_t step, double epoch);

/* The exit status after a stop request (0 when the searcher asked). */
int  dist_stop_status(const tr_options *o);

int  dist_run_sync(tr_rank *r);
int  dist_run_pipeline(tr_rank *r);
int  dist_run_async(tr_rank *r);

#endif
