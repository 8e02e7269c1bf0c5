/*
 * data.h — IDX datasets (MNIST / Fashion-MNIST) and a sharded, seeded
 * mini-batch loader.
 *
 * Files are the four IDX files of the Debian dataset packages
 * (train-images-idx3-ubyte.gz, train-labels-idx1-ubyte.gz,
 * t10k-images-idx3-ubyte.gz, t10k-labels-idx1-ubyte.gz), read through zlib
 * so gzip-compressed and plain files both work. Every size in a header is
 * checked against the data actually present; errors name the file and
 * what is wrong (wrong magic, truncated, mismatched counts).
 *
 * Images stay uint8 in memory (47 MB for Fashion-MNIST); batches are
 * converted to normalised floats ((x/255 - mean) / std, mean and std of the
 * training pixels) as they are drawn.
 *
 * The implementation, one job per file: data.c (the IDX format, gzip),
 * data_cache.c (the decoded-file cache), data_set.c (datasets, their
 * views, batches of rows), data_loader.c (the loader).
 *
 * Order: epoch e visits a permutation of the training indices that depends
 * only on (seed, e) — so a resumed run draws exactly the batches the
 * uninterrupted one would. A global batch of G rows is split across world
 * ranks: rank r takes rows [G*r/world, G*(r+1)/world) of every global batch,
 * so p workers together see exactly the single-process batches.
 */
#ifndef TR_DATA_H
#define TR_DATA_H

#include <stddef.h>
#include <stdint.h>

typedef struct tr_dataset {
    int      n;              /* samples */
    int      c, h, w;        /* per sample; IDX3 images give c = 1 */
    uint8_t *images;         /* (n, c*h*w), owned unless view */
    int32_t *labels;         /* (n), owned unless view */
    int      n_classes;      /* max label + 1 (at least 2) */
    int      view;           /* 1: arrays borrowed from another dataset */
    float    mean, std;      /* normalisation (set by tr_data_load) */
    void    *map;            /* images live in this read-only mapping of a cache file (data_cache.c) */
    size_t   map_len;
} tr_dataset;

/* The largest IDX payload read: 2 GiB. */
#define TR_IDX_MAX_BYTES ((size_t)1 << 31)

/* Parse one IDX file held in memory. want_dims 3 (images) or 1 (labels).
 * RET 0 with *data malloc'd (caller frees) and dims[0..want_dims) filled;
 * HF_EPARSE (wrong magic / type / dims) or HF_ECORRUPT (truncated, extra
 * bytes) with err explaining. Bounded: at most 2^31 elements. */
int tr_idx_parse(const uint8_t *buf, size_t len, int want_dims, uint8_t **data, int *dims,
                 char *err, size_t errlen);
/* Validate it only: RET 0 with dims and *hdr (the payload's offset in
 * buf), or as tr_idx_parse. */
int tr_idx_check(const uint8_t *buf, size_t len, int want_dims, int *dims, size_t *hdr, char *err, size_t errlen);

/* Read a whole file, gunzipping when it is gzip (max bytes), through the
 * decoded-file cache (data_cache.c's header comment). RET 0, HF_ENOTFOUND,
 * HF_EIO, HF_ECORRUPT (bad gzip) or HF_ETOOBIG. */
int tr_file_read_gz(const char *path, size_t max, uint8_t **out, size_t *len, char *err, size_t errlen);
/* The same without the cache. */
int tr_file_read_gunzip(const char *path, size_t max, uint8_t **out, size_t *len, char *err, size_t errlen);
/* The cache directory: $HYPERFARM_DATA_CACHE ("" or "off": no cache), else
 * $XDG_CACHE_HOME/hyperfarm/data, else $HOME/.cache/hyperfarm/data.
 * RET 0 with out set, or -1 (no cache). */
int tr_data_cache_dir(char *out, size_t outlen);
/* The cached decoded copy of path (at most max bytes), mapped read-only,
 * if it matches path's gzip trailer. RET 0 with *map (munmap(*map, *len)
 * to free) and *len, or -1 (no usable copy). */
int tr_data_cache_map(const char *path, size_t max, uint8_t **map, size_t *len);

/* Load images + labels into ds (counts must match). RET 0 or an HF_E code
 * with err naming the file. */
int tr_dataset_load(const char *images_path, const char *labels_path, tr_dataset *ds,
                    char *err, size_t errlen);

/* Load dir's train and test sets; sets mean/std on both from train. */
int tr_data_load(const char *dir, tr_dataset *train, tr_dataset *test, char *err, size_t errlen);

/* Views: first n samples (limit) and the split of the last val samples. */
void tr_dataset_head(const tr_dataset *all, int n, tr_dataset *out);
void tr_dataset_split(const tr_dataset *all, int val, tr_dataset *train, tr_dataset *valset);
void tr_dataset_free(tr_dataset *ds);   /* no-op for views */

/* Copy rows idx[0..B) of ds into x (B, c*h*w) normalised, y (B). */
void tr_dataset_gather(const tr_dataset *ds, const int32_t *idx, int B, float *x, int32_t *y);

typedef struct tr_loader {
    const tr_dataset *ds;
    int      global_batch;   /* G */
    int      rank, world;
    uint64_t seed;
    int      shuffle;        /* 0: natural order (evaluation) */
    int      flip, shift;    /* augmentation (training only) */
    int      epoch;          /* current epoch */
    int64_t  batch;          /* next global batch index within the epoch */
    int32_t *perm;           /* (n) order of this epoch, owned */
} tr_loader;

int  tr_loader_init(tr_loader *l, const tr_dataset *ds, int global_batch, int rank, int world,
                    uint64_t seed, int shuffle);
void tr_loader_free(tr_loader *l);
/* Position at (epoch, batch): recomputes the permutation for epoch. */
void tr_loader_seek(tr_loader *l, int epoch, int64_t batch);
/* Global batches per epoch (the last one may be short). */
int64_t tr_loader_batches(const tr_loader *l);
/* Next batch of this rank: x (rows, c*h*w), y (rows); *rows may be 0 for a
 * rank whose share of a short last batch is empty. *row_base gets the global
 * row (within the global batch) of this rank's first row; *gb the global
 * batch size. RET 1 when a batch was produced, 0 at the end of the epoch. */
int  tr_loader_next(tr_loader *l, float *x, int32_t *y, int *rows, int *gb, int64_t *row_base);

#endif
