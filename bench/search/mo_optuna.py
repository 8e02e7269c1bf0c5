#!/usr/bin/env python3
"""The peer for bench/search_mo: Optuna's NSGAIISampler (default settings:
population 50, uniform crossover), TPESampler with several objectives
(MOTPE, default settings) and TPESampler(multivariate=True) on ZDT1, ZDT2
(30 dimensions) and DTLZ2 (3 objectives, 12 dimensions), the same budget
of trials and seeds 0..S-1, sequential. The figure is the hypervolume of
all trials' objective vectors against the same reference point as ours
(ZDT: (11, 11); DTLZ2: (2.5, 2.5, 2.5)), computed here exactly (sweep in
2-D, slicing in 3-D, as scheduler/search/search_mo.c). With --ours BIN it also
runs our bench/search_mo --tsv and prints ours beside Optuna's with the
ratio ours / Optuna's best (>= 1: we are at least as good).

  mo_optuna.py [--seeds 10] [--trials 200] [--fn NAME[,NAME...]] [--ours bin/bench/search_mo]
"""
import argparse, math, statistics, subprocess, sys, warnings
import optuna

optuna.logging.set_verbosity(optuna.logging.WARNING)
warnings.filterwarnings("ignore")


def zdt_g(x):
    return 1 + 9 * sum(x[1:]) / (len(x) - 1)


def zdt1(x):
    g = zdt_g(x)
    return [x[0], g * (1 - math.sqrt(x[0] / g))]


def zdt2(x):
    g = zdt_g(x)
    return [x[0], g * (1 - (x[0] / g) ** 2)]


def dtlz2(x):
    g = sum((v - 0.5) ** 2 for v in x[2:])
    a, b = x[0] * math.pi / 2, x[1] * math.pi / 2
    return [(1 + g) * math.cos(a) * math.cos(b), (1 + g) * math.cos(a) * math.sin(b), (1 + g) * math.sin(a)]


PROBLEMS = {"zdt1": (30, 2, [11, 11], zdt1), "zdt2": (30, 2, [11, 11], zdt2),
            "dtlz2": (12, 3, [2.5, 2.5, 2.5], dtlz2)}


def hv(points, ref):
    """Exact hypervolume (minimisation) of points inside the box below ref."""
    pts = [p for p in points if all(a < r for a, r in zip(p, ref))]
    m = len(ref)
    if not pts:
        return 0.0
    if m == 1:
        return ref[0] - min(p[0] for p in pts)
    pts.sort(key=lambda p: p[-1])
    if m == 2:
        vol, bx = 0.0, ref[0]
        for i, p in enumerate(pts):
            ny = pts[i + 1][1] if i + 1 < len(pts) else ref[1]
            bx = min(bx, p[0])
            vol += (ref[0] - bx) * (ny - p[1])
        return vol
    vol = 0.0
    for i, p in enumerate(pts):
        z1 = pts[i + 1][-1] if i + 1 < len(pts) else ref[-1]
        if z1 > p[-1]:
            vol += hv([q[:-1] for q in pts[:i + 1]], ref[:-1]) * (z1 - p[-1])
    return vol


SAMPLERS = {
    "nsga2": lambda s: optuna.samplers.NSGAIISampler(seed=s),
    "motpe": lambda s: optuna.samplers.TPESampler(seed=s),
    "motpe-mv": lambda s: optuna.samplers.TPESampler(seed=s, multivariate=True),
}


def run(problem, sampler, seed, trials):
    dim, nobj, ref, f = PROBLEMS[problem]
    study = optuna.create_study(directions=["minimize"] * nobj, sampler=SAMPLERS[sampler](seed))
    study.optimize(lambda t: f([t.suggest_float("x%d" % j, 0, 1) for j in range(dim)]), n_trials=trials)
    return hv([t.values for t in study.trials if t.values], ref)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", type=int, default=10)
    ap.add_argument("--trials", type=int, default=200)
    ap.add_argument("--fn", default="zdt1,zdt2,dtlz2")
    ap.add_argument("--ours", default=None)
    ap.add_argument("--samplers", default=",".join(SAMPLERS),
                    help="Optuna's samplers to run (default all: %s)" % ",".join(SAMPLERS))
    a = ap.parse_args()
    names = a.fn.split(",")
    ours = {}
    if a.ours:
        for name in names:
            out = subprocess.run([a.ours, "--seeds", str(a.seeds), "--trials", str(a.trials), "--fn", name, "--tsv"],
                                 capture_output=True, text=True).stdout
            for line in out.splitlines():
                p, m, _, _, v = line.split("\t")
                ours[(p, m)] = float(v)
    cols = [c for c in a.samplers.split(",") if c in SAMPLERS]
    print("median hypervolume over %d seeds, %d trials, sequential (higher is better)" % (a.seeds, a.trials))
    hdr = "%-6s | " % "problem" + " ".join("%10s" % ("optuna " + c if len(c) < 4 else c) for c in cols)
    if a.ours:
        hdr += " | %10s %10s | %s" % ("our random", "our tpe", "ours / Optuna's best")
    print(hdr)
    worse = 0
    for name in names:
        med = {}
        for c in cols:
            hvs = []
            for s in range(a.seeds):
                hvs.append(run(name, c, s, a.trials))
                print("  %s %s seed %d: %.4f" % (name, c, s, hvs[-1]), file=sys.stderr, flush=True)
            med[c] = statistics.median(hvs)
        line = "%-7s | " % name + " ".join("%10.4f" % med[c] for c in cols)
        if a.ours:
            best = max(med.values())
            mine = ours.get((name, "tpe"), float("nan"))
            line += " | %10.4f %10.4f | %.3f" % (ours.get((name, "random"), float("nan")), mine, mine / best)
            worse += mine < best
        print(line, flush=True)
    return 1 if worse else 0


if __name__ == "__main__":
    sys.exit(main())
