/*
 * placement.c — gang placement (see placement.h).
 */
#include "scheduler/core/placement.h"

#include "hf_err.h"

#include <stdlib.h>
#include <string.h>

static int gpus_free(const place_agent *a)
{
    return a->ngpus - __builtin_popcountll(a->gpu_used);
}

int placement_capacity(const place_agent *a, int spw)
{
    if (a->excluded || spw <= 0) return 0;
    int free_slots = a->slots - a->slots_used;
    if (a->ngpus > 0 && gpus_free(a) < free_slots) free_slots = gpus_free(a);
    return free_slots > 0 ? free_slots / spw : 0;
}

static void take(place_agent *a, int idx, int spw, place_rank *r)
{
    r->agent = idx;
    r->ngpu = 0;
    a[idx].slots_used += spw;
    if (a[idx].ngpus > 0) {
        for (int g = 0; g < a[idx].ngpus && r->ngpu < spw; g++) {
            if (a[idx].gpu_used & (1ull << g)) continue;
            a[idx].gpu_used |= 1ull << g;
            r->gpu[r->ngpu++] = a[idx].gpu_index[g];
        }
    }
}

int placement_gang(place_agent *a, int n, int workers, int spw, place_rank *out)
{
    if (workers <= 0 || spw <= 0 || spw > PLACE_MAX_GPUS || n < 0) return HF_EINVAL;
    int total = 0, best = -1, best_cap = 0;
    for (int i = 0; i < n; i++) {
        int c = placement_capacity(&a[i], spw);
        total += c;
        if (c >= workers && (best < 0 || c < best_cap)) { best = i; best_cap = c; }
    }
    if (total < workers) return HF_ENOTFOUND;
    if (best >= 0) {
        for (int r = 0; r < workers; r++) take(a, best, spw, &out[r]);
        return HF_OK;
    }
    /* Span agents, largest free capacity first, fewest agents. */
    int *order = malloc(sizeof *order * (size_t)n);
    if (!order) return HF_ENOMEM;
    for (int i = 0; i < n; i++) order[i] = i;
    for (int i = 1; i < n; i++) {          /* insertion sort: n is small per pass */
        int v = order[i], cv = placement_capacity(&a[v], spw), j = i - 1;
        while (j >= 0 && (placement_capacity(&a[order[j]], spw) < cv ||
                          (placement_capacity(&a[order[j]], spw) == cv && order[j] > v))) {
            order[j + 1] = order[j];
            j--;
        }
        order[j + 1] = v;
    }
    int r = 0;
    for (int k = 0; k < n && r < workers; k++) {
        int c = placement_capacity(&a[order[k]], spw);
        for (int w = 0; w < c && r < workers; w++) take(a, order[k], spw, &out[r++]);
    }
    free(order);
    return HF_OK;
}

int placement_prefer(const place_agent *a, int n, const int *holds, int workers, int spw)
{
    int best = -1, best_cap = 0;
    if (workers <= 0 || spw <= 0) return -1;
    for (int i = 0; i < n; i++) {
        if (!holds[i]) continue;
        int c = placement_capacity(&a[i], spw);
        if (c >= workers && (best < 0 || c < best_cap)) { best = i; best_cap = c; }
    }
    return best;
}

int placement_reserve(const place_agent *a, int n, int workers, int spw, int *reserve)
{
    if (workers <= 0 || spw <= 0 || spw > PLACE_MAX_GPUS || n < 0) return HF_EINVAL;
    int total = 0, best = -1, best_now = -1;
    for (int i = 0; i < n; i++) {
        place_agent idle = a[i];
        idle.slots_used = 0;
        idle.gpu_used = 0;
        int c = placement_capacity(&idle, spw), now = placement_capacity(&a[i], spw);
        reserve[i] = 0;
        total += c;
        if (c >= workers && now > best_now) { best = i; best_now = now; }
    }
    if (total < workers) return HF_ENOTFOUND;
    if (best >= 0) {
        reserve[best] = workers * spw;
        return HF_OK;
    }
    /* Span agents: most free now first, then largest when idle. */
    int left = workers;
    while (left > 0) {
        int pick = -1, pick_now = -1, pick_idle = -1;
        for (int i = 0; i < n; i++) {
            if (reserve[i]) continue;
            place_agent idle = a[i];
            idle.slots_used = 0;
            idle.gpu_used = 0;
            int c = placement_capacity(&idle, spw), now = placement_capacity(&a[i], spw);
            if (c == 0) continue;
            if (now > pick_now || (now == pick_now && c > pick_idle)) { pick = i; pick_now = now; pick_idle = c; }
        }
        if (pick < 0) break;   /* cannot happen: total >= workers */
        int w = pick_idle < left ? pick_idle : left;
        reserve[pick] = w * spw;
        left -= w;
    }
    return HF_OK;
}

void placement_release(place_agent *a, int n, int workers, int spw, const place_rank *out)
{
    for (int r = 0; r < workers; r++) {
        int i = out[r].agent;
        if (i < 0 || i >= n) continue;
        a[i].slots_used -= spw;
        if (a[i].slots_used < 0) a[i].slots_used = 0;
        for (int k = 0; k < out[r].ngpu; k++)
            for (int g = 0; g < a[i].ngpus; g++)
                if (a[i].gpu_index[g] == out[r].gpu[k]) a[i].gpu_used &= ~(1ull << g);
    }
}
