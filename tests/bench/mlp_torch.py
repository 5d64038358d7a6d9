#!/usr/bin/python3
"""The PyTorch side of bench_mlp: the same MLP train step (784-256-256-10,
ReLU, softmax cross-entropy, SGD 0.1) on the same data and initial weights,
one thread. Prints the loss of the first step and the median ms per step."""
import sys

import numpy as np
import torch

from torch_steps import median_step_ms


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
    first, ms = median_step_ms(model, opt, loss_fn, x, y, steps, warmup=3)
    print(f"first_loss={first:.6f} ms_per_step={ms:.4f}")


if __name__ == "__main__":
    main()
