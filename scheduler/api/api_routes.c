/*
 * api_routes.c — the REST routes of docs/protocol.md (docs/openapi.yaml)
 * as one table: matching, roles and the checks every route shares. The
 * handlers live by family in api_h_*.c and api_objects.c
 * (api_handlers.h); this file calls them and nothing calls back.
 *
 * A row is {pattern, methods, role, body limit, flags, handler}, one per
 * (pattern, method) operation. In a pattern '*' is an id segment (a
 * positive integer, else 400 with field "id"), '@' an action segment
 * (pause, resume, cancel, extend, archive, unarchive) and '#' a key segment (any text, which
 * the handler checks: a checkpoint's SHA-256); patterns are disjoint, and
 * one trailing slash is tolerated. A request is answered, in this order:
 *
 *   no pattern matches  404 under /api, else not ours (static files)
 *   no row for method   405, Allow = the methods of every matching row
 *   role                401 no/invalid token, 403 wrong role (when a
 *                       token file is loaded; docs/api.md "Roles":
 *                       viewers and agents only GET)
 *   body over limit     413
 *   bad id              400 field "id"
 *   owner               F_OWNER / F_OWNER_TRIAL: 403 unless the token's
 *                       user owns the experiment (or the trial's) or is
 *                       an admin; the try is a REFUSED event
 *   replication role    a standby or fenced primary: an agent token's
 *                       request is a witness vote, then 503 for writes
 *                       and GETs without F_STANDBY_OK (role_gate; a
 *                       request's X-Hyperfarm-Term above ours fences
 *                       this primary first)
 *   F_JSON body         400 with the JSON parser's message
 *   then the handler; a write's answer (any non-GET) is held until a
 *   standby in sync acknowledged it (api_hold_writes).
 *
 * An F_STREAM row (the checkpoint upload) gets the same checks, except
 * the body's, at the request's first call (api_route_begin), where its
 * handler runs with k->begin set and opens the upload; the body then goes
 * to the upload, not to a buffer, and the handler runs again at the end.
 *
 * tests/system/test_eco_openapi.sh reads the table out of this file (rows
 * starting {"/pattern", "METHODS",) and compares it with
 * docs/openapi.yaml both ways: keep that shape.
 */
#include "scheduler/api/api_int.h"

#include "hf_err.h"
#include "scheduler/api/api_h_backup.h"
#include "scheduler/api/api_h_repl.h"
#include "scheduler/api/api_h_provision.h"
#include "scheduler/api/api_h_standby.h"
#include "scheduler/api/api_handlers.h"
#include "scheduler/api/auth.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <unistd.h>

enum route_role {
    ROLE_OPEN,     /* no token needed (/healthz) */
    ROLE_USER,     /* a user token; an agent token may GET */
    ROLE_AGENT,    /* an agent token only */
};

enum route_flag {
    F_JSON        = 1 << 0,   /* parse the body as JSON before the handler */
    F_QUERY_TOKEN = 1 << 1,   /* ?token= when there is no Authorization
                                 header (EventSource cannot set headers) */
    F_STREAM      = 1 << 2,   /* the body is streamed to the handler's upload
                                 (the row's body limit is not used) */
    F_OWNER       = 1 << 3,   /* changes experiment '*': its owner or an admin
                                 only (docs/api.md "Roles") */
    F_OWNER_TRIAL = 1 << 4,   /* changes trial '*': its experiment's owner or
                                 an admin only */
    F_NO_AGENT    = 1 << 5,   /* not even a GET with an agent token */
    F_STANDBY_OK  = 1 << 6,   /* a GET served on a standby or a fenced primary:
                                 its handler needs no core (store readers,
                                 the object files, the server's own state) */
    F_ANY_ROLE    = 1 << 7,   /* any method served whatever the replication
                                 role (the standby's promotion) */
};

typedef enum MHD_Result route_fn(api_call *k);

