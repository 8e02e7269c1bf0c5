/*
 * options.h — every setting of hyperfarm-train in one struct, shared by the
 * single-process trainer (train.c) and the distributed runner (dist.c).
 *
 * Sources, lowest precedence first:
 *   1. defaults (tr_options_defaults)
 *   2. command-line flags: "--name value", "--name=value"; booleans
 *      "--name" / "--no-name" / "--name=true|false"
 *   3. HYPERFARM_HPARAMS, a JSON object whose keys are the flag names with
 *      '-' written '_' ("batch_size": 128). The searcher's per-trial values
 *      win over the fixed command of the experiment file. Unknown keys and
 *      ill-typed values are errors naming the key.
 *   4. the trial environment (docs/trainer.md, "Options"): HYPERFARM_MAX_EPOCHS (or
 *      HYPERFARM_BUDGET) sets how many epochs to run; HYPERFARM_CHECKPOINT_DIR
 *      sets checkpoint_dir when no flag gave one and, under an agent
 *      (HYPERFARM_TRIAL_ID set), turns on resume; HYPERFARM_RANK,
 *      HYPERFARM_WORLD_SIZE (or OMPI_COMM_WORLD_RANK/SIZE) fill rank/world.
 *
 * The struct holds only values (fixed-size strings, no pointers), so it can
 * be copied, memcmp'd and sent to another process as bytes.
 */
#ifndef TR_OPTIONS_H
#define TR_OPTIONS_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define TR_MAX_HIDDEN   16      /* MLP hidden layers / CNN conv blocks */
#define TR_PATH_MAX     1024
#define TR_NAME_MAX     16

typedef struct tr_options {
    /* model */
    char    model[TR_NAME_MAX];          /* "mlp" | "cnn" */
    int     hidden[TR_MAX_HIDDEN];       /* MLP hidden widths, e.g. 256,128 */
    int     n_hidden;
    int     channels[TR_MAX_HIDDEN];     /* CNN conv channels per block, e.g. 32,64 */
    int     n_channels;
    int     fc;                          /* CNN dense head width (0 = none) */
    double  dropout;                     /* drop probability before each hidden dense */
    int     batch_norm;                  /* bool: BN after each conv / hidden dense */

    /* optimisation */
    int     epochs;                      /* epochs to run; also the LR schedule horizon */
    int     batch_size;                  /* global batch (split across ranks) */
    double  lr;
    char    optimizer[TR_NAME_MAX];      /* "sgd" | "adam" | "adamw" */
    double  momentum;                    /* SGD momentum */
    int     nesterov;                    /* bool */
    double  beta1, beta2, eps;           /* Adam */
    double  weight_decay;                /* L2 (sgd, adam) or decoupled (adamw) */
    char    lr_schedule[TR_NAME_MAX];    /* "none" | "cosine" | "step" */
    double  warmup_epochs;               /* linear warm-up, fractional epochs allowed */
    int     step_size;                   /* "step": decay every step_size epochs */
    double  step_gamma;                  /* "step": multiply by this */
    double  min_lr;                      /* "cosine": floor */
    double  clip_norm;                   /* clip global grad L2 norm (0 = off) */

    /* data */
    char    data[TR_PATH_MAX];           /* directory of the four IDX .gz files */
    int     val_size;                    /* last N training samples held out */
    int     limit_train;                 /* use only the first N training samples (0 = all) */
    int     limit_test;                  /* evaluate on the first N test samples (0 = all) */
    int     flip;                        /* bool: random horizontal flips */
    int     shift;                       /* random shifts of up to N pixels */

    /* run */
    int     threads;                     /* BLAS threads (0 = all cores) */
    char    device[TR_NAME_MAX];         /* "cpu" | "cuda" | "auto" */
    uint64_t seed;
    char    checkpoint_dir[TR_PATH_MAX]; /* "" = no checkpoints */
    int     resume;                      /* bool: continue from newest valid checkpoint */
    int     checkpoint_every;            /* also checkpoint every N steps (0 = per epoch only) */
    int     keep_checkpoints;            /* newest N kept */
    int     log_every;                   /* metric line every N steps (0 = per epoch only) */
    int     max_steps;                   /* stop after N global steps (0 = no limit; tests) */
    int     eval_test;                   /* bool: report test_acc each epoch (else only at end) */

    /* distributed (docs/distributed.md; consumed by dist.c) */
    int     nproc;                       /* local workers to launch (1 = single process) */
    char    mode[TR_NAME_MAX];           /* "" | "sync" | "async" | "pipeline":
                                            tr_options_mode gives the enum */
    char    backend[TR_NAME_MAX];        /* "tcp" | "mpi" | "nccl" */
    int     ps;                          /* parameter servers (async) */
    int     staleness;                   /* SSP bound (-1 = unbounded) */
    double  timeout;                     /* seconds a collective may wait */

    /* from the environment, not flags */
    int     budget_epochs;               /* HYPERFARM_MAX_EPOCHS/BUDGET, 0 = unset */
    int     rank, world;                 /* HYPERFARM_RANK/WORLD_SIZE or OMPI_*; 0/1 default */
    int     under_agent;                 /* HYPERFARM_TRIAL_ID is set */
    char    log_level[TR_NAME_MAX];
} tr_options;

