/*
 * hf_be.h — big-endian integers in byte buffers: the replication
 * stream's frame headers (docs/protocol.md), changeset values and the
 * standby's spool records.
 */
#ifndef HF_BE_H
#define HF_BE_H

#include <stdint.h>

/* Write the low n bytes (1..8) of v at p, most significant first. */
static inline void hf_be_put(uint8_t *p, uint64_t v, int n)
{
    for (int i = n - 1; i >= 0; i--, v >>= 8) p[i] = (uint8_t)v;
}

/* Read n bytes (1..8) at p, most significant first. */
static inline uint64_t hf_be_get(const uint8_t *p, int n)
{
    uint64_t v = 0;
    for (int i = 0; i < n; i++) v = v << 8 | p[i];
    return v;
}

#endif
