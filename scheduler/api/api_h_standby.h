/*
 * api_h_standby.h — the standby's routes and figures (docs/scheduler.md,
 * "Standby and failover"; docs/protocol.md): POST
 * /api/v1/replication/promote, and the standby's lines of /metrics and
 * of GET /replication.
 */
#ifndef HF_API_H_STANDBY_H
#define HF_API_H_STANDBY_H

#include "hf_buf.h"
#include "scheduler/api/api_int.h"

#include <jansson.h>

/* POST /api/v1/replication/promote (admins): on a standby, promote now:
 * 202 {"term": T+1}, then the process re-executes itself as the primary;
 * 409 on a scheduler that is not a standby. */
enum MHD_Result api_h_standby_promote(api_call *k);

/* Append the standby's Prometheus lines (hyperfarm_standby_applied_lsn,
 * _lag_seconds, _bootstraps_total, hyperfarm_failover_votes) to b; nothing
 * on a scheduler that runs no standby loop. RET 0 or hf_buf's code. */
int api_standby_metrics(hf_buf *b);

/* Add "applied_lsn" and "lag_ms" to a GET /replication object on a
 * standby (nothing elsewhere). */
void api_standby_status(json_t *o);

#endif
