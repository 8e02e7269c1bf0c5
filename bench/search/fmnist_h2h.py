#!/usr/bin/env python3
"""bench/search/fmnist_h2h.py — issue 16.3: hyperfarm against Optuna on
real training. The same hyperfarm-train, the same Fashion-MNIST MLP space
(fmnist.py's SPACE), the same epoch budget and the same 2-way
parallelism, for each seed:

  optuna    Optuna's TPESampler(seed) + HyperbandPruner(min_resource=r,
            max_resource=R, reduction_factor=eta), 2 parallel workers
            (study.optimize(n_jobs=2)) on its SQLite storage (RDBStorage,
            a file in the run's temp dir). Each trial runs hyperfarm-train
            as a child process with the same environment our agent gives
            it (HYPERFARM_HPARAMS, HYPERFARM_MAX_EPOCHS=R, HYPERFARM_SEED),
            reads its per-epoch `HYPERFARM {...}` lines, reports val_acc
            at each epoch and kills the child when the pruner says so.
  asha      ours: scheduler + agent (2 slots) on loopback, ASHA r, R, eta
            (fmnist.py, one scheduler and agent per run)
  asha-stop ours: ASHA in stop mode (a trial runs on towards R in one
            process and is stopped at a rung where it is not in the top
            1/eta: what Optuna's pruner does)
  asha-tpe  ours: ASHA with "sampler": "tpe" (BOHB)
  asha-tpe-cost  ours: asha-tpe with "cost_metric": "epoch_seconds" (TPE
            weighs expected improvement per second of training,
            docs/search.md "Cost-aware proposals")
  asha-tpe-cool  ours: asha-tpe-cost with "cost_cooling": true (the cost's
            weight falls from 1 to 0 as the trials the budget buys are
            created; max_trials from the budget, fmnist.py)
  asha-time ours: ASHA with rungs in seconds of training ("time_metric":
            "epoch_seconds", "min_time": --min-time; docs/search.md "Rungs
            in seconds"): configurations compared at equal training time
  asha-tpe-time  ours: asha-time with the TPE sampler
  asha-hb   ours: ASHA with as many brackets as rungs (4 here), the
            brackets Optuna's HyperbandPruner makes of the same r, R, eta
  tpe       ours: TPE with full-length trials (budget / R of them)

Each run stops at the budget of epochs (counted over all trials in the
order the reports arrived, as fmnist.py counts). Printed per run: epochs
and wall-clock seconds until val_acc first reached the target (0.88), and
the best val_acc within the budget; then per method the medians over
seeds, and the ratios optuna/ours; then seed by seed (paired): the
geometric mean of optuna's figure over ours with a bootstrap 90 %
interval, the seeds each is better on, and the best val_acc found by 5,
10, 20 and 40 s (--json-out keeps these per run as "best_at"). Runs of
different (method, seed) pairs go --parallel at a time, each with its own
processes and temp dir (on a machine with at least 2 x parallel cores the
runs do not share cores).

  /usr/bin/python3 bench/search/fmnist_h2h.py --seeds 1-10 --parallel 6 \\
      [--budget 243 --max-epochs 27 --min-epochs 1 --eta 3 --target 0.88] \\
      [--methods optuna,asha,asha-stop,asha-tpe,asha-tpe-cost,asha-tpe-cool,asha-time,asha-tpe-time,asha-hb,tpe]
      [--min-time 0.5] [--json-out FILE]
  /usr/bin/python3 bench/search/fmnist_h2h.py --report FILE... [--methods M,..] [--seeds A-B]

--report runs nothing and prints the figures of saved runs, e.g. the 60
seeds of Optuna against BOHB in docs/search.md:
bench/search/results/h2h-optuna-bohb-seeds-1-60.json.

Not a test: figures only. Needs $HF_BIN (default ./bin) and Optuna
(Debian's python3-optuna: scripts/install-deps --bench).
"""
import argparse, concurrent.futures, json, math, os, random, shutil, statistics, subprocess, sys, tempfile, threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
HF_BIN = os.environ.get("HF_BIN", os.path.join(ROOT, "bin"))
sys.path.insert(0, HERE)
from fmnist import ANYTIME_S, SPACE, best_at  # noqa: E402  (the same space and figures as our runs)