typedef struct api_route {
    const char *pattern;
    const char *methods;   /* "GET", "GET, HEAD", "POST" */
    int         role;      /* ROLE_* */
    unsigned    body_max;  /* bytes; more is answered 413 */
    unsigned    flags;     /* F_* */
    route_fn   *fn;
} api_route;

/* ---------- the table ---------- */

#define USER_MAX  API_MAX_BODY_USER
#define AGENT_MAX API_MAX_BODY_AGENT

static const api_route routes[] = {
    /* pattern                       methods      role        body limit flags          handler */
    {"/healthz",                     "GET, HEAD", ROLE_OPEN,  USER_MAX,  F_STANDBY_OK,  api_h_healthz},
    {"/metrics",                     "GET, HEAD", ROLE_USER,  USER_MAX,  F_STANDBY_OK,  api_h_metrics},
    {"/api/v1/events",               "GET",       ROLE_USER,  USER_MAX,  F_QUERY_TOKEN | F_STANDBY_OK, api_h_events},
    {"/api/v1/experiments",          "GET",       ROLE_USER,  USER_MAX,  0,             api_h_exp_list},
    {"/api/v1/experiments",          "POST",      ROLE_USER,  USER_MAX,  F_JSON,        api_h_exp_submit},
    {"/api/v1/experiments/*",        "GET",       ROLE_USER,  USER_MAX,  0,             api_h_exp_get},
    {"/api/v1/experiments/*",        "DELETE",    ROLE_USER,  USER_MAX,  F_OWNER,       api_h_exp_delete},
    {"/api/v1/experiments/*/trials", "GET",       ROLE_USER,  USER_MAX,  0,             api_h_exp_trials},
    {"/api/v1/experiments/*/top",    "GET",       ROLE_USER,  USER_MAX,  0,             api_h_exp_top},
    {"/api/v1/experiments/*/export", "GET",       ROLE_USER,  USER_MAX,  0,             api_h_exp_export},
    {"/api/v1/experiments/*/metrics", "GET",      ROLE_USER,  USER_MAX,  0,             api_h_exp_metrics},
    {"/api/v1/experiments/*/importance", "GET",   ROLE_USER,  USER_MAX,  0,             api_h_exp_importance},
    {"/api/v1/experiments/*/logs",   "GET",       ROLE_USER,  USER_MAX,  0,             api_h_exp_logs},
    {"/api/v1/experiments/*/pareto", "GET",       ROLE_USER,  USER_MAX,  0,             api_h_exp_pareto},
    {"/api/v1/experiments/*/@",      "POST",      ROLE_USER,  USER_MAX,  F_OWNER,       api_h_exp_action},
    {"/api/v1/trials/*",             "GET",       ROLE_USER,  USER_MAX,  0,             api_h_trial_get},
    {"/api/v1/trials/*/metrics",     "GET",       ROLE_USER,  USER_MAX,  0,             api_h_trial_metrics},
    {"/api/v1/trials/*/logs",        "GET",       ROLE_USER,  USER_MAX,  0,             api_h_trial_logs},
    {"/api/v1/trials/*/kill",        "POST",      ROLE_USER,  USER_MAX,  F_OWNER_TRIAL, api_h_trial_kill},
    {"/api/v1/trials/*/checkpoints", "GET",       ROLE_USER,  USER_MAX,  0,             api_h_ckpt_list},
    {"/api/v1/trials/*/checkpoints", "PUT",       ROLE_AGENT, 0,         F_STREAM,      api_h_ckpt_put},
    {"/api/v1/trials/*/checkpoints", "POST",      ROLE_AGENT, USER_MAX,  F_JSON,        api_h_ckpt_register},
    {"/api/v1/checkpoints/#",        "GET, HEAD", ROLE_USER,  USER_MAX,  F_STANDBY_OK,  api_h_ckpt_get},
    {"/api/v1/objects/#",            "GET, HEAD", ROLE_USER,  USER_MAX,  F_STANDBY_OK,  api_h_ckpt_get},
    {"/api/v1/contexts",             "PUT",       ROLE_USER,  0,         F_STREAM,      api_h_ctx_put},
    {"/api/v1/contexts/#",           "GET, HEAD", ROLE_USER,  USER_MAX,  F_STANDBY_OK,  api_h_ckpt_get},
    {"/api/v1/webhooks",             "GET",       ROLE_USER,  USER_MAX,  F_NO_AGENT,    api_h_webhook_list},
    {"/api/v1/webhooks",             "POST",      ROLE_USER,  USER_MAX,  F_JSON,        api_h_webhook_create},
    {"/api/v1/webhooks/*",           "DELETE",    ROLE_USER,  USER_MAX,  0,             api_h_webhook_delete},
    {"/api/v1/webhooks/*/test",      "POST",      ROLE_USER,  USER_MAX,  0,             api_h_webhook_test},
    {"/api/v1/agents",               "GET",       ROLE_USER,  USER_MAX,  0,             api_h_agent_list},
    {"/api/v1/agents",               "POST",      ROLE_AGENT, USER_MAX,  F_JSON,        api_h_agent_register},
    {"/api/v1/agents/*/heartbeat",   "POST",      ROLE_AGENT, AGENT_MAX, F_JSON,        api_h_agent_heartbeat},
    {"/api/v1/agents/*/wait",        "GET",       ROLE_AGENT, USER_MAX,  0,             api_h_agent_wait},
    /* the workflow of issue #17 (docs/scheduler.md "Workflow") */
    {"/api/v1/experiments/*",        "PATCH",     ROLE_USER,  USER_MAX,  F_JSON | F_OWNER, api_h_exp_patch},
    {"/api/v1/experiments/*/fork",   "POST",      ROLE_USER,  USER_MAX,  F_JSON,        api_h_exp_fork},
    {"/api/v1/experiments/*/events", "GET",       ROLE_USER,  USER_MAX,  0,             api_h_exp_events},
    {"/api/v1/trials/*",             "PATCH",     ROLE_USER,  USER_MAX,  F_JSON | F_OWNER_TRIAL, api_h_trial_patch},
    /* owners and roles of issue #27 (docs/api.md "Roles") */
    {"/api/v1/whoami",               "GET",       ROLE_USER,  USER_MAX,  F_STANDBY_OK,  api_h_whoami},
    /* online backups of issue #31 (docs/operations.md "Backup and restore"); admins only */
    {"/api/v1/backups",              "POST",      ROLE_USER,  USER_MAX,  F_JSON | F_NO_AGENT, api_h_backup_take},
    {"/api/v1/backups/*",            "GET",       ROLE_USER,  USER_MAX,  F_NO_AGENT,    api_h_backup_get},
    /* the replication log of issue #31 (docs/scheduler.md "Replication"); all but the status: admins only */
    {"/api/v1/replication",          "GET",       ROLE_USER,  USER_MAX,  F_STANDBY_OK,  api_h_repl_status},
    {"/api/v1/replication/snapshot", "GET",       ROLE_USER,  USER_MAX,  F_NO_AGENT,    api_h_repl_snapshot},
    {"/api/v1/replication/stream",   "GET",       ROLE_USER,  USER_MAX,  F_NO_AGENT,    api_h_repl_stream},
    {"/api/v1/replication/objects/#", "GET",      ROLE_USER,  USER_MAX,  F_NO_AGENT,    api_h_repl_object},
    /* the standby of issue #31 (docs/scheduler.md "Standby and failover"); admins only */
    {"/api/v1/replication/promote",  "POST",      ROLE_USER,  USER_MAX,  F_NO_AGENT | F_ANY_ROLE, api_h_standby_promote},
    /* the agent provisioner of issue #32 (docs/deploy.md "Slurm") */
    {"/api/v1/provisioner",          "GET",       ROLE_USER,  USER_MAX,  0,             api_h_provision_get},
};

