#!/usr/bin/env python3
"""bench/search/fmnist.py — random vs ASHA vs TPE on real Fashion-MNIST
training through the whole system (scheduler + agent + hyperfarm-train).

Starts hyperfarm-scheduler and one hyperfarm-agent on a free loopback port
in a temp dir, then, for each seed, submits the same MLP search space once
per searcher with the same total budget of epochs:
  random, tpe : budget / max_epochs trials of max_epochs epochs each
  asha        : r=--min-epochs (1), R=max_epochs, eta=--eta (3), as many
                trials as it asks for,
                canceled once it has trained `budget` epochs
  asha-stop   : ASHA in stop mode whatever --asha-mode says (every trial
                runs towards max_epochs and is stopped at a rung where it
                is not in the top 1/eta, as Ray Tune's ASHAScheduler and
                Optuna's SuccessiveHalving/HyperbandPruner do)
  asha-tpe    : the same with "sampler": "tpe" (new trials drawn by TPE
                from the rung results, as BOHB does)
  asha-tpe-cost : asha-tpe with "cost_metric": "epoch_seconds" (TPE's
                proposals weigh expected improvement against the
                trainer's seconds per epoch, docs/search.md "Cost-aware
                proposals"); prints the searcher's observations_with_cost
                and the mean hidden size and seconds per epoch of its
                trials
  asha-tpe-cool : asha-tpe-cost with "cost_cooling": true and max_trials
                the budget over ASHA's expected epochs per new trial
                (sum over rungs of eta^-k times the rung's added epochs),
                so the cost's weight falls from 1 to 0 as the budget is
                spent (CArBO's cost cooling)
  asha-time   : ASHA with rungs in seconds of training ("time_metric":
                "epoch_seconds", "min_time": --min-time (0.5), max_time
                min_time * max_epochs / min_epochs; docs/search.md "Rungs
                in seconds"): configurations are compared at equal
                training time instead of equal epochs
  asha-tpe-time : asha-time with "sampler": "tpe"
  asha-hb     : ASHA with as many brackets as rungs (asynchronous
                Hyperband: trial n starts at rung n mod brackets, so every
                fourth trial of r=1, R=27, eta=3 trains 27 epochs at once),
                the brackets Optuna's HyperbandPruner makes of the same
                r, R and eta
and reads every trial's val_acc history (GET /api/v1/trials/{id}/metrics).
Epochs are counted across all trials in the order reports arrived (a
resumed ASHA trial counts only the epochs it adds). For each run it prints
the epochs spent when val_acc first reached the target (0.88) and the best
val_acc within the budget; then the medians over seeds and the ratio
random/asha (the issue's target: asha <= 1/3 of random).

Usage: fmnist.py [--seeds 1,2,3] [--budget 54] [--max-epochs 9]
                 [--min-epochs 1] [--eta 3] [--asha-mode promote|stop]
                 [--slots 2] [--min-time 0.5]
                 [--searchers random,asha,asha-stop,asha-tpe,asha-tpe-cost,asha-tpe-cool,asha-time,asha-tpe-time,tpe]
                 [--target 0.88]
Needs $HF_BIN (default ./bin) with hyperfarm-scheduler, hyperfarm-agent,
hyperfarm-train. Exit 2 when they are missing (bench/run: "not run").
"""
import argparse, json, math, os, shutil, signal, socket, statistics, subprocess, sys, tempfile, time
import urllib.request, urllib.error

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HF_BIN = os.environ.get("HF_BIN", os.path.join(ROOT, "bin"))

SPACE = {
    "lr": {"type": "log", "min": 1e-5, "max": 1.0},
    "hidden": {"type": "int", "min": 16, "max": 512, "log": True},
    "optimizer": {"type": "categorical", "values": ["sgd", "adam"]},
    "momentum": {"type": "uniform", "min": 0.0, "max": 0.99,
                 "condition": {"param": "optimizer", "values": ["sgd"]}},
    "weight_decay": {"type": "log", "min": 1e-6, "max": 1e-1},
    "batch_size": {"type": "categorical", "values": [64, 128, 256]},
}


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


class Api:
    def __init__(self, base):
        self.base = base

    def call(self, method, path, body=None):
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.base + path, data=data, method=method,
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=10) as r:
                return json.loads(r.read() or b"null")
        except urllib.error.HTTPError as e:
            raise RuntimeError("%s %s -> %d %s" % (method, path, e.code, e.read()[:300]))


