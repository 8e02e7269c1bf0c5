/*
 * ckpt.h — checkpoints: everything needed to continue a run bit for bit.
 *
 * Contents: the model's parameters and buffers, the optimizer's state and
 * step count, the data position (epoch, next batch, global step), the
 * running train-loss sums of the current epoch, and a 4-word RNG state.
 * Masks and augmentations are counter-based (layer.h), so they need no
 * state of their own.
 *
 * File format (little-endian, see ckpt.c): "HFCKPT01", a fixed header with
 * the counts and the model's arch hash, the float arrays, then a CRC-32 of
 * every preceding byte and "HFCKEND\n". A file whose size, magic, counts or
 * checksum disagree is corrupt and is never loaded.
 *
 * Files are dir/ckpt-<step, 12 digits>.hfck, written atomically: a
 * temporary file in dir, fsync, rename, fsync of dir. The newest
 * keep_checkpoints files are kept.
 */
#ifndef TR_CKPT_H
#define TR_CKPT_H

#include <stddef.h>
#include <stdint.h>

typedef struct tr_ckpt {
    uint64_t arch_hash;
    int64_t  epoch;          /* epoch in progress (or next to start when batch == 0) */
    int64_t  batch;          /* next global batch index in that epoch */
    int64_t  step;           /* global steps done */
    double   loss_sum;       /* train loss summed over the epoch's batches so far */
    int64_t  loss_count;
    int64_t  correct;        /* train hits so far this epoch */
    int64_t  seen;           /* train samples so far this epoch */
    uint64_t rng[4];
    int64_t  optim_t;
    size_t   n_params, n_bufs, n_state;
    float   *params, *bufs, *state;  /* owned when decoded, borrowed when encoding */
    int      owned;
} tr_ckpt;

/* Serialise c. RET 0 with *buf malloc'd (caller frees) or HF_ENOMEM. */
int  tr_ckpt_encode(const tr_ckpt *c, uint8_t **buf, size_t *len);
/* Parse len bytes. RET 0 (c owns its arrays: tr_ckpt_clear), HF_ECORRUPT
 * or HF_EPARSE with err saying why. Never trusts a count from the file
 * beyond len. */
int  tr_ckpt_decode(const uint8_t *buf, size_t len, tr_ckpt *c, char *err, size_t errlen);
void tr_ckpt_clear(tr_ckpt *c);

/* Atomically write c as dir/ckpt-<step>.hfck (dir is created if needed);
 * path (may be NULL) receives the final name. Prunes to keep newest files. */
int  tr_ckpt_write(const char *dir, const tr_ckpt *c, int keep, char *path, size_t pathlen,
                   char *err, size_t errlen);
int  tr_ckpt_read(const char *path, tr_ckpt *c, char *err, size_t errlen);

/* The trainer's save: tr_ckpt_write into dir keeping keep files, and the
 * outcome logged ("checkpoint PATH (epoch, batch, step)" or the error).
 * RET as tr_ckpt_write; HF_ENOTFOUND when dir is "" (checkpoints off). */
int  tr_ckpt_save(const char *dir, int keep, const tr_ckpt *c, char *path, size_t pathlen);

/* Load the newest checkpoint in dir that decodes and whose arch_hash and
 * counts match; corrupt or mismatched files are skipped with a warning.
 * RET 0 (c filled, path set), HF_ENOTFOUND (none usable). */
int  tr_ckpt_load_latest(const char *dir, uint64_t arch_hash, size_t n_params, size_t n_bufs,
                         size_t n_state, tr_ckpt *c, char *path, size_t pathlen);

#endif
