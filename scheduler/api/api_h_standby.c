/*
 * api_h_standby.c — the standby's side of the API (api_h_standby.h).
 *
 * POST /api/v1/replication/promote asks the apply loop (thread
 * "hf-standby", scheduler/standby/standby.c) to stop and commit the new
 * term; the handler waits for that commit (at most PROMOTE_WAIT_MS: the
 * loop's long-poll is cut short at once) and answers 202 {"term": T+1}.
 * The loop then re-executes the process as a primary, a few hundred
 * milliseconds later, so the answer leaves first. The route passes the
 * read-only gate of a standby (it is the one write a standby takes).
 */
#include "scheduler/api/api_h_standby.h"

#include "hf_err.h"
#include "hf_log.h"
#include "scheduler/api/auth.h"
#include "scheduler/standby/standby.h"

#define PROMOTE_WAIT_MS 5000

enum MHD_Result api_h_standby_promote(api_call *k)
{
    int64_t a, b, c, d, term = 0;
    char by[160];
    if (k->role != AUTH_ADMIN) return api_send_err(k->c, 403, NULL, "promotion is for admins");
    if (standby_figures(&a, &b, &c, &d) == HF_ESTATE)
        return api_send_err(k->c, 409, NULL, "this scheduler is not a standby: nothing to promote");
    snprintf(by, sizeof by, "admin:%s", k->user ? k->user : "-");
    int rc = standby_request_promote(by, PROMOTE_WAIT_MS, &term);
    if (rc == HF_ESTATE) return api_send_err(k->c, 409, NULL, "a promotion is already under way");
    if (rc) return api_send_err(k->c, 500, NULL, "promotion failed: %s", hf_strerror(rc));
    hf_warn("promoted to primary of term %lld by %s: restarting as the primary", (long long)term, by);
    return api_send_json(k->c, 202, json_pack("{sI}", "term", (json_int_t)term));
}

int api_standby_metrics(hf_buf *b)
{
    int64_t applied, lag, boots, votes;
    if (standby_figures(&applied, &lag, &boots, &votes)) return 0;
    return hf_buf_printf(b,
                         "# HELP hyperfarm_standby_applied_lsn Last LSN of the primary this standby applied\n"
                         "# TYPE hyperfarm_standby_applied_lsn gauge\nhyperfarm_standby_applied_lsn %lld\n"
                         "# HELP hyperfarm_standby_lag_seconds Seconds since the primary's last stream answer\n"
                         "# TYPE hyperfarm_standby_lag_seconds gauge\nhyperfarm_standby_lag_seconds %.3f\n"
                         "# HELP hyperfarm_standby_bootstraps_total Snapshots this standby bootstrapped from\n"
                         "# TYPE hyperfarm_standby_bootstraps_total counter\nhyperfarm_standby_bootstraps_total %lld\n"
                         "# HELP hyperfarm_failover_votes Agents that told this standby they lost the primary "
                         "(last --failover-after seconds)\n"
                         "# TYPE hyperfarm_failover_votes gauge\nhyperfarm_failover_votes %lld\n",
                         (long long)applied, (double)lag / 1000.0, (long long)boots, (long long)votes);
}

void api_standby_status(json_t *o)
{
    int64_t applied, lag, boots, votes;
    if (!o || standby_figures(&applied, &lag, &boots, &votes)) return;
    json_object_set_new(o, "applied_lsn", json_integer((json_int_t)applied));
    json_object_set_new(o, "lag_ms", json_integer((json_int_t)lag));
}
