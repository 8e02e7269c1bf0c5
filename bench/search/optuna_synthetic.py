#!/usr/bin/env python3
"""The peer for bench/search_synthetic: Optuna's RandomSampler, TPESampler
(default settings) and TPESampler(multivariate=True) on the same functions,
search spaces, budgets and seeds 0..S-1, sequential. Prints the median
regret (best found - known minimum) of each; with --ours BIN it also runs
our bench/search_synthetic (--tsv) and prints ours beside Optuna's with the
ratio ours/Optuna (below 1: we are ahead).

  optuna_synthetic.py [--seeds 20] [--first-seed 0] [--fn NAME[,NAME...]]
                      [--concurrency 1] [--samplers random,tpe,tpe-mv]
                      [--per-seed] [--ours bin/bench/search_synthetic]

--first-seed F runs seeds F..F+S-1 (medians over more seeds than one run
has time for, in pieces); --per-seed also prints each run's regret as
"raw<TAB>function<TAB>sampler<TAB>seed<TAB>regret", as search_synthetic
--per-seed does for ours.
"""
import argparse, math, statistics, subprocess, sys, warnings
import optuna

optuna.logging.set_verbosity(optuna.logging.WARNING)
warnings.filterwarnings("ignore")


def vec(t, d, lo, hi):
    return [t.suggest_float("x%d" % (j + 1), lo, hi) for j in range(d)]


def branin(t):
    x1 = t.suggest_float("x1", -5, 10); x2 = t.suggest_float("x2", 0, 15)
    b, c, tt = 5.1 / (4 * math.pi ** 2), 5 / math.pi, 1 / (8 * math.pi)
    return (x2 - b * x1 * x1 + c * x1 - 6) ** 2 + 10 * (1 - tt) * math.cos(x1) + 10


def hartmann(x, A, P):
    AL = [1.0, 1.2, 3.0, 3.2]
    return -sum(AL[i] * math.exp(-sum(A[i][j] * (x[j] - P[i][j]) ** 2 for j in range(len(x)))) for i in range(4))


A3 = [[3, 10, 30], [0.1, 10, 35], [3, 10, 30], [0.1, 10, 35]]
P3 = [[0.3689, 0.1170, 0.2673], [0.4699, 0.4387, 0.7470], [0.1091, 0.8732, 0.5547], [0.0381, 0.5743, 0.8828]]
A6 = [[10, 3, 17, 3.5, 1.7, 8], [0.05, 10, 17, 0.1, 8, 14], [3, 3.5, 1.7, 10, 17, 8], [17, 8, 0.05, 10, 0.1, 14]]
P6 = [[0.1312, 0.1696, 0.5569, 0.0124, 0.8283, 0.5886], [0.2329, 0.4135, 0.8307, 0.3736, 0.1004, 0.9991],
      [0.2348, 0.1451, 0.3522, 0.2883, 0.3047, 0.6650], [0.4047, 0.8828, 0.8732, 0.5743, 0.1091, 0.0381]]


def hartmann3(t): return hartmann(vec(t, 3, 0, 1), A3, P3)
def hartmann6(t): return hartmann(vec(t, 6, 0, 1), A6, P6)


def rosenbrock5(t):
    x = vec(t, 5, -5, 10)
    return sum(100 * (x[j + 1] - x[j] ** 2) ** 2 + (1 - x[j]) ** 2 for j in range(4))


def ackley5(t):
    x = vec(t, 5, -32.768, 32.768)
    return (-20 * math.exp(-0.2 * math.sqrt(sum(v * v for v in x) / 5))
            - math.exp(sum(math.cos(2 * math.pi * v) for v in x) / 5) + 20 + math.e)


def levy6(t):
    w = [1 + (v - 1) / 4 for v in vec(t, 6, -10, 10)]
    s = math.sin(math.pi * w[0]) ** 2
    s += sum((w[j] - 1) ** 2 * (1 + 10 * math.sin(math.pi * w[j] + 1) ** 2) for j in range(5))
    return s + (w[5] - 1) ** 2 * (1 + math.sin(2 * math.pi * w[5]) ** 2)


def styblinski4(t):
    return sum(v ** 4 - 16 * v * v + 5 * v for v in vec(t, 4, -5, 5)) / 2


def int_sphere6(t):
    c = [3, -7, 1, 8, -2, 5]
    return sum((t.suggest_int("x%d" % (j + 1), -10, 10) - c[j]) ** 2 for j in range(6))


def cat_hartmann3(t):
    o1 = dict(zip("abcde", [0.8, 0.3, 0.0, 1.2, 0.5])); o2 = dict(zip("abcde", [0.4, 1.0, 0.7, 0.0, 0.2]))
    x = vec(t, 3, 0, 1)
    c1 = t.suggest_categorical("c1", list("abcde")); c2 = t.suggest_categorical("c2", list("abcde"))
    return hartmann(x, A3, P3) + o1[c1] + o2[c2]


def log_bowl4(t):
    lr = t.suggest_float("lr", 1e-5, 1, log=True); wd = t.suggest_float("wd", 1e-6, 0.1, log=True)
    batch = t.suggest_int("batch", 16, 1024, log=True); mom = t.suggest_float("mom", 0, 1)
    return ((math.log10(lr) + 2.5) ** 2 + 0.5 * (math.log10(wd) + 4) ** 2 + 0.25 * (math.log2(batch) - 7) ** 2
            + 4 * (mom - 0.9) ** 2)


