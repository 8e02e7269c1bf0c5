/*
 * hf_follow.c — the follow set of a client given several scheduler URLs
 * (see hf_follow.h for the rule). A process holds a handful of sets at
 * most (the agent one, the CLI one), kept in a short registry list under
 * one mutex; each set has its own mutex for its fields.
 */
#include "hf_follow.h"
#include "hf_err.h"
#include "hf_json.h"
#include "hf_time.h"

#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct hf_follow {
    pthread_mutex_t mu;         /* guards everything below but next/refs (reg_mu) */
    char           *key;        /* the list as opened: the registry key */
    char           *urls[HF_FOLLOW_MAX_URLS];
    size_t          n;
    size_t          cur;        /* index in use */
    uint64_t        gen;        /* changes of cur */
    int64_t         term;       /* highest term seen */
    int64_t         last_ok_ms; /* hf_mono_ms when a primary last answered */
    int64_t         lost_after_ms;
    int64_t         failed_ms[HF_FOLLOW_MAX_URLS];  /* hf_mono_ms of a URL's last transport failure, 0 = none since it answered */
    int64_t         avoid_ms;   /* how long a 503's hint to a failed URL is not followed */
    int             refs;
    hf_follow      *next;
};

static pthread_mutex_t reg_mu = PTHREAD_MUTEX_INITIALIZER;
static hf_follow *reg_head;

int hf_follow_is_list(const char *urls) { return urls && strchr(urls, ',') != NULL; }

/* Split urls into out (malloc'd copies, trailing slashes and surrounding
 * blanks dropped). RET the count, or HF_EINVAL/HF_ENOMEM (err says which
 * entry); out is freed on error. */
static int split(const char *urls, char **out, char *err, size_t errlen)
{
    int n = 0;
    const char *p = urls;
    if (!urls) {
        snprintf(err, errlen, "no scheduler URL");
        return HF_EINVAL;
    }
    for (;;) {
        const char *e = strchr(p, ',');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        while (len > 0 && (*p == ' ' || *p == '\t')) p++, len--;
        while (len > 0 && (p[len - 1] == ' ' || p[len - 1] == '\t' || p[len - 1] == '/')) len--;
        int bad = len == 0 || len > HF_FOLLOW_URL_MAX || n >= HF_FOLLOW_MAX_URLS
                  || (strncmp(p, "http://", 7) && strncmp(p, "https://", 8));
        if (bad) {
            snprintf(err, errlen, n >= HF_FOLLOW_MAX_URLS ? "more than %d scheduler URLs"
                                                          : "scheduler URL #%d must start with http:// or https://",
                     n >= HF_FOLLOW_MAX_URLS ? HF_FOLLOW_MAX_URLS : n + 1);
            goto fail;
        }
        if (!(out[n] = strndup(p, len))) {
            snprintf(err, errlen, "out of memory");
            n++;
            for (int i = 0; i < n; i++) free(out[i]);
            return HF_ENOMEM;
        }
        n++;
        if (!e) return n;
        p = e + 1;
    }
fail:
    for (int i = 0; i < n; i++) free(out[i]);
    return HF_EINVAL;
}

int hf_follow_check(const char *urls, char *err, size_t errlen)
{
    char *u[HF_FOLLOW_MAX_URLS];
    int n = split(urls, u, err, errlen);
    if (n < 0) return n;
    for (int i = 0; i < n; i++) free(u[i]);
    return HF_OK;
}

hf_follow *hf_follow_open(const char *urls)
{
    char err[128];
    hf_follow *f;
    pthread_mutex_lock(&reg_mu);
    for (f = reg_head; f; f = f->next)
        if (!strcmp(f->key, urls)) {
            f->refs++;
            goto end;
        }
    if (!(f = calloc(1, sizeof *f))) goto end;
    int n = split(urls, f->urls, err, sizeof err);
    if (n < 0 || !(f->key = strdup(urls))) {
        for (int i = 0; i < (n > 0 ? n : 0); i++) free(f->urls[i]);
        free(f);
        f = NULL;
        goto end;
    }
    f->n = (size_t)n;
    f->refs = 1;
    f->last_ok_ms = hf_mono_ms();
    f->lost_after_ms = 2000;
    f->avoid_ms = HF_FOLLOW_AVOID_MS;
    pthread_mutex_init(&f->mu, NULL);
    f->next = reg_head;
    reg_head = f;
end:
    pthread_mutex_unlock(&reg_mu);
    return f;
}

void hf_follow_close(hf_follow *f)
{
    if (!f) return;
    pthread_mutex_lock(&reg_mu);
    int last = --f->refs == 0;
    if (last)
        for (hf_follow **pp = &reg_head; *pp; pp = &(*pp)->next)
            if (*pp == f) {
                *pp = f->next;
                break;
            }
    pthread_mutex_unlock(&reg_mu);
    if (!last) return;
    for (size_t i = 0; i < f->n; i++) free(f->urls[i]);
    free(f->key);
    pthread_mutex_destroy(&f->mu);
    free(f);
}

size_t hf_follow_count(const hf_follow *f) { return f->n; }   /* fixed at open: no lock needed */

void hf_follow_url(const hf_follow *f, size_t i, char *out, size_t len)
{
    snprintf(out, len, "%s", i < f->n ? f->urls[i] : "");   /* fixed at open: no lock needed */
}

size_t hf_follow_current(hf_follow *f, char *out, size_t len)
{
    pthread_mutex_lock(&f->mu);
    size_t i = f->cur;
    snprintf(out, len, "%s", f->urls[i]);
    pthread_mutex_unlock(&f->mu);
    return i;
}

