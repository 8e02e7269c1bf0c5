/*
 * webhook.h — webhooks on experiment and trial state changes
 * (docs/protocol.md "Webhooks"): registration (POST/GET/DELETE
 * /api/v1/webhooks), and delivery from the durable outbox.
 *
 * At least once: store_event_insert (scheduler/store/store.h) writes one
 * webhook_outbox row per matching hook in the same transaction as the
 * state change's events row, so a change that committed has its deliveries on
 * disk. A delivery thread, on its own read-write SQLite connection, POSTs
 * due rows oldest first with libcurl and marks them delivered on a 2xx;
 * any other outcome is recorded (attempts, last status and error) and the
 * row is retried with exponential backoff per hook (WEBHOOK_BACKOFF_MS
 * doubling up to WEBHOOK_BACKOFF_MAX_MS). A restart resumes from the rows
 * left undelivered; a crash between a receiver's 2xx and the row's update
 * delivers that one again (the X-Hyperfarm-Delivery id lets receivers
 * drop repeats).
 *
 * Every body is signed: X-Hyperfarm-Signature: sha256=HEX, the
 * HMAC-SHA256 of the exact body bytes under the hook's secret (as
 * GitHub's X-Hub-Signature-256). Secrets are stored, never returned by
 * GET; a secret the scheduler generated is returned once, by the POST.
 */
#ifndef HF_WEBHOOK_H
#define HF_WEBHOOK_H

#include "hf_json.h"

#include <stddef.h>
#include <stdint.h>

#define WEBHOOK_URL_MAX        2048
#define WEBHOOK_SECRET_MAX     256
#define WEBHOOK_EVENTS_MAX     32
#define WEBHOOK_BACKOFF_MS     250
#define WEBHOOK_BACKOFF_MAX_MS 30000
#define WEBHOOK_TIMEOUT_MS     10000
#define WEBHOOK_POLL_MS        200

/* A validated POST /webhooks body; strings point into the JSON it came from. */
typedef struct webhook_spec {
    const char *url;
    const char *secret;      /* NULL: generate one */
    const char *format;      /* "json" | "slack" */
    json_t     *events;      /* borrowed array of filters, or NULL = ["*"] */
    int64_t     experiment_id;   /* 0 = every experiment */
    const char *owner;       /* the creating user (not parsed: set by the caller); NULL = none */
} webhook_spec;

/* Validate body (path "" = the document). RET 0 or HF_EINVAL with e
 * naming the field (unknown member, url not http(s) or too long or with
 * spaces/control bytes, format, an unknown event filter, a secret of
 * control bytes or over WEBHOOK_SECRET_MAX, experiment_id < 1). Pure. */
int webhook_spec_parse(const json_t *body, webhook_spec *out, hf_jerr *e);

/* sha256=HEX of HMAC-SHA256(secret, body[0..len)) into out (72 bytes).
 * RET 0 or HF_EINVAL (GnuTLS refused). */
int webhook_sign(const char *secret, const void *body, size_t len, char out[72]);

/* One state change as delivered (a row of events joined with its names). */
typedef struct webhook_event {
    int64_t     delivery;        /* webhook_outbox.id */
    int64_t     event_id, time, experiment_id, trial_id;   /* trial_id 0: an experiment event */
    const char *state;           /* events.type: the new state */
    const char *detail;          /* may be NULL */
    const char *experiment_name; /* may be NULL */
    int         has_objective;
    double      objective;       /* the objective of the trial (an experiment event: of its best trial) */
    int64_t     objective_trial; /* that trial, 0 = none */
    const char *objectives;      /* JSON {"metric": value} of every objective of a list, NULL with one */
} webhook_event;

/* The body of ev for a hook of format ("json" or "slack"): malloc'ed
 * compact JSON, or NULL (OOM). Pure. */
char *webhook_body(const webhook_event *ev, const char *format);

typedef struct webhook_svc webhook_svc;

/* Open db_path on a connection of its own and start the delivery thread.
 * RET 0 with *out, or HF_EDB / HF_ENOMEM with err. */
int  webhook_open(const char *db_path, webhook_svc **out, char *err, size_t errlen);
/* Stop the thread (an attempt in progress is abandoned and stays due) and close. NULL is fine. */
void webhook_close(webhook_svc *w);

/* Store a hook. *out = {id, url, format, events, experiment_id,
 * created_at, owner} plus "secret" when it was generated. RET 0, HF_EDB,
 * HF_ENOSPC. */
int webhook_create(webhook_svc *w, const webhook_spec *sp, json_t **out);
/* {"webhooks": [{id, url, format, events, experiment_id, created_at, owner,
 * delivered, pending, last_status, last_error, last_attempt_at}...]}
 * without secrets. */
int webhook_list(webhook_svc *w, json_t **out);
/* Delete hook id and its undelivered rows. RET 0 or HF_ENOTFOUND / HF_EDB. */
int webhook_delete(webhook_svc *w, int64_t id);

/* Queue a test delivery to hook id (POST /webhooks/{id}/test): an events
 * row of type WEBHOOK_TEST_EVENT (no experiment; detail names the hook and
 * user) and its outbox row, in one transaction, then wake the thread: it
 * goes the way of every delivery (signed, retried, counted by list).
 * *out = {"webhook": id, "delivery": outbox id, "event": "webhook.test"}.
 * RET 0, HF_ENOTFOUND, HF_EDB. */
#define WEBHOOK_TEST_EVENT "webhook.test"
int webhook_test(webhook_svc *w, int64_t id, const char *user, json_t **out);

/* Who created hook id ("" when not recorded) and its experiment (0 =
 * global). RET 0, HF_ENOTFOUND, HF_EDB. */
int webhook_owner(webhook_svc *w, int64_t id, char *owner, size_t len, int64_t *experiment_id);

/* Where hooks may point (docs/scheduler.md, --webhook-allow-private).
 * Without allow_private, an address that is loopback, private (RFC 1918,
 * fc00::/7), shared (100.64/10), link-local (169.254/16, fe80::/10),
 * unspecified, multicast, or one of this machine's own is refused; a local
 * address at self_port (the scheduler's own port; 0 = unknown) is refused
 * always. Checked at creation (webhook_url_check) and again for every
 * address curl connects to at delivery (DNS may have changed): a refused
 * address fails the attempt before any byte is sent. */
void webhook_set_policy(webhook_svc *w, int allow_private, int self_port);
/* Resolve url's host; RET 0, or HF_EINVAL with e (field "url") naming the
 * host and why it is refused (or unresolvable). */
int webhook_url_check(webhook_svc *w, const char *url, hf_jerr *e);
/* Why sa is not a public address ("a loopback address (127.0.0.0/8)", ...),
 * or NULL. Pure. */
struct sockaddr;
const char *webhook_addr_private(const struct sockaddr *sa);

/* Deliveries made / failed attempts since start (for /metrics and tests). */
void webhook_stats(webhook_svc *w, int64_t *delivered, int64_t *failed);

#endif