def suggest(trial):
    """SPACE, as Optuna's define-by-run API asks for it."""
    hp = {}
    for name, p in SPACE.items():
        cond = p.get("condition")
        if cond and hp.get(cond["param"]) not in cond["values"]:
            continue
        if p["type"] == "log":
            hp[name] = trial.suggest_float(name, p["min"], p["max"], log=True)
        elif p["type"] == "uniform":
            hp[name] = trial.suggest_float(name, p["min"], p["max"])
        elif p["type"] == "int":
            hp[name] = trial.suggest_int(name, p["min"], p["max"], log=bool(p.get("log")))
        elif p["type"] == "categorical":
            hp[name] = trial.suggest_categorical(name, p["values"])
        else:
            raise ValueError("space type %s" % p["type"])
    return hp


def run_optuna(seed, args):
    import optuna
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    tmp = tempfile.mkdtemp(prefix="hf-h2h-optuna-")
    try:
        sampler = optuna.samplers.TPESampler(seed=seed)
        pruner = optuna.pruners.HyperbandPruner(min_resource=args.min_epochs, max_resource=args.max_epochs,
                                                reduction_factor=args.eta)
        study = optuna.create_study(direction="maximize", sampler=sampler, pruner=pruner,
                                    storage="sqlite:///%s/optuna.db" % tmp, study_name="h2h-%d" % seed)
        lock = threading.Lock()
        st = {"epochs": 0, "reports": [], "trials": 0, "over": False}
        t0 = time.time()

        def objective(trial):
            with lock:
                if st["over"]:
                    study.stop()
                    raise optuna.TrialPruned()
                st["trials"] += 1
            hp = suggest(trial)
            env = dict(os.environ, OPENBLAS_NUM_THREADS="1", HYPERFARM_HPARAMS=json.dumps(hp),
                       HYPERFARM_MAX_EPOCHS=str(args.max_epochs),
                       HYPERFARM_SEED=str(seed * 100003 + trial.number))
            wd = os.path.join(tmp, "t%d" % trial.number)
            os.makedirs(wd)
            p = subprocess.Popen([os.path.join(HF_BIN, "hyperfarm-train"), "--model", "mlp", "--threads", "1",
                                  "--seed", str(seed)], cwd=wd, env=env, stdout=subprocess.PIPE,
                                 stderr=subprocess.DEVNULL, text=True)
            last = None
            try:
                for line in p.stdout:
                    if not line.startswith("HYPERFARM "):
                        continue
                    m = json.loads(line[len("HYPERFARM "):])
                    if "val_acc" not in m:
                        continue
                    v, ep = float(m["val_acc"]), int(round(m.get("epoch", 0)))
                    last = v
                    with lock:
                        if st["over"]:
                            break
                        st["epochs"] += 1
                        st["reports"].append((time.time() - t0, st["epochs"], v))
                        if st["epochs"] >= args.budget:
                            st["over"] = True
                    trial.report(v, ep)
                    if st["over"]:
                        study.stop()
                        break
                    if trial.should_prune():
                        raise optuna.TrialPruned()
            finally:
                if p.poll() is None:
                    p.kill()
                p.wait()
            if last is None:
                raise RuntimeError("trial %d: no report (hyperfarm-train exit %s)" % (trial.number, p.returncode))
            return last

        # A trial whose training diverged (hyperfarm-train exits 1 on a
        # non-finite loss before its first report) is a failed trial, as
        # in our runs: the study goes on.
        study.optimize(objective, n_jobs=args.slots, n_trials=100000, catch=(RuntimeError,))
        wall = time.time() - t0
        first, first_s, best = None, None, 0.0
        for at, cum, v in st["reports"]:
            best = max(best, v)
            if first is None and v >= args.target:
                first, first_s = cum, at
        return {"method": "optuna", "seed": seed, "trials": st["trials"], "epochs": st["epochs"],
                "to_target": first, "s_to_target": first_s, "best": best, "wall_s": wall,
                "best_at": best_at([(at, v) for at, _, v in st["reports"]])}
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def run_ours(method, seed, args):
    out = tempfile.mktemp(prefix="hf-h2h-%s-" % method, suffix=".json")
    cmd = [sys.executable, os.path.join(HERE, "fmnist.py"), "--seeds", str(seed), "--searchers", method,
           "--budget", str(args.budget), "--max-epochs", str(args.max_epochs), "--min-epochs", str(args.min_epochs),
           "--eta", str(args.eta), "--slots", str(args.slots), "--target", str(args.target), "--json-out", out,
           "--min-time", str(args.min_time)]
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if r.returncode != 0 or not os.path.exists(out):
        raise RuntimeError("fmnist.py %s seed %d failed (exit %d): %s" % (method, seed, r.returncode, r.stdout[-800:]))
    with open(out) as f:
        res = json.load(f)[0]
    os.unlink(out)
    res["method"] = method
    return res


