#!/usr/bin/env python3
"""Greedy generation with the ptc Python package over the decode-step library.

    python examples/generate/generate.py decode.so N PROMPT_TOKEN...
"""
import sys

import torch

import ptc


def generate(lib, prompt, new_tokens):
    """Feeds `prompt` token by token, then returns `new_tokens` greedy tokens."""
    lib.reset_state()  # a new sequence: an empty cache
    out, token = [], prompt[0]
    for step in range(len(prompt) + new_tokens - 1):
        (logits,) = lib(torch.tensor([[token]]), torch.tensor([step]))
        if step + 1 < len(prompt):
            token = prompt[step + 1]
            continue
        token = int(logits[0, -1].argmax())
        out.append(token)
    return out


if __name__ == "__main__":
    lib = ptc.load(sys.argv[1])
    print(" ".join(map(str, generate(lib, [int(t) for t in sys.argv[3:]], int(sys.argv[2])))))
