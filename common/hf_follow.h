/*
 * hf_follow.h — which of several scheduler URLs a client talks to: the
 * client side of the standby scheduler (docs/agent.md, "Several
 * schedulers"; docs/cli.md, "Several scheduler URLs").
 *
 * A follow set is the list URL1,URL2,... a user gave (--scheduler,
 * --url, HYPERFARM_URL), the index of the one in use, the highest
 * replication term seen in any answer (X-Hyperfarm-Term), and when a
 * primary last answered. Every hf_http client made with a comma-separated
 * base URL shares one set per distinct list (hf_follow_open keeps a
 * process-wide registry), so the agent's heartbeat, long-poll and object
 * transfers all move together.
 *
 * The rule (hf_follow_observe), after each request:
 *   - an answer with X-Hyperfarm-Term T raises the term to T (never lowers);
 *   - a transport failure (nothing answered) moves to the next URL,
 *     round-robin, and marks the URL failed until it answers again;
 *   - a 503 whose role (X-Hyperfarm-Role, else the JSON body's "role") is
 *     standby or fenced moves to the body's "primary" when it is one of the
 *     configured URLs, else to the next URL;
 *   - a URL that failed at transport level less than the avoid time ago
 *     (HF_FOLLOW_AVOID_MS) is passed over by both moves: a standby names
 *     the primary it last knew, and after a power cut that one only times
 *     out; when every other URL is avoided, a standby's 503 keeps the set
 *     on that standby (it answers, and its Lost-Primary votes count) while
 *     a transport failure takes the next URL anyway. Once the avoid time
 *     is over, the hint is followed again: one probe of the old primary.
 *   - any other answer whose role is primary (or that carries no role: a
 *     scheduler without replication) is "a primary answered": the lost
 *     clock restarts.
 * A move only happens when the request went to the URL still in use, so
 * two threads that fail at once move the set once, not twice.
 *
 * Requests carry X-Hyperfarm-Term (the highest term seen, once one is
 * known) and, when no primary has answered for lost_after_ms (the agent
 * sets 2 heartbeat intervals), X-Hyperfarm-Lost-Primary: MS, the
 * milliseconds since a primary last answered (or since the set was made).
 *
 * Thread-safe: one mutex per set guards all of its fields.
 */
#ifndef HF_FOLLOW_H
#define HF_FOLLOW_H

#include <stddef.h>
#include <stdint.h>

#define HF_FOLLOW_MAX_URLS 16
#define HF_FOLLOW_URL_MAX  1024
#define HF_FOLLOW_AVOID_MS 5000   /* a URL that failed at transport level is passed over this long */
#define HF_FOLLOW_CONNECT_MS 1000 /* connect timeout of a client with several URLs (hf_http.c) */

typedef struct hf_follow hf_follow;

/* What one request saw, for hf_follow_observe. */
typedef struct hf_follow_answer {
    int         transport_failed;  /* 1: no HTTP answer at all (connect failed, reset, timeout) */
    long        status;            /* the HTTP status (when an answer came) */
    int64_t     term;              /* X-Hyperfarm-Term of the answer, 0 = none */
    const char *role;              /* X-Hyperfarm-Role of the answer, NULL or "" = none */
    const char *body;              /* the answer's body (may be NULL; need not be NUL-terminated) */
    size_t      body_len;
} hf_follow_answer;

/* 1 when urls names more than one URL (a comma in it), else 0. */
int hf_follow_is_list(const char *urls);

/* Check a comma-separated URL list: 1 to HF_FOLLOW_MAX_URLS entries, each
 * starting with http:// or https://, none empty or longer than
 * HF_FOLLOW_URL_MAX. RET 0 or HF_EINVAL with err naming the bad entry. */
int hf_follow_check(const char *urls, char *err, size_t errlen);

/* The set for this list (trailing slashes of each URL dropped), shared
 * with every other opener of the same list (a reference is taken).
 * RET NULL on OOM or a list hf_follow_check refuses. */
hf_follow *hf_follow_open(const char *urls);
/* Drop a reference (accepts NULL); the last one frees the set. */
void hf_follow_close(hf_follow *f);

size_t hf_follow_count(const hf_follow *f);
/* Copy URL number i (0 <= i < count, as configured) into out. */
void hf_follow_url(const hf_follow *f, size_t i, char *out, size_t len);
/* Copy the URL in use into out. RET its index. */
size_t hf_follow_current(hf_follow *f, char *out, size_t len);
/* Times the URL in use changed since the set was made (a client that
 * registered with one scheduler registers again after a change). */
uint64_t hf_follow_generation(hf_follow *f);
int64_t  hf_follow_term(hf_follow *f);
/* Milliseconds since a primary last answered (since hf_follow_open when
 * none has yet). */
int64_t  hf_follow_lost_ms(hf_follow *f);
/* After how long without a primary requests carry
 * X-Hyperfarm-Lost-Primary (default 2000; <= 0: never). */
void     hf_follow_set_lost_after(hf_follow *f, int64_t ms);

/* How long a URL that failed at transport level is passed over
 * (default HF_FOLLOW_AVOID_MS; <= 0: never passed over). */
void     hf_follow_set_avoid(hf_follow *f, int64_t ms);

/* The header lines a request carries now: term gets
 * "X-Hyperfarm-Term: T" or "" (no term seen yet), lost gets
 * "X-Hyperfarm-Lost-Primary: MS" or "" (a primary answered lately). */
void hf_follow_headers(hf_follow *f, char *term, size_t tlen, char *lost, size_t llen);

/* Apply the rule above to one request sent to used_url (the URL it went
 * to, as hf_follow_current gave it). RET 1 when the URL in use changed
 * (the caller may retry at once on the new one), else 0. */
int hf_follow_observe(hf_follow *f, const char *used_url, const hf_follow_answer *a);

#endif
