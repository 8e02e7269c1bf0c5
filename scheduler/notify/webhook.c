/*
 * webhook.c — webhook registration and the outbox delivery thread
 * (webhook.h; docs/protocol.md "Webhooks").
 *
 * Invariants: the outbox rows are written by the events trigger
 * (schema/0009_insight.sql), in the transaction of the state change, and
 * by webhook_test (a test row, with its own events row); otherwise this
 * file only reads them and records outcomes. One connection (w->db,
 * foreign keys on, 5 s busy timeout like the core's writer, whose short
 * transactions it waits for) serves the API calls and the thread, under
 * w->mu; the lock is never held across an HTTP request, so a slow receiver
 * delays neither registrations nor the scheduler core. Backoff is per
 * hook and in memory: rows of a hook that just failed are skipped until
 * its retry time, which keeps their order and spares a receiver that is
 * down a storm of attempts; after a restart every due row is tried at
 * once.
 *
 * Workload: a few hooks; at most one row per (hook, state change), i.e.
 * a handful per trial. A round takes at most WEBHOOK_ROUND rows.
 */
#include "scheduler/notify/webhook.h"

#include "hf_err.h"
#include "hf_log.h"
#include "hf_time.h"
#include "scheduler/store/store.h"

#include <arpa/inet.h>
#include <curl/curl.h>
#include <gnutls/crypto.h>
#include <gnutls/gnutls.h>
#include <pthread.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sqlite3.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define WEBHOOK_ROUND 32
#define HOOK_SLOTS    256     /* hooks with a backoff in force (more: treated as not backed off) */

/* ---------- validation ---------- */

static const char *const exp_states[] = {"ACTIVE", "PAUSED", "COMPLETED", "CANCELED", "FAILED", NULL};
static const char *const trial_states[] = {"QUEUED", "ASSIGNED", "RUNNING", "COMPLETED", "FAILED",
                                           "STOPPED", "CANCELED", "PAUSED", NULL};

static int in_list(const char *s, const char *const *l)
{
    for (; *l; l++)
        if (strcmp(s, *l) == 0) return 1;
    return 0;
}

static int filter_ok(const char *f)
{
    if (strcmp(f, "*") == 0) return 1;
    if (strncmp(f, "experiment.", 11) == 0) return strcmp(f + 11, "*") == 0 || in_list(f + 11, exp_states);
    if (strncmp(f, "trial.", 6) == 0) return strcmp(f + 6, "*") == 0 || in_list(f + 6, trial_states);
    return 0;
}

static int printable(const char *s)
{
    for (; *s; s++)
        if ((unsigned char)*s < 0x20 || *s == 0x7f) return 0;
    return 1;
}

int webhook_spec_parse(const json_t *body, webhook_spec *out, hf_jerr *e)
{
    static const char *const keys[] = {"url", "secret", "format", "events", "experiment_id", NULL};
    int rc;
    memset(out, 0, sizeof *out);
    out->format = "json";
    if (!json_is_object(body)) return hf_jerr_set(e, "", NULL, "expected a JSON object");
    if ((rc = hf_json_only_keys(body, "", keys, e))) return rc;
    if ((rc = hf_json_get_string(body, "", "url", 1, WEBHOOK_URL_MAX, &out->url, e))) return rc;
    if (strncmp(out->url, "http://", 7) && strncmp(out->url, "https://", 8))
        return hf_jerr_set(e, "", "url", "must start with http:// or https://");
    const char *host = out->url + (out->url[4] == 's' ? 8 : 7);
    if (!*host || *host == '/') return hf_jerr_set(e, "", "url", "has no host");
    for (const char *c = out->url; *c; c++)
        if ((unsigned char)*c <= 0x20 || *c == 0x7f) return hf_jerr_set(e, "", "url", "contains a space or control character");
    if ((rc = hf_json_get_string(body, "", "secret", 0, WEBHOOK_SECRET_MAX, &out->secret, e))) return rc;
    if (out->secret && (!*out->secret || !printable(out->secret)))
        return hf_jerr_set(e, "", "secret", "must be 1 to %d printable characters", WEBHOOK_SECRET_MAX);
    if ((rc = hf_json_get_string(body, "", "format", 0, 16, &out->format, e))) return rc;
    if (!out->format) out->format = "json";
    if (strcmp(out->format, "json") && strcmp(out->format, "slack"))
        return hf_jerr_set(e, "", "format", "must be \"json\" or \"slack\"");
    json_t *ev = NULL;
    if ((rc = hf_json_get_array(body, "", "events", 0, WEBHOOK_EVENTS_MAX, &ev, e))) return rc;
    if (ev) {
        if (json_array_size(ev) == 0) return hf_jerr_set(e, "", "events", "must name at least one filter");
        size_t i;
        json_t *f;
        json_array_foreach(ev, i, f) {
            char p[32];
            snprintf(p, sizeof p, "events[%zu]", i);
            if (!json_is_string(f) || !filter_ok(json_string_value(f)))
                return hf_jerr_set(e, p, NULL, "must be \"*\", \"experiment.*\", \"trial.*\", \"experiment.STATE\" "
                                   "(ACTIVE, PAUSED, COMPLETED, CANCELED, FAILED) or \"trial.STATE\" (QUEUED, ASSIGNED, "
                                   "RUNNING, COMPLETED, FAILED, STOPPED, CANCELED, PAUSED)");
        }
        out->events = ev;
    }
    if ((rc = hf_json_get_int(body, "", "experiment_id", 0, 1, INT64_MAX, &out->experiment_id, e))) return rc;
    return 0;
}

