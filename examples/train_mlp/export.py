#!/usr/bin/env python3
"""Exports the model that train.cpp trains: a small MLP regressor with its loss inside the graph.

    .venv/bin/python examples/train_mlp/export.py OUT.pt2

forward(x, y) returns the mean squared error of mlp(x) against y, so the training library's one
output is the loss and its gradient input is 1. Random initial weights (seeded); batch 64.
"""
import sys

import torch
import torch.nn as nn


class Regressor(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(8, 64), nn.Tanh(), nn.Linear(64, 64), nn.GELU(), nn.Linear(64, 1))

    def forward(self, x, y):
        d = self.net(x) - y
        return (d * d).mean()


def main():
    torch.manual_seed(0)
    model = Regressor()
    x, y = torch.randn(64, 8), torch.randn(64, 1)
    ep = torch.export.export(model, (x, y))
    torch.export.save(ep, sys.argv[1] if len(sys.argv) > 1 else "train_mlp.pt2")


if __name__ == "__main__":
    main()