def seeds_of(s):
    out = []
    for part in s.split(","):
        a, _, b = part.partition("-")
        out += list(range(int(a), int(b) + 1)) if b else [int(a)]
    return out


def fmt(x, digits=0):
    return "not reached" if x is None else ("%.*f" % (digits, x))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", help="default 1-10 (--report: every seed saved)")
    ap.add_argument("--methods", help="default optuna,asha,asha-tpe,tpe (--report: every method saved)")
    ap.add_argument("--budget", type=int, default=243)
    ap.add_argument("--max-epochs", type=int, default=27)
    ap.add_argument("--min-epochs", type=int, default=1)
    ap.add_argument("--min-time", type=float, default=0.5, help="asha-time: the first rung's seconds of training")
    ap.add_argument("--eta", type=int, default=3)
    ap.add_argument("--slots", type=int, default=2)
    ap.add_argument("--target", type=float, default=0.88)
    ap.add_argument("--parallel", type=int, default=1, help="runs at once (each uses --slots cores)")
    ap.add_argument("--json-out")
    ap.add_argument("--report", nargs="+", metavar="JSON",
                    help="run nothing: print the figures of runs saved by --json-out (a later file's run of the "
                         "same method and seed replaces an earlier one's)")
    args = ap.parse_args()
    if args.report:
        return report(args)
    args.seeds, args.methods = args.seeds or "1-10", args.methods or "optuna,asha,asha-tpe,tpe"
    if not os.access(os.path.join(HF_BIN, "hyperfarm-train"), os.X_OK):
        print("fmnist_h2h: %s/hyperfarm-train not built" % HF_BIN)
        return 2
    try:
        import optuna
    except ImportError:
        print("fmnist_h2h: Optuna is not installed (scripts/install-deps --bench)")
        return 2
    methods, seeds = args.methods.split(","), seeds_of(args.seeds)
    print("fmnist_h2h: Optuna %s; budget %d epochs, R=%d r=%d eta=%d, %d slots, target val_acc %.2f, seeds %s, "
          "%d runs at once, %d cores" % (optuna.__version__, args.budget, args.max_epochs, args.min_epochs, args.eta,
                                         args.slots, args.target, args.seeds, args.parallel, os.cpu_count()))
    print("%-9s %5s %7s %7s %12s %10s %8s %8s" % ("method", "seed", "trials", "epochs", "epochs->tgt", "s->tgt",
                                                    "best", "wall_s"), flush=True)
    jobs = [(m, s) for s in seeds for m in methods]
    res = []
    with concurrent.futures.ThreadPoolExecutor(max_workers=args.parallel) as ex:
        futs = {ex.submit(run_optuna if m == "optuna" else run_ours, *((s, args) if m == "optuna" else (m, s, args))):
                (m, s) for m, s in jobs}
        for f in concurrent.futures.as_completed(futs):
            m, s = futs[f]
            try:
                r = f.result()
            except Exception as e:   # one failed run is reported, the rest go on
                print("%-9s %5d  FAILED: %s" % (m, s, e), flush=True)
                continue
            res.append(r)
            print("%-9s %5d %7d %7.0f %12s %10s %8.4f %8.1f" % (m, s, r["trials"], r["epochs"], fmt(r["to_target"]),
                  fmt(r["s_to_target"], 1), r["best"], r["wall_s"]), flush=True)
            if "observations_with_cost" in r:   # asha-tpe-cost: did the cost reach the model?
                print("%-9s %5d   observations_with_cost %s, mean hidden %s, mean epoch_seconds %s"
                      % (m, s, r["observations_with_cost"], fmt(r["mean_hidden"], 1), fmt(r["mean_epoch_s"], 3)),
                      flush=True)
    if args.json_out:
        with open(args.json_out, "w") as f:
            json.dump(res, f, indent=1)
    summarize(res, methods, seeds, args.budget)
    return 0