int webhook_sign(const char *secret, const void *body, size_t len, char out[72])
{
    unsigned char mac[32];
    static const char hex[] = "0123456789abcdef";
    if (gnutls_hmac_fast(GNUTLS_MAC_SHA256, secret, strlen(secret), body, len, mac) < 0) return HF_EINVAL;
    memcpy(out, "sha256=", 7);
    for (int i = 0; i < 32; i++) {
        out[7 + 2 * i] = hex[mac[i] >> 4];
        out[8 + 2 * i] = hex[mac[i] & 15];
    }
    out[71] = '\0';
    return 0;
}

/* "trial.FAILED", "experiment.COMPLETED", or "webhook.test" (a test delivery). */
static const char *event_name(const webhook_event *ev, char *buf, size_t size)
{
    if (strcmp(ev->state, WEBHOOK_TEST_EVENT) == 0) return WEBHOOK_TEST_EVENT;
    snprintf(buf, size, "%s.%s", ev->trial_id > 0 ? "trial" : "experiment", ev->state);
    return buf;
}

char *webhook_body(const webhook_event *ev, const char *format)
{
    int test = strcmp(ev->state, WEBHOOK_TEST_EVENT) == 0;
    const char *kind = test ? "webhook" : ev->trial_id > 0 ? "trial" : "experiment";
    char buf[300];
    const char *name = event_name(ev, buf, sizeof buf);
    json_t *v;
    if (test && strcmp(format, "slack") == 0) {
        char text[400];
        snprintf(text, sizeof text, "hyperfarm: %.300s", ev->detail ? ev->detail : "test delivery");
        v = json_pack("{ss}", "text", text);
    } else if (strcmp(format, "slack") == 0) {
        char text[1200], obj[64] = "";
        if (ev->has_objective && ev->trial_id > 0) snprintf(obj, sizeof obj, ", objective %.6g", ev->objective);
        else if (ev->has_objective && ev->objective_trial > 0)   /* an experiment event: its best trial's */
            snprintf(obj, sizeof obj, ", best objective %.6g (trial %lld)", ev->objective,
                     (long long)ev->objective_trial);
        if (ev->trial_id > 0)
            snprintf(text, sizeof text, "hyperfarm: trial %lld of experiment %lld (%.200s) is %s%s%s%.300s",
                     (long long)ev->trial_id, (long long)ev->experiment_id,
                     ev->experiment_name ? ev->experiment_name : "?", ev->state, obj,
                     ev->detail && *ev->detail ? ": " : "", ev->detail ? ev->detail : "");
        else
            snprintf(text, sizeof text, "hyperfarm: experiment %lld (%.200s) is %s%s%s%.300s",
                     (long long)ev->experiment_id, ev->experiment_name ? ev->experiment_name : "?", ev->state,
                     *obj ? obj : "", ev->detail && *ev->detail ? ": " : "", ev->detail ? ev->detail : "");
        v = json_pack("{ss}", "text", text);
    } else {
        v = json_pack("{sIsssssssososIsIsosososo}", "delivery", (json_int_t)ev->delivery, "event", name, "kind", kind,
                      "state", test ? "test" : ev->state,
                      "experiment_id", ev->experiment_id > 0 ? json_integer(ev->experiment_id) : json_null(),
                      "experiment_name", ev->experiment_name ? json_string(ev->experiment_name) : json_null(),
                      "event_id", (json_int_t)ev->event_id, "time", (json_int_t)ev->time,
                      "trial_id", ev->trial_id > 0 ? json_integer(ev->trial_id) : json_null(),
                      "objective", ev->has_objective ? json_real(ev->objective) : json_null(),
                      "detail", ev->detail ? json_string(ev->detail) : json_null(),
                      "hyperfarm", json_string("1"));
    }
    if (v && strcmp(format, "slack") && !test) {
        /* Which trial the objective is of (an experiment event: its best),
         * and every objective of a list (docs/protocol.md "Webhooks"). */
        json_object_set_new(v, "objective_trial", ev->objective_trial > 0 ? json_integer(ev->objective_trial)
                                                                           : json_null());
        if (ev->objectives) {
            json_t *o = json_loads(ev->objectives, 0, NULL);
            if (json_is_object(o)) json_object_set_new(v, "objectives", o);
            else json_decref(o);
        }
    }
    char *s = v ? json_dumps(v, JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(15)) : NULL;
    json_decref(v);
    return s;
}

/* ---------- where a hook may point (docs/scheduler.md --webhook-allow-private) ---------- */

/* Is a (an IPv4 address, host order) in net/bits? */
static int in4(uint32_t a, uint32_t net, int bits)
{
    uint32_t mask = bits ? 0xffffffffu << (32 - bits) : 0;
    return (a & mask) == (net & mask);
}

static const char *private4(uint32_t a)
{
    if (in4(a, 0x00000000u, 8)) return "an unspecified address (0.0.0.0/8)";
    if (in4(a, 0x7f000000u, 8)) return "a loopback address (127.0.0.0/8)";
    if (in4(a, 0x0a000000u, 8) || in4(a, 0xac100000u, 12) || in4(a, 0xc0a80000u, 16))
        return "a private address (RFC 1918)";
    if (in4(a, 0x64400000u, 10)) return "a shared address (100.64.0.0/10)";
    if (in4(a, 0xa9fe0000u, 16)) return "a link-local address (169.254.0.0/16)";
    if (in4(a, 0xe0000000u, 4) || a == 0xffffffffu) return "a multicast or broadcast address";
    return NULL;
}

