/*
 * agent_outbox.c — bounded, acknowledged queue of heartbeat items
 * (see agent_outbox.h for the contract and the drop policy).
 *
 * Three FIFO lists (events, metrics, logs) of JSON objects, each item with
 * a sequence number that only grows. A taken batch remembers the highest
 * sequence number per list; acknowledging it pops items up to that number
 * from the front. Drops also pop from the front (oldest first), so an
 * acknowledgement after a drop removes only what is still there.
 */
#include "agent_outbox.h"
#include "hf_err.h"
#include "hf_log.h"
#include "hf_time.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct ob_item {
    struct ob_item *next;
    uint64_t        seq;
    size_t          bytes;   /* estimated serialised size */
    json_t         *j;       /* owned */
} ob_item;

typedef struct ob_list {
    ob_item *head, *tail;
    size_t   n, bytes;
} ob_list;

/* Per-trial count of dropped log lines not yet reported to the user. */
#define OB_NOTICES 64
typedef struct ob_notice {
    int64_t  trial_id, attempt;
    uint64_t dropped;
} ob_notice;

struct agent_outbox {
    pthread_mutex_t     mu;
    agent_outbox_limits lim;
    ob_list             events, metrics, logs;
    uint64_t            seq;
    json_t             *running;
    ob_notice           notice[OB_NOTICES];
    agent_outbox_stats  st;
};

agent_outbox *agent_outbox_new(const agent_outbox_limits *limits)
{
    agent_outbox *ob = calloc(1, sizeof *ob);
    if (!ob) return NULL;
    pthread_mutex_init(&ob->mu, NULL);
    ob->lim.max_log_lines = 20000;
    ob->lim.max_log_bytes = 8u << 20;
    ob->lim.max_metrics = 200000;
    ob->lim.max_events = 100000;
    if (limits) {
        if (limits->max_log_lines) ob->lim.max_log_lines = limits->max_log_lines;
        if (limits->max_log_bytes) ob->lim.max_log_bytes = limits->max_log_bytes;
        if (limits->max_metrics) ob->lim.max_metrics = limits->max_metrics;
        if (limits->max_events) ob->lim.max_events = limits->max_events;
    }
    ob->running = json_array();
    if (!ob->running) {
        agent_outbox_free(ob);
        return NULL;
    }
    return ob;
}

static void list_clear(ob_list *l)
{
    ob_item *it = l->head;
    while (it) {
        ob_item *nx = it->next;
        json_decref(it->j);
        free(it);
        it = nx;
    }
    memset(l, 0, sizeof *l);
}

void agent_outbox_free(agent_outbox *ob)
{
    if (!ob) return;
    list_clear(&ob->events);
    list_clear(&ob->metrics);
    list_clear(&ob->logs);
    json_decref(ob->running);
    pthread_mutex_destroy(&ob->mu);
    free(ob);
}

/* Append j (stolen) to l. Caller holds the mutex. */
static int list_push(agent_outbox *ob, ob_list *l, json_t *j, size_t bytes)
{
    ob_item *it = malloc(sizeof *it);
    if (!it || !j) {
        free(it);
        json_decref(j);
        return HF_ENOMEM;
    }
    it->next = NULL;
    it->seq = ++ob->seq;
    it->bytes = bytes;
    it->j = j;
    if (l->tail) l->tail->next = it;
    else l->head = it;
    l->tail = it;
    l->n++;
    l->bytes += bytes;
    return HF_OK;
}

static void list_pop(ob_list *l)
{
    ob_item *it = l->head;
    if (!it) return;
    l->head = it->next;
    if (!l->head) l->tail = NULL;
    l->n--;
    l->bytes -= it->bytes;
    json_decref(it->j);
    free(it);
}

static void notice_add(agent_outbox *ob, int64_t trial_id, int64_t attempt)
{
    ob_notice *free_slot = NULL;
    for (int i = 0; i < OB_NOTICES; i++) {
        ob_notice *n = &ob->notice[i];
        if (n->dropped && n->trial_id == trial_id && n->attempt == attempt) {
            n->dropped++;
            return;
        }
        if (!n->dropped && !free_slot) free_slot = n;
    }
    if (free_slot) {
        free_slot->trial_id = trial_id;
        free_slot->attempt = attempt;
        free_slot->dropped = 1;
    }
    /* more than OB_NOTICES trials dropping at once: counted globally only */
}

