#!/usr/bin/python3
"""The PyTorch side of bench_conv: one training step (forward, backward,
Adam 1e-3) of the CNN of examples/fashion_cnn.gr on random data, one
thread (or THREADS). Usage: conv_torch.py BATCH STEPS [THREADS]; prints the median ms
per step."""
import sys

import torch
from torch import nn

from torch_steps import median_step_ms


def main():
    b, steps = int(sys.argv[1]), int(sys.argv[2])
    torch.set_num_threads(int(sys.argv[3]) if len(sys.argv) > 3 else 1)
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Conv2d(1, 32, 3, padding=1, bias=False), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 3, padding=1, bias=False), nn.BatchNorm2d(64), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Dropout(0.3), nn.Linear(3136, 128), nn.ReLU(), nn.Linear(128, 10))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    loss_fn = nn.CrossEntropyLoss()
    x = torch.rand(b, 1, 28, 28)
    y = torch.randint(0, 10, (b,))
    _, ms = median_step_ms(model, opt, loss_fn, x, y, steps, warmup=2)
    print(f"ms_per_step={ms:.4f}")


if __name__ == "__main__":
    main()