def report(args):
    """--report: the figures of saved runs, every method and seed in them
    unless --methods/--seeds were given."""
    runs = {}
    for fn in args.report:
        try:
            with open(fn) as f:
                for r in json.load(f):
                    r["method"] = r.get("method") or r["searcher"]
                    runs[(r["method"], r["seed"])] = r
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
            print("fmnist_h2h: %s: not a --json-out file of runs (%s)" % (fn, e))
            return 2
    methods = sorted({m for m, _ in runs}, key=lambda m: (m != "optuna", m))
    seeds = sorted({s for _, s in runs})
    if args.methods:
        methods = args.methods.split(",")
    if args.seeds:
        seeds = seeds_of(args.seeds)
    res = [r for (m, s), r in runs.items() if m in methods and s in seeds]
    print("fmnist_h2h: %d saved runs from %s; methods %s; %d seeds" % (len(res), ", ".join(args.report),
                                                                      ",".join(methods), len(seeds)))
    summarize(res, methods, seeds, args.budget)
    return 0


def summarize(res, methods, seeds, budget):
    inf = float("inf")
    print()
    print("%-9s %6s %16s %14s %10s %8s" % ("method", "runs", "median epochs", "median s", "median", "reached"))
    med = {}
    for m in methods:
        rs = [r for r in res if r["method"] == m]
        if not rs:
            continue
        e = statistics.median([r["to_target"] if r["to_target"] is not None else inf for r in rs])
        t = statistics.median([r["s_to_target"] if r["s_to_target"] is not None else inf for r in rs])
        b = statistics.median([r["best"] for r in rs])
        med[m] = (e, t, b)
        print("%-9s %6d %16s %14s %10.4f %5d/%d" % (m, len(rs), "%.1f" % e if e < inf else "> budget",
              "%.1f" % t if t < inf else "never", b, sum(r["to_target"] is not None for r in rs), len(rs)))
    if "optuna" in med:
        oe, ot, ob = med["optuna"]
        for m in methods:
            if m == "optuna" or m not in med:
                continue
            e, t, b = med[m]
            re = "%.2fx" % (oe / e) if 0 < e < inf and oe < inf else "n/a"
            rt = "%.2fx" % (ot / t) if 0 < t < inf and ot < inf else "n/a"
            print("optuna/%s: epochs to target %s, seconds to target %s (above 1: %s is faster); best val_acc "
                  "%+.4f" % (m, re, rt, m, b - ob))
        # per seed: where does Optuna win?
        for m in methods:
            if m == "optuna":
                continue
            lost = []
            for s in seeds:
                o = [r for r in res if r["method"] == "optuna" and r["seed"] == s]
                u = [r for r in res if r["method"] == m and r["seed"] == s]
                if not o or not u:
                    continue
                ot_, ut_ = o[0]["s_to_target"], u[0]["s_to_target"]
                if ot_ is not None and (ut_ is None or ut_ > ot_):
                    lost.append("%d (%.0f s vs %s)" % (s, ot_, fmt(ut_)))
            print("%s slower than optuna to the target on seeds: %s" % (m, ", ".join(lost) or "none"))
        paired(res, methods, seeds, budget)


