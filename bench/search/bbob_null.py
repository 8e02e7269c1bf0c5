#!/usr/bin/env python3
"""bbob_null.py — the null comparison for issue 29's goal (docs/search.md,
"How strict is the goal? Optuna against itself"): per problem, the Optuna
TPE sampler with the lower median regret in REF (the better Optuna, as
bbob_table.py picks it) and that sampler's lines from OTHER (the same
problems run on other seeds), relabelled "null-best" and printed. Set
against REF with bbob_table.py, they score what a searcher identical to
the better Optuna would:

  bbob_null.py REF OTHER > null.tsv
  bbob_table.py --ours null-best REF null.tsv

Sequential lines (concurrency 1) only; TPE samplers "tpe" and "tpe-mv";
regrets floored as bbob_table.py floors them (its load()).
"""
import statistics, sys

from bbob_table import load

TPE = ("tpe", "tpe-mv")


def main():
    if len(sys.argv) != 3:
        sys.stderr.write(__doc__)
        return 2
    ref, other = load([sys.argv[1]]), load([sys.argv[2]])
    for case in sorted({c for conc, c, m in ref if conc == 1 and m in TPE}):
        med = {m: statistics.median(ref[(1, case, m)].values()) for m in TPE if ref.get((1, case, m))}
        best = min(med, key=med.get)
        for seed, regret in sorted(other.get((1, case, best), {}).items()):
            print("raw\t%s\tnull-best\t%d\t%.9g\t1" % (case, seed, regret))
    return 0


if __name__ == "__main__":
    sys.exit(main())