const char *webhook_addr_private(const struct sockaddr *sa)
{
    if (sa->sa_family == AF_INET)
        return private4(ntohl(((const struct sockaddr_in *)sa)->sin_addr.s_addr));
    if (sa->sa_family != AF_INET6) return "not an IP address";
    const unsigned char *b = ((const struct sockaddr_in6 *)sa)->sin6_addr.s6_addr;
    static const unsigned char zero[16], mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    if (memcmp(b, mapped, 12) == 0 || (memcmp(b, zero, 12) == 0 && (b[12] | b[13] | b[14] | b[15]) && b[15] != 1)) {
        /* IPv4-mapped (::ffff:a.b.c.d) and IPv4-compatible (::a.b.c.d) */
        uint32_t a = (uint32_t)b[12] << 24 | (uint32_t)b[13] << 16 | (uint32_t)b[14] << 8 | b[15];
        return private4(a);
    }
    if (memcmp(b, zero, 16) == 0) return "an unspecified address (::)";
    if (memcmp(b, zero, 15) == 0 && b[15] == 1) return "a loopback address (::1)";
    if ((b[0] & 0xfe) == 0xfc) return "a private address (fc00::/7)";
    if (b[0] == 0xfe && (b[1] & 0xc0) == 0x80) return "a link-local address (fe80::/10)";
    if (b[0] == 0xfe && (b[1] & 0xc0) == 0xc0) return "a site-local address (fec0::/10)";
    if (b[0] == 0xff) return "a multicast address";
    return NULL;
}

/* Is sa one of this machine's addresses (its interfaces')? */
static int addr_is_local(const struct sockaddr *sa)
{
    struct ifaddrs *ifs = NULL;
    int hit = 0;
    if (getifaddrs(&ifs)) return 0;
    for (struct ifaddrs *i = ifs; i && !hit; i = i->ifa_next) {
        if (!i->ifa_addr || i->ifa_addr->sa_family != sa->sa_family) continue;
        if (sa->sa_family == AF_INET)
            hit = ((const struct sockaddr_in *)sa)->sin_addr.s_addr ==
                  ((const struct sockaddr_in *)i->ifa_addr)->sin_addr.s_addr;
        else if (sa->sa_family == AF_INET6)
            hit = memcmp(&((const struct sockaddr_in6 *)sa)->sin6_addr,
                         &((const struct sockaddr_in6 *)i->ifa_addr)->sin6_addr, 16) == 0;
    }
    freeifaddrs(ifs);
    return hit;
}

static int sa_port(const struct sockaddr *sa)
{
    if (sa->sa_family == AF_INET) return ntohs(((const struct sockaddr_in *)sa)->sin_port);
    if (sa->sa_family == AF_INET6) return ntohs(((const struct sockaddr_in6 *)sa)->sin6_port);
    return 0;
}

/* Why the hook may not connect to sa under the policy, or NULL. The
 * scheduler itself (a local address at its own port) is refused even when
 * private addresses are allowed. */
static const char *addr_refused(const struct sockaddr *sa, int allow_private, int self_port)
{
    const char *why = webhook_addr_private(sa);
    int local = addr_is_local(sa) || (why && strstr(why, "loopback")) || (why && strstr(why, "unspecified"));
    if (local && self_port > 0 && sa_port(sa) == self_port) return "the scheduler itself";
    if (allow_private) return NULL;
    if (why) return why;
    if (local) return "an address of the scheduler's machine";
    return NULL;
}

/* ---------- the service ---------- */

typedef struct backoff {
    int64_t hook_id;   /* 0: a free slot */
    int     fails;
    int64_t retry_at;   /* hf_mono_ms */
} backoff;

struct webhook_svc {
    sqlite3        *db;
    pthread_mutex_t mu;            /* w->db */
    pthread_t       thread;
    int             started;
    pthread_mutex_t wake_mu;
    pthread_cond_t  wake_cv;
    atomic_int      stop;
    CURL           *curl;          /* the thread's */
    backoff         bo[HOOK_SLOTS];  /* under bo_mu */
    pthread_mutex_t bo_mu;
    atomic_llong    gen;           /* +1 at every create and delete (a hook id may come back) */
    atomic_llong    delivered, failed;
    atomic_int      allow_private; /* --webhook-allow-private */
    atomic_int      self_port;     /* the scheduler's port: never a target */
    char            refused[160];  /* why opensocket refused the last address (the thread's) */
};

static int exec1(sqlite3 *db, const char *sql)
{
    return sqlite3_exec(db, sql, NULL, NULL, NULL) == SQLITE_OK ? 0 : HF_EDB;
}

static backoff *bo_find(webhook_svc *w, int64_t hook, int create)
{
    backoff *free_slot = NULL;
    for (int i = 0; i < HOOK_SLOTS; i++) {
        if (w->bo[i].hook_id == hook) return &w->bo[i];
        if (!free_slot && w->bo[i].hook_id == 0) free_slot = &w->bo[i];
    }
    if (create && free_slot) {
        memset(free_slot, 0, sizeof *free_slot);
        free_slot->hook_id = hook;
        return free_slot;
    }
    return NULL;
}

/* Hook id was created or deleted: whatever backoff its id had is gone. */
static void forget_backoff(webhook_svc *w, int64_t id)
{
    pthread_mutex_lock(&w->bo_mu);
    atomic_fetch_add(&w->gen, 1);
    backoff *b = bo_find(w, id, 0);
    if (b) b->hook_id = 0;
    pthread_mutex_unlock(&w->bo_mu);
}

static size_t discard(char *p, size_t sz, size_t n, void *u)
{
    (void)p;
    (void)u;
    return sz * n;   /* the receiver's answer is not kept */
}

static int on_xfer(void *u, curl_off_t a, curl_off_t b, curl_off_t c, curl_off_t d)
{
    (void)a; (void)b; (void)c; (void)d;
    return atomic_load(&((webhook_svc *)u)->stop) ? 1 : 0;
}