int agent_outbox_event(agent_outbox *ob, json_t *ev)
{
    pthread_mutex_lock(&ob->mu);
    while (ob->events.n >= ob->lim.max_events) {
        list_pop(&ob->events);
        ob->st.dropped_events++;
    }
    int rc = list_push(ob, &ob->events, ev, 128);
    pthread_mutex_unlock(&ob->mu);
    return rc;
}

int agent_outbox_metric(agent_outbox *ob, int64_t trial_id, int64_t attempt, int64_t time_ms,
                        const hf_metric_report *r)
{
    size_t bytes = 96;
    json_t *values = json_object();
    json_t *m = json_pack("{s:I, s:I, s:I}", "trial_id", (json_int_t)trial_id,
                          "attempt", (json_int_t)attempt, "time", (json_int_t)time_ms);
    if (!values || !m) goto oom;
    for (size_t i = 0; i < r->n; i++) {
        /* epoch is sent as its own member; the rest are metric values */
        if (strcmp(r->m[i].name, "epoch") == 0) continue;
        if (json_object_set_new(values, r->m[i].name, json_real(r->m[i].value))) goto oom;
        bytes += strlen(r->m[i].name) + 28;
    }
    if (r->has_step && json_object_set_new(m, "step", json_integer((json_int_t)r->step))) goto oom;
    if (r->has_epoch && json_object_set_new(m, "epoch", json_real(r->epoch))) goto oom;
    if (r->checkpoint[0]) {
        if (json_object_set_new(m, "checkpoint", json_string(r->checkpoint))) goto oom;
        bytes += strlen(r->checkpoint) + 16;
    }
    if (json_object_set_new(m, "values", values)) {
        values = NULL;
        goto oom;
    }
    values = NULL;

    pthread_mutex_lock(&ob->mu);
    while (ob->metrics.n >= ob->lim.max_metrics) {
        list_pop(&ob->metrics);
        ob->st.dropped_metrics++;
    }
    int rc = list_push(ob, &ob->metrics, m, bytes);
    pthread_mutex_unlock(&ob->mu);
    return rc;
oom:
    json_decref(values);
    json_decref(m);
    return HF_ENOMEM;
}

/* Length of a valid UTF-8 sequence at p (n bytes left), 0 if invalid. */
static size_t utf8_seq(const unsigned char *p, size_t n)
{
    unsigned c = p[0];
    size_t len;
    unsigned min;
    if (c < 0x80) return 1;
    if (c >= 0xC2 && c <= 0xDF) { len = 2; min = 0x80; }
    else if (c >= 0xE0 && c <= 0xEF) { len = 3; min = 0x800; }
    else if (c >= 0xF0 && c <= 0xF4) { len = 4; min = 0x10000; }
    else return 0;
    if (n < len) return 0;
    unsigned cp = c & (0x3F >> (len - 1));
    for (size_t i = 1; i < len; i++) {
        if ((p[i] & 0xC0) != 0x80) return 0;
        cp = (cp << 6) | (p[i] & 0x3F);
    }
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
    return len;
}

/* A JSON string of line with invalid UTF-8 bytes and NULs replaced by '?'. */
static json_t *line_string(const char *line, size_t len)
{
    const unsigned char *p = (const unsigned char *)line;
    size_t i = 0, bad = 0;
    while (i < len) {
        size_t k = p[i] ? utf8_seq(p + i, len - i) : 0;
        if (!k) { bad++; k = 1; }
        i += k;
    }
    if (!bad) return json_stringn(line, len);
    char *copy = malloc(len ? len : 1);
    if (!copy) return NULL;
    for (i = 0; i < len;) {
        size_t k = p[i] ? utf8_seq(p + i, len - i) : 0;
        if (!k) { copy[i++] = '?'; continue; }
        memcpy(copy + i, p + i, k);
        i += k;
    }
    json_t *s = json_stringn(copy, len);
    free(copy);
    return s;
}

static json_t *log_item(int64_t trial_id, int64_t attempt, int64_t time_ms, int stream,
                        const char *line, size_t len)
{
    json_t *s = line_string(line, len);
    if (!s) return NULL;
    return json_pack("{s:I, s:I, s:I, s:s, s:o}", "trial_id", (json_int_t)trial_id,
                     "attempt", (json_int_t)attempt, "time", (json_int_t)time_ms,
                     "stream", stream == AGENT_STREAM_STDERR ? "stderr" : "stdout", "line", s);
}