/* ---------- matching ---------- */

static int is_action(const char *seg, size_t n)
{
    static const char *const acts[] = {"pause", "resume", "cancel", "extend", "archive", "unarchive"};
    for (size_t i = 0; i < sizeof acts / sizeof acts[0]; i++)
        if (strlen(acts[i]) == n && memcmp(seg, acts[i], n) == 0) return 1;
    return 0;
}

/* A row's captured segments, as text (a longer segment is cut, which
 * makes it invalid for its parser: ids are at most 18 digits, keys 64). */
typedef struct route_caps {
    char id[32], act[16], key[72];
} route_caps;

/* Match url against pat, filling *cp. RET 1 on match. */
static int route_match(const char *pat, const char *url, route_caps *cp)
{
    const char *p = pat, *u = url;
    while (*p && *u) {
        if (*p == '*' || *p == '@' || *p == '#') {
            const char *e = u;
            while (*e && *e != '/') e++;
            size_t n = (size_t)(e - u);
            if (n == 0) return 0;
            if (*p == '@' && !is_action(u, n)) return 0;
            char *dst = *p == '*' ? cp->id : *p == '@' ? cp->act : cp->key;
            size_t dl = *p == '*' ? sizeof cp->id : *p == '@' ? sizeof cp->act : sizeof cp->key;
            if (n >= dl) n = dl - 1;
            memcpy(dst, u, n);
            dst[n] = 0;
            u = e;
            p++;
            continue;
        }
        if (*p != *u) return 0;
        p++;
        u++;
    }
    if (*u == '/' && u[1] == 0) u++;     /* tolerate one trailing slash */
    return *p == 0 && *u == 0;
}

