/*
 * ckretain.h — checkpoint retention and garbage collection of the
 * checkpoint store (docs/scheduler.md, "Checkpoint retention").
 *
 * Policy (the experiment file's "checkpoint_policy", defaults like
 * Determined's: keep_latest 1, keep_best_trials 1), applied to the
 * 'stored' checkpoint rows of each experiment:
 *
 *   - a trial that has not ended (QUEUED, ASSIGNED, RUNNING, PAUSED) keeps
 *     every checkpoint: a restart or a promotion resumes from its newest;
 *   - an ended trial (COMPLETED, FAILED, STOPPED, CANCELED) keeps its
 *     newest keep_latest checkpoints ("newest": highest step, then the
 *     latest row);
 *   - the best keep_best_trials ended trials of the experiment (by their
 *     best objective; trials without one never count) keep their best
 *     checkpoint: the one at the step of the best objective report, else
 *     their newest;
 *   - every ended trial keeps the checkpoint that scored its objective:
 *     the newest row at the step of the report its objective came from
 *     (the first report of its best value, with objective.aggregate
 *     "last" its last report; docs/guide.md "The objective");
 *   - an ended trial that may still be continued keeps its newest: the
 *     parent of a trial that has not ended (PBT), and every trial of an
 *     ASHA or PBT experiment that is still ACTIVE or PAUSED (a promotion
 *     or an exploit may pick it later; the full policy applies once the
 *     experiment has ended);
 *   - an archived experiment keeps nothing.
 *
 * Everything else is deleted: the rows first, in one transaction that
 * also read the state they were decided on, then each object no row names
 * any more (ckstore_release: refcounted by the rows, shared objects stay).
 * A crash between the two leaves objects without rows; at start,
 * ckretain_gc_orphans removes every object no row names whose file is
 * older than a grace period (which also removes the object of a crash
 * between an upload's rename and its row).
 *
 * Threads: one background thread ("hf-ckretain", ckretain_start) runs the startup GC,
 * then a pass every interval, or sooner when kicked; a pass does nothing
 * unless events, checkpoint rows or their count changed since the last
 * one. ckretain_sweep may also be called from any thread (it serialises
 * with the background pass). Its own two SQLite connections: one for the
 * passes, one for the usage queries of the API.
 */
#ifndef HF_CKRETAIN_H
#define HF_CKRETAIN_H

#include "scheduler/store/ckstore.h"

#include <stddef.h>
#include <stdint.h>

typedef struct ckretain ckretain;

typedef struct ckretain_policy {
    int64_t keep_latest;        /* newest checkpoints kept per ended trial */
    int64_t keep_best_trials;   /* best ended trials whose best checkpoint is kept */
} ckretain_policy;

/* ---- the decision (pure; table-tested) ---- */

typedef struct ckr_trial {
    int64_t id;
    int     ended;       /* COMPLETED, FAILED, STOPPED or CANCELED */
    int     needed;      /* its newest must stay (may be continued) */
    int     has_obj;
    double  norm;        /* best objective, oriented so that higher is better */
    int64_t best_step;   /* step of the report that scored the objective, -1 = unknown */
} ckr_trial;

typedef struct ckr_ckpt {
    size_t  trial;       /* index into the trials */
    int64_t row_id;
    int64_t step;
    int     keep;        /* OUT: 1 keep, 0 delete */
} ckr_ckpt;

/* Decide which checkpoints stay. ck[] is grouped by trial, and within a
 * trial ordered oldest first (step, then row id). archived: keep none. */
void ckretain_decide(const ckretain_policy *p, int archived, const ckr_trial *trials, size_t ntrials, ckr_ckpt *ck,
                     size_t nck);

/* ---- the collector ---- */

typedef struct ckretain_stats {
    int64_t sweeps;          /* passes that looked at the rows */
    int64_t rows_deleted;    /* checkpoint rows deleted by the policy */
    int64_t objects_freed;   /* object files removed (policy, deletes, orphans) */
    int64_t bytes_freed;
} ckretain_stats;

/* Storage used by one experiment: the distinct objects its rows name. */
typedef struct ckretain_usage {
    int64_t experiment_id;
    int64_t objects, bytes;
} ckretain_usage;

/* Open the collector of store ck (borrowed, outlives it) on the migrated
 * database db_path. interval_ms: time between passes of the thread;
 * grace_ms: age below which an unnamed object is left alone at start.
 * RET 0 with *out, or HF_E* with a message in err. */
int  ckretain_open(ckstore *ck, const char *db_path, int64_t interval_ms, int64_t grace_ms, ckretain **out,
                   char *err, size_t errlen);
/* Stop the thread (if started) and free. NULL ok. */
void ckretain_close(ckretain *cr);
/* Start the background thread (startup GC, then passes). RET 0 or HF_E*. */
int  ckretain_start(ckretain *cr);
/* Wake the thread for a pass now (after a trial ended, an archive...). */
void ckretain_kick(ckretain *cr);
/* One pass now, on this thread; force: even when nothing changed.
 * RET 0 or HF_E* (the first failure; other experiments are still done). */
int  ckretain_sweep(ckretain *cr, int force);
/* Remove every object that no row names and whose file is older than
 * grace_ms. *objects / *bytes (may be NULL): what was removed. RET 0 or HF_E*. */
int  ckretain_gc_orphans(ckretain *cr, int64_t grace_ms, int64_t *objects, int64_t *bytes);
void ckretain_get_stats(ckretain *cr, ckretain_stats *out);

/* Per-experiment usage, ordered by experiment id, of every experiment
 * that has stored checkpoints. RET 0 with *out (caller frees) and *n, or
 * HF_EDB / HF_ENOMEM. */
int ckretain_usage_all(ckretain *cr, ckretain_usage **out, size_t *n);
/* The usage of one experiment (zeros when it has none). RET 0 or HF_EDB. */
int ckretain_usage_of(ckretain *cr, int64_t experiment_id, ckretain_usage *out);

/* The distinct objects experiment_id's rows name (to free them once a
 * delete removed the rows): *out is a malloc'ed array of *n hashes.
 * RET 0, HF_EDB, HF_ENOMEM. */
int ckretain_objects_of(ckretain *cr, int64_t experiment_id, char (**out)[CKSTORE_HASH_LEN + 1], size_t *n);
/* ckstore_release every one of the n hashes (kept when still named);
 * adds to the stats. RET 0 or the first HF_E*. */
int ckretain_release(ckretain *cr, const char (*hashes)[CKSTORE_HASH_LEN + 1], size_t n);

#endif
