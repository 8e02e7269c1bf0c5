/*
 * downsample.c — LTTB (see downsample.h). O(n) time, no allocation.
 */
#include "scheduler/api/downsample.h"

#include <math.h>

size_t downsample_lttb(const double *x, const double *y, size_t n, size_t m, size_t *idx)
{
    if (m < 3) m = 3;
    if (n <= m) {
        for (size_t i = 0; i < n; i++) idx[i] = i;
        return n;
    }
    double every = (double)(n - 2) / (double)(m - 2);
    size_t a = 0, k = 0;
    idx[k++] = 0;
    for (size_t i = 0; i < m - 2; i++) {
        /* Average of the next bucket: the third triangle corner. */
        size_t ns = (size_t)floor((double)(i + 1) * every) + 1;
        size_t ne = (size_t)floor((double)(i + 2) * every) + 1;
        if (ne > n) ne = n;
        double ax = 0, ay = 0;
        size_t cnt = ne > ns ? ne - ns : 0;
        for (size_t j = ns; j < ne; j++) { ax += x[j]; ay += y[j]; }
        if (cnt) { ax /= (double)cnt; ay /= (double)cnt; }
        else { ax = x[n - 1]; ay = y[n - 1]; }
        /* This bucket: the point making the largest triangle with a and the average. */
        size_t bs = (size_t)floor((double)i * every) + 1;
        size_t be = (size_t)floor((double)(i + 1) * every) + 1;
        if (be > n - 1) be = n - 1;
        double best = -1;
        size_t pick = bs;
        for (size_t j = bs; j < be; j++) {
            double area = fabs((x[a] - ax) * (y[j] - y[a]) - (x[a] - x[j]) * (ay - y[a]));
            if (area > best) { best = area; pick = j; }
        }
        idx[k++] = pick;
        a = pick;
    }
    idx[k++] = n - 1;
    return k;
}