# A run that never reached the target counts as the whole budget and this
# many seconds (longer than any run's whole budget on the 2-core machine).
NOT_REACHED_S = 200.0


def wilcoxon_p(d):
    """", Wilcoxon signed-rank p = ..." where SciPy is installed, else ""."""
    try:
        import warnings
        from scipy.stats import wilcoxon
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")   # ties: SciPy says it uses the normal approximation
            return ", Wilcoxon signed-rank p = %.2g" % wilcoxon(d).pvalue
    except (ImportError, ValueError):
        return ""


def paired(res, methods, seeds, budget, resamples=4000):
    """Seed by seed (docs/search.md): each seed gives both methods the same
    luck, so compare per seed: the geometric mean of Optuna's figure over
    ours with a bootstrap 90 % interval over seeds, how many seeds we are
    better on, and the best val_acc found by fixed times (ANYTIME_S)."""
    by = {(r["method"], r["seed"]): r for r in res}
    rng = random.Random(1)
    for m in methods:
        if m == "optuna":
            continue
        pairs = [(by[("optuna", s)], by[(m, s)]) for s in seeds if ("optuna", s) in by and (m, s) in by]
        if len(pairs) < 2:
            continue
        print("%s against optuna, %d seeds paired (not reached: %d epochs, %.0f s):"
              % (m, len(pairs), budget, NOT_REACHED_S))
        for key, miss, what in (("to_target", budget, "epochs to target"), ("s_to_target", NOT_REACHED_S,
                                                                            "seconds to target")):
            logs = []
            for o, u in pairs:
                a, b = (x[key] if x[key] is not None else miss for x in (o, u))
                logs.append(math.log(max(a, 1e-3) / max(b, 1e-3)))
            boot = sorted(math.exp(statistics.fmean(rng.choices(logs, k=len(logs)))) for _ in range(resamples))
            print("  %-18s %.2fx (90%% interval %.2f-%.2f), %s better on %d of %d seeds%s"
                  % (what, math.exp(statistics.fmean(logs)), boot[int(0.05 * resamples)],
                     boot[int(0.95 * resamples) - 1], m, sum(x > 0 for x in logs), len(logs), wilcoxon_p(logs)))
        d = [u["best"] - o["best"] for o, u in pairs]
        print("  %-18s %+.4f mean, %+.4f median, better on %d, worse on %d%s"
              % ("best val_acc", statistics.fmean(d), statistics.median(d), sum(x > 0 for x in d),
                 sum(x < 0 for x in d), wilcoxon_p(d)))
        timed = [(o["best_at"], u["best_at"]) for o, u in pairs if "best_at" in o and "best_at" in u]
        for t in ANYTIME_S if timed else ():
            k = str(t)
            d = [u[k] - o[k] for o, u in timed]
            print("  best by %3d s      %+.4f median (optuna %.4f, %s %.4f), better on %d, worse on %d of %d"
                  % (t, statistics.median(d), statistics.median(o[k] for o, _ in timed), m,
                     statistics.median(u[k] for _, u in timed), sum(x > 0 for x in d), sum(x < 0 for x in d),
                     len(d)))


if __name__ == "__main__":
    sys.exit(main())
