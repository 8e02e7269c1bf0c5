#!/usr/bin/env python3
"""bbob_table.py — the held-out benchmark's table (docs/search.md,
"Held-out benchmark: BBOB") from the raw lines that bench/search_bbob and
optuna_bbob.py print ("raw case method seed regret concurrency"), read
from the files named (bench/search/bbob.sh collects them).

For each concurrency and each problem: the median regret over seeds of
ours (--ours, default "ours-tpe") and of each Optuna TPE sampler run, the
better Optuna (the lowest median of its TPE samplers on that problem),
ratio = ours / better Optuna (below 1: we are ahead), and seed by seed
(paired: the same seed is the same luck for neither side, but the same
problem instance and budget) the geometric mean of ours/Optuna with a
bootstrap 90 % interval and the seeds we are better on. Regrets are
floored at 1e-8 (BBOB's final target) before any ratio. Then the
geometric mean of the ratios over problems, per function id, and the
goal of issue 29, geometric mean <= 0.90 and no function worse than
1.10x, read two ways: no problem above 1.10, and no function id above
1.10 (each the geometric mean of its dimensions and instances).
Since one problem's median ratio at 20 seeds is as noisy as that bound
(docs/search.md: Optuna's better TPE against itself with other seeds
puts a third of the problems above 1.10), the function ids come with a
bootstrap 90 % interval over seeds (every problem's seeds drawn
again, paired, the better Optuna chosen again each time) and those whose
interval lies wholly above 1.10, and the problems we trail beyond luck
(paired interval wholly above 1).

  bbob_table.py [--ours ours-tpe] FILE...
"""
import argparse, collections, math, random, statistics, sys

FLOOR = 1e-8
PEERS = ("tpe", "tpe-mv", "tpe-cl", "tpe-mv-cl")


def gmean(xs):
    return math.exp(statistics.fmean(math.log(x) for x in xs)) if xs else float("nan")


def interval90(means):
    """The 90 % interval of bootstrap replicates of a mean of logs."""
    b, n = sorted(means), len(means)
    return math.exp(b[int(0.05 * n)]), math.exp(b[int(0.95 * n) - 1])


def boot_interval(logs, rng, n=2000):
    return interval90([statistics.fmean(rng.choices(logs, k=len(logs))) for _ in range(n)])


def fid_of(c):
    return c.split("-")[1] if c.startswith(("mix", "cond")) else c.split("-")[0]


def fid_intervals(res, conc, cases, ours, rng, n=1000):
    """Per function id: the geometric mean of its problems' ratios when
    every problem's seeds are drawn again with replacement (the same
    draw for ours and every Optuna sampler: paired), n times; 90 %
    interval of those. Where ours and the Optuna samplers share fewer
    than 2 seeds (ours run on other seeds, as when a sampler is set
    against itself), each side's own seeds are drawn independently
    (unpaired); the second value returned says whether any problem was."""
    prob, unpaired = [], False
    for c in cases:
        peers = [res[(conc, c, m)] for m in PEERS if res.get((conc, c, m))]
        seeds = sorted(set(res[(conc, c, ours)]).intersection(*[set(p) for p in peers]))
        unpaired |= len(seeds) < 2
        prob.append((fid_of(c), seeds, res[(conc, c, ours)], peers))

    def med(d, draw):   # draw None: unpaired, d's own seeds drawn
        return statistics.median(d[s] for s in draw) if draw is not None else \
            statistics.median(rng.choices(list(d.values()), k=len(d)))

    reps = collections.defaultdict(list)
    for _ in range(n):
        logs = collections.defaultdict(list)
        for fid, seeds, o, peers in prob:
            draw = rng.choices(seeds, k=len(seeds)) if len(seeds) >= 2 else None
            best = min(med(p, draw) for p in peers)
            logs[fid].append(math.log(med(o, draw) / best))
        for fid, v in logs.items():
            reps[fid].append(statistics.fmean(v))
    return {fid: interval90(reps[fid]) for fid in sorted(reps)}, unpaired


