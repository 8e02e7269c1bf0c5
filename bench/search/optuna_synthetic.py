#!/usr/bin/env python3
"""The peer for bench/search_synthetic: Optuna's TPESampler (default
settings, n_startup_trials=10) against its RandomSampler on Branin (50
trials) and Hartmann-6 (100 trials), seeds 0..S-1, sequential. Prints the
same columns as search_synthetic."""
import argparse, math, statistics
import optuna

optuna.logging.set_verbosity(optuna.logging.WARNING)

def branin(t):
    x1 = t.suggest_float("x1", -5, 10); x2 = t.suggest_float("x2", 0, 15)
    b, c, tt = 5.1 / (4 * math.pi ** 2), 5 / math.pi, 1 / (8 * math.pi)
    return (x2 - b * x1 * x1 + c * x1 - 6) ** 2 + 10 * (1 - tt) * math.cos(x1) + 10

A = [[10, 3, 17, 3.5, 1.7, 8], [0.05, 10, 17, 0.1, 8, 14], [3, 3.5, 1.7, 10, 17, 8], [17, 8, 0.05, 10, 0.1, 14]]
P = [[0.1312, 0.1696, 0.5569, 0.0124, 0.8283, 0.5886], [0.2329, 0.4135, 0.8307, 0.3736, 0.1004, 0.9991],
     [0.2348, 0.1451, 0.3522, 0.2883, 0.3047, 0.6650], [0.4047, 0.8828, 0.8732, 0.5743, 0.1091, 0.0381]]
AL = [1.0, 1.2, 3.0, 3.2]

def hartmann6(t):
    x = [t.suggest_float("x%d" % (j + 1), 0, 1) for j in range(6)]
    return -sum(AL[i] * math.exp(-sum(A[i][j] * (x[j] - P[i][j]) ** 2 for j in range(6))) for i in range(4))

ap = argparse.ArgumentParser(); ap.add_argument("--seeds", type=int, default=30); a = ap.parse_args()
for name, f, n, mn in (("branin", branin, 50, 0.397887), ("hartmann6", hartmann6, 100, -3.32237)):
    r, t = [], []
    for s in range(a.seeds):
        for samp, out in ((optuna.samplers.RandomSampler(seed=s), r), (optuna.samplers.TPESampler(seed=s), t)):
            st = optuna.create_study(sampler=samp); st.optimize(f, n_trials=n); out.append(st.best_value)
    rm, tm = statistics.median(r), statistics.median(t)
    print("optuna %-10s %4d trials %3d seeds | random med %.5f | tpe med %.5f | tpe wins %d/%d | median regret random/tpe = %.2fx"
          % (name, n, a.seeds, rm, tm, sum(x < y for x, y in zip(t, r)), a.seeds, (rm - mn) / max(tm - mn, 1e-12)))
