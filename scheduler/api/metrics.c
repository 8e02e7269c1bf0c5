/*
 * metrics.c — Prometheus exposition of the scheduler's counters (see
 * metrics.h). Histograms use fixed bucket bounds in seconds from 1 ms to
 * 10 s, enough for request and dispatch latency.
 */
#include "scheduler/api/metrics.h"
#include "scheduler/api/api_h_standby.h"
#include "scheduler/store/repl.h"
#include "scheduler/provision/provision.h"

#include "hf_assert.h"
#include "hf_err.h"
#include "hf_time.h"

#include <pthread.h>
#include <stdlib.h>

metrics_counters metrics;

static const double bounds_s[METRICS_NBUCKETS] = {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
                                                  0.1, 0.25, 0.5, 1, 2.5, 5, 10};

void metrics_observe(metrics_hist *h, int64_t us)
{
    if (us < 0) us = 0;
    double s = (double)us / 1e6;
    int i = 0;
    while (i < METRICS_NBUCKETS && s > bounds_s[i]) i++;
    atomic_fetch_add(&h->bucket[i], 1);
    atomic_fetch_add(&h->count, 1);
    atomic_fetch_add(&h->sum_us, (uint64_t)us);
}

/* Ingest rate: reports counted at the previous scrape-or-query. */
static pthread_mutex_t rate_lock = PTHREAD_MUTEX_INITIALIZER;
static int64_t rate_t0_us;
static uint64_t rate_n0;
static double rate_last;

double metrics_ingest_rate(void)
{
    pthread_mutex_lock(&rate_lock);
    int64_t now = hf_mono_us();
    uint64_t n = atomic_load(&metrics.metric_reports);
    if (rate_t0_us == 0) {
        rate_t0_us = now;
        rate_n0 = n;
    } else if (now - rate_t0_us >= 1000000) {
        rate_last = (double)(n - rate_n0) * 1e6 / (double)(now - rate_t0_us);
        rate_t0_us = now;
        rate_n0 = n;
    }
    double r = rate_last;
    pthread_mutex_unlock(&rate_lock);
    return r;
}

static int hist(hf_buf *b, const char *name, const char *help, metrics_hist *h)
{
    int rc = hf_buf_printf(b, "# HELP %s %s\n# TYPE %s histogram\n", name, help, name);
    uint64_t cum = 0;
    for (int i = 0; i <= METRICS_NBUCKETS && rc == 0; i++) {
        cum += atomic_load(&h->bucket[i]);
        if (i < METRICS_NBUCKETS) rc = hf_buf_printf(b, "%s_bucket{le=\"%g\"} %llu\n", name, bounds_s[i],
                                                     (unsigned long long)cum);
        else rc = hf_buf_printf(b, "%s_bucket{le=\"+Inf\"} %llu\n", name, (unsigned long long)cum);
    }
    if (rc == 0) rc = hf_buf_printf(b, "%s_sum %.6f\n%s_count %llu\n", name,
                                    (double)atomic_load(&h->sum_us) / 1e6, name,
                                    (unsigned long long)atomic_load(&h->count));
    return rc;
}

#define COUNTER(b, name, help, v) \
    hf_buf_printf(b, "# HELP " name " " help "\n# TYPE " name " counter\n" name " %llu\n", \
                  (unsigned long long)atomic_load(&(v)))