/* Every address curl is about to connect to (after its own DNS lookup,
 * for each address it tries): refused under the policy -> no socket, so
 * the attempt fails before any byte is sent (DNS may have changed since
 * the hook was created). */
static curl_socket_t open_checked(void *u, curlsocktype purpose, struct curl_sockaddr *addr)
{
    webhook_svc *w = u;
    (void)purpose;
    const char *why = addr_refused(&addr->addr, atomic_load(&w->allow_private), atomic_load(&w->self_port));
    if (why) {
        char ip[INET6_ADDRSTRLEN] = "?";
        const void *in = addr->family == AF_INET ? (const void *)&((struct sockaddr_in *)&addr->addr)->sin_addr
                                                 : (const void *)&((struct sockaddr_in6 *)&addr->addr)->sin6_addr;
        inet_ntop(addr->family, in, ip, sizeof ip);
        snprintf(w->refused, sizeof w->refused, "address %s refused: %s (--webhook-allow-private)", ip, why);
        return CURL_SOCKET_BAD;
    }
    return socket(addr->family, addr->socktype, addr->protocol);
}

/* POST body to url; RET the HTTP status (0: no answer, err says why). */
static long post(webhook_svc *w, const char *url, const char *body, const char *sig, const char *event,
                 int64_t delivery, char *err, size_t errlen)
{
    char h1[100], h2[120], h3[64];
    struct curl_slist *hd = NULL;
    snprintf(h1, sizeof h1, "X-Hyperfarm-Signature: %s", sig);
    snprintf(h2, sizeof h2, "X-Hyperfarm-Event: %.90s", event);
    snprintf(h3, sizeof h3, "X-Hyperfarm-Delivery: %lld", (long long)delivery);
    hd = curl_slist_append(hd, "Content-Type: application/json");
    hd = curl_slist_append(hd, h1);
    hd = curl_slist_append(hd, h2);
    hd = curl_slist_append(hd, h3);
    hd = curl_slist_append(hd, "Expect:");
    CURL *c = w->curl;
    curl_easy_reset(c);
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
    curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE, (long)strlen(body));
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, hd);
    curl_easy_setopt(c, CURLOPT_USERAGENT, "hyperfarm-scheduler");
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, 5000L);
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, (long)WEBHOOK_TIMEOUT_MS);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, discard);
    curl_easy_setopt(c, CURLOPT_NOPROGRESS, 0L);
    curl_easy_setopt(c, CURLOPT_XFERINFOFUNCTION, on_xfer);
    curl_easy_setopt(c, CURLOPT_XFERINFODATA, w);
    curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 0L);
    curl_easy_setopt(c, CURLOPT_PROXY, "");   /* straight to the checked address, never via a proxy */
    curl_easy_setopt(c, CURLOPT_OPENSOCKETFUNCTION, open_checked);
    curl_easy_setopt(c, CURLOPT_OPENSOCKETDATA, w);
    w->refused[0] = 0;
    long status = 0;
    CURLcode cc = curl_easy_perform(c);
    if (cc == CURLE_OK) curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
    else snprintf(err, errlen, "%s", w->refused[0] ? w->refused : curl_easy_strerror(cc));
    if (cc == CURLE_OK && (status < 200 || status > 299)) snprintf(err, errlen, "HTTP %ld", status);
    curl_slist_free_all(hd);
    return status;
}

typedef struct due {
    webhook_event ev;
    int64_t hook_id;
    char   *url, *secret, *format, *state, *detail, *name, *objectives;
} due;

static char *col_dup(sqlite3_stmt *st, int i)
{
    const unsigned char *t = sqlite3_column_text(st, i);
    return t ? strdup((const char *)t) : NULL;
}

static void due_free(due *d)
{
    free(d->url);
    free(d->secret);
    free(d->format);
    free(d->state);
    free(d->detail);
    free(d->name);
    free(d->objectives);
}

/* With a list objective: {"metric": value, ...} of every objective of a
 * trial (its last value, as the Pareto front ranks them; null when not
 * reported) as malloc'ed JSON text; NULL with one objective or on error. */
static char *objectives_text(const char *config, const char *latest)
{
    json_t *cfg = config ? json_loads(config, 0, NULL) : NULL, *objs = json_object_get(cfg, "objective");
    char *out = NULL;
    if (json_is_array(objs) && json_array_size(objs) > 0) {
        json_t *vals = latest ? json_loads(latest, 0, NULL) : NULL, *o = json_object(), *m;
        size_t i;
        json_array_foreach(objs, i, m) {
            const char *name = json_string_value(json_object_get(m, "metric"));
            json_t *v = json_object_get(vals, name ? name : "");
            if (name) json_object_set_new(o, name, json_is_number(v) ? json_real(json_number_value(v)) : json_null());
        }
        out = json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(15));
        json_decref(o);
        json_decref(vals);
    }
    json_decref(cfg);
    return out;
}

