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

#endif