#define LOCKED_GET(type, name, field)         \
    type name(hf_follow *f)                   \
    {                                         \
        pthread_mutex_lock(&f->mu);           \
        type v = f->field;                    \
        pthread_mutex_unlock(&f->mu);         \
        return v;                             \
    }
LOCKED_GET(uint64_t, hf_follow_generation, gen)
LOCKED_GET(int64_t, hf_follow_term, term)

int64_t hf_follow_lost_ms(hf_follow *f)
{
    pthread_mutex_lock(&f->mu);
    int64_t v = hf_mono_ms() - f->last_ok_ms;
    pthread_mutex_unlock(&f->mu);
    return v;
}

void hf_follow_set_lost_after(hf_follow *f, int64_t ms)
{
    pthread_mutex_lock(&f->mu);
    f->lost_after_ms = ms;
    pthread_mutex_unlock(&f->mu);
}

void hf_follow_set_avoid(hf_follow *f, int64_t ms)
{
    pthread_mutex_lock(&f->mu);
    f->avoid_ms = ms;
    pthread_mutex_unlock(&f->mu);
}

void hf_follow_headers(hf_follow *f, char *term, size_t tlen, char *lost, size_t llen)
{
    pthread_mutex_lock(&f->mu);
    int64_t since = hf_mono_ms() - f->last_ok_ms;
    if (f->term > 0) snprintf(term, tlen, "X-Hyperfarm-Term: %lld", (long long)f->term);
    else if (tlen) term[0] = 0;
    if (f->lost_after_ms > 0 && since >= f->lost_after_ms)
        snprintf(lost, llen, "X-Hyperfarm-Lost-Primary: %lld", (long long)since);
    else if (llen) lost[0] = 0;
    pthread_mutex_unlock(&f->mu);
}

/* The index of url in the set, or -1. Called with f->mu held. */
static int index_of(const hf_follow *f, const char *url, size_t len)
{
    while (len > 0 && url[len - 1] == '/') len--;
    for (size_t i = 0; i < f->n; i++)
        if (strlen(f->urls[i]) == len && !strncmp(f->urls[i], url, len)) return (int)i;
    return -1;
}

/* What a 503 body says: its "role" (copied to role) and "primary"
 * (copied to primary) and "term", each left empty/0 when absent. */
static void parse_body(const hf_follow_answer *a, char *role, size_t rlen, char *primary, size_t plen,
                       int64_t *term)
{
    json_t *j = a->body && a->body_len ? json_loadb(a->body, a->body_len, 0, NULL) : NULL;
    const char *r = json_string_value(json_object_get(j, "role"));
    const char *p = json_string_value(json_object_get(j, "primary"));
    json_t *t = json_object_get(j, "term");
    snprintf(role, rlen, "%s", r ? r : "");
    snprintf(primary, plen, "%s", p ? p : "");
    *term = json_is_integer(t) ? json_integer_value(t) : 0;
    json_decref(j);
}

/* Did URL i fail at transport level within avoid_ms? Called with f->mu held. */
static int avoided(const hf_follow *f, int i, int64_t now)
{
    return f->failed_ms[i] && now - f->failed_ms[i] < f->avoid_ms;
}

/* Where a request to used that met no primary moves the set: the 503's
 * hint when it is another configured URL not avoided, else the next URL
 * round-robin not avoided; when every other URL is avoided, a standby's
 * 503 (standby: 1) keeps the set where it is (that scheduler answers:
 * the cheapest place to wait and vote) and a transport failure takes the
 * plain next URL. Called with f->mu held. */
static size_t move_to(const hf_follow *f, int used, const char *hint, int standby)
{
    int64_t now = hf_mono_ms();
    int to = hint[0] ? index_of(f, hint, strlen(hint)) : -1;
    if (to >= 0 && to != used && !avoided(f, to, now)) return (size_t)to;
    for (size_t k = 1; k < f->n; k++) {
        size_t i = ((size_t)used + k) % f->n;
        if (!avoided(f, (int)i, now)) return i;
    }
    return standby ? (size_t)used : ((size_t)used + 1) % f->n;
}

int hf_follow_observe(hf_follow *f, const char *used_url, const hf_follow_answer *a)
{
    char role[32] = "", primary[HF_FOLLOW_URL_MAX + 1] = "";
    int64_t bterm = 0;
    int not_here = a->transport_failed;

    if (!a->transport_failed) {
        snprintf(role, sizeof role, "%s", a->role ? a->role : "");
        if (a->status == 503) {
            char brole[32];
            parse_body(a, brole, sizeof brole, primary, sizeof primary, &bterm);
            if (!role[0]) snprintf(role, sizeof role, "%s", brole);
            not_here = !strcmp(role, "standby") || !strcmp(role, "fenced");
        }
    }
    pthread_mutex_lock(&f->mu);
    int used = index_of(f, used_url, strlen(used_url));
    if (a->term > f->term) f->term = a->term;
    if (bterm > f->term) f->term = bterm;
    if (!a->transport_failed && !not_here && (!role[0] || !strcmp(role, "primary"))) f->last_ok_ms = hf_mono_ms();
    if (used >= 0) f->failed_ms[used] = a->transport_failed ? hf_mono_ms() : 0;
    if (not_here && used == (int)f->cur) {
        size_t to = move_to(f, used, primary, !a->transport_failed);
        if (to != f->cur) {
            f->cur = to;
            f->gen++;
        }
    }
    int retry = not_here && used != (int)f->cur;
    pthread_mutex_unlock(&f->mu);
    return retry;
}
