/*
 * data.c — reading the IDX format (data.h): validating and copying an
 * IDX file held in memory, and reading a whole file through zlib, so
 * gzip-compressed and plain files both work. Every size in a header is
 * checked against the bytes present; errors say what is wrong (wrong
 * magic, truncated, extra bytes). Calls nothing else of the trainer.
 */
#include "data.h"

#include "hf_err.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

int tr_idx_check(const uint8_t *buf, size_t len, int want_dims, int *dims, size_t *hdr_out, char *err, size_t el)
{
    if (len < 4) return snprintf(err, el, "truncated: %zu bytes, no IDX header", len), HF_ECORRUPT;
    if (buf[0] != 0 || buf[1] != 0)
        return snprintf(err, el, "wrong magic %02x%02x%02x%02x (not an IDX file)", buf[0], buf[1], buf[2], buf[3]),
               HF_EPARSE;
    if (buf[2] != 0x08)
        return snprintf(err, el, "IDX element type 0x%02x unsupported (want 0x08, unsigned byte)", buf[2]), HF_EPARSE;
    if (buf[3] != want_dims)
        return snprintf(err, el, "IDX has %d dimensions, want %d", buf[3], want_dims), HF_EPARSE;
    size_t hdr = 4 + 4 * (size_t)want_dims;
    if (len < hdr) return snprintf(err, el, "truncated header (%zu of %zu bytes)", len, hdr), HF_ECORRUPT;
    uint64_t total = 1;
    for (int i = 0; i < want_dims; i++) {
        const uint8_t *p = buf + 4 + 4 * i;
        uint32_t d = (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
        if (d == 0 || d > (1u << 30)) return snprintf(err, el, "dimension %d is %u", i, d), HF_EPARSE;
        total *= d;
        if (total > TR_IDX_MAX_BYTES) return snprintf(err, el, "IDX payload over 2 GiB"), HF_ETOOBIG;
        dims[i] = (int)d;
    }
    if (len - hdr < total)
        return snprintf(err, el, "truncated: header says %llu data bytes, file has %zu", (unsigned long long)total,
                        len - hdr), HF_ECORRUPT;
    if (len - hdr > total)
        return snprintf(err, el, "%zu bytes after the %llu the header declares", len - hdr - (size_t)total,
                        (unsigned long long)total), HF_ECORRUPT;
    *hdr_out = hdr;
    return 0;
}

int tr_idx_parse(const uint8_t *buf, size_t len, int want_dims, uint8_t **data, int *dims, char *err, size_t el)
{
    size_t hdr;
    *data = NULL;
    int rc = tr_idx_check(buf, len, want_dims, dims, &hdr, err, el);
    if (rc) return rc;
    *data = malloc(len - hdr);
    if (!*data) return snprintf(err, el, "out of memory"), HF_ENOMEM;
    memcpy(*data, buf + hdr, len - hdr);
    return 0;
}

int tr_file_read_gunzip(const char *path, size_t max, uint8_t **out, size_t *len, char *err, size_t el)
{
    *out = NULL;
    *len = 0;
    int rc = 0;
    uint8_t *buf = NULL;
    size_t cap = 0, n = 0;
    gzFile f = gzopen(path, "rb");
    if (!f) {
        int e = errno;
        snprintf(err, el, "%s: %s", path, strerror(e ? e : ENOMEM));
        return e == ENOENT ? HF_ENOTFOUND : HF_EIO;
    }
    for (;;) {
        if (n == cap) {
            size_t ncap = cap ? cap * 2 : (1 << 20);
            if (ncap > max + 1) ncap = max + 1;
            if (ncap <= cap) { snprintf(err, el, "%s: larger than %zu bytes", path, max); rc = HF_ETOOBIG; goto end; }
            uint8_t *nb = realloc(buf, ncap);
            if (!nb) { snprintf(err, el, "%s: out of memory", path); rc = HF_ENOMEM; goto end; }
            buf = nb;
            cap = ncap;
        }
        size_t want = cap - n;
        if (want > (1u << 30)) want = 1u << 30;
        int r = gzread(f, buf + n, (unsigned)want);
        if (r < 0) {
            int zerr;
            const char *m = gzerror(f, &zerr);
            snprintf(err, el, "%s: corrupt gzip data (%s)", path, m ? m : "?");
            rc = zerr == Z_ERRNO ? HF_EIO : HF_ECORRUPT;
            goto end;
        }
        if (r == 0) break;
        n += (size_t)r;
        if (n > max) { snprintf(err, el, "%s: larger than %zu bytes", path, max); rc = HF_ETOOBIG; goto end; }
    }
    /* gzread stops quietly at a gzip stream cut short; zlib reports it via gzerror */
    {
        int zerr = Z_OK;
        gzerror(f, &zerr);
        if (zerr != Z_OK && zerr != Z_STREAM_END) {
            snprintf(err, el, "%s: truncated or corrupt gzip stream", path);
            rc = HF_ECORRUPT;
            goto end;
        }
    }
    *out = buf;
    *len = n;
    buf = NULL;
end:
    gzclose(f);
    free(buf);
    return rc;
}
