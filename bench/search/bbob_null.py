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

Sequential lines (concurrency 1) only; TPE samplers "tpe" and "tpe-mv".
"""
import collections, statistics, sys


def load(fn):
    d = collections.defaultdict(list)
    for line in open(fn):
        f = line.rstrip("\n").split("\t")
        if len(f) == 6 and f[0] == "raw" and f[2] in ("tpe", "tpe-mv") and f[5] == "1":
            d[(f[1], f[2])].append(f)
    return d


def main():
    if len(sys.argv) != 3:
        sys.stderr.write(__doc__)
        return 2
    ref, other = load(sys.argv[1]), load(sys.argv[2])
    for case in sorted({c for c, _ in ref}):
        med = {m: statistics.median(float(f[4]) for f in ref[(case, m)]) for m in ("tpe", "tpe-mv") if ref.get((case, m))}
        best = min(med, key=med.get)
        for f in other.get((case, best), []):
            print("\t".join(f[:2] + ["null-best"] + f[3:]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