def wait_health(api, secs=15):
    t0 = time.time()
    while time.time() - t0 < secs:
        try:
            api.call("GET", "/healthz")
            return
        except Exception:
            time.sleep(0.1)
    raise RuntimeError("scheduler did not become healthy")


def experiment(name, searcher, seed, budget, max_epochs, slots, min_epochs=1, eta=3, mode="promote", min_time=0.5):
    if searcher in ("asha", "asha-tpe", "asha-stop", "asha-tpe-cost", "asha-tpe-cool", "asha-time", "asha-tpe-time",
                    "asha-hb"):
        sc = {"name": "asha", "max_trials": 1000, "max_epochs": max_epochs, "min_epochs": min_epochs,
              "reduction_factor": eta, "mode": "stop" if searcher == "asha-stop" else mode}
        if searcher == "asha-hb":
            nb, b = 1, min_epochs
            while b * eta < max_epochs:
                b *= eta
                nb += 1
            sc["brackets"] = nb + 1 if b < max_epochs else nb   # rungs r*eta^k below R, and R
        if searcher in ("asha-time", "asha-tpe-time"):
            # Rungs in seconds of training: the sum of the trainer's
            # per-epoch epoch_seconds reports (docs/trainer.md).
            sc.update({"time_metric": "epoch_seconds", "min_time": min_time})
        if searcher in ("asha-tpe", "asha-tpe-cost", "asha-tpe-cool", "asha-tpe-time"):
            sc["sampler"] = "tpe"   # new trials from TPE over the rung results (BOHB-style)
        if searcher in ("asha-tpe-cost", "asha-tpe-cool"):
            sc["cost_metric"] = "epoch_seconds"   # the trainer's seconds per epoch (docs/trainer.md)
        if searcher == "asha-tpe-cool":
            # Cooling needs the number of trials the budget buys: a new
            # trial trains r epochs, a 1/eta fraction of them goes on to the
            # next rung, and so on up to max_epochs.
            rungs, b = [min_epochs], min_epochs
            while b * eta < max_epochs:
                b *= eta
                rungs.append(b)
            rungs.append(max_epochs)
            per = rungs[0] + sum((rungs[k] - rungs[k - 1]) / eta ** k for k in range(1, len(rungs)))
            sc["max_trials"] = max(11, int(budget / per))
            sc["cost_cooling"] = True
    elif searcher == "tpe":
        sc = {"name": "tpe", "max_trials": budget // max_epochs, "max_epochs": max_epochs,
              "n_startup_trials": 3}
    else:
        sc = {"name": searcher, "max_trials": budget // max_epochs, "max_epochs": max_epochs}
    sc["seed"] = seed
    # One trial per free slot: adaptive searchers (ASHA's promotions, TPE's
    # model) must be asked when a slot frees up, not fill a queue upfront.
    sc["max_concurrent_trials"] = slots
    return {
        "name": name,
        "objective": {"metric": "val_acc", "goal": "maximize"},
        "searcher": sc,
        "hyperparameters": SPACE,
        "trial": {"command": ["hyperfarm-train", "--model", "mlp", "--threads", "1", "--seed", str(seed)],
                  "resources": {"workers": 1, "slots_per_worker": 1}, "max_restarts": 1},
    }


# Anytime figure (docs/search.md, "Seed by seed"): the best val_acc found
# by these seconds after the start, counting only reports within the
# epoch budget; a run that spent its budget sooner keeps its final best.
ANYTIME_S = (5, 10, 20, 40)


def best_at(points):
    """points: (seconds since the start, val_acc) in arrival order, within
    the budget. RET {"5": best by 5 s, ...}, 0.0 where nothing came yet."""
    out = {}
    for t in ANYTIME_S:
        out[str(t)] = max([v for at, v in points if at <= t], default=0.0)
    return out


def metrics_of(api, tid, name="val_acc"):
    out, after = [], 0
    while True:
        r = api.call("GET", "/api/v1/trials/%d/metrics?name=%s&after=%d&limit=10000" % (tid, name, after))
        m = r.get("metrics", [])
        out += m
        if not m:
            return out
        after = m[-1]["seq"]


def epochs_used(trials):
    used = 0
    for t in trials:
        lat = t.get("latest") or {}
        e = lat.get("epoch")
        if isinstance(e, (int, float)):
            # Whole epochs, as the reports count them: a trial stopped
            # mid-epoch (rungs in time) reports a fractional epoch with its
            # checkpoint, and its resumed run reports that epoch whole.
            used += math.floor(e + 1e-9)
    return used


def run_one(api, searcher, seed, args):
    exp = experiment("bench-%s-%d" % (searcher, seed), searcher, seed, args.budget, args.max_epochs,
                     args.slots, args.min_epochs, args.eta, args.asha_mode, args.min_time)
    t_submit = time.time()
    eid = api.call("POST", "/api/v1/experiments", exp)["id"]
    t0 = time.time()
    canceled = False
    while True:
        x = api.call("GET", "/api/v1/experiments/%d" % eid)
        if x["state"] in ("COMPLETED", "CANCELED"):
            break
        trials = api.call("GET", "/api/v1/experiments/%d/trials" % eid)["trials"]
        if not canceled and epochs_used(trials) >= args.budget:
            api.call("POST", "/api/v1/experiments/%d/cancel" % eid)
            canceled = True
        if time.time() - t0 > args.timeout:
            api.call("POST", "/api/v1/experiments/%d/cancel" % eid)
            print("  %s seed %d: timed out after %ds" % (searcher, seed, args.timeout), file=sys.stderr)
            canceled = True
        time.sleep(0.5)
    wall = time.time() - t0
    trials = api.call("GET", "/api/v1/experiments/%d/trials" % eid)["trials"]
    reports = []
    for t in trials:
        for m in metrics_of(api, t["id"]):
            reports.append((m["seq"], t["id"], m.get("epoch"), m["value"], m.get("time", 0) / 1000.0))
    reports.sort()
    last_epoch, cum, first, first_s, best, points = {}, 0, None, None, 0.0, []
    for seq, tid, ep, v, at in reports:
        ep = ep if isinstance(ep, (int, float)) else last_epoch.get(tid, 0) + 1
        cum += max(0.0, ep - last_epoch.get(tid, 0))
        last_epoch[tid] = max(ep, last_epoch.get(tid, 0))
        if cum > args.budget + 1e-9:
            break
        best = max(best, v)
        points.append((at - t_submit, v))   # the agent's clock: same machine
        if first is None and v >= args.target:
            first, first_s = cum, points[-1][0]
    res = {"searcher": searcher, "seed": seed, "trials": len(trials), "epochs": min(cum, args.budget),
           "to_target": first, "s_to_target": first_s, "best": best, "wall_s": wall, "best_at": best_at(points)}
    if searcher in ("asha-tpe-cost", "asha-tpe-cool"):
        # Evidence that the cost reached the model: the searcher's count of
        # observations with a cost, and what its trials cost per epoch.
        st = x.get("searcher_state") or {}
        hid = [t["hparams"]["hidden"] for t in trials if "hidden" in (t.get("hparams") or {})]
        secs = [m["value"] for t in trials for m in metrics_of(api, t["id"], "epoch_seconds")]
        res.update({"observations_with_cost": st.get("observations_with_cost"),
                    "mean_hidden": statistics.mean(hid) if hid else None,
                    "mean_epoch_s": statistics.mean(secs) if secs else None})
        print("  %s seed %d: observations_with_cost %s, mean hidden %s, mean epoch_seconds %s over %d reports"
              % (searcher, seed, res["observations_with_cost"], res["mean_hidden"], res["mean_epoch_s"], len(secs)),
              flush=True)
    return res


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", default="1,2,3")
    ap.add_argument("--budget", type=int, default=54)
    ap.add_argument("--max-epochs", type=int, default=9)
    ap.add_argument("--min-epochs", type=int, default=1, help="ASHA's r (grace period, epochs of rung 0)")
    ap.add_argument("--eta", type=int, default=3, help="ASHA's reduction factor")
    ap.add_argument("--min-time", type=float, default=0.5,
                    help="asha-time: the first rung's seconds of training (max_time: x max_epochs / min_epochs)")
    ap.add_argument("--asha-mode", default="promote", choices=["promote", "stop"],
                    help="promote (the paper's ASHA) or stop (Ray Tune's ASHAScheduler)")
    ap.add_argument("--slots", type=int, default=2)
    ap.add_argument("--searchers", default="random,asha,tpe")
    ap.add_argument("--target", type=float, default=0.88)
    ap.add_argument("--timeout", type=int, default=900)
    ap.add_argument("--json-out", help="also write every run's result (a JSON list) to this file")
    args = ap.parse_args()
    for p in ("hyperfarm-scheduler", "hyperfarm-agent", "hyperfarm-train"):
        if not os.access(os.path.join(HF_BIN, p), os.X_OK):
            print("fmnist: %s/%s not built; skipping" % (HF_BIN, p))
            return 2
    tmp = tempfile.mkdtemp(prefix="hf-bench-search-")
    port = free_port()
    procs = []
    try:
        env = dict(os.environ, OPENBLAS_NUM_THREADS="1")
        sl = open(os.path.join(tmp, "scheduler.log"), "w")
        procs.append(subprocess.Popen([os.path.join(HF_BIN, "hyperfarm-scheduler"), "--listen",
                                       "127.0.0.1:%d" % port, "--db", os.path.join(tmp, "hf.db")],
                                      stdout=sl, stderr=subprocess.STDOUT, env=env))
        api = Api("http://127.0.0.1:%d" % port)
        wait_health(api)
        al = open(os.path.join(tmp, "agent.log"), "w")
        os.makedirs(os.path.join(tmp, "agent"))
        procs.append(subprocess.Popen([os.path.join(HF_BIN, "hyperfarm-agent"), "--scheduler",
                                       "http://127.0.0.1:%d" % port, "--name", "bench", "--slots",
                                       str(args.slots), "--gpus", "none", "--workdir", os.path.join(tmp, "agent")],
                                      stdout=al, stderr=subprocess.STDOUT, env=env))
        print("fmnist: budget %d epochs per run, max_epochs %d, ASHA %s r=%d eta=%d, %d slots, target val_acc %.2f"
              % (args.budget, args.max_epochs, args.asha_mode, args.min_epochs, args.eta, args.slots, args.target))
        print("%-8s %5s %7s %7s %14s %9s %8s" % ("search", "seed", "trials", "epochs", "epochs->%.2f" % args.target,
                                                   "best", "wall_s"))
        res = []
        for seed in [int(s) for s in args.seeds.split(",")]:
            for sr in args.searchers.split(","):
                r = run_one(api, sr, seed, args)
                res.append(r)
                print("%-8s %5d %7d %7.0f %14s %9.4f %8.1f" % (sr, seed, r["trials"], r["epochs"],
                      "%.0f" % r["to_target"] if r["to_target"] is not None else "not reached",
                      r["best"], r["wall_s"]), flush=True)
        if args.json_out:
            with open(args.json_out, "w") as f:
                json.dump(res, f)
        print()
        med = {}
        inf = float("inf")
        for sr in args.searchers.split(","):
            rs = [r for r in res if r["searcher"] == sr]
            # Not reaching the target within the budget is +inf: the median
            # is then only known to exceed the budget.
            med[sr] = statistics.median([r["to_target"] if r["to_target"] is not None else inf for r in rs])
            print("%-8s median epochs to %.2f: %8s   median best val_acc: %.4f   reached in %d/%d seeds"
                  % (sr, args.target, "%.1f" % med[sr] if med[sr] < inf else "> %d" % args.budget,
                     statistics.median([r["best"] for r in rs]),
                     sum(r["to_target"] is not None for r in rs), len(rs)))
        for a in ("asha", "asha-tpe"):
            if "random" not in med or a not in med or not 0 < med[a] < inf:
                continue
            if med["random"] < inf:
                ratio = med["random"] / med[a]
                print("ratio random/%s epochs to %.2f: %.2fx (target >= 3x: %s)"
                      % (a, args.target, ratio, "met" if ratio >= 3 else "MISSED"))
            else:
                ratio = args.budget / med[a]
                print("ratio random/%s epochs to %.2f: > %.2fx (random did not reach it within %d epochs; "
                      "target >= 3x: %s)" % (a, args.target, ratio, args.budget, "met" if ratio >= 3 else "not shown"))
        return 0
    finally:
        for p in reversed(procs):
            p.send_signal(signal.SIGTERM)
        for p in reversed(procs):
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
        if os.environ.get("KEEP_TMP"):
            print("logs kept in", tmp)
        else:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
