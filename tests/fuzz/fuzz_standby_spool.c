/*
 * fuzz_standby_spool.c — libFuzzer target for opening the standby's spool
 * (scheduler/standby/standby_spool.c) on whatever bytes a crash or a bad
 * disk left in DB.spool.
 *
 * The input (after two bytes that pick the replica's LSN and term) is
 * written as the spool file; standby_spool_open must keep a prefix of
 * whole records whose hashes match and whose frames follow the replica,
 * truncate the rest, and everything it then hands out must be whole
 * frames: standby_spool_take's bodies decode with standby_frame_next to
 * their end, and the file is never longer than the input. Nothing may
 * crash, read out of bounds or leak.
 */
// FUZZ_SOURCES: scheduler/standby/standby_spool.c scheduler/standby/standby_frames.c common/hf_err.c common/hf_log.c common/hf_file.c common/hf_time.c
// FUZZ_LIBS: -lsqlite3 -ljansson
#include "scheduler/standby/standby.h"

#include "hf_log.h"

#include <assert.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char db[64];

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!db[0]) {
        char dir[] = "/tmp/hf-fuzz-spool-XXXXXX";
        if (!mkdtemp(dir)) abort();
        snprintf(db, sizeof db, "%s/r.db", dir);
        hf_log_set_level(HF_LOG_OFF);
    }
    int64_t applied = size ? data[0] % 4 : 0, term = size > 1 ? 1 + data[1] % 2 : 1;
    const uint8_t *body = size > 2 ? data + 2 : data;
    size_t n = size > 2 ? size - 2 : 0;
    char path[96];
    standby_spool_path(db, path, sizeof path);
    FILE *f = fopen(path, "wb");
    if (!f) abort();
    if (n && fwrite(body, 1, n, f) != n) abort();
    fclose(f);
    char err[256];
    standby_spool *sp = NULL;
    if (standby_spool_open(db, applied, term, &sp, err, sizeof err) == 0) {
        struct stat st;
        assert(stat(path, &st) == 0 && (size_t)st.st_size <= n);
        assert(standby_spool_last(sp) >= applied);
        for (int k = 0; k < 64; k++) {
            uint8_t *buf = NULL;
            size_t len = 0;
            int64_t mark = 0;
            if (standby_spool_take(sp, 0, 1 << 20, &buf, &len, &mark) || !len) { free(buf); break; }
            size_t off = 0;
            standby_frame fr;
            int r;
            while ((r = standby_frame_next(buf, len, &off, &fr)) == 1) assert(fr.data + fr.len <= buf + len);
            assert(r == 0 && off == len);
            free(buf);
            standby_spool_applied(sp, mark);
        }
        standby_spool_close(sp);
    }
    unlink(path);
    return 0;
}