/* Read up to WEBHOOK_ROUND due rows (oldest first). RET how many. */
static int load_due(webhook_svc *w, due *out)
{
    static const char *const q =
        "SELECT o.id,o.hook_id,h.url,h.secret,h.format,e.id,e.time,e.experiment_id,e.trial_id,e.type,e.detail,"
        "x.name,t.objective,t.id,x.config,t.latest FROM webhook_outbox o JOIN webhooks h ON h.id=o.hook_id "
        "JOIN events e ON e.id=o.event_id LEFT JOIN experiments x ON x.id=e.experiment_id "
        /* A trial event: its trial; an experiment event: its best trial
         * by the (first) objective (docs/protocol.md "Webhooks"). */
        "LEFT JOIN trials t ON t.id=CASE WHEN e.trial_id>0 THEN e.trial_id ELSE (SELECT b.id FROM trials b "
        "JOIN experiments bx ON bx.id=b.experiment_id WHERE b.experiment_id=e.experiment_id AND b.objective IS NOT NULL "
        "ORDER BY CASE WHEN COALESCE(json_extract(bx.config,'$.objective.goal'),"
        "json_extract(bx.config,'$.objective[0].goal'))='maximize' "
        "THEN -b.objective ELSE b.objective END, b.id LIMIT 1) END "
        "WHERE o.delivered_at IS NULL AND o.next_at<=?1 ORDER BY o.id LIMIT ?2";
    sqlite3_stmt *st = NULL;
    int n = 0;
    pthread_mutex_lock(&w->mu);
    if (sqlite3_prepare_v2(w->db, q, -1, &st, NULL) == SQLITE_OK) {
        sqlite3_bind_int64(st, 1, hf_wall_ms());
        sqlite3_bind_int(st, 2, WEBHOOK_ROUND);
        while (n < WEBHOOK_ROUND && sqlite3_step(st) == SQLITE_ROW) {
            due *d = &out[n];
            memset(d, 0, sizeof *d);
            d->ev.delivery = sqlite3_column_int64(st, 0);
            d->hook_id = sqlite3_column_int64(st, 1);
            d->url = col_dup(st, 2);
            d->secret = col_dup(st, 3);
            d->format = col_dup(st, 4);
            d->ev.event_id = sqlite3_column_int64(st, 5);
            d->ev.time = sqlite3_column_int64(st, 6);
            d->ev.experiment_id = sqlite3_column_int64(st, 7);
            d->ev.trial_id = sqlite3_column_int64(st, 8);
            d->state = col_dup(st, 9);
            d->detail = col_dup(st, 10);
            d->name = col_dup(st, 11);
            d->ev.has_objective = sqlite3_column_type(st, 12) != SQLITE_NULL;
            d->ev.objective = sqlite3_column_double(st, 12);
            d->ev.objective_trial = sqlite3_column_int64(st, 13);
            d->objectives = objectives_text((const char *)sqlite3_column_text(st, 14),
                                            (const char *)sqlite3_column_text(st, 15));
            d->ev.objectives = d->objectives;
            d->ev.state = d->state ? d->state : "?";
            d->ev.detail = d->detail;
            d->ev.experiment_name = d->name;
            if (!d->url || !d->secret || !d->format) { due_free(d); continue; }
            n++;
        }
    }
    sqlite3_finalize(st);
    pthread_mutex_unlock(&w->mu);
    return n;
}

/* Record one attempt's outcome. A failed UPDATE (the core's writer busy
 * for over 5 s, a full disk) leaves the row due: it is sent again. */
static void record(webhook_svc *w, int64_t id, int ok, long status, const char *err, int64_t next_at)
{
    sqlite3_stmt *st = NULL;
    pthread_mutex_lock(&w->mu);
    if (sqlite3_prepare_v2(w->db,
                           ok ? "UPDATE webhook_outbox SET delivered_at=?2,attempts=attempts+1,last_status=?3,"
                                "last_error=NULL WHERE id=?1"
                              : "UPDATE webhook_outbox SET next_at=?2,attempts=attempts+1,last_status=?3,"
                                "last_error=?4 WHERE id=?1",
                           -1, &st, NULL) == SQLITE_OK) {
        sqlite3_bind_int64(st, 1, id);
        sqlite3_bind_int64(st, 2, ok ? hf_wall_ms() : next_at);
        sqlite3_bind_int64(st, 3, status);
        if (!ok) sqlite3_bind_text(st, 4, err, -1, SQLITE_TRANSIENT);
        if (sqlite3_step(st) != SQLITE_DONE)
            hf_warn("webhook: cannot record delivery %lld: %s (it will be sent again)", (long long)id,
                    sqlite3_errmsg(w->db));
    }
    sqlite3_finalize(st);
    pthread_mutex_unlock(&w->mu);
}

/* One round: every due row whose hook is not backing off. RET rows tried. */
static int round_once(webhook_svc *w)
{
    due d[WEBHOOK_ROUND];
    int64_t gen = atomic_load(&w->gen);   /* before the rows: a hook deleted since is not backed off */
    int n = load_due(w, d), tried = 0;
    for (int i = 0; i < n && !atomic_load(&w->stop); i++) {
        pthread_mutex_lock(&w->bo_mu);
        backoff *b = bo_find(w, d[i].hook_id, 0);
        int64_t now = hf_mono_ms();
        int wait = b && b->retry_at > now;
        pthread_mutex_unlock(&w->bo_mu);
        if (wait) continue;   /* this hook failed a moment ago: keep its order */
        char *body = webhook_body(&d[i].ev, d[i].format), sig[72], err[256] = "", ebuf[80];
        if (!body || webhook_sign(d[i].secret, body, strlen(body), sig)) { free(body); continue; }
        const char *event = event_name(&d[i].ev, ebuf, sizeof ebuf);
        long status = post(w, d[i].url, body, sig, event, d[i].ev.delivery, err, sizeof err);
        free(body);
        tried++;
        if (atomic_load(&w->stop) && status == 0) break;   /* abandoned: stays due */
        int ok = status >= 200 && status <= 299;
        if (ok) {
            atomic_fetch_add(&w->delivered, 1);
            pthread_mutex_lock(&w->bo_mu);
            if ((b = bo_find(w, d[i].hook_id, 0))) b->hook_id = 0;
            pthread_mutex_unlock(&w->bo_mu);
            record(w, d[i].ev.delivery, 1, status, NULL, 0);
        } else {
            atomic_fetch_add(&w->failed, 1);
            int fails = 1;
            int64_t delay = WEBHOOK_BACKOFF_MS;
            pthread_mutex_lock(&w->bo_mu);
            /* A hook created or deleted since the rows were read may be
             * another hook under the same id: it inherits nothing. */
            b = atomic_load(&w->gen) == gen ? bo_find(w, d[i].hook_id, 1) : NULL;
            if (b) fails = ++b->fails;
            for (int k = 1; k < fails && delay < WEBHOOK_BACKOFF_MAX_MS; k++) delay *= 2;
            if (delay > WEBHOOK_BACKOFF_MAX_MS) delay = WEBHOOK_BACKOFF_MAX_MS;
            if (b) b->retry_at = hf_mono_ms() + delay;
            pthread_mutex_unlock(&w->bo_mu);
            hf_info("webhook %lld: delivery %lld to %s failed (%s); retry in %lld ms", (long long)d[i].hook_id,
                    (long long)d[i].ev.delivery, d[i].url, err, (long long)delay);
            record(w, d[i].ev.delivery, 0, status, err, hf_wall_ms() + delay);
        }
    }
    for (int i = 0; i < n; i++) due_free(&d[i]);
    return tried;
}