int agent_outbox_log(agent_outbox *ob, int64_t trial_id, int64_t attempt, int64_t time_ms,
                     int stream, const char *line, size_t len)
{
    json_t *j = log_item(trial_id, attempt, time_ms, stream, line, len);
    size_t bytes = len + 80;
    if (!j) return HF_ENOMEM;
    pthread_mutex_lock(&ob->mu);
    while (ob->logs.n > 0 && (ob->logs.n >= ob->lim.max_log_lines
                              || ob->logs.bytes + bytes > ob->lim.max_log_bytes)) {
        json_t *old = ob->logs.head->j;
        notice_add(ob, json_integer_value(json_object_get(old, "trial_id")),
                   json_integer_value(json_object_get(old, "attempt")));
        list_pop(&ob->logs);
        ob->st.dropped_logs++;
    }
    int rc = list_push(ob, &ob->logs, j, bytes);
    pthread_mutex_unlock(&ob->mu);
    return rc;
}

void agent_outbox_set_running(agent_outbox *ob, json_t *running)
{
    if (!running) return;
    pthread_mutex_lock(&ob->mu);
    json_decref(ob->running);
    ob->running = running;
    pthread_mutex_unlock(&ob->mu);
}

/* Is (trial, attempt, rank) of event ev already in the running array r? */
static int running_has(const json_t *r, const json_t *ev)
{
    size_t i;
    json_t *x;
    json_array_foreach(r, i, x) {
        if (json_equal(json_object_get(x, "trial_id"), json_object_get(ev, "trial_id"))
            && json_equal(json_object_get(x, "attempt"), json_object_get(ev, "attempt"))
            && json_equal(json_object_get(x, "rank"), json_object_get(ev, "rank")))
            return 1;
    }
    return 0;
}

/* The running list as the scheduler must see it: live processes, plus
 * trials whose end ("exited", "start_failed") is still waiting in the
 * outbox. Until the scheduler has stored that end, the trial is running as
 * far as it knows; leaving it out of a re-registration (after a scheduler
 * restart) would make the scheduler declare it lost and fail it, and then
 * drop the real exit event as stale. */
json_t *agent_outbox_running(agent_outbox *ob)
{
    pthread_mutex_lock(&ob->mu);
    json_t *r = json_deep_copy(ob->running);
    for (ob_item *it = ob->events.head; r && it; it = it->next) {
        const char *type = json_string_value(json_object_get(it->j, "type"));
        if (!type || (strcmp(type, "exited") && strcmp(type, "start_failed")) || running_has(r, it->j))
            continue;
        json_t *pid = json_object_get(it->j, "pid");
        json_t *rank = json_object_get(it->j, "rank");
        json_array_append_new(r, json_pack("{s:O, s:O, s:I, s:I}", "trial_id", json_object_get(it->j, "trial_id"),
                                           "attempt", json_object_get(it->j, "attempt"),
                                           "pid", (json_int_t)(json_is_integer(pid) ? json_integer_value(pid) : 0),
                                           "rank", (json_int_t)(json_is_integer(rank) ? json_integer_value(rank) : 0)));
    }
    pthread_mutex_unlock(&ob->mu);
    return r;
}

/* Add up to max items of l to arr within the byte budget. Caller holds mu. */
static int take_list(ob_list *l, json_t *arr, size_t max, size_t *budget, uint64_t *last, size_t *n)
{
    *last = 0;
    *n = 0;
    for (ob_item *it = l->head; it && *n < max; it = it->next) {
        if (*n > 0 && it->bytes > *budget) break;   /* always send at least one */
        if (json_array_append(arr, it->j)) return HF_ENOMEM;
        *budget = it->bytes > *budget ? 0 : *budget - it->bytes;
        *last = it->seq;
        (*n)++;
    }
    return HF_OK;
}

