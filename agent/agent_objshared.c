/*
 * agent_objshared.c — objects through a shared filesystem (see
 * agent_objshared.h). Nothing here holds state: the shared directory is
 * named by each call (it can change with a registration reply).
 */
#include "agent_objshared.h"

#include "hf_err.h"
#include "hf_file.h"
#include "hf_time.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

int agent_objshared_put(const char *shared, const char *sha, const char *obj, char *err, size_t errlen)
{
    char dst[PATH_MAX + 80], dir[PATH_MAX], tmp[PATH_MAX + 64];
    struct stat sb;
    int rc;
    snprintf(dir, sizeof dir, "%s/objects/%.2s", shared, sha);
    snprintf(dst, sizeof dst, "%s/%s", dir, sha);
    if (stat(dst, &sb) == 0) return 0;             /* the scheduler verifies it anyway */
    snprintf(tmp, sizeof tmp, "%s/tmp/agent-%.12s-%d-%lld", shared, sha, (int)getpid(), (long long)hf_mono_us());
    if ((rc = agent_objcache_copy_file(obj, tmp)) == 0 &&
        (rc = mkdir(dir, 0755) == 0 || errno == EEXIST ? 0 : hf_err_from_errno(errno)) == 0) {
        if (link(tmp, dst) != 0 && errno != EEXIST) rc = hf_err_from_errno(errno);
        else hf_file_fsync_dir(dir);
    }
    unlink(tmp);
    if (rc) snprintf(err, errlen, "writing object %.12s into the shared store %s: %s", sha, shared, hf_strerror(rc));
    return rc;
}

int agent_objshared_fetch(agent_objcache *oc, const char *shared, const char *sha, int64_t size, char *err,
                          size_t errlen)
{
    char src[PATH_MAX];
    snprintf(src, sizeof src, "%s/objects/%.2s/%s", shared, sha, sha);
    return agent_objcache_ingest(oc, src, sha, size, 1, NULL, NULL, err, errlen);
}
