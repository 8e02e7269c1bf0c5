/*
 * api_h_exp.c — the experiment routes (api_handlers.h; docs/protocol.md):
 * list, submit, fork, get, patch, delete, actions, trials, top, Pareto
 * front, export (JSON or CSV), one metric of every trial, hyperparameter
 * importance and the experiment's events. Each handler checks its query
 * arguments, calls the core (sched.h) or a read query (query.h) and
 * answers with api_reply; summaries gain "owner" and "checkpoint_bytes".
 */
#include "scheduler/api/api_handlers.h"

#include "hf_err.h"
#include "scheduler/core/expmeta.h"
#include "scheduler/api/query.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------- handlers: experiments ---------- */

/* "owner" of an experiment summary: its submitter, SCHED_OWNER_UNKNOWN
 * when none was recorded (docs/api.md "Roles"). */
static void add_owner(json_t *summary)
{
    const char *by = json_string_value(json_object_get(summary, "submitted_by"));
    if (json_is_object(summary)) json_object_set_new(summary, "owner", json_string(by ? by : SCHED_OWNER_UNKNOWN));
}

/* Add "checkpoint_bytes" to summary (0 when the store has nothing of it). */
static void add_usage(api *a, json_t *summary)
{
    add_owner(summary);
    ckretain_usage u;
    json_int_t id = json_integer_value(json_object_get(summary, "id"));
    if (a->cr && ckretain_usage_of(a->cr, id, &u) == 0)
        json_object_set_new(summary, "checkpoint_bytes", json_integer((json_int_t)u.bytes));
}

/* ?archived=1 lists archived experiments too. */
enum MHD_Result api_h_exp_list(api_call *k)
{
    json_t *out = NULL, *x;
    int64_t archived;
    ckretain_usage *u = NULL;
    size_t n = 0, i, j = 0;
    if (api_query_int(k->c, "archived", 0, 1, 0, &archived, &k->e)) return api_send_jerr(k->c, 400, &k->e);
    const char *tag = api_query_arg(k, "tag");
    if (tag && !expmeta_tag_ok(tag))
        return api_send_err(k->c, 400, "tag", "a tag is 1..%d characters of A-Z a-z 0-9 _ . : / = + -",
                            EXPMETA_MAX_TAG_LEN);
    int rc = sched_experiment_list_tagged(k->a->s, (int)archived, tag, &out);
    json_array_foreach(rc == 0 ? json_object_get(out, "experiments") : NULL, i, x) add_owner(x);
    if (rc == 0 && k->a->cr && ckretain_usage_all(k->a->cr, &u, &n) == 0) {
        json_array_foreach(json_object_get(out, "experiments"), i, x) {   /* both ordered by id */
            json_int_t id = json_integer_value(json_object_get(x, "id"));
            while (j < n && u[j].experiment_id < id) j++;
            json_object_set_new(x, "checkpoint_bytes", json_integer(j < n && u[j].experiment_id == id ? u[j].bytes : 0));
        }
    }
    free(u);
    return api_reply(k, rc, "experiment", 200, out);
}


enum MHD_Result api_h_exp_submit(api_call *k)
{
    int64_t id = 0;
    enum MHD_Result ret;
    if (api_exp_context_missing(k, &ret)) return ret;
    int rc = sched_experiment_submit_as(k->a->s, k->body, k->user, 0, &id, &k->e);
    return api_reply(k, rc, "experiment", 201, rc ? NULL : json_pack("{sI}", "id", (json_int_t)id));
}

/* POST /experiments/{id}/fork: the body is the edited experiment file; the
 * new experiment records {id} as its parent. */
enum MHD_Result api_h_exp_fork(api_call *k)
{
    int64_t id = 0;
    enum MHD_Result ret;
    if (api_exp_context_missing(k, &ret)) return ret;   /* a fork keeps (or changes) its code context */
    int rc = sched_experiment_submit_as(k->a->s, k->body, k->user, k->id, &id, &k->e);
    return api_reply(k, rc, "experiment", 201,
                 rc ? NULL : json_pack("{sIsI}", "id", (json_int_t)id, "parent_experiment", (json_int_t)k->id));
}

enum MHD_Result api_h_exp_patch(api_call *k)
{
    json_t *out = NULL;
    int rc = sched_experiment_patch(k->a->s, k->id, k->body, k->user, &out, &k->e);
    if (rc == 0) add_owner(out);
    return api_reply(k, rc, "experiment", 200, out);
}