int metrics_render(hf_buf *b, const sched_stats *st)
{
    int rc = hf_buf_printf(b, "# HELP hyperfarm_trials Trials by state.\n# TYPE hyperfarm_trials gauge\n");
    for (int i = 0; i < 8 && rc == 0; i++)
        rc = hf_buf_printf(b, "hyperfarm_trials{state=\"%s\"} %lld\n", sched_trial_state_names[i],
                           (long long)st->trials_by_state[i]);
    if (rc == 0)
        rc = hf_buf_printf(b,
            "# HELP hyperfarm_queue_length Trials waiting for placement.\n# TYPE hyperfarm_queue_length gauge\n"
            "hyperfarm_queue_length %lld\n"
            "# HELP hyperfarm_agents Agents by state.\n# TYPE hyperfarm_agents gauge\n"
            "hyperfarm_agents{state=\"alive\"} %lld\nhyperfarm_agents{state=\"lost\"} %lld\n"
            "# HELP hyperfarm_experiments_active Experiments in state ACTIVE.\n"
            "# TYPE hyperfarm_experiments_active gauge\nhyperfarm_experiments_active %lld\n"
            "# HELP hyperfarm_experiments_purging Deleted experiments whose rows are still being removed.\n"
            "# TYPE hyperfarm_experiments_purging gauge\nhyperfarm_experiments_purging %lld\n"
            "# HELP hyperfarm_heartbeat_lag_seconds Longest time since an alive agent's last heartbeat.\n"
            "# TYPE hyperfarm_heartbeat_lag_seconds gauge\nhyperfarm_heartbeat_lag_seconds %.3f\n"
            "# HELP hyperfarm_ingest_reports_per_second Metric reports ingested per second (last interval).\n"
            "# TYPE hyperfarm_ingest_reports_per_second gauge\nhyperfarm_ingest_reports_per_second %.1f\n",
            (long long)st->queued, (long long)st->agents_alive, (long long)st->agents_lost,
            (long long)st->experiments_active, (long long)st->experiments_purging, st->max_heartbeat_lag_s,
            metrics_ingest_rate());
    if (rc == 0) rc = hf_buf_printf(b, "# HELP hyperfarm_http_requests_total HTTP requests by status class.\n"
                                       "# TYPE hyperfarm_http_requests_total counter\n");
    for (int i = 1; i < 6 && rc == 0; i++)
        rc = hf_buf_printf(b, "hyperfarm_http_requests_total{code=\"%dxx\"} %llu\n", i,
                           (unsigned long long)atomic_load(&metrics.http_requests[i]));
    if (rc == 0) rc = COUNTER(b, "hyperfarm_heartbeats_total", "Agent heartbeats handled.", metrics.heartbeats);
    if (rc == 0)
        rc = COUNTER(b, "hyperfarm_heartbeats_repeated_total",
                     "Heartbeat batches received again after they were committed (acknowledged, not stored twice).",
                     metrics.heartbeats_repeated);
    if (rc == 0)
        rc = COUNTER(b, "hyperfarm_heartbeats_grouped_total",
                     "Heartbeats whose transaction was committed together with later ones (group commit).",
                     metrics.heartbeats_grouped);
    if (rc == 0) rc = COUNTER(b, "hyperfarm_metric_reports_total", "Metric reports ingested.", metrics.metric_reports);
    if (rc == 0) rc = COUNTER(b, "hyperfarm_metric_points_total", "Metric values stored.", metrics.metric_points);
    if (rc == 0) rc = COUNTER(b, "hyperfarm_log_lines_total", "Log lines stored.", metrics.log_lines);
    if (rc == 0) rc = COUNTER(b, "hyperfarm_items_dropped_total",
                              "Heartbeat items dropped (stale attempt, unknown trial, bounds).", metrics.items_dropped);
    if (rc == 0) rc = COUNTER(b, "hyperfarm_trials_created_total", "Trials created by searchers.", metrics.trials_created);
    if (rc == 0) rc = COUNTER(b, "hyperfarm_searcher_stops_total", "Early stops decided by searchers.",
                              metrics.searcher_stops);
    if (rc == 0) rc = COUNTER(b, "hyperfarm_store_errors_total", "Failed store transactions.", metrics.store_errors);
    if (rc == 0)
        rc = COUNTER(b, "hyperfarm_purged_rows_total", "Rows of deleted experiments removed by the purge.",
                     metrics.purged_rows);
    if (rc == 0)
        rc = COUNTER(b, "hyperfarm_checkpoint_store_full_total",
                     "Uploads (checkpoints, contexts) refused because the checkpoint store's disk is full.",
                     metrics.checkpoint_store_full);
    if (rc == 0)
        rc = hf_buf_printf(b,
            "# HELP hyperfarm_checkpoint_objects Objects in the checkpoint store (distinct contents).\n"
            "# TYPE hyperfarm_checkpoint_objects gauge\nhyperfarm_checkpoint_objects %lld\n"
            "# HELP hyperfarm_checkpoint_store_bytes Bytes of the objects in the checkpoint store.\n"
            "# TYPE hyperfarm_checkpoint_store_bytes gauge\nhyperfarm_checkpoint_store_bytes %lld\n",
            (long long)atomic_load(&metrics.checkpoint_objects), (long long)atomic_load(&metrics.checkpoint_bytes));
    if (rc == 0) rc = hist(b, "hyperfarm_http_request_duration_seconds", "API request latency.",
                           &metrics.request_latency);
    if (rc == 0) rc = hist(b, "hyperfarm_dispatch_latency_seconds",
                           "From trial ready to its start reported by the agent.", &metrics.dispatch_latency);
    return rc;
}

