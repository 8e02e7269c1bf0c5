/*
 * ckpt_fixture.h — what the scheduler's checkpoint unit tests share
 * (test_scheduler_ckretain.c, test_scheduler_restore.c): the SHA-256 of a
 * buffer, and a checkpoint put into a real store (ckstore.c) the way an
 * agent's PUT does it: upload begin/write/commit, then its row. Include
 * after <cmocka.h>; link with gnutls.
 */
#ifndef HF_CKPT_FIXTURE_H
#define HF_CKPT_FIXTURE_H

#include "scheduler/store/ckstore.h"

#include <gnutls/crypto.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

/* Lowercase hex SHA-256 of data[0..n). */
static inline void unit_sha_hex(const char *data, size_t n, char hex[65])
{
    unsigned char d[32];
    gnutls_hash_fast(GNUTLS_DIG_SHA256, data, n, d);
    for (int i = 0; i < 32; i++) snprintf(hex + 2 * i, 3, "%02x", d[i]);
}

/* Store content as checkpoint name (NULL: none) of trial tid at step,
 * attempt; OUT sha: its hash. Every step must succeed. */
static inline void unit_put_ckpt(ckstore *ck, int64_t tid, int64_t step, int64_t attempt, const char *name,
                                 const char *content, char sha[65])
{
    ckstore_upload *up = NULL;
    ckstore_info info = {.step = step, .attempt = attempt};
    char msg[256];
    if (name) snprintf(info.name, sizeof info.name, "%s", name);
    unit_sha_hex(content, strlen(content), sha);
    assert_int_equal(ckstore_upload_begin(ck, sha, (int64_t)strlen(content), &up), 0);
    assert_int_equal(ckstore_upload_write(up, content, strlen(content)), 0);
    assert_int_equal(ckstore_upload_commit(up, &info, msg, sizeof msg), 0);
    assert_int_equal(ckstore_record(ck, tid, &info), 0);
}

#endif
