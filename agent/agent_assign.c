/*
 * agent_assign.c — validation of heartbeat replies: assignments and kills
 * (see agent_assign.h and docs/protocol.md, "Agents").
 *
 * The workload: a reply carries a handful of assignments (at most
 * AGENT_MAX_ASSIGN); each is copied into an agent_spec of bounded size
 * (AGENT_MAX_ARGS arguments and AGENT_MAX_ENV variables of at most
 * AGENT_ARG_MAX bytes each), so a hostile reply cannot make the agent
 * allocate without bound.
 */
#include "agent_assign.h"
#include "hf_buf.h"
#include "hf_err.h"
#include "hf_metric.h"
#include "hf_log.h"
#include "hf_time.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- spec */

void agent_spec_free(agent_spec *s)
{
    if (!s) return;
    for (char **p = s->argv; p && *p; p++) free(*p);
    for (char **p = s->env; p && *p; p++) free(*p);
    free(s->argv);
    free(s->env);
    free(s->hostfile);
    hf_trial_vars_free(&s->trial);
    free(s);
}

/* A host name or address as Open MPI's host file takes it: letters,
 * digits, '.', '-', '_', ':' (IPv6), 1..255 bytes. Nothing else can reach
 * the file (no spaces, newlines or '#'). */
static int host_ok(const char *h)
{
    size_t n = strlen(h);
    if (n == 0 || n > 255 || h[0] == '-') return 0;
    for (size_t i = 0; i < n; i++) {
        char c = h[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '-'
              || c == '_' || c == ':'))
            return 0;
    }
    return 1;
}

/* "launcher", "hold", "hosts" of an assignment. RET 0 or HF_EINVAL. */
static int parse_launcher(const json_t *a, const char *path, agent_spec *s, hf_jerr *e)
{
    const char *l = NULL;
    json_t *hosts = NULL, *hold = json_object_get(a, "hold");
    char fp[256], ip[256];
    hf_buf b;
    int rc;
    if ((rc = hf_json_get_string(a, path, "launcher", 0, 16, &l, e))) return rc;
    if ((rc = hf_json_get_array(a, path, "hosts", 0, AGENT_MAX_HOSTS, &hosts, e))) return rc;
    if (hold && !json_is_boolean(hold)) return hf_jerr_set(e, path, "hold", "must be a boolean");
    if (!l) {
        if (hosts || json_is_true(hold)) return hf_jerr_set(e, path, "launcher", "required with hosts or hold");
        return 0;
    }
    if (strcmp(l, "mpirun")) return hf_jerr_set(e, path, "launcher", "must be \"mpirun\", got \"%s\"", l);
    s->launcher = 1;
    s->hold = json_is_true(hold);
    if (s->hold) return 0;
    if (!hosts || json_array_size(hosts) == 0)
        return hf_jerr_set(e, path, "hosts", "required (non-empty) for the rank that runs mpirun");
    hf_buf_init(&b, (size_t)AGENT_MAX_HOSTS * 300);
    hf_jpath(fp, sizeof fp, path, "hosts");
    for (size_t i = 0; i < json_array_size(hosts); i++) {
        json_t *h = json_array_get(hosts, i);
        const char *name = NULL;
        int64_t slots = 0;
        hf_jpath_index(ip, sizeof ip, fp, i);
        if (!json_is_object(h)) { rc = hf_jerr_set(e, ip, NULL, "must be an object"); goto end; }
        if ((rc = hf_json_get_string(h, ip, "host", 1, 255, &name, e))) goto end;
        if (!host_ok(name)) {
            rc = hf_jerr_set(e, ip, "host", "not a host name or address ([A-Za-z0-9._:-])");
            goto end;
        }
        if ((rc = hf_json_get_int(h, ip, "slots", 1, 1, 100000, &slots, e))) goto end;
        if ((rc = hf_buf_printf(&b, "%s slots=%lld\n", name, (long long)slots))) {
            rc = hf_jerr_set(e, ip, NULL, "out of memory");
            goto end;
        }
    }
    if (!(s->hostfile = strndup(b.data ? b.data : "", b.len))) rc = hf_jerr_set(e, path, NULL, "out of memory");
end:
    hf_buf_free(&b);
    return rc;
}

/* "checkpoint_dir" (ck, required) and "copy_checkpoint_from" (cf, may be
 * NULL or ""): relative paths inside the work directory. RET 0 or HF_EINVAL. */