json_t *agent_outbox_take(agent_outbox *ob, agent_outbox_mark *mark)
{
    json_t *body = NULL, *ev = json_array(), *me = json_array(), *lo = json_array();
    size_t budget = AGENT_BATCH_BYTES;
    char msg[160];

    memset(mark, 0, sizeof *mark);
    pthread_mutex_lock(&ob->mu);
    /* Turn pending drop counts into a visible log line of that trial. */
    for (int i = 0; i < OB_NOTICES; i++) {
        ob_notice *nt = &ob->notice[i];
        if (!nt->dropped) continue;
        int n = snprintf(msg, sizeof msg,
                         "[hyperfarm-agent] %llu log lines dropped (agent outbox full: scheduler "
                         "unreachable or trial too verbose)", (unsigned long long)nt->dropped);
        json_t *j = log_item(nt->trial_id, nt->attempt, hf_wall_ms(), AGENT_STREAM_STDERR, msg, (size_t)n);
        if (j) list_push(ob, &ob->logs, j, (size_t)n + 80);
        nt->dropped = 0;
    }
    if (!ev || !me || !lo) goto end;
    if (take_list(&ob->events, ev, AGENT_BATCH_EVENTS, &budget, &mark->last_event, &mark->n_events)
        || take_list(&ob->metrics, me, AGENT_BATCH_METRICS, &budget, &mark->last_metric, &mark->n_metrics)
        || take_list(&ob->logs, lo, AGENT_BATCH_LOGS, &budget, &mark->last_log, &mark->n_logs))
        goto end;
    body = json_pack("{s:O, s:O, s:O, s:O}", "running", ob->running, "events", ev,
                     "metrics", me, "logs", lo);
    mark->more = ob->events.n > mark->n_events || ob->metrics.n > mark->n_metrics || ob->logs.n > mark->n_logs;
end:
    pthread_mutex_unlock(&ob->mu);
    json_decref(ev);
    json_decref(me);
    json_decref(lo);
    if (!body) memset(mark, 0, sizeof *mark);
    return body;
}

static void ack_list(ob_list *l, uint64_t last, uint64_t *sent)
{
    while (last && l->head && l->head->seq <= last) {
        list_pop(l);
        (*sent)++;
    }
}

/* At debug level, one line per METRIC item the acknowledgement pops (the
 * multi-server tests follow reports with it; docs/agent.md). Called with
 * ob->mu held, before ack_list pops them. */
static void ack_log_metrics(const ob_list *l, uint64_t last)
{
    for (const ob_item *it = l->head; last && it && it->seq <= last; it = it->next) {
        json_t *st = json_object_get(it->j, "step");
        long long t = (long long)json_integer_value(json_object_get(it->j, "trial_id"));
        long long a = (long long)json_integer_value(json_object_get(it->j, "attempt"));
        if (json_is_integer(st))
            hf_debug("acknowledged report: trial %lld attempt %lld step %lld", t, a,
                     (long long)json_integer_value(st));
        else
            hf_debug("acknowledged report: trial %lld attempt %lld", t, a);
    }
}

void agent_outbox_ack(agent_outbox *ob, const agent_outbox_mark *mark)
{
    pthread_mutex_lock(&ob->mu);
    ack_list(&ob->events, mark->last_event, &ob->st.sent_events);
    ack_log_metrics(&ob->metrics, mark->last_metric);
    ack_list(&ob->metrics, mark->last_metric, &ob->st.sent_metrics);
    ack_list(&ob->logs, mark->last_log, &ob->st.sent_logs);
    pthread_mutex_unlock(&ob->mu);
}

void agent_outbox_get_stats(agent_outbox *ob, agent_outbox_stats *st)
{
    pthread_mutex_lock(&ob->mu);
    *st = ob->st;
    st->logs = ob->logs.n;
    st->log_bytes = ob->logs.bytes;
    st->metrics = ob->metrics.n;
    st->events = ob->events.n;
    pthread_mutex_unlock(&ob->mu);
}

uint64_t agent_outbox_last_seq(agent_outbox *ob)
{
    pthread_mutex_lock(&ob->mu);
    uint64_t seq = ob->seq;
    pthread_mutex_unlock(&ob->mu);
    return seq;
}

int agent_outbox_metrics_delivered(agent_outbox *ob, uint64_t seq)
{
    pthread_mutex_lock(&ob->mu);
    int done = !ob->metrics.head || ob->metrics.head->seq > seq;
    pthread_mutex_unlock(&ob->mu);
    return done;
}
