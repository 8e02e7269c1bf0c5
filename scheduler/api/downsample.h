/*
 * downsample.h — Largest-Triangle-Three-Buckets (Steinarsson 2013): pick m
 * of n points of a series so its chart keeps its shape (peaks and dips
 * survive, unlike plain striding). Used for ?max_points= on metric
 * queries, so a million-point curve reaches the browser as a few thousand.
 */
#ifndef HF_DOWNSAMPLE_H
#define HF_DOWNSAMPLE_H

#include <stddef.h>

/* x must be non-decreasing. Writes the chosen indices (ascending, first
 * and last always included) to idx[0..m) and returns their count:
 * n when n <= m (all points), else m. m < 3 is treated as 3. */
size_t downsample_lttb(const double *x, const double *y, size_t n, size_t m, size_t *idx);

#endif
