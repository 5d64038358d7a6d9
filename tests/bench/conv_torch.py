#!/usr/bin/python3
"""The PyTorch side of bench_conv: training steps (forward, backward, Adam
1e-3) of the CNN of examples/fashion_cnn.gr on random data, on one thread
(or THREADS). Usage: conv_torch.py BATCH STEPS [THREADS [serve]]; prints
the median ms per step. With serve, after two warm-up steps it runs a
number of steps for each line read from stdin (a slice), answering "ran N
SECONDS" (their sum), until end of input: bench_conv interleaves its
engines' slices."""
import sys
import time

import torch
from torch import nn

from torch_steps import median_step_ms


def main():
    b, steps = int(sys.argv[1]), int(sys.argv[2])
    torch.set_num_threads(int(sys.argv[3]) if len(sys.argv) > 3 else 1)
    serve = len(sys.argv) > 4 and sys.argv[4] == "serve"
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Conv2d(1, 32, 3, padding=1, bias=False), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 3, padding=1, bias=False), nn.BatchNorm2d(64), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Dropout(0.3), nn.Linear(3136, 128), nn.ReLU(), nn.Linear(128, 10))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    loss_fn = nn.CrossEntropyLoss()
    x = torch.rand(b, 1, 28, 28)
    y = torch.randint(0, 10, (b,))
    if not serve:
        _, ms = median_step_ms(model, opt, loss_fn, x, y, steps, warmup=2)
        print(f"ms_per_step={ms:.4f}")
        return
    median_step_ms(model, opt, loss_fn, x, y, 1, warmup=1)
    for line in sys.stdin:
        n = int(line)
        t0 = time.perf_counter()
        for _ in range(n):
            opt.zero_grad()
            loss_fn(model(x), y).backward()
            opt.step()
        print(f"ran {n} {time.perf_counter() - t0:.6f}", flush=True)


if __name__ == "__main__":
    main()
