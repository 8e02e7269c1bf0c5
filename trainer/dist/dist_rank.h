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

#include "trainer/backend.h"
#include "trainer/ckpt.h"
#include "trainer/coll.h"
#include "trainer/data.h"
#include "trainer/model.h"
#include "trainer/options.h"
#include "trainer/train.h"

#include <stdint.h>

typedef struct tr_rank {
    const tr_options *o;
    int        mode;         /* enum tr_mode */
    tr_dist_tuning tune;     /* read once by tr_dist_main */
    tr_coll   *coll;
    int        rank, world;
    tr_dataset all, test, train, val, test_view;
    tr_model  *m;
    tr_backend be;           /* compute: the CPU backend over m (the modes'
                                collectives and callbacks read host gradients) */
    int64_t    spe;          /* global batches per epoch */
    int        target;       /* epochs to reach */
} tr_rank;

/* Where a mode's run stands: what dist_epochs advances and what the
 * checkpoints and reports record. */
typedef struct dist_pos {
    int           epoch;       /* epoch in progress (0-based) */
    int64_t       step;        /* global steps done */
    int64_t       this_batch;  /* batch of the step in progress (not applied
                                  when a stop ended it: a resumed run starts
                                  there); at start, the batch to resume at */
    tr_epoch_sums sums;        /* of the epoch in progress */
} dist_pos;

/* What a checkpoint restored (or zeros). */
typedef struct tr_resume {
    int      found;
    dist_pos pos;
    int64_t  optim_t;
} tr_resume;

/* Load data, build the model for max_batch rows and open its compute
 * backend (the CPU's, whatever --device says). RET 0 or HF_E* (message
 * printed). */
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

/* Chief, at the end of epoch pos->epoch: the epoch line (tr_report_epoch;
 * `where` ends its log line), with the checkpoint of the epoch's end and
 * epoch_seconds = train_time plus the evaluation and checkpoint, is
 * printed. OUT *rep as printed (path must outlive it). */
void dist_report_epoch(tr_rank *r, const dist_optstate *os, const dist_pos *pos, double samples_per_s,
                       double train_time, const char *where, tr_report *rep, char *path, size_t pathlen);

/* Chief, when a stop ended the run at pos: checkpoint that position with
 * the running sums and print the position line — with always, also when
 * the checkpoint failed (then without a path). */
void dist_report_stop(tr_rank *r, const dist_optstate *os, const dist_pos *pos, int always);

/* Should this rank stop before step `step` (a signal, or --max-steps)? The
 * modes agree on it with a collective: one rank's answer stops them all. */
int  dist_should_stop(const tr_rank *r, int64_t step);

/* After a step: count it (loss_sum over rows, hits, rows) into pos and
 * *samples; the chief prints the step line every --log-every steps (lr
 * NaN: left out; next_batch: the loader's position, for the fractional
 * epoch; the rate: *samples since t0, times scale). */
void dist_step_done(const tr_rank *r, dist_pos *pos, double loss_sum, int64_t hits, int64_t rows, int64_t *samples,
                    int64_t next_batch, double lr, double t0, double scale);

/* What a mode's step answers to dist_epochs. */
enum { DIST_STEP_OK = 0, DIST_STEP_STOP, DIST_STEP_END, DIST_STEP_FAIL, DIST_STEP_COMM };

typedef struct dist_loop {
    void *ctx;
    /* One global step; t0: when the epoch began; *samples: training rows
     * so far this epoch. RET DIST_STEP_OK, _STOP (all ranks stop here),
     * _END (the data ended early: the epoch ends), _FAIL (message
     * printed) or _COMM (the communicator failed). */
    int (*step)(tr_rank *r, void *ctx, double t0, int64_t *samples);
    /* The end of an epoch, or of the run when stopped. Resets the mode's
     * running sums when not stopped. RET DIST_STEP_OK or _COMM. */
    int (*epoch_end)(tr_rank *r, void *ctx, int stopped, double train_time, int64_t samples);
} dist_loop;

/*
 * The epoch loop of every mode: from (pos->epoch, pos->this_batch) until
 * r->target, seek ld, step until the epoch's last batch (decided by
 * position, so the same on every rank), then epoch_end. Sets
 * pos->this_batch before each step and advances pos->epoch. OUT *stopped.
 * RET DIST_STEP_OK, _FAIL or _COMM.
 */
int  dist_epochs(tr_rank *r, tr_loader *ld, dist_pos *pos, const dist_loop *lp, int *stopped);

/* The exit status of a mode's run from what dist_epochs answered (st,
 * stopped): TR_EXIT_ERROR for DIST_STEP_FAIL, and for DIST_STEP_COMM after
 * printing the communicator's error naming this rank as "<who> <rank>";
 * after a stop by signal, 0 when the searcher asked for it, else 143;
 * otherwise 0. */
int  dist_exit_status(const tr_rank *r, int st, int stopped, const char *who);

#endif
