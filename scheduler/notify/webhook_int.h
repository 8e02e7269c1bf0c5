/*
 * webhook_int.h — what the webhook files share (webhook.h is the public
 * side): the service object and the calls between its files.
 *
 *   webhook.c         registration: validate a hook, store, list, delete,
 *                     queue a test delivery (the API's calls)
 *   webhook_addr.c    where a hook may point (the address policy)
 *   webhook_payload.c what is sent: the body and its signature (pure)
 *   webhook_outbox.c  the service's life and the delivery thread
 *                     "hf-webhook" that drains the outbox
 *
 * Calls go one way: webhook.c -> webhook_outbox.c -> webhook_payload.c,
 * webhook_addr.c; nothing calls back into webhook.c.
 *
 * Locks: mu guards db (the API's calls and the thread's reads and
 * records; never held across an HTTP request); bo_mu guards the backoff
 * table. The counters and the policy are atomics.
 */
#ifndef HF_WEBHOOK_INT_H
#define HF_WEBHOOK_INT_H

#include "hf_thread.h"
#include "scheduler/notify/webhook.h"
#include "scheduler/store/repl.h"

#include <curl/curl.h>
#include <pthread.h>
#include <sqlite3.h>
#include <stdatomic.h>
#include <stdint.h>

#define WEBHOOK_ROUND 32
#define HOOK_SLOTS    256     /* hooks with a backoff in force (more: treated as not backed off) */

typedef struct backoff {
    int64_t hook_id;   /* 0: a free slot */
    int     fails;
    int64_t retry_at;   /* hf_mono_ms */
} backoff;

struct webhook_svc {
    sqlite3        *db;
    pthread_mutex_t mu;            /* w->db */
    repl_conn      *repl;          /* w->db's transactions, captured for a standby (repl.h) */
    hf_thread      *th;            /* "hf-webhook"; its stop flag abandons an attempt in progress */
    CURL           *curl;          /* the thread's */
    backoff         bo[HOOK_SLOTS];  /* under bo_mu */
    pthread_mutex_t bo_mu;
    atomic_llong    gen;           /* +1 at every create and delete (a hook id may come back) */
    atomic_llong    delivered, failed;
    atomic_int      allow_private; /* --webhook-allow-private */
    atomic_int      self_port;     /* the scheduler's port: never a target */
    char            refused[160];  /* why opensocket refused the last address (the thread's) */
};

/* webhook_outbox.c: new due rows (a test delivery): the thread looks now. */
void webhook_outbox_kick(webhook_svc *w);
/* webhook_outbox.c: hook id was created or deleted: whatever backoff its
 * id had is gone. */
void webhook_forget_backoff(webhook_svc *w, int64_t id);

/* webhook_addr.c: why the hook may not connect to sa under the policy, or
 * NULL. The scheduler itself (a local address at its own port) is refused
 * even when private addresses are allowed. */
struct sockaddr;
const char *webhook_addr_refused(const struct sockaddr *sa, int allow_private, int self_port);

/* webhook_payload.c: "trial.FAILED", "experiment.COMPLETED", or
 * "webhook.test" (a test delivery); buf holds the composed names. */
const char *webhook_event_name(const webhook_event *ev, char *buf, size_t size);

#endif