/* The experiment's own events (not its trials' state changes) and every
 * event a user caused, oldest first. */
enum MHD_Result api_h_exp_events(api_call *k)
{
    json_t *out = NULL;
    int64_t limit;
    if (api_query_int(k->c, "limit", 1, 10000, 1000, &limit, &k->e)) return api_send_jerr(k->c, 400, &k->e);
    int rc = sched_experiment_get(k->a->s, k->id, &out);   /* 404 for an unknown experiment */
    json_decref(out);
    out = NULL;
    if (rc == 0) rc = query_experiment_events(k->a->st, k->id, limit, &out);
    return api_reply(k, rc, "experiment", 200, out);
}

enum MHD_Result api_h_exp_get(api_call *k)
{
    json_t *out = NULL;
    int rc = sched_experiment_get(k->a->s, k->id, &out);
    if (rc == 0) add_usage(k->a, out);
    return api_reply(k, rc, "experiment", 200, out);
}

/* DELETE /api/v1/experiments/{id}: gone at once (409 while it runs); its
 * rows are purged by the tick in bounded transactions, which then frees
 * the objects no row names any more (sched_experiment_delete). The
 * answer's checkpoint_bytes: what its checkpoints held. */
enum MHD_Result api_h_exp_delete(api_call *k)
{
    ckretain_usage u = {0};
    if (k->a->cr && ckretain_usage_of(k->a->cr, k->id, &u))
        return api_send_err(k->c, 500, NULL, "cannot list the experiment's checkpoints");
    int rc = sched_experiment_delete_as(k->a->s, k->id, k->user, &k->e);
    if (rc) return api_send_rc(k->c, rc, &k->e, "experiment");
    return api_send_json(k->c, 200, json_pack("{sIsbsI}", "id", (json_int_t)k->id, "deleted", 1,
                                              "checkpoint_bytes", (json_int_t)u.bytes));
}

/* pause | resume | cancel, or extend with a JSON body. */
enum MHD_Result api_h_exp_action(api_call *k)
{
    json_t *out = NULL, *body = NULL;
    int rc;
    if (strcmp(k->act, "extend") == 0) {
        if (api_parse_body(k, &body)) return api_send_jerr(k->c, 400, &k->e);
        rc = sched_experiment_extend_as(k->a->s, k->id, body, k->user, &out, &k->e);
        json_decref(body);
    } else {
        rc = sched_experiment_action_as(k->a->s, k->id, k->act, k->user, &out, &k->e);
        /* Archiving drops the checkpoints now: the answer shows them gone. */
        if (rc == 0 && strcmp(k->act, "archive") == 0 && k->a->cr) ckretain_sweep(k->a->cr, 1);
    }
    if (rc == 0) add_usage(k->a, out);
    return api_reply(k, rc, "experiment", 200, out);
}

/* Sent as the core serialized it (per-trial cached views). */
enum MHD_Result api_h_exp_trials(api_call *k)
{
    char *text = NULL;
    size_t len = 0;
    int rc = sched_experiment_trials_text(k->a->s, k->id, &text, &len);
    return rc ? api_send_rc(k->c, rc, NULL, "experiment") : api_send_text(k->c, 200, "application/json", text, len);
}

enum MHD_Result api_h_exp_top(api_call *k)
{
    json_t *out = NULL;
    int64_t n;
    if (api_query_int(k->c, "k", 1, 10000, 10, &n, &k->e)) return api_send_jerr(k->c, 400, &k->e);
    int rc = sched_experiment_top(k->a->s, k->id, n, &out);
    return api_reply(k, rc, "experiment", 200, out);
}

enum MHD_Result api_h_exp_pareto(api_call *k)
{
    json_t *out = NULL;
    int rc = sched_experiment_pareto(k->a->s, k->id, &out);
    return api_reply(k, rc, "experiment", 200, out);
}

static enum MHD_Result send_csv(struct MHD_Connection *c, const json_t *trials)
{
    hf_buf b;
    size_t len = 0;
    hf_buf_init(&b, 256u << 20);
    int rc = query_export_csv(trials, &b);
    char *text = rc ? NULL : hf_buf_take(&b, &len);
    hf_buf_free(&b);
    return text ? api_send_text(c, 200, "text/csv; charset=utf-8", text, len)
                : api_send_err(c, 500, NULL, "export failed (%s)", hf_strerror(rc));
}

