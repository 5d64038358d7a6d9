#!/usr/bin/python3
"""The PyTorch side of bench_train: the Fashion-MNIST MLP (784-256-256-10,
ReLU, softmax cross-entropy, SGD 0.1, batch 128) trained for a number of
steps with the shuffling rule of examples/fashion_mlp.gr: 60000 // 128 = 468
batches per epoch, the rows of epoch e in a permutation drawn from
(seed, e), the last partial batch of an epoch left out.

    train_torch.py DATA_DIR THREADS STEPS SEED [serve]

With serve, it runs a number of steps for each line read from stdin (a
slice), answers "ran N SECONDS" for each, and ends at end of input: a
caller interleaves the engines' slices, so that a change of the machine's
speed hits both.

The images become f32 in [0, 1] once, before the loop (as a PyTorch user
writes it); each step gathers its rows, runs forward, backward and the
update, and reads the loss as a Python float (loss.item(), as a progress
display does). The clock starts after the first step, as in bench_train.
Prints: seconds=S steps=N loss=L acc=A threads=T"""
import gzip
import sys
import time

import numpy as np
import torch

BATCH = 128


def read_idx(path):
    with gzip.open(path, "rb") as f:
        data = f.read()
    ndim = data[3]
    dims = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(ndim)]
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)


def main():
    d, threads, steps, seed = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    serve = len(sys.argv) > 5 and sys.argv[5] == "serve"
    torch.set_num_threads(threads)
    torch.manual_seed(seed)
    x = torch.from_numpy(read_idx(f"{d}/train-images-idx3-ubyte.gz").reshape(-1, 784).astype(np.float32) / 255)
    y = torch.from_numpy(read_idx(f"{d}/train-labels-idx1-ubyte.gz").astype(np.int64))
    tx = torch.from_numpy(read_idx(f"{d}/t10k-images-idx3-ubyte.gz").reshape(-1, 784).astype(np.float32) / 255)
    ty = torch.from_numpy(read_idx(f"{d}/t10k-labels-idx1-ubyte.gz").astype(np.int64))
    layers = [torch.nn.Linear(784, 256), torch.nn.Linear(256, 256), torch.nn.Linear(256, 10)]
    for lin in layers:  # glorot_uniform weights and zero biases, as the .gr file
        torch.nn.init.xavier_uniform_(lin.weight)
        torch.nn.init.zeros_(lin.bias)
    model = torch.nn.Sequential(layers[0], torch.nn.ReLU(), layers[1], torch.nn.ReLU(), layers[2])
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    loss_fn = torch.nn.CrossEntropyLoss()
    per_epoch = x.shape[0] // BATCH
    state = {"perm": None, "epoch": -1, "loss": 0.0}

    def step(s):
        epoch = s // per_epoch
        if epoch != state["epoch"]:
            g = torch.Generator().manual_seed(seed * 1000003 + epoch)
            state["perm"], state["epoch"] = torch.randperm(x.shape[0], generator=g), epoch
        rows = state["perm"][(s % per_epoch) * BATCH:(s % per_epoch + 1) * BATCH]
        opt.zero_grad()
        loss = loss_fn(model(x[rows]), y[rows])
        loss.backward()
        opt.step()
        state["loss"] = loss.item()

    def run(first, n):  # steps first..first+n-1; seconds of those after step 0
        t0 = None
        for s in range(first, min(first + n, steps)):
            if s >= 1 and t0 is None:
                t0 = time.perf_counter()
            step(s)
        return time.perf_counter() - t0 if t0 is not None else 0.0

    seconds, done = 0.0, 0
    if serve:  # slices of steps on request, so that a caller can interleave engines
        for line in sys.stdin:
            n = int(line)
            sec = run(done, n)
            done, seconds = min(done + n, steps), seconds + sec
            print(f"ran {n} {sec:.6f}", flush=True)
    else:
        seconds = run(0, steps)
    total = state["loss"]
    with torch.no_grad():
        acc = (model(tx).argmax(1) == ty).float().mean().item()
    print(f"seconds={seconds:.4f} steps={steps} loss={total:.6f} acc={acc:.4f} threads={threads}")


if __name__ == "__main__":
    main()