static int parse_paths(const char *ck, const char *cf, const char *path, agent_spec *s, hf_jerr *e)
{
    char why[160];
    if (agent_fs_check_rel(ck, why, sizeof why)) return hf_jerr_set(e, path, "checkpoint_dir", "%s", why);
    snprintf(s->checkpoint_dir, sizeof s->checkpoint_dir, "%s", ck);
    if (cf && *cf) {
        if (agent_fs_check_rel(cf, why, sizeof why)) return hf_jerr_set(e, path, "copy_checkpoint_from", "%s", why);
        snprintf(s->copy_from, sizeof s->copy_from, "%s", cf);
    }
    return HF_OK;
}

/* "restore": {"sha256", "size", "name", "step", "trial"} (optional). The
 * name becomes a file in the checkpoint directory, so it must be a plain
 * file name. RET 0 or HF_EINVAL. */
static int parse_restore(const json_t *a, const char *path, agent_spec *s, hf_jerr *e)
{
    char rp[160];
    const char *sha = NULL, *name = NULL;
    json_t *r = json_object_get(a, "restore");
    if (!r || json_is_null(r)) return 0;
    snprintf(rp, sizeof rp, "%s.restore", path);
    if (!json_is_object(r)) return hf_jerr_set(e, path, "restore", "must be an object");
    if (hf_json_get_string(r, rp, "sha256", 1, 64, &sha, e) || hf_json_get_int(r, rp, "size", 1, 0, INT64_MAX, &s->restore_size, e)
        || hf_json_get_string(r, rp, "name", 1, 255, &name, e)
        || hf_json_get_int(r, rp, "step", 0, INT64_MIN, INT64_MAX, &s->restore_step, e)
        || hf_json_get_int(r, rp, "trial", 0, 0, INT64_MAX, &s->restore_trial, e))
        return HF_EINVAL;
    if (strlen(sha) != 64 || strspn(sha, "0123456789abcdef") != 64)
        return hf_jerr_set(e, rp, "sha256", "must be 64 lowercase hex characters");
    if (!*name || strchr(name, '/') || !strcmp(name, ".") || !strcmp(name, ".."))
        return hf_jerr_set(e, rp, "name", "must be a plain file name (no '/', not . or ..)");
    for (const char *c = name; *c; c++)
        if ((unsigned char)*c < 0x20 || *c == 0x7f) return hf_jerr_set(e, rp, "name", "control character");
    memcpy(s->restore_sha, sha, 65);
    snprintf(s->restore_name, sizeof s->restore_name, "%s", name);
    s->has_restore = 1;
    return 0;
}

/* "context" (may be absent): {"sha256": 64 lowercase hex, "size": bytes}.
 * RET 0 or HF_EINVAL. */
static int parse_context(const json_t *a, const char *path, agent_spec *s, hf_jerr *e)
{
    json_t *c = NULL;
    const char *sha = NULL;
    char fp[256];
    int rc;
    if ((rc = hf_json_get_object(a, path, "context", 0, &c, e)) || !c) return rc;
    hf_jpath(fp, sizeof fp, path, "context");
    if ((rc = hf_json_get_string(c, fp, "sha256", 1, 64, &sha, e)) ||
        (rc = hf_json_get_int(c, fp, "size", 1, 0, INT64_MAX, &s->context_size, e)))
        return rc;
    size_t n = strspn(sha, "0123456789abcdef");
    if (n != 64 || sha[n]) return hf_jerr_set(e, fp, "sha256", "must be 64 lowercase hex characters");
    memcpy(s->context_sha, sha, 65);
    return HF_OK;
}

/* "argv": a non-empty array of strings without NUL, argv[0] non-empty.
 * RET 0, HF_EINVAL or HF_ENOMEM (e filled either way). */
static int parse_argv(const json_t *argv, const char *path, agent_spec *s, hf_jerr *e)
{
    char fp[256], ip[256];
    size_t na = json_array_size(argv);
    if (na == 0) return hf_jerr_set(e, path, "argv", "must not be empty");
    if (!(s->argv = calloc(na + 1, sizeof *s->argv))) goto oom;
    hf_jpath(fp, sizeof fp, path, "argv");
    for (size_t i = 0; i < na; i++) {
        json_t *x = json_array_get(argv, i);
        hf_jpath_index(ip, sizeof ip, fp, i);
        if (!json_is_string(x)) return hf_jerr_set(e, ip, NULL, "must be a string");
        size_t len = json_string_length(x);
        if (len > AGENT_ARG_MAX || strlen(json_string_value(x)) != len || (i == 0 && len == 0))
            return hf_jerr_set(e, ip, NULL, i == 0 ? "must be a non-empty string without NUL"
                                                   : "must be at most %d bytes without NUL", AGENT_ARG_MAX);
        if (!(s->argv[i] = strdup(json_string_value(x)))) goto oom;
    }
    return HF_OK;
oom:
    hf_jerr_set(e, path, NULL, "out of memory");
    return HF_ENOMEM;
}

