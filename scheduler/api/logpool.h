/*
 * logpool.h — the log-search pool: the threads ("hf-logsearch") that run ?grep= searches
 * (logsearch.h) so that the HTTP server's threads, which serve agents'
 * heartbeats and /healthz, never wait on one (docs/protocol.md "Log
 * search", docs/architecture.md "Threads").
 *
 * The HTTP handler submits a search and suspends its connection; a pool
 * thread runs it on a reader connection of the store and calls the job's
 * done callback, which resumes the connection; the handler, called again,
 * takes the result. Bounds: LOGPOOL_THREADS searches run at once, at most
 * LOGPOOL_MAX_JOBS are running or queued in all, and at most
 * LOGPOOL_PER_USER per user name; beyond either the submit is refused
 * with a Retry-After estimate (the API answers 429). A search's time
 * budget (LOGSEARCH_BUDGET_MS) counts from its submission, so a queued
 * search answers within the budget too. A client that hangs up (its
 * socket, polled every LOGPOOL_POLL_MS while the search is queued or
 * running, reports the peer closed) ends its search and frees its slot;
 * logpool_stop ends every search within one line's match.
 *
 * A job has two owners: the pool (until done has returned) and the
 * connection (until logjob_release). done is called exactly once per job,
 * never before logjob_arm.
 */
#ifndef HF_LOGPOOL_H
#define HF_LOGPOOL_H

#include "hf_json.h"
#include "scheduler/api/logsearch.h"
#include "scheduler/store/store.h"

#define LOGPOOL_THREADS  2
#define LOGPOOL_MAX_JOBS 8     /* running + queued, every user */
#define LOGPOOL_PER_USER 2     /* running + queued, one user name */
#define LOGPOOL_POLL_MS  100   /* how often a waiting client's socket is checked */
#define LOGPOOL_NICE     10    /* the pool threads' niceness: the HTTP threads come first */

typedef struct logpool logpool;
typedef struct logjob logjob;

/* Called from a pool thread (or from logjob_arm / logpool_stop) once the
 * job's result is ready; it must not call back into the pool. */
typedef void (*logjob_done_fn)(void *arg);

/* Start LOGPOOL_THREADS threads searching st. NULL on failure. */
logpool *logpool_new(store *st);
/* Stop: cancel every search (running ones stop within one line's match),
 * join the threads, and finish every armed job still queued (rc
 * HF_ESTATE, done called). Later submits are refused with HF_ESTATE.
 * Idempotent; NULL is fine. */
void logpool_stop(logpool *lp);
/* logpool_stop, then free. Every job must have been released. */
void logpool_free(logpool *lp);

/* Queue a search.
 * IN  user (the token's user name, copied), p (taken: freed with the job,
 *     or here when refused), q (copied; its stop is the pool's), fd (the
 *     client's socket, polled for a hang-up; -1: none), done/arg.
 * OUT *out: the job (a reference the caller gives back with
 *     logjob_release); *retry_s on HF_ETOOBIG: seconds after which a
 *     slot should be free (1..LOGSEARCH_BUDGET_MS/1000).
 * RET 0; HF_ETOOBIG with e saying which limit (the user's or the pool's);
 *     HF_ESTATE (stopping); HF_ENOMEM. The job runs only once armed. */
int  logpool_submit(logpool *lp, const char *user, logsearch_pat *p, const logsearch_query *q, int fd,
                    logjob_done_fn done, void *arg, logjob **out, int *retry_s, hf_jerr *e);
/* The caller is ready for done (its connection is suspended): the pool
 * may run the job. When the pool is stopping, done is called here. */
void logjob_arm(logpool *lp, logjob *j);
/* After done: the search's result, as logsearch_run returns it (HF_ECONN:
 * the client hung up; HF_ESTATE: the pool stopped), with *out taken by
 * the caller (NULL unless 0) and *e the error of HF_ETOOBIG. */
int  logjob_result(logjob *j, json_t **out, hf_jerr *e);
/* The caller is done with j: a search not yet done is cancelled, and the
 * reference is dropped (a job never armed leaves the pool at once, done
 * never called). NULL is fine. */
void logjob_release(logjob *j);

/* Searches running and queued now (for tests and /metrics). */
int  logpool_jobs(logpool *lp);

#endif
