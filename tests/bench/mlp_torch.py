#!/usr/bin/python3
"""The PyTorch side of bench_mlp: the same MLP train step (784-256-256-10,
ReLU, softmax cross-entropy, SGD 0.1) on the same data and initial weights,
one thread. Prints the loss of the first step and the median ms per step."""
import sys
import time

import numpy as np
import torch


def main():
    d, steps = sys.argv[1], int(sys.argv[2])
    torch.set_num_threads(1)
    x = torch.from_numpy(np.load(f"{d}/x.npy"))
    y = torch.from_numpy(np.load(f"{d}/y.npy"))
    layers = []
    for i in range(3):
        lin = torch.nn.Linear(1, 1)
        lin.weight = torch.nn.Parameter(torch.from_numpy(np.load(f"{d}/w{i}.npy")).t().contiguous())
        lin.bias = torch.nn.Parameter(torch.zeros(lin.weight.shape[0]))
        layers.append(lin)
    model = torch.nn.Sequential(layers[0], torch.nn.ReLU(), layers[1], torch.nn.ReLU(), layers[2])
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    loss_fn = torch.nn.CrossEntropyLoss()
    times, first = [], None
    for s in range(steps + 3):
        t0 = time.perf_counter()
        opt.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        dt = time.perf_counter() - t0
        if first is None:
            first = loss.item()
        if s >= 3:
            times.append(dt)
    times.sort()
    print(f"first_loss={first:.6f} ms_per_step={1e3 * times[len(times) // 2]:.4f}")


if __name__ == "__main__":
    main()
