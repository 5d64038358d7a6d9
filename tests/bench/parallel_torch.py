# The PyTorch side of tests/bench/bench_parallel.c: one of two processes
# (rank 0 or 1) joined by torch.distributed with the Gloo backend over a
# file:// rendezvous, one thread each. Rank 0 prints one line per figure:
#   allreduce BYTES MEDIAN_S MIN_S MAX_S   (one all_reduce of BYTES of f32)
#   ddp BATCH MEDIAN_S MIN_S MAX_S         (one DDP train step of the MLP)
# timed after warm-up, every iteration bracketed by barriers so both ranks
# start together (the median over the iterations).
#
#   python3 parallel_torch.py RANK INIT_FILE ITERS_4M ITERS_64M DDP_STEPS
import os
import sys
import time

import torch
import torch.distributed as dist

torch.set_num_threads(1)
rank, init_file = int(sys.argv[1]), sys.argv[2]
iters_small, iters_large, ddp_steps = int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
dist.init_process_group("gloo", init_method="file://" + init_file, rank=rank, world_size=2)


def timed(fn, iters, warmup):
    for _ in range(warmup):
        fn()
    ts = []
    for _ in range(iters):
        dist.barrier()
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    ts.sort()
    return ts[len(ts) // 2], ts[0], ts[-1]


for nbytes, iters in ((4 << 20, iters_small), (64 << 20, iters_large)):
    x = torch.ones(nbytes // 4, dtype=torch.float32)
    med, lo, hi = timed(lambda: dist.all_reduce(x), iters, 2)
    if rank == 0:
        print(f"allreduce {nbytes} {med:.6f} {lo:.6f} {hi:.6f}", flush=True)

# The MLP 784-256-256-10, SGD 0.1, batch 128 per process, the same initial
# weights on both (DDP broadcasts rank 0's); each rank its own batches of a
# u8 data set, scaled to [0, 1] at every step as graphrun's example does.
torch.manual_seed(0)
model = torch.nn.Sequential(
    torch.nn.Linear(784, 256), torch.nn.ReLU(), torch.nn.Linear(256, 256), torch.nn.ReLU(),
    torch.nn.Linear(256, 10))
ddp = torch.nn.parallel.DistributedDataParallel(model)
opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
g = torch.Generator().manual_seed(rank)
data_x = torch.randint(0, 256, (4096, 784), dtype=torch.uint8, generator=g)
data_y = torch.randint(0, 10, (4096,), generator=g)
pos = [0]


def step():
    i = pos[0] % 32 * 128
    pos[0] += 1
    x = data_x[i:i + 128].float().mul_(1 / 255)
    loss = torch.nn.functional.cross_entropy(ddp(x), data_y[i:i + 128])
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()


if ddp_steps > 0:
    for _ in range(10):
        step()
    dist.barrier()
    # per step: the steps' total time over a few blocks (a barrier per block only)
    blocks, ts = 5, []
    for _ in range(blocks):
        dist.barrier()
        t0 = time.perf_counter()
        for _ in range(max(1, ddp_steps // blocks)):
            step()
        ts.append((time.perf_counter() - t0) / max(1, ddp_steps // blocks))
    ts.sort()
    if rank == 0:
        print(f"ddp 128 {ts[len(ts) // 2]:.6f} {ts[0]:.6f} {ts[-1]:.6f}", flush=True)
dist.barrier()
dist.destroy_process_group()
os._exit(0)
