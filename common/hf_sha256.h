/*
 * hf_sha256.h — SHA-256 of a file descriptor's bytes, streamed through a
 * fixed buffer (GnuTLS gnutls_hash_*), as lowercase hex: the name of an
 * object in the content-addressed stores (scheduler/store/ckstore.h,
 * agent/agent_objects.h); and the same hash fed piece by piece, for bytes
 * that arrive in chunks (a standby's snapshot download) or are hashed
 * between checks of a stop flag. Thread-safe (no shared state).
 */
#ifndef HF_SHA256_H
#define HF_SHA256_H

#include <stddef.h>
#include <stdint.h>

#define HF_SHA256_HEX 65   /* 64 hex characters and the NUL */

/* Read fd to its end, hashing; when out >= 0 also write every byte there.
 * OUT hex (lowercase), *size (bytes read). RET 0, HF_ENOMEM, or the
 * errno-derived code of a failed read or write (hex is then meaningless). */
int hf_sha256_fd(int fd, int out, char hex[HF_SHA256_HEX], int64_t *size);

/* A hash fed piece by piece: begin, update for each piece, end. end gives
 * the hex of every byte fed and frees the context (NULL: hex = ""). */
typedef struct hf_sha256_ctx hf_sha256_ctx;
/* RET 0 with *out, or HF_ENOMEM (*out NULL). */
int  hf_sha256_begin(hf_sha256_ctx **out);
void hf_sha256_update(hf_sha256_ctx *c, const void *p, size_t n);
void hf_sha256_end(hf_sha256_ctx *c, char hex[HF_SHA256_HEX]);

/* Is s exactly 64 lowercase hex characters (an object's name)? 1 or 0. */
int hf_sha256_hex_valid(const char *s);

/* The hex form of a 32-byte digest. */
void hf_sha256_hex(const unsigned char dig[32], char hex[HF_SHA256_HEX]);

#endif