static void *deliver_main(void *arg)
{
    webhook_svc *w = arg;
    while (!atomic_load(&w->stop)) {
        int tried = round_once(w);
        if (tried > 0) continue;   /* more may be due at once */
        pthread_mutex_lock(&w->wake_mu);
        if (!atomic_load(&w->stop)) {
            struct timespec ts = hf_deadline(CLOCK_REALTIME, WEBHOOK_POLL_MS);
            pthread_cond_timedwait(&w->wake_cv, &w->wake_mu, &ts);
        }
        pthread_mutex_unlock(&w->wake_mu);
    }
    return NULL;
}

int webhook_open(const char *db_path, webhook_svc **out, char *err, size_t errlen)
{
    *out = NULL;
    webhook_svc *w = calloc(1, sizeof *w);
    if (!w) return HF_ENOMEM;
    pthread_mutex_init(&w->mu, NULL);
    pthread_mutex_init(&w->bo_mu, NULL);
    pthread_mutex_init(&w->wake_mu, NULL);
    pthread_cond_init(&w->wake_cv, NULL);
    int rc = HF_EDB;
    if (sqlite3_open_v2(db_path, &w->db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX, NULL) != SQLITE_OK) {
        snprintf(err, errlen, "webhooks: cannot open %s: %s", db_path, w->db ? sqlite3_errmsg(w->db) : "?");
        goto fail;
    }
    sqlite3_busy_timeout(w->db, 5000);
    if (exec1(w->db, "PRAGMA foreign_keys=ON")) {
        snprintf(err, errlen, "webhooks: %s", sqlite3_errmsg(w->db));
        goto fail;
    }
    rc = HF_ENOMEM;
    if (!(w->curl = curl_easy_init())) { snprintf(err, errlen, "webhooks: curl_easy_init failed"); goto fail; }
    if (pthread_create(&w->thread, NULL, deliver_main, w)) {
        snprintf(err, errlen, "webhooks: cannot start the delivery thread");
        goto fail;
    }
    w->started = 1;
    *out = w;
    return 0;
fail:
    webhook_close(w);
    return rc;
}

void webhook_close(webhook_svc *w)
{
    if (!w) return;
    if (w->started) {
        atomic_store(&w->stop, 1);
        pthread_mutex_lock(&w->wake_mu);
        pthread_cond_signal(&w->wake_cv);
        pthread_mutex_unlock(&w->wake_mu);
        pthread_join(w->thread, NULL);
    }
    if (w->curl) curl_easy_cleanup(w->curl);
    sqlite3_close_v2(w->db);
    pthread_mutex_destroy(&w->mu);
    pthread_mutex_destroy(&w->bo_mu);
    pthread_mutex_destroy(&w->wake_mu);
    pthread_cond_destroy(&w->wake_cv);
    free(w);
}

void webhook_stats(webhook_svc *w, int64_t *delivered, int64_t *failed)
{
    *delivered = atomic_load(&w->delivered);
    *failed = atomic_load(&w->failed);
}

/* Columns id,url,format,events,experiment_id,created_at,created_by. */
static json_t *hook_row(sqlite3_stmt *st)
{
    json_t *ev = json_loads((const char *)sqlite3_column_text(st, 3), 0, NULL);
    const char *by = (const char *)sqlite3_column_text(st, 6);
    return json_pack("{sIsssssosos Iso}", "id", (json_int_t)sqlite3_column_int64(st, 0), "url",
                     (const char *)sqlite3_column_text(st, 1), "format", (const char *)sqlite3_column_text(st, 2),
                     "events", ev ? ev : json_array(),
                     "experiment_id", sqlite3_column_type(st, 4) == SQLITE_NULL ? json_null()
                                                                                : json_integer(sqlite3_column_int64(st, 4)),
                     "created_at", (json_int_t)sqlite3_column_int64(st, 5), "owner",
                     by ? json_string(by) : json_null());
}