/* ?format=json (default: summary and trials with their metric history) or csv. */
enum MHD_Result api_h_exp_export(api_call *k)
{
    const char *fmt = api_query_arg(k, "format");
    json_t *sum = NULL, *trials = NULL, *out = NULL;
    enum MHD_Result ret;
    if (!fmt) fmt = "json";
    if (strcmp(fmt, "csv") && strcmp(fmt, "json")) return api_send_err(k->c, 400, "format", "must be csv or json");
    int rc = sched_experiment_export(k->a->s, k->id, &sum, &trials);
    if (rc) {
        ret = api_send_rc(k->c, rc, NULL, "experiment");
    } else if (strcmp(fmt, "csv") == 0) {
        ret = send_csv(k->c, trials);
    } else {
        rc = query_export_json(k->a->st, sum, trials, &out);
        ret = api_reply(k, rc, "experiment", 200, out);
    }
    json_decref(sum);
    json_decref(trials);
    return ret;
}

/* One metric of every trial (the dashboard's learning curves). */
enum MHD_Result api_h_exp_metrics(api_call *k)
{
    int64_t after, maxp;
    json_t *out = NULL;
    const char *name = api_query_arg(k, "name");
    if (api_query_int(k->c, "after", 0, INT64_MAX, 0, &after, &k->e) || api_query_max_points(k, &maxp))
        return api_send_jerr(k->c, 400, &k->e);
    if (!name || !*name || strlen(name) > 64) return api_send_err(k->c, 400, "name", "required: a metric name");
    int rc = sched_experiment_get(k->a->s, k->id, &out);   /* 404 for an unknown experiment */
    json_decref(out);
    out = NULL;
    if (rc) return api_send_rc(k->c, rc, NULL, "experiment");
    rc = query_experiment_metrics(k->a->st, k->id, name, after, maxp, &out);
    return api_reply(k, rc, "experiment", 200, out);
}

/* fANOVA importance of the hyperparameters over the finished trials
 * (importance.h), from the cache while no trial finished since; ranked by
 * ?objective= (one of the experiment's objectives, default the first;
 * docs/search.md "Hyperparameter importance"). */
enum MHD_Result api_h_exp_importance(api_call *k)
{
    json_t *sum = NULL, *trials = NULL, *out = NULL;
    enum MHD_Result r;
    const char *want = api_query_arg(k, "objective");
    int rc = sched_experiment_export(k->a->s, k->id, &sum, &trials);
    if (rc) goto end;
    /* Every objective: a list's "objectives", else the one "objective". */
    json_t *one = json_object_get(sum, "objective"), *objs = json_object_get(sum, "objectives"), *ob = one;
    size_t n = json_is_array(objs) ? json_array_size(objs) : 1, pick = 0;
    if (want) {
        for (pick = 0; pick < n; pick++) {
            ob = json_is_array(objs) ? json_array_get(objs, pick) : one;
            if (!strcmp(want, json_string_value(json_object_get(ob, "metric")) ?: "")) break;
        }
        if (pick == n) {
            char names[1024] = "";
            for (size_t i = 0; i < n; i++) {
                const json_t *oi = json_is_array(objs) ? json_array_get(objs, i) : one;
                size_t l = strlen(names);
                snprintf(names + l, sizeof names - l, "%s%s", i ? ", " : "",
                         json_string_value(json_object_get(oi, "metric")) ?: "");
            }
            r = api_send_err(k->c, 400, "objective", "not an objective of experiment %lld (one of: %s)",
                             (long long)k->id, names);
            goto out;
        }
    }
    /* The first objective is the trials' "objective"; another one its last value. */
    const char *metric = json_string_value(json_object_get(ob, "metric"));
    const json_t *hp = json_object_get(json_object_get(sum, "config"), "hyperparameters");
    rc = importance_cache_get(k->a->imp, k->id, pick ? metric : NULL, hp, trials, &out, &k->e);
    if (rc == 0) {
        json_object_set_new(out, "objective", json_string(metric ? metric : ""));
        json_object_set(out, "goal", json_object_get(ob, "goal") ?: json_null());
    }
end:
    r = api_reply(k, rc, "experiment", 200, out);
    out = NULL;
out:
    json_decref(out);
    json_decref(sum);
    json_decref(trials);
    return r;
}
