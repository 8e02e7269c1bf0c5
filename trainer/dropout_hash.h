/*
 * dropout_hash.h — the counter hash behind dropout masks, parameter
 * initialisation and data augmentation, in one place for both compilers:
 * layer.c (the CPU reference) and the CUDA kernels (cuda_kernels.cu) both
 * include it, so CPU and GPU drop exactly the same units (docs/trainer.md,
 * "CPU and GPU"). Plain C; under nvcc every function is also a device
 * function (TR_HOSTDEV).
 *
 * The hash is splitmix64-style mixing of four 64-bit words: the same
 * inputs always give the same value, so masks need no saved state and a
 * resumed run draws what an uninterrupted one would. Changing any constant
 * here changes every model's initial weights and every mask: checkpoints
 * and recorded runs would no longer reproduce.
 */
#ifndef TR_DROPOUT_HASH_H
#define TR_DROPOUT_HASH_H

#include <stddef.h>
#include <stdint.h>

#ifdef __CUDACC__
#define TR_HOSTDEV __host__ __device__
#else
#define TR_HOSTDEV
#endif

/* The hash of (a, b, c, d). */
static inline TR_HOSTDEV uint64_t tr_hash64_inline(uint64_t a, uint64_t b, uint64_t c, uint64_t d)
{
    uint64_t h = a * 0x9E3779B97F4A7C15ull;
    uint64_t in[3] = {b, c, d};
    for (int i = 0; i < 3; i++) {
        h ^= in[i] + 0x9E3779B97F4A7C15ull + (h << 6) + (h >> 2);
        h ^= h >> 30; h *= 0xBF58476D1CE4E5B9ull;
        h ^= h >> 27; h *= 0x94D049BB133111EBull;
        h ^= h >> 31;
    }
    return h;
}

/* The top 24 bits of h as a float in [0, 1): exact (a 24-bit integer times
 * 2^-24), so host and device agree whatever the compiler fuses. */
static inline TR_HOSTDEV float tr_hash_unit(uint64_t h)
{
    return (float)(h >> 40) * (1.0f / 16777216.0f);
}

/* Dropout: the seed of one row's mask, from the run's seed, the step, the
 * layer's index in the model and the row's global index (row_base + row in
 * data-parallel shards), ... */
static inline TR_HOSTDEV uint64_t tr_dropout_row_seed(uint64_t seed, int64_t step, int layer, int64_t row)
{
    return tr_hash64_inline(seed, (uint64_t)step, (uint64_t)layer, (uint64_t)row);
}

/* ... and whether element i of that row is kept (drop probability p). */
static inline TR_HOSTDEV int tr_dropout_keep(uint64_t row_seed, size_t i, float p)
{
    return tr_hash_unit(tr_hash64_inline(row_seed, (uint64_t)i, 0x5D, 0)) >= p;
}

#endif
