#!/usr/bin/python3
"""bench/allreduce_gloo.py — the Gloo side of bench/allreduce.

Starts --np ranks (processes) that join a torch.distributed gloo group on
loopback and, for each size, time the same loop bench/allreduce.c times for
our ring and Open MPI: 2 warm-up allreduces, a barrier, enough timed
iterations to move about --min-bytes, the slowest rank's time per call;
then the same exact-integer correctness check. Rank 0 prints
"RESULT <size index> <seconds per allreduce> <1 if correct>" lines.
One intra-op thread per rank, as the C ranks use.
"""
import argparse
import os
import socket
import sys
import time


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def rank_main(rank, world, port, sizes, min_bytes, min_iters):
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    for k, size in enumerate(sizes):
        n = size // 4
        buf = (torch.arange(n, dtype=torch.float32) % 1000) * 0.001
        iters = int(max(min_iters, min(2000, min_bytes / size)))
        for _ in range(2):
            dist.all_reduce(buf)
        dist.barrier()
        t0 = time.perf_counter()
        for _ in range(iters):
            dist.all_reduce(buf)
        dt = torch.tensor([(time.perf_counter() - t0) / iters])
        dist.all_reduce(dt, op=dist.ReduceOp.MAX)
        idx = torch.arange(n, dtype=torch.int64)
        buf = ((idx + rank * 3) % 17).to(torch.float32)
        dist.all_reduce(buf)
        want = torch.zeros(n, dtype=torch.float32)
        for q in range(world):
            want += ((idx + q * 3) % 17).to(torch.float32)
        ok = torch.tensor([1.0 if torch.equal(buf, want) else 0.0])
        dist.all_reduce(ok)
        if rank == 0:
            print(f"RESULT {k} {dt.item():.9f} {1 if ok.item() == world else 0}", flush=True)
    dist.destroy_process_group()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--np", type=int, default=2)
    ap.add_argument("--sizes", default="4096")
    ap.add_argument("--min-bytes", type=float, default=1 << 30)
    ap.add_argument("--min-iters", type=int, default=5)
    ap.add_argument("--rank", type=int, default=-1)
    ap.add_argument("--port", type=int, default=0)
    a = ap.parse_args()
    sizes = [int(s) for s in a.sizes.split(",")]
    if a.rank >= 0:
        rank_main(a.rank, a.np, a.port, sizes, a.min_bytes, a.min_iters)
        return 0
    import subprocess
    port = free_port()
    procs = [subprocess.Popen([sys.executable, __file__, "--np", str(a.np), "--sizes", a.sizes,
                               "--min-bytes", str(a.min_bytes), "--min-iters", str(a.min_iters),
                               "--rank", str(r), "--port", str(port)],
                              env=dict(os.environ, OMP_NUM_THREADS="1"))
             for r in range(a.np)]
    rc = 0
    for p in procs:
        rc |= p.wait()
    return 1 if rc else 0


if __name__ == "__main__":
    sys.exit(main())
