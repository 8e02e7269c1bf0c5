/*
 * fuzz_checkpoint.c — libFuzzer target for checkpoint decoding
 * (trainer/ckpt.c).
 *
 * A checkpoint directory survives crashes, disk-full and half-written
 * files; whatever a file holds, tr_ckpt_decode must reject it cleanly or
 * return arrays of exactly the sizes recorded. Accepted inputs must
 * re-encode to the identical bytes (the format has no slack).
 */
// FUZZ_SOURCES: trainer/ckpt.c common/hf_err.c common/hf_log.c
// FUZZ_LIBS: -lz -ljansson
#include "hf_err.h"
#include "trainer/ckpt.h"

#include <assert.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    tr_ckpt c;
    char err[256];
    int rc = tr_ckpt_decode(data, size, &c, err, sizeof err);
    if (rc == 0) {
        uint8_t *again = NULL;
        size_t len = 0;
        assert(tr_ckpt_encode(&c, &again, &len) == 0);
        assert(len == size && memcmp(again, data, size) == 0);
        free(again);
        tr_ckpt_clear(&c);
    } else {
        assert(memchr(err, '\0', sizeof err) != NULL);
    }
    return 0;
}