int webhook_create(webhook_svc *w, const webhook_spec *sp, json_t **out)
{
    char gen[65];
    const char *secret = sp->secret;
    *out = NULL;
    if (!secret) {
        unsigned char r[32];
        static const char hex[] = "0123456789abcdef";
        if (gnutls_rnd(GNUTLS_RND_KEY, r, sizeof r) < 0) return HF_EINVAL;
        for (int i = 0; i < 32; i++) {
            gen[2 * i] = hex[r[i] >> 4];
            gen[2 * i + 1] = hex[r[i] & 15];
        }
        gen[64] = '\0';
        secret = gen;
    }
    char *events = sp->events ? json_dumps(sp->events, JSON_COMPACT) : strdup("[\"*\"]");
    if (!events) return HF_ENOMEM;
    sqlite3_stmt *st = NULL;
    int rc = HF_EDB;
    pthread_mutex_lock(&w->mu);
    if (sqlite3_prepare_v2(w->db, "INSERT INTO webhooks(url,secret,format,events,experiment_id,created_at,created_by) "
                                  "VALUES(?,?,?,?,?,?,?) RETURNING id,url,format,events,experiment_id,created_at,"
                                  "created_by",
                           -1, &st, NULL) != SQLITE_OK) goto end;
    sqlite3_bind_text(st, 1, sp->url, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 2, secret, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 3, sp->format, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 4, events, -1, SQLITE_STATIC);
    store_bind_opt_int(st, 5, sp->experiment_id > 0, sp->experiment_id);
    sqlite3_bind_int64(st, 6, hf_wall_ms());
    store_bind_text(st, 7, sp->owner);
    int src = sqlite3_step(st);
    if (src == SQLITE_ROW) *out = hook_row(st);
    src = sqlite3_reset(st);   /* the statement's outcome (RETURNING: the row comes before the write ends) */
    if (src != SQLITE_OK) {
        hf_warn("webhook: insert: %s", sqlite3_errmsg(w->db));
        json_decref(*out);
        *out = NULL;
        rc = store_rc(src);
        goto end;
    }
    if (!*out) { rc = HF_ENOMEM; goto end; }
    if (!sp->secret) json_object_set_new(*out, "secret", json_string(secret));
    forget_backoff(w, json_integer_value(json_object_get(*out, "id")));
    rc = 0;
end:
    sqlite3_finalize(st);
    pthread_mutex_unlock(&w->mu);
    free(events);
    return rc;
}

int webhook_list(webhook_svc *w, json_t **out)
{
    static const char *const q =
        "SELECT h.id,h.url,h.format,h.events,h.experiment_id,h.created_at,h.created_by,"
        "(SELECT count(*) FROM webhook_outbox o WHERE o.hook_id=h.id AND o.delivered_at IS NOT NULL),"
        "(SELECT count(*) FROM webhook_outbox o WHERE o.hook_id=h.id AND o.delivered_at IS NULL),"
        "(SELECT o.last_status FROM webhook_outbox o WHERE o.hook_id=h.id AND o.attempts>0 "
        "  ORDER BY coalesce(o.delivered_at,o.next_at) DESC LIMIT 1),"
        "(SELECT o.last_error FROM webhook_outbox o WHERE o.hook_id=h.id AND o.delivered_at IS NULL AND o.attempts>0 "
        "  ORDER BY o.id LIMIT 1) FROM webhooks h ORDER BY h.id";
    sqlite3_stmt *st = NULL;
    int rc = HF_EDB, src;
    json_t *arr = json_array();
    *out = NULL;
    pthread_mutex_lock(&w->mu);
    if (sqlite3_prepare_v2(w->db, q, -1, &st, NULL) != SQLITE_OK) goto end;
    while ((src = sqlite3_step(st)) == SQLITE_ROW) {
        json_t *h = hook_row(st);
        if (!h) continue;
        json_object_set_new(h, "delivered", json_integer(sqlite3_column_int64(st, 7)));
        json_object_set_new(h, "pending", json_integer(sqlite3_column_int64(st, 8)));
        json_object_set_new(h, "last_status", sqlite3_column_type(st, 9) == SQLITE_NULL
                                                  ? json_null() : json_integer(sqlite3_column_int64(st, 9)));
        const char *le = (const char *)sqlite3_column_text(st, 10);
        json_object_set_new(h, "last_error", le ? json_string(le) : json_null());
        json_array_append_new(arr, h);
    }
    if (src != SQLITE_DONE) { rc = store_rc(src); goto end; }
    *out = json_pack("{sO}", "webhooks", arr);
    rc = *out ? 0 : HF_ENOMEM;
end:
    json_decref(arr);
    sqlite3_finalize(st);
    pthread_mutex_unlock(&w->mu);
    return rc;
}

int webhook_delete(webhook_svc *w, int64_t id)
{
    sqlite3_stmt *st = NULL;
    int rc = HF_EDB;
    pthread_mutex_lock(&w->mu);
    if (sqlite3_prepare_v2(w->db, "DELETE FROM webhooks WHERE id=?", -1, &st, NULL) == SQLITE_OK) {
        sqlite3_bind_int64(st, 1, id);
        int src = sqlite3_step(st);
        rc = src == SQLITE_DONE ? (sqlite3_changes(w->db) ? 0 : HF_ENOTFOUND) : store_rc(src);
    }
    sqlite3_finalize(st);
    pthread_mutex_unlock(&w->mu);
    if (rc == 0) forget_backoff(w, id);
    return rc;
}