def cond_opt(t):
    opt = t.suggest_categorical("opt", ["sgd", "adam"])
    lr = math.log10(t.suggest_float("lr", 1e-5, 1, log=True)); x = t.suggest_float("x", 0, 1)
    s = 2 * (x - 0.3) ** 2
    if opt == "sgd":
        return s + 0.3 + (lr + 1.5) ** 2 + 4 * (t.suggest_float("mom", 0, 1) - 0.95) ** 2
    return s + (lr + 3) ** 2 + 8 * (t.suggest_float("beta1", 0.5, 0.999) - 0.9) ** 2


# name, objective, budget, known minimum (the same as bench/search_synthetic.c)
FNS = [("branin", branin, 50, 0.397887), ("hartmann3", hartmann3, 50, -3.86278),
       ("hartmann6", hartmann6, 100, -3.32237), ("rosenbrock5", rosenbrock5, 100, 0.0),
       ("ackley5", ackley5, 100, 0.0), ("levy6", levy6, 100, 0.0), ("styblinski4", styblinski4, 100, -39.16617 * 4),
       ("int_sphere6", int_sphere6, 100, 0.0), ("cat_hartmann3", cat_hartmann3, 100, -3.86278),
       ("log_bowl4", log_bowl4, 100, 0.0), ("cond_opt", cond_opt, 100, 0.0)]
SAMPLERS = [("random", lambda s, cl: optuna.samplers.RandomSampler(seed=s)),
            ("tpe", lambda s, cl: optuna.samplers.TPESampler(seed=s, constant_liar=cl)),
            ("tpe-mv", lambda s, cl: optuna.samplers.TPESampler(seed=s, multivariate=True, constant_liar=cl,
                                                                warn_independent_sampling=False))]


def best_of(study, f, n, conc):
    """n trials, conc in flight, driven as bench/search_synthetic drives
    ours: a trial's parameters are chosen when it is asked for, its value
    told when it finishes, the oldest in flight first."""
    if conc == 1:
        study.optimize(f, n_trials=n)
        return study.best_value
    flight, asked = [], 0
    while asked < n or flight:
        while len(flight) < conc and asked < n:
            t = study.ask(); flight.append((t, f(t))); asked += 1
        t, y = flight.pop(0)
        study.tell(t, y)
    return study.best_value

ap = argparse.ArgumentParser()
ap.add_argument("--seeds", type=int, default=20)
ap.add_argument("--fn", default="all")
ap.add_argument("--first-seed", type=int, default=0)
ap.add_argument("--samplers", default="random,tpe,tpe-mv")
ap.add_argument("--per-seed", action="store_true")
ap.add_argument("--concurrency", type=int, default=1, help="trials in flight (TPE then uses constant_liar)")
ap.add_argument("--ours", default=None, help="path of bin/bench/search_synthetic: print ours beside Optuna's")
a = ap.parse_args()
if a.ours and a.first_seed:
    ap.error("--ours runs our seeds 0..S-1: use it without --first-seed (search_synthetic --per-seed for others)")
want = None if a.fn == "all" else set(a.fn.split(","))
ours = {}
if a.ours:
    out = subprocess.run([a.ours, "--seeds", str(a.seeds), "--concurrency", str(a.concurrency), "--tsv"], capture_output=True, text=True).stdout
    for line in out.splitlines():
        f = line.split("\t")
        ours[(f[0], f[1])] = float(f[4])
print("median regret over %d seeds, %d in flight; ratio = ours tpe / Optuna's best TPE (<= 1: we are at least as good)"
      % (a.seeds, a.concurrency))
print("%-14s %6s | %10s %10s %10s | %10s %10s %10s | %6s" % ("function", "trials", "opt random", "opt tpe", "opt tpe-mv",
                                                              "our random", "our tpe", "our tpe-uv", "ratio"))
sys.stdout.flush()
for name, f, n, mn in FNS:
    if want and name not in want:
        continue
    med = {}
    for label, mk in SAMPLERS:
        if label not in a.samplers.split(","):
            med[label] = float("nan")
            continue
        r = []
        for s in range(a.first_seed, a.first_seed + a.seeds):
            r.append(best_of(optuna.create_study(sampler=mk(s, a.concurrency > 1)), f, n, a.concurrency) - mn)
            if a.per_seed:
                print("raw\t%s\t%s\t%d\t%.9g" % (name, label, s, r[-1]), flush=True)
        med[label] = statistics.median(r)
    o = [ours.get((name, m), float("nan")) for m in ("random", "tpe", "tpe-univariate")]
    both = [m for m in (med["tpe"], med["tpe-mv"]) if not math.isnan(m)]
    peer = min(both) if both else float("nan")
    print("%-14s %6d | %10.4g %10.4g %10.4g | %10.4g %10.4g %10.4g | %6.2f"
          % (name, n, med["random"], med["tpe"], med["tpe-mv"], o[0], o[1], o[2], o[1] / max(peer, 1e-12)))
    sys.stdout.flush()
