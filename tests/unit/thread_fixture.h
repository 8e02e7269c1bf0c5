/*
 * thread_fixture.h — what unit tests of threaded code share: how many
 * threads of this process carry a name now (/proc/self/task/TID/comm, set
 * by common/hf_thread.h). Include after <cmocka.h>.
 */
#ifndef HF_THREAD_FIXTURE_H
#define HF_THREAD_FIXTURE_H

#include <dirent.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

static inline int unit_threads_named(const char *name)
{
    DIR *d = opendir("/proc/self/task");
    assert_non_null(d);
    int n = 0;
    for (struct dirent *e; (e = readdir(d));) {
        char path[300], comm[64] = "";
        if (e->d_name[0] == '.') continue;
        snprintf(path, sizeof path, "/proc/self/task/%s/comm", e->d_name);
        FILE *f = fopen(path, "r");
        if (!f) continue;   /* the thread just ended */
        if (fgets(comm, sizeof comm, f)) comm[strcspn(comm, "\n")] = 0;
        fclose(f);
        n += strcmp(comm, name) == 0;
    }
    closedir(d);
    return n;
}

/* The same once the count is want, waiting up to 2 s: a joined thread's
 * /proc/self/task entry can outlive pthread_join for a moment (the kernel
 * wakes the joiner before it releases the task), so a count that must fall
 * after a stop is read with this. RET the last count. */
static inline int unit_threads_settle(const char *name, int want)
{
    int n = unit_threads_named(name);
    for (int i = 0; i < 200 && n != want; i++) {
        struct timespec ts = {0, 10 * 1000 * 1000};
        nanosleep(&ts, NULL);
        n = unit_threads_named(name);
    }
    return n;
}

#endif
