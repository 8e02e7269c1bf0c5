/*
 * hf_time.c — clocks (see hf_time.h).
 */
#include "hf_time.h"

#include <errno.h>
#include <time.h>

static int64_t clock_us(clockid_t id)
{
    struct timespec ts;
    clock_gettime(id, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

int64_t hf_mono_us(void) { return clock_us(CLOCK_MONOTONIC); }
int64_t hf_mono_ms(void) { return clock_us(CLOCK_MONOTONIC) / 1000; }
double  hf_mono_s(void)  { return (double)clock_us(CLOCK_MONOTONIC) / 1e6; }
int64_t hf_wall_ms(void) { return clock_us(CLOCK_REALTIME) / 1000; }

struct timespec hf_deadline(clockid_t clock, int64_t ms)
{
    struct timespec ts;
    clock_gettime(clock, &ts);
    int64_t ns = ts.tv_nsec + (ms % 1000) * 1000000;
    ts.tv_sec += ms / 1000 + ns / 1000000000;
    ts.tv_nsec = ns % 1000000000;
    return ts;
}

void hf_sleep_ms(int64_t ms)
{
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000};
    while (nanosleep(&ts, &ts) == -1 && errno == EINTR) {
    }
}
