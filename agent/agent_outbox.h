/*
 * agent_outbox.h — the agent's bounded queue of what it owes the scheduler.
 *
 * The supervisor (main thread) pushes trial events, metric reports and log
 * lines; the heartbeat thread takes a batch, sends it, and acknowledges it
 * only when the scheduler answered 200. Until then the items stay queued,
 * so nothing is lost when a heartbeat fails (scheduler down, partition).
 *
 * Bounds, because a partition may last hours and a trial may print without
 * end: logs are limited in lines and bytes, and when full the *oldest* log
 * lines are dropped; metrics have a separate, much larger bound and are only
 * dropped (oldest first) when that is exceeded; events (started, exited,
 * start_failed) are tiny and bounded only by a large safety cap. Every drop
 * is counted, globally and per trial, and the per-trial count is turned into
 * one "[hyperfarm-agent] N log lines dropped" log line so the user sees the
 * gap in the trial's log.
 *
 * Thread-safe: every function takes the outbox mutex.
 */
#ifndef AGENT_OUTBOX_H
#define AGENT_OUTBOX_H

#include "hf_metric.h"

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

typedef struct agent_outbox agent_outbox;

typedef struct agent_outbox_limits {
    size_t max_log_lines;      /* queued log lines before the oldest are dropped */
    size_t max_log_bytes;      /* queued log text bytes before the oldest are dropped */
    size_t max_metrics;        /* queued metric reports before the oldest are dropped */
    size_t max_events;         /* safety cap on queued events */
} agent_outbox_limits;

/* What one heartbeat carries at most (the scheduler's body limit is 8 MiB). */
#define AGENT_BATCH_LOGS      5000
#define AGENT_BATCH_METRICS   5000
#define AGENT_BATCH_EVENTS    2000
#define AGENT_BATCH_BYTES     (4u << 20)

typedef struct agent_outbox_stats {
    size_t   logs, log_bytes, metrics, events;              /* queued now */
    uint64_t dropped_logs, dropped_metrics, dropped_events; /* since start */
    uint64_t sent_logs, sent_metrics, sent_events;          /* acknowledged */
} agent_outbox_stats;

/* Marks what a taken batch contained, for outbox_ack. */
typedef struct agent_outbox_mark {
    uint64_t last_event, last_metric, last_log;   /* highest seq taken, 0 = none */
    size_t   n_events, n_metrics, n_logs;
    int      more;        /* the outbox held more than the batch's limits took */
} agent_outbox_mark;

enum { AGENT_STREAM_STDOUT = 0, AGENT_STREAM_STDERR = 1 };

/* limits NULL = defaults (20000 lines, 8 MiB, 200000 metrics, 100000 events).
 * RET NULL on OOM. */
agent_outbox *agent_outbox_new(const agent_outbox_limits *limits);
void agent_outbox_free(agent_outbox *ob);

/* Queue a trial event (ev: a JSON object with trial_id, attempt, type, time...).
 * Steals the reference. RET 0 or HF_ENOMEM. */
int agent_outbox_event(agent_outbox *ob, json_t *ev);
/* Queue one parsed metric report. RET 0 or HF_ENOMEM. */
int agent_outbox_metric(agent_outbox *ob, int64_t trial_id, int64_t attempt, int64_t time_ms,
                        const hf_metric_report *r);
/* Queue one log line of len bytes (no newline; invalid UTF-8 is replaced).
 * RET 0 or HF_ENOMEM. */
int agent_outbox_log(agent_outbox *ob, int64_t trial_id, int64_t attempt, int64_t time_ms,
                     int stream, const char *line, size_t len);
/* Replace the list of running trials sent with every heartbeat (steals). */
void agent_outbox_set_running(agent_outbox *ob, json_t *running);
/* A new reference to the running list (an array, maybe empty). */
json_t *agent_outbox_running(agent_outbox *ob);

/* Build a heartbeat body {"running", "events", "metrics", "logs"} from the
 * oldest queued items within the AGENT_BATCH_* bounds. Items stay queued
 * until agent_outbox_ack(mark). RET a new reference or NULL on OOM. */
json_t *agent_outbox_take(agent_outbox *ob, agent_outbox_mark *mark);
/* Remove the items of a batch the scheduler acknowledged. Items dropped in
 * the meantime are simply no longer there. */
void agent_outbox_ack(agent_outbox *ob, const agent_outbox_mark *mark);
/* The sequence number of the newest item queued (0 = none yet): a metric
 * report's own when called right after agent_outbox_metric on the same
 * thread. */
uint64_t agent_outbox_last_seq(agent_outbox *ob);
/* Has every metric report up to seq left the outbox (acknowledged by the
 * scheduler, or dropped by the bounds)? RET 1 or 0. */
int agent_outbox_metrics_delivered(agent_outbox *ob, uint64_t seq);
void agent_outbox_get_stats(agent_outbox *ob, agent_outbox_stats *st);

#endif
