/*
 * fuzz_idx.c — libFuzzer target for the IDX parser (trainer/data.c).
 *
 * Dataset files come from disk and may be anything: the first byte picks
 * the expected number of dimensions (1 or 3), the rest is the file. The
 * parser must accept it or reject it with a NUL-terminated message,
 * never read past the buffer, and on success return a payload exactly as
 * large as the dimensions say.
 */
// FUZZ_SOURCES: trainer/data.c trainer/layer.c common/hf_err.c common/hf_log.c
// FUZZ_LIBS: -lz -lopenblas -ljansson
#include "hf_err.h"
#include "trainer/data.h"

#include <assert.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1) return 0;
    int want = (data[0] & 1) ? 3 : 1;
    uint8_t *out = NULL;
    int dims[3] = {0, 0, 0};
    char err[256];
    memset(err, 'x', sizeof err);
    err[sizeof err - 1] = '\0';
    int rc = tr_idx_parse(data + 1, size - 1, want, &out, dims, err, sizeof err);
    if (rc == 0) {
        size_t total = 1;
        for (int i = 0; i < want; i++) {
            assert(dims[i] > 0);
            total *= (size_t)dims[i];
        }
        assert(total == size - 1 - 4 - 4 * (size_t)want);
        if (total) assert(memcmp(out, data + 1 + 4 + 4 * want, total) == 0);
        free(out);
    } else {
        assert(out == NULL);
        assert(memchr(err, '\0', sizeof err) != NULL);
    }
    return 0;
}