/* hyperfarm_checkpoint_experiment_bytes{experiment="ID"}: one line per
 * experiment that has stored checkpoints (ckretain.h), and the bytes
 * retention, deletes and the orphan GC freed. */
static int render_usage(hf_buf *b, ckretain *cr)
{
    ckretain_usage *u = NULL;
    size_t n = 0;
    if (ckretain_usage_all(cr, &u, &n)) return 0;   /* the rest of /metrics still answers */
    int rc = hf_buf_printf(b, "# HELP hyperfarm_checkpoint_experiment_bytes Bytes of the distinct checkpoint objects "
                              "an experiment's rows name.\n# TYPE hyperfarm_checkpoint_experiment_bytes gauge\n");
    for (size_t i = 0; i < n && rc == 0; i++)
        rc = hf_buf_printf(b, "hyperfarm_checkpoint_experiment_bytes{experiment=\"%lld\"} %lld\n",
                           (long long)u[i].experiment_id, (long long)u[i].bytes);
    ckretain_stats cs;
    ckretain_get_stats(cr, &cs);
    if (rc == 0)
        rc = hf_buf_printf(b, "# HELP hyperfarm_checkpoint_freed_bytes_total Bytes of checkpoint objects removed "
                              "(retention, deletes, orphans).\n# TYPE hyperfarm_checkpoint_freed_bytes_total counter\n"
                              "hyperfarm_checkpoint_freed_bytes_total %lld\n",
                           (long long)cs.bytes_freed);
    free(u);
    return rc;
}

/* What the connection guard closed or refused (api_guard.h), and the
 * connections waiting for a complete header now. */
static int render_guard(hf_buf *b, api_guard *g)
{
    api_guard_stats gs;
    api_guard_get_stats(g, &gs);
    return hf_buf_printf(b,
        "# HELP hyperfarm_http_guard_closed_total Connections the guard closed, by reason: no complete request "
        "header in time (header_deadline), oldest half-open one evicted to make room (half_open_evicted), request "
        "body below the minimum rate (slow_body).\n# TYPE hyperfarm_http_guard_closed_total counter\n"
        "hyperfarm_http_guard_closed_total{reason=\"header_deadline\"} %llu\n"
        "hyperfarm_http_guard_closed_total{reason=\"half_open_evicted\"} %llu\n"
        "hyperfarm_http_guard_closed_total{reason=\"slow_body\"} %llu\n"
        "# HELP hyperfarm_http_sse_refused_total Event streams refused by the per-token limit.\n"
        "# TYPE hyperfarm_http_sse_refused_total counter\nhyperfarm_http_sse_refused_total %llu\n"
        "# HELP hyperfarm_http_half_open_connections Connections without a complete request header now.\n"
        "# TYPE hyperfarm_http_half_open_connections gauge\nhyperfarm_http_half_open_connections %u\n",
        (unsigned long long)gs.deadline, (unsigned long long)gs.evicted, (unsigned long long)gs.slow_body,
        (unsigned long long)gs.sse_refused, gs.half_open);
}

/* The replication log's lines (repl.h; docs/scheduler.md "Replication"):
 * role and state as one-hot gauges, positions, lag, the degrade count and
 * the recent commit waits. */
