/*
 * events.h — the Server-Sent Events hub behind GET /api/v1/events.
 *
 * Producers (the core, after a commit) publish (type, JSON) pairs; each
 * subscriber has a bounded queue of formatted "event: T\ndata: {...}\n\n"
 * text. A subscriber that falls more than EVENTS_MAX_QUEUE bytes behind is
 * cut off (its stream ends; EventSource reconnects), so a slow browser can
 * never make the scheduler grow without bound. When a subscriber's queue
 * goes from empty to non-empty its wake callback runs (api_stream.c resumes the
 * suspended HTTP connection).
 */
#ifndef HF_EVENTS_H
#define HF_EVENTS_H

#include <jansson.h>
#include <stddef.h>
#include <sys/types.h>

#define EVENTS_MAX_QUEUE   (4u << 20)
#define EVENTS_MAX_SUBS    256

typedef struct events_hub events_hub;
typedef struct events_sub events_sub;
typedef void (*events_wake_fn)(void *arg);

events_hub *events_new(void);
void        events_free(events_hub *h);
int         events_subscribers(events_hub *h);
/* Publish to every subscriber; data is borrowed. */
void        events_publish(events_hub *h, const char *type, const json_t *data);
/* A comment line that keeps proxies and EventSource from timing out. */
void        events_keepalive(events_hub *h);

/* End every stream (at shutdown): queues are cut off and sleepers woken. */
void        events_close_all(events_hub *h);

/* NULL when EVENTS_MAX_SUBS are connected or on OOM. */
events_sub *events_subscribe(events_hub *h, events_wake_fn wake, events_wake_fn sleep, void *arg);
void        events_unsubscribe(events_hub *h, events_sub *s);
/* Copy up to max queued bytes into buf. RET bytes copied; 0 when empty
 * (then sleep(arg) runs under the hub lock, so no publish can slip
 * between the empty check and the sleep, and the next publish calls
 * wake(arg)); -1 when the
 * subscriber was cut off (end the stream). */
ssize_t     events_read(events_hub *h, events_sub *s, char *buf, size_t max);

#endif
