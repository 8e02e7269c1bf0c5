/*
 * hf_sha256.c — streamed SHA-256 of a file, or of pieces fed in turn (see
 * hf_sha256.h).
 */
#include "hf_sha256.h"

#include "hf_err.h"
#include "hf_file.h"

#include <errno.h>
#include <gnutls/crypto.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#define HF_SHA256_CHUNK (1 << 20)

int hf_sha256_hex_valid(const char *s)
{
    size_t i = 0;
    if (!s) return 0;
    for (; s[i]; i++)
        if (i >= 64 || !((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f'))) return 0;
    return i == 64;
}

void hf_sha256_hex(const unsigned char dig[32], char hex[HF_SHA256_HEX])
{
    static const char d[] = "0123456789abcdef";
    for (int i = 0; i < 32; i++) {
        hex[2 * i] = d[dig[i] >> 4];
        hex[2 * i + 1] = d[dig[i] & 15];
    }
    hex[64] = 0;
}

/* The context is GnuTLS's own handle (a pointer), under our name. */
int hf_sha256_begin(hf_sha256_ctx **out)
{
    gnutls_hash_hd_t h;
    *out = NULL;
    if (gnutls_hash_init(&h, GNUTLS_DIG_SHA256) != 0) return HF_ENOMEM;
    *out = (hf_sha256_ctx *)h;
    return 0;
}

void hf_sha256_update(hf_sha256_ctx *c, const void *p, size_t n)
{
    if (c && n) gnutls_hash((gnutls_hash_hd_t)c, p, n);
}

void hf_sha256_end(hf_sha256_ctx *c, char hex[HF_SHA256_HEX])
{
    unsigned char dig[32];
    hex[0] = 0;
    if (!c) return;
    gnutls_hash_deinit((gnutls_hash_hd_t)c, dig);
    hf_sha256_hex(dig, hex);
}

int hf_sha256_fd(int fd, int out, char hex[HF_SHA256_HEX], int64_t *size)
{
    hf_sha256_ctx *h = NULL;
    char *buf = malloc(HF_SHA256_CHUNK);
    int rc = 0;
    *size = 0;
    hex[0] = 0;
    if (!buf) return HF_ENOMEM;
    if (hf_sha256_begin(&h)) {
        free(buf);
        return HF_ENOMEM;
    }
    for (;;) {
        ssize_t r = read(fd, buf, HF_SHA256_CHUNK);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) { rc = hf_err_from_errno(errno); break; }
        if (r == 0) break;
        hf_sha256_update(h, buf, (size_t)r);
        *size += r;
        if (out >= 0 && (rc = hf_file_write_all(out, buf, (size_t)r))) break;
    }
    hf_sha256_end(h, hex);
    free(buf);
    return rc;
}
