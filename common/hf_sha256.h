/*
 * hf_sha256.h — SHA-256 of a file descriptor's bytes, streamed through a
 * fixed buffer (GnuTLS gnutls_hash_*), as lowercase hex: the name of an
 * object in the content-addressed stores (scheduler/store/ckstore.h,
 * agent/agent_objects.h). Thread-safe (no shared state).
 */
#ifndef HF_SHA256_H
#define HF_SHA256_H

#include <stdint.h>

#define HF_SHA256_HEX 65   /* 64 hex characters and the NUL */

/* Read fd to its end, hashing; when out >= 0 also write every byte there.
 * OUT hex (lowercase), *size (bytes read). RET 0, HF_ENOMEM, or the
 * errno-derived code of a failed read or write (hex is then meaningless). */
int hf_sha256_fd(int fd, int out, char hex[HF_SHA256_HEX], int64_t *size);

/* Is s exactly 64 lowercase hex characters (an object's name)? 1 or 0. */
int hf_sha256_hex_valid(const char *s);

/* The hex form of a 32-byte digest. */
void hf_sha256_hex(const unsigned char dig[32], char hex[HF_SHA256_HEX]);

#endif
