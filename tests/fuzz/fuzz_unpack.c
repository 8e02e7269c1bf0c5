/*
 * fuzz_unpack.c — libFuzzer target for the agent's code-context unpacker
 * (agent/agent_context.c agent_context_unpack): the input is the archive
 * (gzip'd tar, plain tar, or anything), unpacked into a fresh directory
 * d inside a fresh sandbox directory, with small limits.
 *
 * Invariants: no crash, leak or out-of-bounds access whatever the bytes;
 * nothing is ever written outside d (the sandbox holds d alone
 * afterwards); nothing written at all when the unpack is refused with
 * HF_EINVAL or HF_ETOOBIG (every check runs before the first write).
 */
// FUZZ_SOURCES: common/*.c agent/agent_context.c agent/agent_objects.c agent/agent_objcache.c agent/agent_objshared.c agent/agent_assign.c agent/agent_fs.c
// FUZZ_LIBS: -larchive -lcurl -lgnutls -ljansson -lpthread
#include "agent/agent_context.h"
#include "hf_err.h"
#include "hf_log.h"

#include <assert.h>
#include <dirent.h>
#include <ftw.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int rm_cb(const char *p, const struct stat *st, int flag, struct FTW *f)
{
    (void)st; (void)flag; (void)f;
    return remove(p);
}

/* How many names dir holds besides "." and "..". */
static int entries(const char *dir)
{
    struct dirent **names = NULL;
    int n = scandir(dir, &names, NULL, NULL);
    for (int i = 0; i < n; i++) free(names[i]);
    free(names);
    return n < 0 ? -1 : n - 2;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static int init;
    char sandbox[64] = "/tmp/hf-fuzz-unpack-XXXXXX", dest[128], arch[128], err[512];
    if (!init) {
        hf_log_set_level(HF_LOG_ERROR);
        init = 1;
    }
    if (!mkdtemp(sandbox)) return 0;
    snprintf(dest, sizeof dest, "%s/d", sandbox);
    snprintf(arch, sizeof arch, "/tmp/hf-fuzz-unpack-%d.tar", (int)getpid());
    FILE *f = fopen(arch, "wb");
    if (!f || mkdir(dest, 0755)) abort();
    fwrite(data, 1, size, f);
    fclose(f);
    const agent_context_limits lim = {.max_entries = 256, .max_bytes = 4 << 20};
    int rc = agent_context_unpack(arch, dest, &lim, NULL, NULL, err, sizeof err);
    assert(entries(sandbox) == 1);                                   /* only d */
    if (rc == HF_EINVAL || rc == HF_ETOOBIG) assert(entries(dest) == 0);
    assert(rc == 0 || err[0]);
    unlink(arch);
    nftw(sandbox, rm_cb, 16, FTW_DEPTH | FTW_PHYS);
    return 0;
}
