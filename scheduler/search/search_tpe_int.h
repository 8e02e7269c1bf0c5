/*
 * search_tpe_int.h — what the tpe searcher (search_tpe.c) takes from TPE's
 * model and proposal step (search_tpe_model.c) beyond search.h's
 * search_tpe_propose. Private to those two files.
 */
#ifndef HF_SEARCH_TPE_INT_H
#define HF_SEARCH_TPE_INT_H

#include "search.h"

/* An observation with the weight of its component in l(x) when it is
 * good (MOTPE: its hypervolume contribution; 0: the age weight). */
typedef struct tpe_wobs { search_tpe_obs o; double w; } tpe_wobs;

/* The size of the good set among N observations: min(ceil(gamma N), 25), at least 1. */
size_t search_tpe_n_good(const search_tpe_opts *o, size_t N);

/* search_tpe_propose with weights: obs[i].w > 0 replaces the age weight of
 * obs[i]'s component in l(x) (all good ones get 1e-12 at least when one
 * has a weight). obs is sorted in place, as search_tpe_propose's. */
json_t *search_tpe_propose_w(const struct search_space *sp, const search_tpe_opts *o, tpe_wobs *obs, size_t N,
                             const json_t *const *liars, size_t nl, uint64_t *rng);

#endif