/* Is method one of the comma-separated methods? */
static int method_allowed(const char *methods, const char *method)
{
    size_t ml = strlen(method);
    for (const char *p = methods; (p = strstr(p, method)) != NULL; p += ml)
        if ((p == methods || p[-1] == ' ') && (p[ml] == 0 || p[ml] == ',')) return 1;
    return 0;
}

static int is_get(const char *method) { return strcmp(method, "GET") == 0 || strcmp(method, "HEAD") == 0; }

typedef struct route_hit {
    const api_route *rt;   /* the row for the method, or NULL (405) */
    char allow[64];        /* methods of every row whose pattern matches */
    route_caps caps;       /* the row's captures */
} route_hit;

/* RET 1 when some row's pattern matches url, with *h filled. */
static int route_find(const char *url, const char *method, route_hit *h)
{
    int any = 0;
    memset(h, 0, sizeof *h);
    for (size_t i = 0; i < sizeof routes / sizeof routes[0]; i++) {
        route_caps cp = {.id = ""};
        if (!route_match(routes[i].pattern, url, &cp)) continue;
        size_t n = strlen(h->allow);
        snprintf(h->allow + n, sizeof h->allow - n, "%s%s", any ? ", " : "", routes[i].methods);
        any = 1;
        if (!h->rt && method_allowed(routes[i].methods, method)) {
            h->rt = &routes[i];
            h->caps = cp;
        }
    }
    return any;
}

unsigned api_route_body_max(const char *url, const char *method)
{
    route_hit h;
    return route_find(url, method, &h) && h.rt ? h.rt->body_max : API_MAX_BODY_USER;
}

/* ---------- serving ---------- */

/* Strict positive integer id. */
static int parse_id(const char *s, int64_t *out)
{
    if (!*s || strlen(s) > 18) return HF_EINVAL;
    int64_t v = 0;
    for (const char *p = s; *p; p++) {
        if (*p < '0' || *p > '9') return HF_EINVAL;
        v = v * 10 + (*p - '0');
    }
    if (v <= 0) return HF_EINVAL;
    *out = v;
    return 0;
}

/* The row's role against the request's token (a token file is loaded).
 * RET 0 when the request may go on, else 1 with *ret the 401/403. */
