/*
 * metrics.h — the scheduler's own Prometheus metrics (text format 0.0.4),
 * documented in docs/scheduler.md "Metrics". Counters and histograms are
 * lock-free atomics updated from any thread; gauges that need the core's
 * state come in a sched_stats at scrape time, and the counters other
 * parts keep (the checkpoint store and retention, the connection guard,
 * failed self-checks) are read from them at scrape time too
 * (metrics_scrape).
 */
#ifndef HF_METRICS_H
#define HF_METRICS_H

#include "hf_buf.h"
#include "scheduler/api/api_guard.h"
#include "scheduler/core/sched.h"
#include "scheduler/store/ckretain.h"
#include "scheduler/store/ckstore.h"

#include <stdatomic.h>
#include <stdint.h>

#define METRICS_NBUCKETS 14

typedef struct metrics_hist {
    _Atomic uint64_t bucket[METRICS_NBUCKETS + 1];   /* last = +Inf */
    _Atomic uint64_t count;
    _Atomic uint64_t sum_us;
} metrics_hist;

typedef struct metrics_counters {
    _Atomic uint64_t http_requests[6];     /* by status class: 1xx..5xx, [0] other */
    _Atomic uint64_t heartbeats;
    _Atomic uint64_t heartbeats_repeated;  /* batches already committed, acknowledged only */
    _Atomic uint64_t heartbeats_grouped;   /* heartbeats that shared a later COMMIT (group commit) */
    _Atomic uint64_t metric_reports;       /* heartbeat metric items accepted */
    _Atomic uint64_t metric_points;        /* rows written */
    _Atomic uint64_t log_lines;
    _Atomic uint64_t items_dropped;        /* stale attempts, unknown trials, over bounds */
    _Atomic uint64_t trials_created;
    _Atomic uint64_t searcher_stops;
    _Atomic uint64_t store_errors;
    _Atomic uint64_t checkpoint_store_full;  /* uploads refused with 507: the store's disk is full */
    _Atomic uint64_t purged_rows;          /* rows of deleted experiments removed (sched_purge.c) */
    _Atomic int64_t  checkpoint_objects;   /* gauges: the checkpoint store (ckstore.h), set at scrape time */
    _Atomic int64_t  checkpoint_bytes;
    metrics_hist     request_latency;      /* seconds */
    metrics_hist     dispatch_latency;     /* trial ready -> started reported */
} metrics_counters;

extern metrics_counters metrics;

void metrics_observe(metrics_hist *h, int64_t us);
/* Append the whole exposition to b. RET 0 or HF_ETOOBIG/HF_ENOMEM. */
int  metrics_render(hf_buf *b, const sched_stats *st);

/* What a scrape reads besides the counters; any may be NULL (its lines
 * are left out, the checkpoint-store gauges keep their last values). */
typedef struct metrics_sources {
    ckstore   *ck;      /* hyperfarm_checkpoint_objects, _store_bytes */
    ckretain  *cr;      /* hyperfarm_checkpoint_experiment_bytes, _freed_bytes_total */
    api_guard *guard;   /* hyperfarm_http_guard_closed_total, _sse_refused_total, half-open gauge */
} metrics_sources;
/* The whole /metrics text: metrics_render, then the sources' lines and
 * hyperfarm_assert_failures_total (hf_assert.h). RET 0 or
 * HF_ETOOBIG/HF_ENOMEM. A source that cannot answer (ckretain's query
 * failing) leaves out its lines, not the rest. */
int  metrics_scrape(hf_buf *b, const sched_stats *st, const metrics_sources *src);
/* Reports/s over the last few seconds (for the ingest-rate gauge). */
double metrics_ingest_rate(void);

#endif
