/*
 * hf_pool.h — a small fixed pool of named worker threads with a bounded
 * job queue: the one way a hyperfarm program runs job-shaped work off its
 * request threads (a checkpoint-retention pass, a restore, a context
 * preparation).
 *
 * A job is a function and an argument, with an optional key (a short
 * string such as "exp-12" or "ckpt 7/3") by which callers ask whether
 * equal work is already queued or running and may refuse duplicates.
 * Jobs start in submission order; with more than one thread they may run
 * at once. At most queue_max jobs wait (running ones do not count); a full
 * queue refuses a submit with HF_ETOOBIG, or, with HF_POOL_BLOCK, makes it
 * wait for room. Every worker thread carries the pool's name (hf_thread.h).
 *
 * Ownership: for every accepted job exactly one of run (on a pool thread)
 * or drop (on the thread that stops the pool, when a cancelling stop finds
 * it still queued) is called, once; either may free arg. A refused submit
 * calls neither: arg stays the caller's.
 *
 * Shutdown (hf_pool_stop, or hf_pool_free):
 *   HF_POOL_DRAIN  — new submits are refused; every queued job still runs
 *                    to its normal end; then the threads exit.
 *   HF_POOL_CANCEL — new submits are refused; queued jobs are dropped;
 *                    running jobs see hf_pool_stopping() == 1 and their
 *                    hf_pool_wait returns at once, so they end early;
 *                    the threads exit when their job returns.
 * Both wait until every thread has exited.
 */
#ifndef HF_POOL_H
#define HF_POOL_H

#include <stdint.h>

#define HF_POOL_KEY_MAX 63

typedef struct hf_pool hf_pool;

/* A job's body (run) or its cancellation (drop); p is the pool. */
typedef void (*hf_pool_fn)(hf_pool *p, void *arg);

enum {
    HF_POOL_BLOCK  = 1,   /* submit: wait for room instead of HF_ETOOBIG */
    HF_POOL_UNIQUE = 2,   /* submit: HF_EEXIST when a job with this key is queued or running */
};
enum { HF_POOL_DRAIN = 0, HF_POOL_CANCEL = 1 };

/* Start threads (1..64) workers named name (hf_thread.h rules), with room
 * for queue_max (>= 1) waiting jobs. NULL on a bad argument or failure. */
hf_pool *hf_pool_new(const char *name, int threads, int queue_max);

/* Queue run(p, arg).
 * IN  key: NULL or a string (copied, at most HF_POOL_KEY_MAX characters
 *     kept); drop: NULL or called instead of run when a cancelling stop
 *     finds the job queued; flags: HF_POOL_BLOCK | HF_POOL_UNIQUE.
 * RET 0 (accepted); HF_ETOOBIG (queue full, no HF_POOL_BLOCK); HF_EEXIST
 *     (HF_POOL_UNIQUE and the key is queued or running); HF_ESTATE (the
 *     pool is stopping, including while blocked); HF_EINVAL; HF_ENOMEM. */
int  hf_pool_submit(hf_pool *p, const char *key, hf_pool_fn run, hf_pool_fn drop, void *arg, int flags);
/* 1 when a job with key is queued or running, else 0. */
int  hf_pool_has(hf_pool *p, const char *key);
/* Jobs queued plus running. */
int  hf_pool_pending(hf_pool *p);
/* Wait up to ms until no job is queued or running. RET 0, or HF_ETIMEOUT. */
int  hf_pool_idle_wait(hf_pool *p, int64_t ms);

/* From a running job: has a cancelling stop been asked? */
int  hf_pool_stopping(hf_pool *p);
/* From a running job: sleep up to ms. RET 1 at once or early when a
 * cancelling stop is asked, else 0 after ms. */
int  hf_pool_wait(hf_pool *p, int64_t ms);

/* Stop as how says (HF_POOL_DRAIN or HF_POOL_CANCEL) and join the
 * threads. Not from a pool thread. Idempotent; NULL is fine. */
void hf_pool_stop(hf_pool *p, int how);
/* hf_pool_stop(p, HF_POOL_CANCEL) unless stopped already; wait for
 * submitters blocked in hf_pool_submit to leave; free. NULL is fine. */
void hf_pool_free(hf_pool *p);

#endif
