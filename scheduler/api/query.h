/*
 * query.h — read-only queries that scan the store (metric history, logs,
 * trial events and checkpoints, exports). They run on pooled read-only
 * connections (store_reader_get), outside the core's lock: WAL gives each
 * a consistent snapshot of committed data, and a long scan never delays a
 * heartbeat.
 */
#ifndef HF_QUERY_H
#define HF_QUERY_H

#include "hf_buf.h"
#include "scheduler/store/store.h"

#include <jansson.h>
#include <stdint.h>

#define QUERY_MAX_LIMIT   100000
#define QUERY_MAX_SCAN    5000000   /* rows read for one downsampled query */

/* {"metrics": [...], "next": seq}. name NULL = every metric. max_points 0
 * = no downsampling (then limit applies); else each metric's series is
 * reduced to at most max_points points (LTTB over step). */
int query_metrics(store *st, int64_t trial_id, const char *name, int64_t after, int64_t limit,
                  int64_t max_points, json_t **out);
/* One metric of every trial of an experiment, for the dashboard's learning
 * curves in one request: {"name", "series": [{"trial_id", "points":
 * [[x, value]...], "downsampled_from"}...], "next": seq, "truncated"}.
 * x is the step, else the epoch, else the row's seq. Rows with seq > after
 * only (after 0 = all); max_points > 0 reduces each trial's series with
 * LTTB. At most QUERY_MAX_SCAN rows are read ("truncated": true beyond). */
int query_experiment_metrics(store *st, int64_t exp_id, const char *name, int64_t after, int64_t max_points,
                             json_t **out);
/* {"logs": [...], "next": seq} */
int query_logs(store *st, int64_t trial_id, int64_t after, int64_t limit, json_t **out);
/* Add "events" and "checkpoints" arrays to the trial object t. */
int query_trial_details(store *st, int64_t trial_id, json_t *t);
/* {"events": [{time, trial_id, type, detail, user}]}: experiment exp_id's
 * own events and every event a user caused (user null: the scheduler),
 * the newest limit of them, oldest first. */
int query_experiment_events(store *st, int64_t exp_id, int64_t limit, json_t **out);
/* Export: CSV (one row per trial: id, state, restarts, objective,
 * hyperparameters, best metrics) into b, or JSON (trials with their full
 * metric history) as *out. trials is borrowed. */
int query_export_csv(const json_t *trials, hf_buf *b);
int query_export_json(store *st, json_t *summary, json_t *trials, json_t **out);

#endif
