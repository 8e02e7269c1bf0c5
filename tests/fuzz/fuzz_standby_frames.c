/*
 * fuzz_standby_frames.c — libFuzzer target for the standby's decoding of
 * the replication stream (scheduler/standby/standby_frames.c).
 *
 * An answer of GET /api/v1/replication/stream is untrusted bytes: a run of
 * [u64 lsn][u64 term][u32 flags][u32 len][changeset] frames. The input is
 * decoded frame by frame, checked as a whole answer (from an lsn and term
 * taken from its first bytes), and every frame's body is walked as a
 * changeset for the objects it names. Nothing may crash, read out of
 * bounds or leak; every frame decoded must lie inside the input.
 */
// FUZZ_SOURCES: scheduler/standby/standby_frames.c common/hf_err.c
// FUZZ_LIBS: -lsqlite3
#include "scheduler/standby/standby.h"

#include <assert.h>
#include <stdint.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int on_object(void *ctx, const standby_object *o)
{
    (void)ctx;
    assert(strlen(o->sha256) == 64);
    assert(o->size >= -1);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char err[256];
    standby_cols cols = {.ck_sha = 6, .ck_size = 7, .cx_sha = 1, .cx_size = 2};
    size_t off = 0;
    standby_frame f;
    int after = size ? data[0] : 0, term = size > 1 ? data[1] : 1;
    (void)standby_frames_check(data, size, after, term, err, sizeof err);
    assert(memchr(err, 0, sizeof err) || 1);
    for (int n = 0; n < 10000 && standby_frame_next(data, size, &off, &f) == 1; n++) {
        assert(f.data >= data && f.data + f.len <= data + size);
        assert(off <= size);
        (void)standby_changeset_objects(f.data, (int)f.len, &cols, on_object, NULL);
    }
    /* The whole input as one changeset, too. */
    (void)standby_changeset_objects(data, (int)(size > INT32_MAX ? INT32_MAX : size), &cols, on_object, NULL);
    return 0;
}
