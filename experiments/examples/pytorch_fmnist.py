#!/usr/bin/python3
"""pytorch_fmnist.py - a user's own PyTorch training script as a hyperfarm trial.

It uses no hyperfarm library: only the trial contract (docs/guide.md,
"Writing a trial in any language"), which any program can follow:

  reads     HYPERFARM_HPARAMS         a JSON object: lr, hidden, batch_size,
                                      optimizer (sgd|adam), momentum, seed,
                                      train_size, val_size, threads, epoch_sleep
            HYPERFARM_MAX_EPOCHS      the epoch budget the searcher grants
                                      (ASHA raises it when it promotes a trial)
            HYPERFARM_CHECKPOINT_DIR  where checkpoints live; it survives
                                      restarts of the trial
  reports   one line per epoch on stdout, flushed at once:
            HYPERFARM {"epoch": 2, "step": 188, "train_loss": 0.52,
                       "val_loss": 0.55, "val_acc": 0.81, "checkpoint": "..."}
  resumes   from $HYPERFARM_CHECKPOINT_DIR/model.pt (model, optimizer, epoch
            and RNG state), written atomically (temp file, fsync, rename),
            so a trial killed at any instant restarts from its last
            complete epoch
  stops     on SIGTERM (the searcher stopped it, or the experiment was
            paused): it finishes the current batch, keeps its last
            checkpoint and exits 0 within the agent's grace period

Data: the Fashion-MNIST IDX files of Debian's dataset-fashion-mnist package
(/usr/share/datasets/fashion-mnist, or $FMNIST_DIR), read with gzip and
numpy; nothing is downloaded. train_size images of the training set are
used for training, val_size images of the test set for validation; only
as many bytes as needed are decompressed.

Runs on the CPU with Debian's python3-torch (use /usr/bin/python3, which
has it). Outside hyperfarm it runs too: ./pytorch_fmnist.py (checkpoints
in ./).
"""
import gzip
import json
import os
import signal
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

stop = False


def on_term(signum, frame):
    global stop
    stop = True


def report(**metrics):
    """One HYPERFARM line: a literal prefix, then one JSON object."""
    print("HYPERFARM " + json.dumps(metrics), flush=True)


def read_idx(path, count, item_bytes, header):
    """The first count items of an IDX file (gzip), as a uint8 array."""
    with gzip.open(path, "rb") as f:
        head = f.read(header)
        total = int.from_bytes(head[4:8], "big")
        count = min(count, total)
        raw = f.read(count * item_bytes)
    if len(raw) != count * item_bytes:
        sys.exit("%s: truncated (wanted %d items)" % (path, count))
    return np.frombuffer(raw, dtype=np.uint8).reshape(count, item_bytes)


def load(data_dir, prefix, count):
    x = read_idx(os.path.join(data_dir, prefix + "-images-idx3-ubyte.gz"), count, 784, 16)
    y = read_idx(os.path.join(data_dir, prefix + "-labels-idx1-ubyte.gz"), count, 1, 8)
    x = torch.from_numpy(x.astype(np.float32) / 255.0)
    y = torch.from_numpy(y.reshape(-1).astype(np.int64))
    return x, y


def save_checkpoint(ckdir, state):
    """Atomic: a reader (or a restart after a crash) sees the old file or the new one."""
    path = os.path.join(ckdir, "model.pt")
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        torch.save(state, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    dfd = os.open(ckdir, os.O_RDONLY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)
    return path


def main():
    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)
    hp = json.loads(os.environ.get("HYPERFARM_HPARAMS") or "{}")
    epochs = int(os.environ.get("HYPERFARM_MAX_EPOCHS") or hp.get("epochs", 2))
    ckdir = os.environ.get("HYPERFARM_CHECKPOINT_DIR") or "."
    data_dir = os.environ.get("FMNIST_DIR", "/usr/share/datasets/fashion-mnist")
    lr = float(hp.get("lr", 0.05))
    hidden = int(hp.get("hidden", 128))
    batch = int(hp.get("batch_size", 64))
    opt_name = str(hp.get("optimizer", "sgd"))
    seed = int(hp.get("seed", 1))
    train_size = int(hp.get("train_size", 60000))
    val_size = int(hp.get("val_size", 10000))
    epoch_sleep = float(hp.get("epoch_sleep", 0))
    torch.set_num_threads(int(hp.get("threads", 1)))
    torch.manual_seed(seed)
    os.makedirs(ckdir, exist_ok=True)

    xtr, ytr = load(data_dir, "train", train_size)
    xva, yva = load(data_dir, "t10k", val_size)
    model = torch.nn.Sequential(torch.nn.Linear(784, hidden), torch.nn.ReLU(), torch.nn.Linear(hidden, 10))
    if opt_name == "adam":
        opt = torch.optim.Adam(model.parameters(), lr=lr)
    elif opt_name == "sgd":
        opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=float(hp.get("momentum", 0.9)))
    else:
        sys.exit("optimizer %r: want sgd or adam" % opt_name)

    start, step = 0, 0
    path = os.path.join(ckdir, "model.pt")
    if os.path.exists(path):
        state = torch.load(path)
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["optimizer"])
        torch.set_rng_state(state["rng"])
        start, step = state["epoch"], state["step"]
        print("resuming from %s: epoch %d done, step %d" % (path, start, step), flush=True)

    for epoch in range(start + 1, epochs + 1):
        t0 = time.time()
        model.train()
        perm = torch.randperm(len(xtr))
        total, n = 0.0, 0
        for i in range(0, len(xtr), batch):
            if stop:
                print("stop requested during epoch %d; last checkpoint: epoch %d" % (epoch, epoch - 1), flush=True)
                return 0
            idx = perm[i:i + batch]
            loss = F.cross_entropy(model(xtr[idx]), ytr[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
            total += loss.item() * len(idx)
            n += len(idx)
            step += 1
        model.eval()
        with torch.no_grad():
            out = model(xva)
            val_loss = F.cross_entropy(out, yva).item()
            val_acc = (out.argmax(1) == yva).float().mean().item()
        ck = save_checkpoint(ckdir, {"model": model.state_dict(), "optimizer": opt.state_dict(),
                                     "rng": torch.get_rng_state(), "epoch": epoch, "step": step})
        report(epoch=epoch, step=step, train_loss=total / max(n, 1), val_loss=val_loss, val_acc=val_acc,
               samples_per_s=n / max(time.time() - t0, 1e-9), checkpoint=ck)
        if epoch < epochs and epoch_sleep > 0:       # pacing for demos and stop/resume tests
            end = time.time() + epoch_sleep
            while not stop and time.time() < end:
                time.sleep(0.05)
    return 0


if __name__ == "__main__":
    sys.exit(main())
