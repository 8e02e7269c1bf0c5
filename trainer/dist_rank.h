/*
 * dist_rank.h — what the distributed modes share: one rank's state (its
 * communicator, data, model, tuning) and the helpers every mode uses to
 * start (resume and broadcast) and to checkpoint the whole job from the
 * chief. Implemented in dist_rank.c, which calls no mode.
 *
 * The files of the distributed runner and who calls whom (no cycle):
 *
 *   dist.c           tr_dist_main: parse the mode once, open the
 *                    communicator, run a mode  -> dist_launch.c, modes
 *   dist_launch.c    the launcher (fork/exec the ranks)
 *   dist_sync.c      --mode sync       \
 *   dist_async.c     --mode async       > each -> dist_rank.c, report.c
 *   dist_pipeline.c  --mode pipeline   /
 *   dist_rank.c      set-up, resume, checkpoints (this header)
 *
 * dist_modes.h declares the launcher's and the modes' entry points.
 */
#ifndef TR_DIST_RANK_H
#define TR_DIST_RANK_H

#include "ckpt.h"
#include "coll.h"
#include "data.h"
#include "model.h"
#include "options.h"
#include "train.h"

#include <stdint.h>

typedef struct tr_rank {
    const tr_options *o;
    int        mode;         /* enum tr_mode */
    tr_dist_tuning tune;     /* read once by tr_dist_main */
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
    tr_epoch_sums sums;      /* of the epoch in progress */
    int64_t  optim_t;
} tr_resume;

/* Load data and build the model for max_batch rows. RET 0 or HF_E*
 * (message printed). */
int  dist_setup(tr_rank *r, const tr_options *o, int max_batch);
void dist_free(tr_rank *r);

/*
 * Every mode's start: the chief loads the newest checkpoint when --resume
 * asks (params, bufs and state: n_state floats laid out as a
 * single-process optimizer's), then the position, the parameters, the
 * buffers and the state go from the chief to every rank, so all start
 * identical. OUT *res (zeros when nothing was resumed).
 * RET 0 or HF_E* of the communicator (tr_coll_errmsg says why).
 */
int  dist_start(tr_rank *r, float *state, size_t n_state, tr_resume *res);

/* The optimizer state of the whole model as a checkpoint holds it: n
 * floats laid out as a single-process optimizer over all parameters would
 * (whatever shards the mode keeps), and its step count. */
typedef struct dist_optstate {
    const float *state;
    size_t       n;
    int64_t      t;
} dist_optstate;

/* Chief: write a checkpoint of the model's params/bufs and os at position
 * (epoch, batch, step) with the running sums. path receives the file name.
 * RET 0 or HF_E* (HF_ENOTFOUND: checkpoints are off). */
int  dist_ckpt_save(tr_rank *r, const dist_optstate *os, int epoch, int64_t batch, int64_t step,
                    const tr_epoch_sums *sums, char *path, size_t pathlen);

/* Chief, at the end of epoch `epoch`: the epoch line (tr_report_epoch;
 * `where` ends its log line), with the checkpoint of the epoch's end, is
 * printed. OUT *rep as printed (path must outlive it). */
void dist_report_epoch(tr_rank *r, const dist_optstate *os, int epoch, int64_t step, const tr_epoch_sums *sums,
                       double samples_per_s, const char *where, tr_report *rep, char *path, size_t pathlen);

/* Chief, when a stop ended epoch `epoch` at `batch` (not applied: a
 * resumed run starts with it): checkpoint that position with the running
 * sums and print the position line — with always, also when the
 * checkpoint failed (then without a path). */
void dist_report_stop(tr_rank *r, const dist_optstate *os, int epoch, int64_t batch, int64_t step,
                      const tr_epoch_sums *sums, int always);

/* Should this rank stop before step `step` (a signal, or --max-steps)? The
 * modes agree on it with a collective: one rank's answer stops them all. */
int  dist_should_stop(const tr_rank *r, int64_t step);

/* Chief, every --log-every steps: the step line, with the running mean
 * loss of sums (lr NaN: left out). */
void dist_report_step(const tr_rank *r, int64_t step, double epoch, const tr_epoch_sums *sums, double lr,
                      double samples_per_s);

/* What a mode's step answers to dist_epochs. */
enum { DIST_STEP_OK = 0, DIST_STEP_STOP, DIST_STEP_END, DIST_STEP_FAIL, DIST_STEP_COMM };

typedef struct dist_loop {
    void *ctx;
    /* One global step; t0: when the epoch began; *samples: training rows
     * so far this epoch. RET DIST_STEP_OK, _STOP (all ranks stop here),
     * _END (the data ended early: the epoch ends), _FAIL (message
     * printed) or _COMM (the communicator failed). */
    int (*step)(void *ctx, double t0, int64_t *samples);
    /* The end of an epoch, or of the run when stopped. Resets the mode's
     * running sums when not stopped. RET DIST_STEP_OK or _COMM. */
    int (*epoch_end)(void *ctx, int stopped, double train_time, int64_t samples);
} dist_loop;

/*
 * The epoch loop of every mode: from (*epoch, batch) until r->target,
 * seek ld, step until the epoch's last batch (decided by position, so the
 * same on every rank), then epoch_end. OUT *epoch where it stopped,
 * *stopped. RET DIST_STEP_OK, _FAIL or _COMM.
 */
int  dist_epochs(tr_rank *r, tr_loader *ld, int *epoch, int64_t batch, const dist_loop *lp, int *stopped);

/* The exit status after a stop request (0 when the searcher asked). */
int  dist_stop_status(const tr_options *o);

#endif