int webhook_test(webhook_svc *w, int64_t id, const char *user, json_t **out)
{
    char detail[200];
    sqlite3_stmt *st = NULL;
    int rc = HF_EDB, src;
    int64_t now = hf_wall_ms(), delivery = 0;
    *out = NULL;
    snprintf(detail, sizeof detail, "test delivery of webhook %lld, asked by %.64s", (long long)id,
             user && *user ? user : "an anonymous user");
    pthread_mutex_lock(&w->mu);
    if (exec1(w->db, "BEGIN IMMEDIATE")) goto end;
    /* The hook must exist: its outbox row references it. */
    if (sqlite3_prepare_v2(w->db, "SELECT 1 FROM webhooks WHERE id=?", -1, &st, NULL) != SQLITE_OK) goto rollback;
    sqlite3_bind_int64(st, 1, id);
    src = sqlite3_step(st);
    sqlite3_finalize(st);
    st = NULL;
    if (src != SQLITE_ROW) { rc = src == SQLITE_DONE ? HF_ENOTFOUND : store_rc(src); goto rollback; }
    /* An events row with no experiment (the trigger skips it: not a state). */
    if (sqlite3_prepare_v2(w->db, "INSERT INTO events(time,experiment_id,trial_id,type,detail,user_name) "
                                  "VALUES(?,NULL,NULL,?,?,?)", -1, &st, NULL) != SQLITE_OK) goto rollback;
    sqlite3_bind_int64(st, 1, now);
    sqlite3_bind_text(st, 2, WEBHOOK_TEST_EVENT, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 3, detail, -1, SQLITE_STATIC);
    store_bind_text(st, 4, user && *user ? user : NULL);
    src = sqlite3_step(st);
    sqlite3_finalize(st);
    st = NULL;
    if (src != SQLITE_DONE) { rc = store_rc(src); goto rollback; }
    int64_t event_id = sqlite3_last_insert_rowid(w->db);
    if (sqlite3_prepare_v2(w->db, "INSERT INTO webhook_outbox(hook_id,event_id,next_at) VALUES(?,?,?)", -1, &st,
                           NULL) != SQLITE_OK) goto rollback;
    sqlite3_bind_int64(st, 1, id);
    sqlite3_bind_int64(st, 2, event_id);
    sqlite3_bind_int64(st, 3, now);
    src = sqlite3_step(st);
    sqlite3_finalize(st);
    st = NULL;
    if (src != SQLITE_DONE) { rc = store_rc(src); goto rollback; }
    delivery = sqlite3_last_insert_rowid(w->db);
    if (exec1(w->db, "COMMIT")) goto rollback;
    rc = 0;
    goto end;
rollback:
    if (rc == HF_EDB) hf_warn("webhook %lld: cannot queue a test delivery: %s", (long long)id, sqlite3_errmsg(w->db));
    exec1(w->db, "ROLLBACK");
end:
    pthread_mutex_unlock(&w->mu);
    if (rc) return rc;
    pthread_mutex_lock(&w->wake_mu);
    pthread_cond_signal(&w->wake_cv);
    pthread_mutex_unlock(&w->wake_mu);
    *out = json_pack("{sIsIss}", "webhook", (json_int_t)id, "delivery", (json_int_t)delivery, "event",
                     WEBHOOK_TEST_EVENT);
    return *out ? 0 : HF_ENOMEM;
}

int webhook_owner(webhook_svc *w, int64_t id, char *owner, size_t len, int64_t *experiment_id)
{
    sqlite3_stmt *st = NULL;
    int rc = HF_EDB;
    pthread_mutex_lock(&w->mu);
    if (sqlite3_prepare_v2(w->db, "SELECT created_by,experiment_id FROM webhooks WHERE id=?", -1, &st, NULL) ==
        SQLITE_OK) {
        sqlite3_bind_int64(st, 1, id);
        int src = sqlite3_step(st);
        if (src == SQLITE_ROW) {
            const char *by = (const char *)sqlite3_column_text(st, 0);
            snprintf(owner, len, "%s", by ? by : "");
            *experiment_id = sqlite3_column_int64(st, 1);
            rc = 0;
        } else {
            rc = src == SQLITE_DONE ? HF_ENOTFOUND : store_rc(src);
        }
    }
    sqlite3_finalize(st);
    pthread_mutex_unlock(&w->mu);
    return rc;
}

void webhook_set_policy(webhook_svc *w, int allow_private, int self_port)
{
    atomic_store(&w->allow_private, allow_private);
    atomic_store(&w->self_port, self_port);
}

int webhook_url_check(webhook_svc *w, const char *url, hf_jerr *e)
{
    CURLU *u = curl_url();
    char *host = NULL, *port = NULL;
    int rc = HF_EINVAL;
    if (!u) return HF_ENOMEM;
    if (curl_url_set(u, CURLUPART_URL, url, 0) != CURLUE_OK || curl_url_get(u, CURLUPART_HOST, &host, 0) != CURLUE_OK) {
        hf_jerr_set(e, "url", NULL, "cannot parse the URL's host");
        goto end;
    }
    if (curl_url_get(u, CURLUPART_PORT, &port, CURLU_DEFAULT_PORT) != CURLUE_OK) {
        hf_jerr_set(e, "url", NULL, "cannot parse the URL's port");
        goto end;
    }
    size_t hl = strlen(host);
    if (hl >= 2 && host[0] == '[' && host[hl - 1] == ']') {   /* [v6] */
        memmove(host, host + 1, hl - 2);
        host[hl - 2] = 0;
    }
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *res = NULL;
    int g = getaddrinfo(host, port, &hints, &res);
    if (g) {
        hf_jerr_set(e, "url", NULL, "cannot resolve host \"%s\": %s", host, gai_strerror(g));
        goto end;
    }
    rc = 0;
    for (struct addrinfo *i = res; i && rc == 0; i = i->ai_next) {
        const char *why = addr_refused(i->ai_addr, atomic_load(&w->allow_private), atomic_load(&w->self_port));
        if (why) {
            rc = HF_EINVAL;
            hf_jerr_set(e, "url", NULL, "host \"%s\" is %s: webhooks may not target it%s", host, why,
                        strcmp(why, "the scheduler itself") == 0 ? ""
                                                                 : " (the operator may allow it: --webhook-allow-private)");
        }
    }
    freeaddrinfo(res);
end:
    curl_free(host);
    curl_free(port);
    curl_url_cleanup(u);
    return rc;
}
