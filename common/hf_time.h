/*
 * hf_time.h — clocks. Monotonic time for timeouts and latency, wall time
 * (milliseconds since the Unix epoch) for anything stored or shown.
 */
#ifndef HF_TIME_H
#define HF_TIME_H

#include <stdint.h>
#include <time.h>

int64_t hf_mono_ms(void);   /* CLOCK_MONOTONIC in milliseconds */
int64_t hf_mono_us(void);   /* CLOCK_MONOTONIC in microseconds */
double  hf_mono_s(void);    /* CLOCK_MONOTONIC in seconds */
int64_t hf_wall_ms(void);   /* CLOCK_REALTIME in milliseconds since epoch */
void    hf_sleep_ms(int64_t ms);
/* The absolute time ms from now on clock, for pthread_cond_timedwait:
 * CLOCK_REALTIME for a default condition variable, CLOCK_MONOTONIC for one
 * whose attribute selects it. */
struct timespec hf_deadline(clockid_t clock, int64_t ms);

#endif
