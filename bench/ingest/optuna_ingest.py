#!/usr/bin/python3
"""optuna_ingest.py — Optuna's metric-ingestion rate with SQLite storage.

The peer figure for bench/ingest: how many intermediate reports per second
Optuna (Debian's python3-optuna, 3.1) stores when trials call
trial.report(value, step) once per step into an RDB storage on a sqlite:///
file, as its documentation shows for pruning. Trials are created with
study.ask() and finished with study.tell(), round-robin over --concurrent
open trials so the database holds several running trials at once, like a
sweep. One process, one thread: the way a user runs Optuna on one machine
(several processes on one SQLite file only add lock contention).

Prints a human line and a machine line:
    OPTUNA {"reports": N, "seconds": S, "reports_per_s": R, "version": "3.1.0"}
"""
import argparse
import json
import logging
import os
import sys
import tempfile
import time

import optuna


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seconds", type=float, default=15.0, help="measure for this long (default 15)")
    ap.add_argument("--steps", type=int, default=100, help="reports per trial (default 100)")
    ap.add_argument("--concurrent", type=int, default=8, help="trials open at once (default 8)")
    ap.add_argument("--db", help="SQLite file (default: a temporary file)")
    args = ap.parse_args()

    optuna.logging.set_verbosity(logging.WARNING)
    tmp = None
    path = args.db
    if not path:
        tmp = tempfile.mkdtemp(prefix="hf-optuna-")
        path = os.path.join(tmp, "optuna.db")
    storage = optuna.storages.RDBStorage(url="sqlite:///" + path)
    study = optuna.create_study(study_name="ingest", storage=storage, direction="minimize")

    open_trials = []
    reports = 0
    trials = 0
    t0 = time.monotonic()
    deadline = t0 + args.seconds
    while time.monotonic() < deadline:
        while len(open_trials) < args.concurrent:
            t = study.ask()
            t.suggest_float("lr", 1e-4, 0.3, log=True)
            open_trials.append([t, 0])
        # One report from each open trial per round, like trials training side by side.
        for entry in list(open_trials):
            t, step = entry
            t.report(1.0 / (step + 1), step)
            reports += 1
            entry[1] = step + 1
            if entry[1] >= args.steps:
                study.tell(t, 1.0 / (step + 1))
                open_trials.remove(entry)
                trials += 1
    secs = time.monotonic() - t0
    for t, step in open_trials:
        study.tell(t, state=optuna.trial.TrialState.FAIL)
    size = os.path.getsize(path)
    rate = reports / secs if secs > 0 else 0.0
    print("optuna %s, SQLite storage: %d reports in %.1f s = %.0f reports/s (%d trials finished, db %.1f MiB)"
          % (optuna.__version__, reports, secs, rate, trials, size / 1048576.0))
    print("OPTUNA " + json.dumps({"reports": reports, "seconds": round(secs, 2),
                                  "reports_per_s": round(rate, 1), "version": optuna.__version__,
                                  "db_bytes": size}))
    if tmp:
        for f in os.listdir(tmp):
            os.unlink(os.path.join(tmp, f))
        os.rmdir(tmp)
    return 0


if __name__ == "__main__":
    sys.exit(main())
