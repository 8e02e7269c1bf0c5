/*
 * api_owner.c — who may change what (docs/api.md "Roles"): an admin
 * anything, a user what it owns (the experiments it submitted, their
 * trials, the webhooks it created), viewers and agents nothing. A refusal
 * is recorded as a REFUSED events row naming who tried, then answered
 * 403. Used by the route table's F_OWNER checks and by the handlers that
 * check an owner themselves (webhooks).
 */
#include "scheduler/api/api_int.h"

#include "hf_log.h"
#include "scheduler/api/auth.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

/* May the request change what owner owns? Admins change anything; users
 * what they own; viewers and agents nothing. */
int api_may_change(const api_call *k, const char *owner)
{
    return k->role == AUTH_ADMIN || (k->role == AUTH_USER && owner && strcmp(owner, k->user) == 0);
}

/* A refused change: an events row (type REFUSED, the user who tried; on
 * experiment exp_id, 0 = none), then 403 {"error": what and why}. */
enum MHD_Result api_refuse(api_call *k, int64_t exp_id, int64_t trial_id, const char *field, const char *fmt, ...)
{
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    char d[480];   /* exp_id 0 (a global webhook): an events row with no experiment */
    snprintf(d, sizeof d, "refused (%s %s): %s", auth_role_name(k->role), k->user, msg);
    if (sched_refused_as(k->a->s, exp_id, trial_id, k->user, d))
        hf_warn("cannot record a refused request of %s (experiment %lld)", k->user, (long long)exp_id);
    hf_info("403 for %s %s: %s", auth_role_name(k->role), k->user, msg);
    return api_send_err(k->c, 403, field, "%s", msg);
}

/* Experiment id (is_trial 0) or trial id's experiment: 0 when the request
 * may change it (or it does not exist: the handler answers 404), else 1
 * with the 403 in *ret. verb says what was asked ("cancel"). */
int api_owner_refused(api_call *k, int64_t id, int is_trial, const char *verb, enum MHD_Result *ret)
{
    char owner[AUTH_NAME_MAX + 1];
    int64_t xid = 0;
    if (k->role == AUTH_ADMIN) return 0;
    if (sched_owner_of(k->a->s, id, is_trial, &xid, owner, sizeof owner)) {
        if (k->role == AUTH_USER) return 0;   /* the handler's 404 */
        snprintf(owner, sizeof owner, "nobody");
        xid = is_trial ? 0 : id;
    }
    if (api_may_change(k, owner)) return 0;
    char what[64];
    if (is_trial) snprintf(what, sizeof what, "trial %lld of experiment %lld", (long long)id, (long long)xid);
    else snprintf(what, sizeof what, "experiment %lld", (long long)xid);
    if (k->role != AUTH_USER)
        *ret = api_refuse(k, xid, is_trial ? id : 0, NULL, "%s %s may only read: it may not %s %s (owned by %s)",
                      auth_role_name(k->role), k->user, verb, what, owner);
    else
        *ret = api_refuse(k, xid, is_trial ? id : 0, NULL, "%s is owned by %s; only its owner or an admin may %s it",
                      what, owner, verb);
    return 1;
}