static int env_name_ok(const char *k)
{
    size_t n = strlen(k);
    if (n == 0 || n > 128 || (k[0] >= '0' && k[0] <= '9')) return 0;
    for (size_t i = 0; i < n; i++) {
        char c = k[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_'))
            return 0;
    }
    return 1;
}

/* "env" (env may be NULL): an object of string values, turned into
 * "NAME=value" entries. RET 0, HF_EINVAL or HF_ENOMEM (e filled either way). */
static int parse_env(const json_t *env, const char *path, agent_spec *s, hf_jerr *e)
{
    char fp[256];
    size_t ne = env ? json_object_size(env) : 0, k = 0;
    if (ne > AGENT_MAX_ENV) return hf_jerr_set(e, path, "env", "more than %d variables", AGENT_MAX_ENV);
    if (!(s->env = calloc(ne + 1, sizeof *s->env))) goto oom;
    if (!env) return HF_OK;
    const char *key;
    json_t *x;
    hf_jpath(fp, sizeof fp, path, "env");
    json_object_foreach((json_t *)env, key, x) {
        if (!env_name_ok(key)) return hf_jerr_set(e, fp, key, "not a valid environment variable name");
        /* The contract's variables come from typed fields only: an "env"
         * naming one would be overridden, so it is refused, not dropped. */
        const char *why = hf_trial_env_reserved(key);
        if (why) return hf_jerr_set(e, fp, key, "%s", why);
        if (!json_is_string(x) || json_string_length(x) > AGENT_ARG_MAX
            || strlen(json_string_value(x)) != json_string_length(x))
            return hf_jerr_set(e, fp, key, "must be a string of at most %d bytes without NUL", AGENT_ARG_MAX);
        size_t len = strlen(key) + json_string_length(x) + 2;
        if (!(s->env[k] = malloc(len))) goto oom;
        snprintf(s->env[k++], len, "%s=%s", key, json_string_value(x));
    }
    return HF_OK;
oom:
    hf_jerr_set(e, path, NULL, "out of memory");
    return HF_ENOMEM;
}

agent_spec *agent_spec_parse(const json_t *a, const char *path, hf_jerr *e)
{
    agent_spec *s = NULL;
    json_t *argv = NULL, *env = NULL;
    const char *ck = NULL, *cf = NULL, *pm = NULL;

    hf_jerr_clear(e);
    if (!json_is_object(a)) {
        hf_jerr_set(e, path, NULL, "must be an object");
        return NULL;
    }
    if (!(s = calloc(1, sizeof *s))) {
        hf_jerr_set(e, path, NULL, "out of memory");
        return NULL;
    }
    if (hf_trial_decode(a, path, &s->trial, e)
        || hf_json_get_array(a, path, "argv", 1, AGENT_MAX_ARGS, &argv, e)
        || hf_json_get_object(a, path, "env", 0, &env, e)
        || hf_json_get_string(a, path, "checkpoint_dir", 1, AGENT_PATH_MAX / 2, &ck, e))
        goto fail;
    s->trial_id = s->trial.trial_id;
    s->attempt = s->trial.attempt;
    s->experiment_id = s->trial.experiment_id;
    s->rank = s->trial.rank;
    s->slots = 1;
    s->grace_ms = -1;
    if (hf_json_get_int(a, path, "slots", 0, 0, 1 << 20, &s->slots, e)
        || hf_json_get_int(a, path, "grace_ms", 0, 0, AGENT_GRACE_MAX_MS, &s->grace_ms, e)
        || hf_json_get_string(a, path, "prompt_metric", 0, sizeof s->prompt_metric - 1, &pm, e))
        goto fail;
    if (pm && !hf_metric_name_ok(pm)) {
        hf_jerr_set(e, path, "prompt_metric", "not a valid metric name");
        goto fail;
    }
    if (pm) snprintf(s->prompt_metric, sizeof s->prompt_metric, "%s", pm);
    if (parse_launcher(a, path, s, e) || parse_context(a, path, s, e)) goto fail;
    /* copy_checkpoint_from: optional string or null (PBT exploit). */
    json_t *cfj = json_object_get(a, "copy_checkpoint_from");
    if (cfj && !json_is_null(cfj)
        && hf_json_get_string(a, path, "copy_checkpoint_from", 1, AGENT_PATH_MAX / 2, &cf, e))
        goto fail;
    if (parse_paths(ck, cf, path, s, e) || parse_argv(argv, path, s, e) || parse_env(env, path, s, e)
        || parse_restore(a, path, s, e))
        goto fail;
    return s;
fail:
    agent_spec_free(s);
    return NULL;
}

/* --------------------------------------------------------------- reply */

void agent_reply_free(agent_reply *r)
{
    if (!r) return;
    for (size_t i = 0; i < r->nassign; i++) agent_spec_free(r->assign[i]);
    free(r->assign);
    free(r->kill);
    json_decref(r->rejected);
    memset(r, 0, sizeof *r);
}

/* An invalid assignment a (named p): tell the scheduler with a
 * start_failed event in out->rejected, if we know which trial it was. */
static void reject_assign(const json_t *a, const char *p, const hf_jerr *ae, agent_reply *out)
{
    json_t *tid = json_object_get(a, "trial_id"), *att = json_object_get(a, "attempt");
    hf_warn("rejected assignment %s: %s: %s", p, ae->field, ae->msg);
    if (json_is_integer(tid) && json_is_integer(att)) {
        char msg[600];
        snprintf(msg, sizeof msg, "invalid assignment: %s: %s", ae->field, ae->msg);
        json_array_append_new(out->rejected,
                              json_pack("{s:O, s:O, s:s, s:I, s:s}", "trial_id", tid, "attempt", att,
                                        "type", "start_failed", "time", (json_int_t)hf_wall_ms(),
                                        "error", msg));
    }
}

/* One element k (named p) of "kill". RET 0 (kr filled) or HF_EINVAL
 * (logged: the element is skipped). */
static int parse_kill(const json_t *k, const char *p, agent_killreq *kr)
{
    const char *reason = NULL;
    hf_jerr ke;
    kr->attempt = 0;
    kr->grace_ms = -1;
    if (!json_is_object(k)
        || hf_json_get_int(k, p, "trial_id", 1, 1, INT64_MAX, &kr->trial_id, &ke)
        || hf_json_get_int(k, p, "attempt", 0, 0, INT32_MAX, &kr->attempt, &ke)
        || hf_json_get_int(k, p, "grace_ms", 0, 0, AGENT_GRACE_MAX_MS, &kr->grace_ms, &ke)) {
        hf_warn("ignored kill %s: %s", p, json_is_object(k) ? ke.msg : "not an object");
        return HF_EINVAL;
    }
    reason = json_string_value(json_object_get(k, "reason"));   /* optional, may be null */
    snprintf(kr->reason, sizeof kr->reason, "%s", reason && *reason ? reason : "scheduler");
    return HF_OK;
}

int agent_reply_parse(const json_t *reply, agent_reply *out, hf_jerr *e)
{
    json_t *assign = NULL, *kill = NULL;
    int64_t iv = 0, gap = 0;
    char p[64];

    memset(out, 0, sizeof *out);
    hf_jerr_clear(e);
    if (!json_is_object(reply)) return hf_jerr_set(e, "", NULL, "reply must be an object");
    if (hf_json_get_array(reply, "", "assign", 0, AGENT_MAX_ASSIGN, &assign, e)
        || hf_json_get_array(reply, "", "kill", 0, AGENT_MAX_ASSIGN, &kill, e)
        || hf_json_get_int(reply, "", "heartbeat_interval_ms", 0, 10, 3600000, &iv, e)
        || hf_json_get_int(reply, "", "report_gap_ms", 0, 1, 3600000, &gap, e))
        return HF_EINVAL;
    out->interval_ms = iv;
    out->report_gap_ms = gap;
    if (!(out->rejected = json_array())) return hf_jerr_set(e, "", NULL, "out of memory");
    size_t na = json_array_size(assign), nk = json_array_size(kill);
    if ((na && !(out->assign = calloc(na, sizeof *out->assign)))
        || (nk && !(out->kill = calloc(nk, sizeof *out->kill)))) {
        agent_reply_free(out);
        return hf_jerr_set(e, "", NULL, "out of memory");
    }
    for (size_t i = 0; i < na; i++) {
        json_t *a = json_array_get(assign, i);
        hf_jerr ae;
        hf_jpath_index(p, sizeof p, "assign", i);
        agent_spec *s = agent_spec_parse(a, p, &ae);
        if (s) out->assign[out->nassign++] = s;
        else reject_assign(a, p, &ae, out);
    }
    for (size_t i = 0; i < nk; i++) {
        hf_jpath_index(p, sizeof p, "kill", i);
        if (parse_kill(json_array_get(kill, i), p, &out->kill[out->nkill]) == HF_OK) out->nkill++;
    }
    return HF_OK;
}
