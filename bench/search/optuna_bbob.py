#!/usr/bin/env python3
"""optuna_bbob.py — the peer on the held-out benchmark (docs/search.md,
"Held-out benchmark: BBOB"): Optuna 3.1's samplers on the problems of
bench/search/bbob.c, evaluated by the same C code (bbob_lib.py), with the
budgets, seeds and in-flight driving of bench/search_bbob. Prints the same
raw lines as bench/search_bbob:

  "raw<TAB>case<TAB>sampler<TAB>seed<TAB>regret<TAB>concurrency"

  optuna_bbob.py [--half heldout|tune|all] [--case NAME[,NAME]] [--seeds 20]
                 [--first-seed 0] [--concurrency 1]
                 [--sampler random|tpe|tpe-mv|tpe-cl|tpe-mv-cl]

Samplers: random = RandomSampler(seed); tpe = TPESampler(seed) (the
default: univariate, 10 startup trials, gamma 0.1, 24 candidates); tpe-mv =
TPESampler(seed, multivariate=True); tpe-cl / tpe-mv-cl add
constant_liar=True (meant for trials in flight). With --concurrency C > 1
the study is driven by ask/tell: C trials asked before any is told, then
one new ask per tell, the oldest in flight told first (as
optuna_synthetic.py and bench/search_bbob do).
"""
import argparse, math, os, sys, warnings

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bbob_lib  # noqa: E402
import optuna  # noqa: E402

optuna.logging.set_verbosity(optuna.logging.WARNING)
warnings.filterwarnings("ignore")

SAMPLERS = {
    "random": lambda s: optuna.samplers.RandomSampler(seed=s),
    "tpe": lambda s: optuna.samplers.TPESampler(seed=s),
    "tpe-mv": lambda s: optuna.samplers.TPESampler(seed=s, multivariate=True, warn_independent_sampling=False),
    "tpe-cl": lambda s: optuna.samplers.TPESampler(seed=s, constant_liar=True),
    "tpe-mv-cl": lambda s: optuna.samplers.TPESampler(seed=s, multivariate=True, constant_liar=True,
                                                      warn_independent_sampling=False),
}


def suggest(trial, case):
    """The trial's values for case's space, parameters in order, a
    conditional one only when its parent has one of its values."""
    got = {}
    for name, p in case.space.items():
        cond = p.get("condition")
        if cond and got.get(cond["param"]) not in cond["values"]:
            continue
        t = p["type"]
        if t == "uniform":
            got[name] = trial.suggest_float(name, p["min"], p["max"])
        elif t == "log":
            got[name] = trial.suggest_float(name, p["min"], p["max"], log=True)
        elif t == "int":
            got[name] = trial.suggest_int(name, p["min"], p["max"], log=bool(p.get("log")))
        elif t == "categorical":
            got[name] = trial.suggest_categorical(name, p["values"])
        else:
            raise ValueError("%s: type %s" % (name, t))
    return got


def best_regret(case, sampler, conc):
    study = optuna.create_study(sampler=sampler)
    f = lambda t: case.regret(suggest(t, case))  # noqa: E731
    if conc == 1:
        study.optimize(f, n_trials=case.budget)
        return study.best_value
    flight, asked = [], 0
    while asked < case.budget or flight:
        while len(flight) < conc and asked < case.budget:
            t = study.ask(); flight.append((t, f(t))); asked += 1
        t, y = flight.pop(0)
        study.tell(t, y)
    return study.best_value


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--half", default="heldout", choices=["heldout", "tune", "all"])
    ap.add_argument("--case", default=None)
    ap.add_argument("--seeds", type=int, default=20)
    ap.add_argument("--first-seed", type=int, default=0)
    ap.add_argument("--concurrency", type=int, default=1)
    ap.add_argument("--sampler", default="tpe", choices=sorted(SAMPLERS))
    a = ap.parse_args()
    names = set(a.case.split(",")) if a.case else None
    cs = bbob_lib.cases(a.half, names)
    if not cs:
        ap.error("no case matches")
    for c in cs:
        for s in range(a.first_seed, a.first_seed + a.seeds):
            r = best_regret(c, SAMPLERS[a.sampler](s), a.concurrency)
            print("raw\t%s\t%s\t%d\t%.9g\t%d" % (c.name, a.sampler, s, r, a.concurrency), flush=True)


if __name__ == "__main__":
    main()
