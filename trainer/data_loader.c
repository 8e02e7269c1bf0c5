/*
 * data_loader.c — the seeded, sharded mini-batch loader (data.h): epoch e
 * visits a permutation of the training rows that depends only on (seed,
 * e), rank r of world takes its share of every global batch, and the
 * optional augmentation (flips, shifts) is a function of (seed, epoch,
 * row position) — so a resumed run draws exactly what an uninterrupted
 * one would.
 */
#include "data.h"

#include "hf_err.h"
#include "layer.h"

#include <stdlib.h>
#include <string.h>

int tr_loader_init(tr_loader *l, const tr_dataset *ds, int G, int rank, int world, uint64_t seed, int shuffle)
{
    memset(l, 0, sizeof *l);
    if (G <= 0 || world <= 0 || rank < 0 || rank >= world || ds->n <= 0) return HF_EINVAL;
    l->ds = ds;
    l->global_batch = G;
    l->rank = rank;
    l->world = world;
    l->seed = seed;
    l->shuffle = shuffle;
    l->perm = malloc((size_t)ds->n * sizeof(int32_t));
    if (!l->perm) return HF_ENOMEM;
    tr_loader_seek(l, 0, 0);
    return 0;
}

void tr_loader_free(tr_loader *l)
{
    if (!l) return;
    free(l->perm);
    l->perm = NULL;
}

void tr_loader_seek(tr_loader *l, int epoch, int64_t batch)
{
    int n = l->ds->n;
    for (int i = 0; i < n; i++) l->perm[i] = i;
    if (l->shuffle) {
        /* Fisher-Yates from a counter-based stream: depends on (seed, epoch) only */
        for (int i = n - 1; i > 0; i--) {
            uint64_t h = tr_hash64(l->seed, 0xDA7A, (uint64_t)epoch, (uint64_t)i);
            int j = (int)(h % (uint64_t)(i + 1));
            int32_t t = l->perm[i];
            l->perm[i] = l->perm[j];
            l->perm[j] = t;
        }
    }
    l->epoch = epoch;
    l->batch = batch;
}

int64_t tr_loader_batches(const tr_loader *l)
{
    return ((int64_t)l->ds->n + l->global_batch - 1) / l->global_batch;
}

static void augment_row(const tr_loader *l, float *x, int64_t pos)
{
    const tr_dataset *ds = l->ds;
    int H = ds->h, W = ds->w;
    uint64_t h = tr_hash64(l->seed, 0xA06, (uint64_t)l->epoch, (uint64_t)pos);
    int flip = l->flip && (h & 1);
    int dy = 0, dx = 0;
    if (l->shift > 0) {
        int span = 2 * l->shift + 1;
        dy = (int)((h >> 8) % (uint64_t)span) - l->shift;
        dx = (int)((h >> 24) % (uint64_t)span) - l->shift;
    }
    if (!flip && !dy && !dx) return;
    float bg = -ds->mean / ds->std, tmp[64 * 64];
    if ((size_t)H * W > sizeof tmp / sizeof tmp[0]) return;
    for (int c = 0; c < ds->c; c++) {
        float *p = x + (size_t)c * H * W;
        memcpy(tmp, p, (size_t)H * W * sizeof(float));
        for (int yy = 0; yy < H; yy++)
            for (int xx = 0; xx < W; xx++) {
                int sy = yy - dy, sx = xx - dx;
                if (flip) sx = W - 1 - sx;
                p[yy * W + xx] = (sy >= 0 && sy < H && sx >= 0 && sx < W) ? tmp[sy * W + sx] : bg;
            }
    }
}

int tr_loader_next(tr_loader *l, float *x, int32_t *y, int *rows, int *gb, int64_t *row_base)
{
    int64_t nb = tr_loader_batches(l);
    if (l->batch >= nb) return 0;
    int64_t start = l->batch * l->global_batch, end = start + l->global_batch;
    if (end > l->ds->n) end = l->ds->n;
    int g = (int)(end - start);
    int lo = (int)((int64_t)g * l->rank / l->world), hi = (int)((int64_t)g * (l->rank + 1) / l->world);
    tr_dataset_gather(l->ds, l->perm + start + lo, hi - lo, x, y);
    if (l->flip || l->shift) {
        size_t per = (size_t)l->ds->c * l->ds->h * l->ds->w;
        for (int r = 0; r < hi - lo; r++) augment_row(l, x + (size_t)r * per, start + lo + r);
    }
    *rows = hi - lo;
    if (gb) *gb = g;
    if (row_base) *row_base = lo;
    l->batch++;
    return 1;
}
