/*
 * api_h_trial.c — the trial routes (api_handlers.h; docs/protocol.md):
 * get, metrics, logs, kill, patch, and the log search of a trial or an
 * experiment (?grep=, logsearch.h), which runs on the search pool
 * (logpool.h) while the connection is suspended: the handler is called a
 * second time when the pool has the answer.
 */
#include "scheduler/api/api_handlers.h"

#include "hf_err.h"
#include "scheduler/api/logpool.h"
#include "scheduler/api/logsearch.h"
#include "scheduler/api/query.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------- handlers: trials ---------- */

enum MHD_Result api_h_trial_get(api_call *k)
{
    json_t *out = NULL;
    int rc = sched_trial_get(k->a->s, k->id, &out);
    if (rc == 0) rc = query_trial_details(k->a->st, k->id, out);
    return api_reply(k, rc, "trial", 200, out);
}

enum MHD_Result api_h_trial_metrics(api_call *k)
{
    int64_t after, limit, maxp;
    json_t *out = NULL;
    const char *name = api_query_arg(k, "name");
    if (api_query_int(k->c, "after", 0, INT64_MAX, 0, &after, &k->e) ||
        api_query_int(k->c, "limit", 1, QUERY_MAX_LIMIT, 10000, &limit, &k->e) || api_query_max_points(k, &maxp))
        return api_send_jerr(k->c, 400, &k->e);
    if (name && (!*name || strlen(name) > 64)) return api_send_err(k->c, 400, "name", "not a valid metric name");
    if (!sched_trial_exists(k->a->s, k->id)) return api_no_such_trial(k);
    int rc = query_metrics(k->a->st, k->id, name, after, limit, maxp, &out);
    return api_reply(k, rc, "trial", 200, out);
}

/* The search pool's done callback: the answer is ready. */
static void grep_done(void *conn) { MHD_resume_connection(conn); }

/* The answer of a search the pool finished (the handler's second call). */
static enum MHD_Result grep_answer(api_call *k)
{
    json_t *out = NULL;
    hf_jerr e;
    int rc = logjob_result(k->rq->search, &out, &e);
    logjob_release(k->rq->search);
    k->rq->search = NULL;
    if (rc == HF_ETOOBIG) return api_send_jerr(k->c, 400, &e);
    if (rc == HF_ECONN) return MHD_NO;   /* the client hung up: close */
    if (rc == HF_ESTATE) return api_send_err(k->c, 503, NULL, "the scheduler is stopping");
    return api_reply(k, rc, "trial", 200, out);
}

/* 429 with Retry-After: the user's or the pool's search limit. */
static enum MHD_Result grep_busy(api_call *k, int retry_s)
{
    return api_send_json_retry(k->c, 429, json_pack("{ssss}", "error", k->e.msg, "field", "grep"), retry_s);
}

/* ?grep=PAT[&regex=1][&icase=1][&after=SEQ][&limit=N] over one trial
 * (trial_id > 0) or a whole experiment (logsearch.h), run by the search
 * pool (logpool.h) while the connection is suspended: called again when
 * the pool has the answer. */
static enum MHD_Result grep_logs(api_call *k, int64_t trial_id, int64_t exp_id)
{
    int64_t after, limit, regex, icase;
    logsearch_pat *p = NULL;
    if (k->rq->search) return grep_answer(k);
    if (api_query_int(k->c, "after", 0, INT64_MAX, 0, &after, &k->e) ||
        api_query_int(k->c, "limit", 1, LOGSEARCH_MAX_LIMIT, LOGSEARCH_DEFAULT_LIMIT, &limit, &k->e) ||
        api_query_int(k->c, "regex", 0, 1, 0, &regex, &k->e) || api_query_int(k->c, "icase", 0, 1, 0, &icase, &k->e))
        return api_send_jerr(k->c, 400, &k->e);
    int rc = logsearch_compile(api_query_arg(k, "grep"), (int)regex, (int)icase, &p, &k->e);
    if (rc == HF_EINVAL) return api_send_jerr(k->c, 400, &k->e);
    if (rc) return api_reply(k, rc, "trial", 200, NULL);
    logsearch_query q = {.trial_id = trial_id, .exp_id = exp_id, .after = after, .limit = limit};
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(k->c, MHD_CONNECTION_INFO_CONNECTION_FD);
    int retry_s = 0;
    rc = logpool_submit(k->a->lp, k->user, p, &q, ci ? ci->connect_fd : -1, grep_done, k->c, &k->rq->search,
                        &retry_s, &k->e);
    if (rc == HF_ETOOBIG) return grep_busy(k, retry_s);
    if (rc == HF_ESTATE) return api_send_err(k->c, 503, NULL, "the scheduler is stopping");
    if (rc) return api_reply(k, rc, "trial", 200, NULL);
    MHD_suspend_connection(k->c);
    logjob_arm(k->a->lp, k->rq->search);
    return MHD_YES;
}

enum MHD_Result api_h_exp_logs(api_call *k)
{
    json_t *out = NULL;
    int rc = sched_experiment_get(k->a->s, k->id, &out);   /* 404 for an unknown experiment */
    json_decref(out);
    if (rc) return api_send_rc(k->c, rc, NULL, "experiment");
    return grep_logs(k, 0, k->id);
}

enum MHD_Result api_h_trial_logs(api_call *k)
{
    int64_t after, limit;
    json_t *out = NULL;
    if (api_query_arg(k, "grep")) {
        if (!sched_trial_exists(k->a->s, k->id)) return api_no_such_trial(k);
        return grep_logs(k, k->id, 0);
    }
    if (api_query_int(k->c, "after", 0, INT64_MAX, 0, &after, &k->e) ||
        api_query_int(k->c, "limit", 1, QUERY_MAX_LIMIT, 1000, &limit, &k->e))
        return api_send_jerr(k->c, 400, &k->e);
    if (!sched_trial_exists(k->a->s, k->id)) return api_no_such_trial(k);
    int rc = query_logs(k->a->st, k->id, after, limit, &out);
    return api_reply(k, rc, "trial", 200, out);
}

enum MHD_Result api_h_trial_kill(api_call *k)
{
    json_t *out = NULL;
    int rc = sched_trial_kill_as(k->a->s, k->id, k->user, &out, &k->e);
    return api_reply(k, rc, "trial", 200, out);
}

enum MHD_Result api_h_trial_patch(api_call *k)
{
    json_t *out = NULL;
    int rc = sched_trial_patch(k->a->s, k->id, k->body, k->user, &out, &k->e);
    return api_reply(k, rc, "trial", 200, out);
}
