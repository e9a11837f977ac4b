#!/usr/bin/env python3
"""Exports a small Llama-style decoder (random weights) as one decode step with a static KV cache.

    .venv/bin/python examples/generate/export.py OUT_DIR [--new-tokens N]

Writes OUT_DIR/decode.pt2 (transformers' convert_and_export_with_cache: inputs input_ids [1, 1]
and cache_position [1]; the key/value caches are buffers the step updates in place) and
OUT_DIR/expected.txt: the prompt's tokens on the first line and, on the second, the tokens that
transformers' model.generate(do_sample=False) continues it with, for the C++ and Python
generators to reproduce.
"""
import argparse
import os
import warnings

import torch
from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM
from transformers.integrations.executorch import convert_and_export_with_cache

warnings.filterwarnings("ignore")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out_dir")
    ap.add_argument("--new-tokens", type=int, default=16)
    ap.add_argument("--max-cache", type=int, default=64)
    args = ap.parse_args()
    os.makedirs(args.out_dir, exist_ok=True)
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=512, hidden_size=128, intermediate_size=256, num_hidden_layers=2, num_attention_heads=4,
                      num_key_value_heads=2, max_position_embeddings=256, tie_word_embeddings=True)
    model = LlamaForCausalLM(cfg).eval()
    prompt = torch.randint(0, cfg.vocab_size, (1, 8))
    with torch.no_grad():
        out = model.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=args.new_tokens,
                             do_sample=False, pad_token_id=0)
    new = out[0, prompt.shape[1]:].tolist()
    model.generation_config = GenerationConfig(use_cache=True, cache_implementation="static", max_length=args.max_cache,
                                               cache_config={"batch_size": 1, "max_cache_len": args.max_cache})
    ep = convert_and_export_with_cache(model)
    torch.export.save(ep, os.path.join(args.out_dir, "decode.pt2"))
    with open(os.path.join(args.out_dir, "expected.txt"), "w") as f:
        f.write(" ".join(map(str, prompt[0].tolist())) + "\n" + " ".join(map(str, new)) + "\n")
    print(f"wrote {args.out_dir}/decode.pt2 and expected.txt ({len(new)} tokens from model.generate)")


if __name__ == "__main__":
    main()