static int render_repl(hf_buf *b)
{
    repl_status r;
    repl_status_get(&r);
    int rc = hf_buf_printf(b, "# HELP hyperfarm_replication_role This scheduler's replication role.\n"
                              "# TYPE hyperfarm_replication_role gauge\n");
    for (int i = REPL_PRIMARY; i <= REPL_FENCED && rc == 0; i++)
        rc = hf_buf_printf(b, "hyperfarm_replication_role{role=\"%s\"} %d\n", repl_role_name(i), r.role == i);
    if (rc == 0) rc = hf_buf_printf(b, "# HELP hyperfarm_replication_state The primary's replication state.\n"
                                       "# TYPE hyperfarm_replication_state gauge\n");
    for (int i = REPL_ST_NONE; i <= REPL_ST_DEGRADED && rc == 0; i++)
        rc = hf_buf_printf(b, "hyperfarm_replication_state{state=\"%s\"} %d\n", repl_state_name(i), r.state == i);
    if (rc == 0)
        rc = hf_buf_printf(b,
            "# HELP hyperfarm_replication_term The replication term (promotions).\n"
            "# TYPE hyperfarm_replication_term gauge\nhyperfarm_replication_term %lld\n"
            "# HELP hyperfarm_replication_lsn The last replicated transaction committed here.\n"
            "# TYPE hyperfarm_replication_lsn gauge\nhyperfarm_replication_lsn %lld\n"
            "# HELP hyperfarm_replication_acked_lsn The last LSN the standby acknowledged.\n"
            "# TYPE hyperfarm_replication_acked_lsn gauge\nhyperfarm_replication_acked_lsn %lld\n"
            "# HELP hyperfarm_replication_lag_lsn Transactions committed here that the standby has not acknowledged.\n"
            "# TYPE hyperfarm_replication_lag_lsn gauge\nhyperfarm_replication_lag_lsn %lld\n"
            "# HELP hyperfarm_replication_lag_seconds Age of the oldest transaction the standby has not acknowledged.\n"
            "# TYPE hyperfarm_replication_lag_seconds gauge\nhyperfarm_replication_lag_seconds %.3f\n"
            "# HELP hyperfarm_replication_degraded_total Times the primary stopped waiting for a lost standby.\n"
            "# TYPE hyperfarm_replication_degraded_total counter\nhyperfarm_replication_degraded_total %lld\n"
            "# HELP hyperfarm_replication_wait_seconds Answers held for the standby's ack (p99 and max of the last 256).\n"
            "# TYPE hyperfarm_replication_wait_seconds gauge\n"
            "hyperfarm_replication_wait_seconds{quantile=\"0.99\"} %.6f\n"
            "hyperfarm_replication_wait_seconds{quantile=\"1\"} %.6f\n"
            "# HELP hyperfarm_replication_waits_total Answers held for the standby's ack.\n"
            "# TYPE hyperfarm_replication_waits_total counter\nhyperfarm_replication_waits_total %lld\n"
            "# HELP hyperfarm_replication_escaped_total Writes committed outside the replication log (a bug).\n"
            "# TYPE hyperfarm_replication_escaped_total counter\nhyperfarm_replication_escaped_total %lld\n"
            "# HELP hyperfarm_replication_logged_metric_rows_total Metric rows the core put in the log itself, not through the session.\n"
            "# TYPE hyperfarm_replication_logged_metric_rows_total counter\nhyperfarm_replication_logged_metric_rows_total %lld\n",
            (long long)r.term, (long long)r.lsn, (long long)r.acked_lsn, (long long)r.lag_lsn, r.lag_ms / 1000.0,
            (long long)r.degraded_total, r.wait_p99_us / 1e6, r.wait_max_us / 1e6, (long long)r.waits,
            (long long)repl_escaped_total(), (long long)repl_metric_rows_logged());
    if (rc == 0)
        rc = hf_buf_printf(b,
            "# HELP hyperfarm_store_flushes_total fsyncs of the WAL by the group flush (docs/scheduler.md \"Durability\").\n"
            "# TYPE hyperfarm_store_flushes_total counter\nhyperfarm_store_flushes_total %lld\n"
            "# HELP hyperfarm_store_flushed_commits_total Commits made durable by those fsyncs (commits / flushes: the group size).\n"
            "# TYPE hyperfarm_store_flushed_commits_total counter\nhyperfarm_store_flushed_commits_total %lld\n"
            "# HELP hyperfarm_store_flush_failed 1 after an fsync of the WAL failed: writes are refused (503) until a restart.\n"
            "# TYPE hyperfarm_store_flush_failed gauge\nhyperfarm_store_flush_failed %d\n",
            (long long)r.flushes, (long long)r.flush_commits, r.flush_failed);
    return rc;
}

int metrics_scrape(hf_buf *b, const sched_stats *st, const metrics_sources *src)
{
    if (src->ck) {
        int64_t objects, bytes;
        ckstore_stats(src->ck, &objects, &bytes);
        atomic_store(&metrics.checkpoint_objects, objects);
        atomic_store(&metrics.checkpoint_bytes, bytes);
    }
    int rc = metrics_render(b, st);
    if (rc == 0 && src->cr) rc = render_usage(b, src->cr);
    if (rc == 0 && src->guard) rc = render_guard(b, src->guard);
    if (rc == 0) rc = render_repl(b);
    if (rc == 0) rc = api_standby_metrics(b);
    if (rc == 0) rc = provision_render_metrics(b);
    if (rc == 0)
        rc = hf_buf_printf(b, "# HELP hyperfarm_assert_failures_total Self-checks (HF_ASSERT) that failed and were "
                              "counted (docs/scheduler.md \"Self-checks\").\n"
                              "# TYPE hyperfarm_assert_failures_total counter\nhyperfarm_assert_failures_total %llu\n",
                           (unsigned long long)hf_assert_failures());
    return rc;
}
