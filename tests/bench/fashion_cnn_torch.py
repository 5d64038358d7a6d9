#!/usr/bin/python3
"""PyTorch reference for examples/fashion_cnn.gr: the same CNN (flip and
crop-with-padding augmentation, two conv 3x3 + batch norm (momentum 0.9 in
Keras terms) + ReLU + max pool blocks, dropout 0.3, dense 128, dense 10),
Adam 1e-3, batch 128, 468 steps an epoch, one thread; prints the test
accuracy after each epoch. Usage: fashion_cnn_torch.py [EPOCHS] [CROP_PADDING] [SEED] [BLOCKS]"""
import gzip
import sys

import numpy as np
import torch
from torch import nn

D = "/usr/share/datasets/fashion-mnist/"


def idx(name, offset):
    with gzip.open(D + name) as f:
        return np.frombuffer(f.read(), np.uint8, offset=offset)


def main():
    epochs = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    pad = int(sys.argv[2]) if len(sys.argv) > 2 else 2
    torch.set_num_threads(1)
    torch.manual_seed(int(sys.argv[3]) if len(sys.argv) > 3 else 0)
    xtr = torch.from_numpy(idx("train-images-idx3-ubyte.gz", 16).reshape(-1, 1, 28, 28).copy())
    ytr = torch.from_numpy(idx("train-labels-idx1-ubyte.gz", 8).astype(np.int64))
    xte = torch.from_numpy(idx("t10k-images-idx3-ubyte.gz", 16).reshape(-1, 1, 28, 28).copy())
    yte = torch.from_numpy(idx("t10k-labels-idx1-ubyte.gz", 8).astype(np.int64))
    xtr, xte = xtr.float() / 255, xte.float() / 255
    blocks = int(sys.argv[4]) if len(sys.argv) > 4 else 2
    chans = [1, 32, 64, 128][:blocks + 1]
    layers = []
    for cin, cout in zip(chans, chans[1:]):
        # MaxPool2d(ceil_mode=True) is TensorFlow's SAME pooling: 7x7 -> 4x4
        layers += [nn.Conv2d(cin, cout, 3, padding=1, bias=False),
                   nn.BatchNorm2d(cout, momentum=0.1), nn.ReLU(), nn.MaxPool2d(2, ceil_mode=True)]
    side = 28
    for _ in range(blocks):
        side = (side + 1) // 2
    model = nn.Sequential(
        *layers, nn.Flatten(), nn.Dropout(0.3), nn.Linear(side * side * chans[-1], 128), nn.ReLU(),
        nn.Linear(128, 10))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    loss_fn = nn.CrossEntropyLoss()
    for e in range(epochs):
        model.train()
        perm = torch.randperm(60000)
        for s in range(468):
            i = perm[s * 128:(s + 1) * 128]
            x = xtr[i]
            flip = torch.rand(128) < 0.5
            x[flip] = x[flip].flip(3)
            if pad:
                xp = nn.functional.pad(x, (pad, pad, pad, pad))
                off = torch.randint(0, 2 * pad + 1, (128, 2))
                x = torch.stack([xp[k, :, off[k, 0]:off[k, 0] + 28, off[k, 1]:off[k, 1] + 28]
                                 for k in range(128)])
            opt.zero_grad()
            loss = loss_fn(model(x), ytr[i])
            loss.backward()
            opt.step()
        model.eval()
        with torch.no_grad():
            hits = sum((model(xte[k:k + 500]).argmax(1) == yte[k:k + 500]).sum().item()
                       for k in range(0, 10000, 500))
        print(f"epoch {e + 1}: loss {loss.item():.4f} test accuracy {hits / 10000:.4f}", flush=True)


if __name__ == "__main__":
    main()
