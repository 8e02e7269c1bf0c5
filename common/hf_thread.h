/*
 * hf_thread.h — the one way a hyperfarm program starts a thread.
 *
 * Every thread has a name (at most HF_THREAD_NAME_MAX characters, e.g.
 * "hf-cron"), set with pthread_setname_np before its function runs, so
 * /proc/PID/task/TID/comm and debuggers show what it is and a test can
 * compare the running threads with docs/architecture.md "Threads". No
 * other file calls pthread_create (common/hf_pool.c starts its workers
 * through this one).
 *
 * A thread carries a stop flag and a condition variable (CLOCK_MONOTONIC):
 * a timer loop sleeps with hf_thread_wait, which returns early when the
 * owner asks it to stop or kicks it, so stopping is prompt however long the
 * period. The usual loop:
 *
 *   static void loop(hf_thread *t, void *arg)
 *   {
 *       while (!hf_thread_wait(t, PERIOD_MS)) do_one_pass(arg);
 *   }
 *
 * The stop flag is advisory: a thread that runs to its own end (a writer
 * draining a pipe) may ignore it, and its owner joins it with
 * hf_thread_join. Signal masks are inherited from the starting thread,
 * as with pthread_create.
 */
#ifndef HF_THREAD_H
#define HF_THREAD_H

#include <stddef.h>
#include <stdint.h>

#define HF_THREAD_NAME_MAX 15   /* the kernel's limit (TASK_COMM_LEN - 1) */

typedef struct hf_thread hf_thread;

/* The thread's body; t is its own handle (for hf_thread_wait/stopping). */
typedef void (*hf_thread_fn)(hf_thread *t, void *arg);

/* Start fn(t, arg) on a new thread called name.
 * IN  name: 1..HF_THREAD_NAME_MAX printable characters (copied);
 *     stack: the stack size in bytes, 0 for the default.
 * OUT *out: the handle, owned by the caller until hf_thread_stop_join or
 *     hf_thread_join; it is stored before the thread starts, so fn may
 *     read it through the caller's structure (NULL again on failure).
 * RET 0 (the thread is named and running when this returns); HF_EINVAL
 *     (bad name); HF_ENOMEM or another HF_E* code when the thread could
 *     not be created (fn is then never called). */
int  hf_thread_start(hf_thread **out, const char *name, hf_thread_fn fn, void *arg);
int  hf_thread_start_stack(hf_thread **out, const char *name, size_t stack, hf_thread_fn fn, void *arg);

/* From the thread itself: sleep up to ms milliseconds (ms <= 0: do not
 * sleep), returning early when stop is asked or the thread is kicked.
 * RET 1 when stop has been asked (at once if it already was), else 0
 * (time is up, or a kick arrived; a kick given while the thread was
 * awake makes the next wait return at once: no kick is lost). */
int  hf_thread_wait(hf_thread *t, int64_t ms);
/* Has stop been asked? Lock-free; any thread. */
int  hf_thread_stopping(const hf_thread *t);
/* Wake the thread's hf_thread_wait without asking it to stop (new work). */
void hf_thread_kick(hf_thread *t);
/* Ask the thread to stop and wake it; do not wait (to stop several
 * threads at once, then join each). NULL is fine. */
void hf_thread_ask_stop(hf_thread *t);
/* Ask the thread to stop, wait for fn to return, free the handle. NULL is fine. */
void hf_thread_stop_join(hf_thread *t);
/* Wait for fn to return on its own (stop is not asked), free the handle.
 * NULL is fine. */
void hf_thread_join(hf_thread *t);
/* The name given to hf_thread_start. */
const char *hf_thread_name(const hf_thread *t);

#endif
