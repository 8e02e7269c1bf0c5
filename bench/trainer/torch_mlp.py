#!/usr/bin/python3
"""PyTorch peer for bench/trainer: the same MLP 784-256-128-10, batch 128,
Adam lr 1e-3, same normalisation, same 55k/5k split, on the CPU with the
given threads. Prints one line:
    torch samples_per_s X test_acc Y epochs E threads T
samples/s counts training steps only (as hyperfarm-train's samples_per_s).
The batches are sliced from one tensor (no DataLoader), PyTorch's fastest
CPU loop, so the comparison is with PyTorch at its best."""
import gzip, os, sys, time
import numpy as np
import torch

def idx(path):
    with gzip.open(path, 'rb') as f:
        b = f.read()
    nd = b[3]
    dims = [int.from_bytes(b[4 + 4 * i:8 + 4 * i], 'big') for i in range(nd)]
    return np.frombuffer(b, dtype=np.uint8, offset=4 + 4 * nd).reshape(dims)

def main():
    data, epochs, threads = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    torch.set_num_threads(threads)
    torch.manual_seed(1)
    xtr = idx(f'{data}/train-images-idx3-ubyte.gz').reshape(-1, 784).astype(np.float32) / 255.0
    ytr = idx(f'{data}/train-labels-idx1-ubyte.gz').astype(np.int64)
    xte = idx(f'{data}/t10k-images-idx3-ubyte.gz').reshape(-1, 784).astype(np.float32) / 255.0
    yte = idx(f'{data}/t10k-labels-idx1-ubyte.gz').astype(np.int64)
    mean, std = xtr.mean(), xtr.std()
    xtr, xte = (xtr - mean) / std, (xte - mean) / std
    xtr, ytr = torch.from_numpy(xtr[:55000].copy()), torch.from_numpy(ytr[:55000].copy())
    xte, yte = torch.from_numpy(xte), torch.from_numpy(yte)
    model = torch.nn.Sequential(torch.nn.Linear(784, 256), torch.nn.ReLU(), torch.nn.Linear(256, 128),
                                torch.nn.ReLU(), torch.nn.Linear(128, 10))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    lossf = torch.nn.CrossEntropyLoss()
    B, n, busy, seen = 128, xtr.shape[0], 0.0, 0
    g = torch.Generator().manual_seed(1)
    for ep in range(epochs):
        perm = torch.randperm(n, generator=g)
        xs, ys = xtr[perm], ytr[perm]
        t0 = time.perf_counter()
        for s in range(0, n, B):
            xb, yb = xs[s:s + B], ys[s:s + B]
            opt.zero_grad(set_to_none=True)
            loss = lossf(model(xb), yb)
            loss.backward()
            opt.step()
            seen += xb.shape[0]
        busy += time.perf_counter() - t0
    with torch.no_grad():
        acc = (model(xte).argmax(1) == yte).float().mean().item()
    print(f'torch samples_per_s {seen / busy:.0f} test_acc {acc:.4f} epochs {epochs} threads {threads} '
          f'torch {torch.__version__}')

if __name__ == '__main__':
    main()