/* The distributed modes ("" means sync). */
enum tr_mode { TR_MODE_SYNC = 0, TR_MODE_ASYNC, TR_MODE_PIPELINE };

/*
 * Tuning of the distributed modes that is not a flag (docs/distributed.md):
 * read from the environment once, when the distributed runner starts, and
 * handed to the modes from there.
 */
typedef struct tr_dist_tuning {
    int bucket_kib;      /* sync: gradient bucket size, KiB (HF_BUCKET_KIB; 128) */
    int microbatches;    /* pipeline: micro-batches per batch (HF_MICROBATCHES;
                            0: two per stage) */
} tr_dist_tuning;

/* Fill o with the defaults. */
void tr_options_defaults(tr_options *o);

/* Parse argv[1..] then the hparams JSON text (may be NULL) into o (which the
 * caller initialised with tr_options_defaults). No environment is read.
 * RET 0; 1 when --help was asked (usage is the caller's); HF_EINVAL with a
 * message in err naming the flag or key ("HYPERFARM_HPARAMS: key 'lr': ..."). */
int tr_options_parse(tr_options *o, int argc, char **argv, const char *hparams,
                     char *err, size_t errlen);

/* Apply the trial environment (see the header comment). RET 0 or HF_EINVAL
 * with err naming the variable. */
int tr_options_from_env(tr_options *o, char *err, size_t errlen);

/* Defaults + argv + $HYPERFARM_HPARAMS + environment, in that order; the
 * seed is $HYPERFARM_SEED when neither argv nor HYPERFARM_HPARAMS set it. */
#define TR_SEED_UNSET UINT64_MAX
int tr_options_load(tr_options *o, int argc, char **argv, char *err, size_t errlen);

/* Number of epochs this process must reach: the budget if set, else epochs. */
int tr_options_target_epochs(const tr_options *o);

/* Does this invocation ask for distributed training (nproc > 1, a --mode,
 * or a world size > 1 in the environment)? */
int tr_options_is_distributed(const tr_options *o);

/* o->mode as an enum. RET 0, or HF_EINVAL for a string that is not a mode
 * (tr_options_parse already refuses those; callers that fill o by hand
 * may not). */
int tr_options_mode(const tr_options *o, int *mode);
const char *tr_options_mode_name(int mode);

/* Defaults, then HF_BUCKET_KIB / HF_MICROBATCHES from the environment. */
void tr_options_tuning(tr_dist_tuning *t);

void tr_options_usage(FILE *f);
/* One-line JSON of the effective options (logged at start). */
void tr_options_print(FILE *f, const tr_options *o);

#endif
