/*
 * hf_thread.c — named threads with a stop flag (hf_thread.h).
 *
 * The handle's mutex guards kicked and started; stop is atomic so that
 * hf_thread_stopping needs no lock, but it is written under the mutex so
 * that a waiter cannot miss the signal between its test and its wait.
 * The new thread names itself, then tells hf_thread_start it is running:
 * when start returns, /proc shows the name and the thread never ran a line
 * of fn under its parent's name.
 */
#include "hf_thread.h"

#include "hf_err.h"
#include "hf_time.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct hf_thread {
    pthread_t       th;
    char            name[HF_THREAD_NAME_MAX + 1];
    hf_thread_fn    fn;
    void           *arg;
    pthread_mutex_t mu;
    pthread_cond_t  cv;        /* CLOCK_MONOTONIC: waits, kicks, stop, the start handshake */
    atomic_int      stop;
    int             kicked;    /* mu */
    int             started;   /* mu */
};

static int name_ok(const char *name)
{
    if (!name || !*name || strlen(name) > HF_THREAD_NAME_MAX) return 0;
    for (const char *p = name; *p; p++)
        if ((unsigned char)*p < 0x21 || *p == 0x7f) return 0;
    return 1;
}

static void *trampoline(void *arg)
{
    hf_thread *t = arg;
    pthread_setname_np(pthread_self(), t->name);
    pthread_mutex_lock(&t->mu);
    t->started = 1;
    pthread_cond_broadcast(&t->cv);
    pthread_mutex_unlock(&t->mu);
    t->fn(t, t->arg);
    return NULL;
}

static void handle_free(hf_thread *t)
{
    pthread_cond_destroy(&t->cv);
    pthread_mutex_destroy(&t->mu);
    free(t);
}

int hf_thread_start_stack(hf_thread **out, const char *name, size_t stack, hf_thread_fn fn, void *arg)
{
    *out = NULL;
    if (!name_ok(name) || !fn) return HF_EINVAL;
    hf_thread *t = calloc(1, sizeof *t);
    if (!t) return HF_ENOMEM;
    strcpy(t->name, name);
    t->fn = fn;
    t->arg = arg;
    atomic_init(&t->stop, 0);
    pthread_mutex_init(&t->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&t->cv, &ca);
    pthread_condattr_destroy(&ca);
    pthread_attr_t at;
    pthread_attr_init(&at);
    int rc = stack ? pthread_attr_setstacksize(&at, stack) : 0;
    *out = t;   /* before the thread exists: fn may read the caller's copy */
    if (rc == 0) rc = pthread_create(&t->th, &at, trampoline, t);
    pthread_attr_destroy(&at);
    if (rc != 0) {
        *out = NULL;
        handle_free(t);
        return rc == EAGAIN ? HF_ENOMEM : hf_err_from_errno(rc);
    }
    pthread_mutex_lock(&t->mu);
    while (!t->started) pthread_cond_wait(&t->cv, &t->mu);
    pthread_mutex_unlock(&t->mu);
    return 0;
}

int hf_thread_start(hf_thread **out, const char *name, hf_thread_fn fn, void *arg)
{
    return hf_thread_start_stack(out, name, 0, fn, arg);
}

int hf_thread_wait(hf_thread *t, int64_t ms)
{
    pthread_mutex_lock(&t->mu);
    if (ms > 0 && !atomic_load(&t->stop) && !t->kicked) {
        struct timespec dl = hf_deadline(CLOCK_MONOTONIC, ms);
        while (!atomic_load(&t->stop) && !t->kicked)
            if (pthread_cond_timedwait(&t->cv, &t->mu, &dl) == ETIMEDOUT) break;
    }
    t->kicked = 0;
    int stop = atomic_load(&t->stop);
    pthread_mutex_unlock(&t->mu);
    return stop ? 1 : 0;
}

int hf_thread_stopping(const hf_thread *t)
{
    return atomic_load(&t->stop) ? 1 : 0;
}

void hf_thread_kick(hf_thread *t)
{
    if (!t) return;
    pthread_mutex_lock(&t->mu);
    t->kicked = 1;
    pthread_cond_broadcast(&t->cv);
    pthread_mutex_unlock(&t->mu);
}

void hf_thread_ask_stop(hf_thread *t)
{
    if (!t) return;
    pthread_mutex_lock(&t->mu);
    atomic_store(&t->stop, 1);
    pthread_cond_broadcast(&t->cv);
    pthread_mutex_unlock(&t->mu);
}

void hf_thread_join(hf_thread *t)
{
    if (!t) return;
    pthread_join(t->th, NULL);
    handle_free(t);
}

void hf_thread_stop_join(hf_thread *t)
{
    hf_thread_ask_stop(t);
    hf_thread_join(t);
}

const char *hf_thread_name(const hf_thread *t)
{
    return t->name;
}
