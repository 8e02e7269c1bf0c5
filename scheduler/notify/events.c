/*
 * events.c — SSE hub (see events.h). One mutex guards the subscriber list
 * and every queue; publishing formats the message once and appends it to
 * each queue.
 */
#include "scheduler/notify/events.h"

#include "hf_buf.h"
#include "hf_json.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

struct events_sub {
    hf_buf         q;
    int            waiting;    /* reader saw an empty queue and sleeps */
    int            dead;       /* cut off: queue overflowed */
    events_wake_fn wake, sleep;
    void          *arg;
    events_sub    *next;
};

struct events_hub {
    pthread_mutex_t lock;
    events_sub     *subs;
    int             n;
};

events_hub *events_new(void)
{
    events_hub *h = calloc(1, sizeof *h);
    if (h) pthread_mutex_init(&h->lock, NULL);
    return h;
}

void events_free(events_hub *h)
{
    if (!h) return;
    events_sub *s = h->subs;
    while (s) {
        events_sub *n = s->next;
        hf_buf_free(&s->q);
        free(s);
        s = n;
    }
    pthread_mutex_destroy(&h->lock);
    free(h);
}

int events_subscribers(events_hub *h)
{
    if (!h) return 0;
    pthread_mutex_lock(&h->lock);
    int n = h->n;
    pthread_mutex_unlock(&h->lock);
    return n;
}

static void push(events_hub *h, const char *text, size_t len)
{
    pthread_mutex_lock(&h->lock);
    for (events_sub *s = h->subs; s; s = s->next) {
        if (s->dead) continue;
        if (hf_buf_add(&s->q, text, len) != 0) s->dead = 1;
        if (s->waiting) {
            s->waiting = 0;
            if (s->wake) s->wake(s->arg);
        }
    }
    pthread_mutex_unlock(&h->lock);
}

void events_publish(events_hub *h, const char *type, const json_t *data)
{
    if (!h || h->n == 0) return;   /* racy read is fine: a missed event for a new subscriber */
    char *js = hf_json_dump(data);
    if (!js) return;
    hf_buf b;
    hf_buf_init(&b, EVENTS_MAX_QUEUE);
    if (hf_buf_printf(&b, "event: %s\ndata: %s\n\n", type, js) == 0) push(h, b.data, b.len);
    hf_buf_free(&b);
    free(js);
}

void events_keepalive(events_hub *h)
{
    if (h && h->n) push(h, ": keepalive\n\n", 13);
}

events_sub *events_subscribe(events_hub *h, events_wake_fn wake, events_wake_fn sleep, void *arg)
{
    events_sub *s = NULL;
    pthread_mutex_lock(&h->lock);
    if (h->n < EVENTS_MAX_SUBS && (s = calloc(1, sizeof *s)) != NULL) {
        hf_buf_init(&s->q, EVENTS_MAX_QUEUE);
        s->wake = wake;
        s->sleep = sleep;
        s->arg = arg;
        s->next = h->subs;
        h->subs = s;
        h->n++;
        /* Tell the browser how long to wait before reconnecting. */
        hf_buf_addstr(&s->q, "retry: 2000\n: connected\n\n");
    }
    pthread_mutex_unlock(&h->lock);
    return s;
}

void events_unsubscribe(events_hub *h, events_sub *s)
{
    if (!s) return;
    pthread_mutex_lock(&h->lock);
    for (events_sub **p = &h->subs; *p; p = &(*p)->next) {
        if (*p == s) {
            *p = s->next;
            h->n--;
            break;
        }
    }
    pthread_mutex_unlock(&h->lock);
    hf_buf_free(&s->q);
    free(s);
}

ssize_t events_read(events_hub *h, events_sub *s, char *buf, size_t max)
{
    ssize_t n;
    pthread_mutex_lock(&h->lock);
    if (s->q.len == 0) {
        n = s->dead ? -1 : 0;
        if (n == 0) {
            s->waiting = 1;
            if (s->sleep) s->sleep(s->arg);
        }
    } else {
        size_t k = s->q.len < max ? s->q.len : max;
        memcpy(buf, s->q.data, k);
        hf_buf_consume(&s->q, k);
        n = (ssize_t)k;
    }
    pthread_mutex_unlock(&h->lock);
    return n;
}

void events_close_all(events_hub *h)
{
    if (!h) return;
    pthread_mutex_lock(&h->lock);
    for (events_sub *s = h->subs; s; s = s->next) {
        s->dead = 1;
        hf_buf_reset(&s->q);
        if (s->waiting) {
            s->waiting = 0;
            if (s->wake) s->wake(s->arg);
        }
    }
    pthread_mutex_unlock(&h->lock);
}