def load(files):
    """The raw lines of files: (concurrency, case, method) -> {seed: regret
    floored at FLOOR} (bbob_null.py reads them the same way)."""
    res = collections.defaultdict(dict)
    for fn in files:
        for line in open(fn):
            f = line.rstrip("\n").split("\t")
            if len(f) == 6 and f[0] == "raw":
                res[(int(f[5]), f[1], f[2])][int(f[3])] = max(float(f[4]), FLOOR)
    return res


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ours", default="ours-tpe")
    ap.add_argument("files", nargs="+")
    a = ap.parse_args()
    res = load(a.files)
    rng = random.Random(1)
    for conc in sorted({k[0] for k in res}):
        cases = sorted({k[1] for k in res if k[0] == conc})
        print("== %d in flight: median regret (floor %g); ratio = ours (%s) / better Optuna TPE" % (conc, FLOOR, a.ours))
        print("%-18s %5s | %10s %10s %10s %10s %10s | %10s %7s | %-24s" % (
            "problem", "seeds", "opt random", "opt tpe", "opt tpe-mv", "opt mv-cl", "ours", "ours uv", "ratio",
            "paired ours/opt [90%]"))
        ratios, kept, by_fid, missing, behind = [], [], collections.defaultdict(list), 0, []
        for c in cases:
            med = {m: statistics.median(res[(conc, c, m)].values()) for m in ("random",) + PEERS + (a.ours, "ours-tpe-univariate")
                   if res.get((conc, c, m))}
            opt = {m: med[m] for m in PEERS if m in med}
            src = {m: res[(conc, c, m)] for m in PEERS if m in med}
            if a.ours not in med or not opt:
                missing += 1
                continue
            peer = min(opt, key=opt.get)
            ratio = med[a.ours] / opt[peer]
            ratios.append(ratio)
            kept.append(c)
            by_fid[fid_of(c)].append(ratio)
            ours = res[(conc, c, a.ours)]
            seeds = sorted(set(ours) & set(src[peer]))
            logs = [math.log(ours[s] / src[peer][s]) for s in seeds]
            lo, hi = boot_interval(logs, rng) if len(logs) > 1 else (float("nan"), float("nan"))
            if lo > 1:
                behind.append("%s %.2f [%.2f-%.2f]" % (c, math.exp(statistics.fmean(logs)), lo, hi))
            print("%-18s %5d | %10.4g %10.4g %10.4g %10.4g %10.4g | %10.4g %7.2f | %.2f [%.2f-%.2f] %d/%d better (vs %s)" % (
                c, len(seeds), med.get("random", math.nan), med.get("tpe", med.get("tpe-cl", math.nan)),
                med.get("tpe-mv", math.nan), med.get("tpe-mv-cl", math.nan), med[a.ours],
                med.get("ours-tpe-univariate", math.nan), ratio, math.exp(statistics.fmean(logs)) if logs else math.nan,
                lo, hi, sum(x < 0 for x in logs), len(logs), peer))
        print("-- per function id (geometric mean of its problems' ratios):")
        fid_g = {k: gmean(v) for k, v in sorted(by_fid.items())}
        print("   " + "  ".join("%s %.2f" % kv for kv in fid_g.items()))
        over = ["%s %.2f" % (k, g) for k, g in fid_g.items() if g > 1.10]
        print("-- function ids above 1.10: %d of %d%s" % (len(over), len(fid_g), (": " + ", ".join(over)) if over else ""))
        fid_iv, unpaired = fid_intervals(res, conc, kept, a.ours, random.Random(2))   # its own stream
        print("-- per function id, bootstrap 90 %% interval over seeds (every problem's seeds resampled, the better "
              "Optuna chosen again each time%s):" % ("; unpaired where ours ran on other seeds" if unpaired else ""))
        print("   " + "  ".join("%s %.2f [%.2f-%.2f]" % (k, fid_g[k], lo, hi) for k, (lo, hi) in fid_iv.items()))
        above = [k for k, (lo, hi) in fid_iv.items() if lo > 1.10]
        print("-- function ids above 1.10 beyond luck (interval wholly above 1.10): %d%s" % (
            len(above), (": " + ", ".join(above)) if above else ""))
        print("-- problems behind beyond luck (paired 90 %% interval above 1): %d%s" % (
            len(behind), (": " + "; ".join(behind)) if behind else ""))
        groups = collections.defaultdict(list)     # by kind and by dimension
        for c, r in zip(kept, ratios):
            groups[c.split("-")[0] if c.startswith(("mix", "cond")) else "pure"].append(r)
            groups["d" + c.split("-d")[1].split("-")[0]].append(r)
        print("-- by kind and dimension: " + "  ".join("%s %.2f (%d)" % (k, gmean(v), len(v))
                                                      for k, v in sorted(groups.items())))
        if len(ratios) > 1:
            lo, hi = boot_interval([math.log(r) for r in ratios], rng)
            print("-- geometric mean over problems, bootstrap 90 %% interval over problems: %.3f-%.3f" % (lo, hi))
        g = gmean(ratios)
        worst = max(ratios) if ratios else float("nan")
        print("-- %d problems (%d without both sides); geometric mean of ratios %.3f; worse than 1.10x on %d; "
              "worst %.2f; goal (<= 0.90, none > 1.10) by problem: %s, by function id: %s" % (
                  len(ratios), missing, g, sum(r > 1.10 for r in ratios), worst,
                  "met" if ratios and g <= 0.90 and worst <= 1.10 else "NOT met",
                  "met" if ratios and g <= 0.90 and not over else "NOT met"))
        print()


if __name__ == "__main__":
    sys.exit(main())
