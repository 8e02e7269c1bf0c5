/*
 * sched_check.c — the scheduler core's invariants (sched_int.h,
 * "Invariants") checked as code: sched_check_invariants walks the whole
 * model and HF_ASSERTs each one.
 *
 *   - s->exps, s->trials and s->agents are in strictly increasing id order;
 *   - a trial is in s->live at t->live_idx exactly while t->ranks != NULL,
 *     and s->live holds nothing else;
 *   - while placed, the trial is in the `on` list of each agent holding one
 *     of its ranks, and an agent's `on` lists only placed trials with a
 *     rank there, each once;
 *   - x->counts[st] is the number of x's trials in state st, and every
 *     trial of s->trials is listed in its experiment's trials.
 *
 * The walk is O(records + ranks), so it runs only in abort mode (debug and
 * sanitizer builds, hf_assert.h), at the end of every transaction
 * (sched_txn.c); on a model of more than CHECK_FULL_MAX trials and agents
 * together only every CHECK_EVERY-th transaction is checked, to keep large
 * tests' time. In release builds it returns at once: the cheap checks on
 * the paths themselves (the state machine's table, the lock) still count
 * failures.
 *
 * A layer just above the model (it calls only sched_model.c).
 */
#include "scheduler/core/sched_int.h"

#include "hf_assert.h"

#define CHECK_FULL_MAX 5000
#define CHECK_EVERY    64

static void check_ids(sched *s)
{
    for (size_t i = 1; i < s->nexps; i++) HF_ASSERT(s->exps[i - 1]->id < s->exps[i]->id);
    for (size_t i = 1; i < s->ntrials; i++) HF_ASSERT(s->trials[i - 1]->id < s->trials[i]->id);
    for (size_t i = 1; i < s->nagents; i++) HF_ASSERT(s->agents[i - 1]->id < s->agents[i]->id);
}

/* Is t in a's `on` list exactly once? */
static int on_once(const agent *a, const trial *t)
{
    int n = 0;
    for (size_t k = 0; k < a->non; k++) n += a->on[k] == t;
    return n == 1;
}

static void check_live(sched *s)
{
    size_t placed = 0;
    for (size_t i = 0; i < s->ntrials; i++) {
        trial *t = s->trials[i];
        if (!t->ranks) continue;
        placed++;
        HF_ASSERT(t->live_idx < s->nlive && s->live[t->live_idx] == t);
        for (int r = 0; r < t->nranks; r++) {
            agent *a = t->ranks[r].agent_id ? agent_find(s, t->ranks[r].agent_id) : NULL;
            if (a) HF_ASSERT(on_once(a, t));
        }
    }
    HF_ASSERT(placed == s->nlive);
    for (size_t i = 0; i < s->nagents; i++) {
        const agent *a = s->agents[i];
        for (size_t k = 0; k < a->non; k++) {
            const trial *t = a->on[k];
            int here = 0;
            for (int r = 0; t->ranks && r < t->nranks; r++) here |= t->ranks[r].agent_id == a->id;
            HF_ASSERT(t->ranks != NULL && here);
        }
    }
}

static void check_counts(sched *s)
{
    size_t listed = 0;
    for (size_t i = 0; i < s->nexps; i++) {
        const experiment *x = s->exps[i];
        int64_t n[T__N] = {0};
        for (size_t k = 0; k < x->ntrials; k++) {
            const trial *t = x->trials[k];
            HF_ASSERT(t->exp == x && t->state >= 0 && t->state < T__N);
            if (t->state >= 0 && t->state < T__N) n[t->state]++;
        }
        for (int st = 0; st < T__N; st++) HF_ASSERT(x->counts[st] == n[st]);
        listed += x->ntrials;
    }
    HF_ASSERT(listed == s->ntrials);
}

void sched_check_invariants(sched *s)
{
    static _Thread_local uint64_t calls;
    if (!hf_assert_aborts()) return;
    if (s->ntrials + s->nagents > CHECK_FULL_MAX && calls++ % CHECK_EVERY) return;
    HF_ASSERT(sched_lock_held(s));
    check_ids(s);
    check_live(s);
    check_counts(s);
}