static int role_refused(const api *a, struct MHD_Connection *c, const api_route *rt, const char *method,
                        const char **user, int *role_out, enum MHD_Result *ret)
{
    const char *tok = auth_bearer(MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION));
    if (!tok && (rt->flags & F_QUERY_TOKEN)) tok = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "token");
    int role = auth_check_user(a->au, tok, user);
    *role_out = role;
    if (role == AUTH_NONE)
        *ret = api_send_401(c, tok ? "invalid token" : "missing bearer token");
    else if (rt->role == ROLE_AGENT && role != AUTH_AGENT)
        *ret = api_send_err(c, 403, NULL, "this route needs an agent token");
    else if (rt->role == ROLE_USER && role == AUTH_AGENT && (rt->flags & F_NO_AGENT))
        *ret = api_send_err(c, 403, NULL, "an agent token may not read %s", rt->pattern);
    else if (rt->role == ROLE_USER && role == AUTH_AGENT && !is_get(method))
        *ret = api_send_err(c, 403, NULL, "this route needs a user token");
    /* A viewer only reads; a change to an experiment or trial is refused
     * after its id is known (serve: the events table records the try). */
    else if (rt->role == ROLE_USER && role == AUTH_VIEWER && !is_get(method) &&
             !(rt->flags & (F_OWNER | F_OWNER_TRIAL))) {
        char msg[200], d[300];
        snprintf(msg, sizeof msg, "viewer %s may only read: %s %s needs a user or admin token", *user, method,
                 rt->pattern);
        snprintf(d, sizeof d, "refused (viewer %s): %s", *user, msg);
        sched_refused_as(a->s, 0, 0, *user, d);   /* no experiment: the events table keeps it all the same */
        *ret = api_send_err(c, 403, NULL, "%s", msg);
    } else {
        return 0;
    }
    return 1;
}

/* Integer request header name (>= 0), or -1 when absent or malformed. */
static int64_t header_int(struct MHD_Connection *c, const char *name)
{
    const char *v = MHD_lookup_connection_value(c, MHD_HEADER_KIND, name);
    int64_t x = 0;
    if (!v || !*v || strlen(v) > 18) return -1;
    for (const char *p = v; *p; p++) {
        if (*p < '0' || *p > '9') return -1;
        x = x * 10 + (*p - '0');
    }
    return x;
}

/* The replication role gate (docs/scheduler.md "Replication"): on a
 * standby or a fenced primary an agent token's request is first a witness
 * vote (X-Hyperfarm-Lost-Primary, X-Hyperfarm-Term; the voter is the
 * token's holder with the agent id of an /api/v1/agents/{id}/... path, -1
 * on other paths, and a registration's claimed name); then every write and every GET that needs the core is answered 503 with the role, the primary
 * (when known) and the term. RET 1 with *ret, or 0. */
static int role_gate(struct MHD_Connection *c, const route_hit *h, const char *method, const req *rq, int role,
                     const char *user, enum MHD_Result *ret)
{
    const api_route *rt = h->rt;
    int r = repl_role();
    if (r == REPL_PRIMARY || (rt->flags & F_ANY_ROLE)) return 0;
    if (role == AUTH_AGENT) {   /* the voter: the agent id of /api/v1/agents/{id}/..., else none (-1) */
        int64_t lost = header_int(c, "X-Hyperfarm-Lost-Primary"), aid = -1;
        json_t *b = NULL;
        if (strncmp(rt->pattern, "/api/v1/agents/*/", 17) || parse_id(h->caps.id, &aid)) aid = -1;
        if (aid < 0 && !strcmp(rt->pattern, "/api/v1/agents") && !is_get(method) && rq->body.data)
            b = json_loadb(rq->body.data, rq->body.len, 0, NULL);   /* a registration: the name it claims */
        repl_vote(user, aid, json_string_value(json_object_get(b, "name")), lost < 0 ? 0 : lost,
                  header_int(c, "X-Hyperfarm-Term"));
        json_decref(b);
    }
    if (is_get(method) && (rt->flags & F_STANDBY_OK)) return 0;
    char hint[512];
    int has = repl_primary_hint(hint, sizeof hint);
    json_t *o = json_pack("{sssssosI}", "error",
                          r == REPL_STANDBY ? "this scheduler is a standby (read-only)"
                                            : "this scheduler was fenced: a newer primary exists (read-only)",
                          "role", repl_role_name(r), "primary", has ? json_string(hint) : json_null(), "term",
                          (json_int_t)repl_term());
    *ret = api_send_json(c, 503, o);
    return 1;
}

