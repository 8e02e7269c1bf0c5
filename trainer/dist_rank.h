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

/* Chief: write a checkpoint of full-model params/bufs and optimizer state
 * (laid out as a single-process optimizer over all parameters would be).
 * path receives the file name. RET 0 or HF_E*. */
int  dist_ckpt_save(tr_rank *r, const float *params, const float *bufs, const float *state, size_t n_state,
                    int64_t optim_t, int epoch, int64_t batch, int64_t step, const tr_epoch_sums *sums,
                    char *path, size_t pathlen);

/* The exit status after a stop request (0 when the searcher asked). */
int  dist_stop_status(const tr_options *o);

#endif