/* What a change route asks, for a refusal: "cancel", "delete", ... */
static const char *verb_of(const api_route *rt, const char *method, const char *act)
{
    if (*act) return act;
    if (strcmp(method, "DELETE") == 0) return "delete";
    if (strcmp(method, "PATCH") == 0) return (rt->flags & F_OWNER_TRIAL) ? "edit the notes of" : "edit";
    if (strstr(rt->pattern, "/kill")) return "kill";
    return "change";
}

/* The checks of the file's header comment, then the handler; begin: the
 * first call of an F_STREAM route (no body yet). */
static enum MHD_Result serve(api *a, struct MHD_Connection *c, const char *method, req *rq, const route_hit *h,
                             int begin)
{
    const api_route *rt = h->rt;
    enum MHD_Result ret;
    const char *user = "local";
    int role = a->au ? AUTH_NONE : AUTH_ADMIN;   /* no token file: one trusted operator */
    if (!rt) return api_send_405(c, h->allow, 1);
    if (a->au && rt->role != ROLE_OPEN && role_refused(a, c, rt, method, &user, &role, &ret)) return ret;
    /* A higher term fences this primary at once; only from a token holder
     * (an anonymous /healthz must not be able to fence it). */
    int64_t term = role != AUTH_NONE ? header_int(c, "X-Hyperfarm-Term") : -1;
    if (term > 0) repl_observe_term(term);
    if (role_gate(c, h, method, rq, role, user, &ret)) return ret;
    if (rq->too_big) return api_send_err(c, 413, NULL, "request body larger than %u bytes", rt->body_max);
    api_call k = {.a = a, .c = c, .rq = rq, .act = h->caps.act, .key = h->caps.key, .begin = begin,
                  .user = user, .role = role};
    hf_jerr_clear(&k.e);
    if (h->caps.id[0] && parse_id(h->caps.id, &k.id))
        return api_send_err(c, 400, "id", "\"%s\" is not a valid id (a positive integer)", h->caps.id);
    if ((rt->flags & (F_OWNER | F_OWNER_TRIAL)) &&
        api_owner_refused(&k, k.id, (rt->flags & F_OWNER_TRIAL) != 0, verb_of(rt, method, k.act), &ret))
        return ret;
    if ((rt->flags & F_JSON) && api_parse_body(&k, &k.body)) return api_send_jerr(c, 400, &k.e);
    if (!is_get(method) && !begin) api_hold_writes(rq);   /* answered once the standby holds it */
    ret = rt->fn(&k);
    api_hold_writes(NULL);
    json_decref(k.body);
    return ret;
}

int api_route_serve(api *a, struct MHD_Connection *c, const char *url, const char *method, req *rq,
                    enum MHD_Result *ret)
{
    route_hit h;
    if (route_find(url, method, &h)) {
        *ret = serve(a, c, method, rq, &h, 0);
        return 0;
    }
    if (strncmp(url, "/api/", 5) == 0 || strcmp(url, "/api") == 0) {
        *ret = api_send_err(c, 404, NULL, "no such route: %s %s", method, url);
        return 0;
    }
    return HF_ENOTFOUND;
}

int api_route_begin(api *a, struct MHD_Connection *c, const char *url, const char *method, req *rq,
                    enum MHD_Result *ret)
{
    route_hit h;
    if (strlen(url) > 2048 || !route_find(url, method, &h) || !h.rt || !(h.rt->flags & F_STREAM)) return 0;
    *ret = serve(a, c, method, rq, &h, 1);
    if (!rq->streamed) rq->answered = 1;   /* refused: an error is queued */
    return 1;
}
