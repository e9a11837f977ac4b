#!/usr/bin/env python3
"""Decoder LLMs from transformers, compiled by ptc and checked against the exported modules.

    .venv/bin/python test/llm_test.py --ptc-binary build/ptc [--families llama,qwen2] [--device cpu]

For each family (small random-weight configurations of Llama, Mistral, Qwen2 and Phi):
  - the whole-sequence forward (logits; dynamic batch and sequence length), compared with the
    exported module at several (batch, length) shapes;
  - the decode step with a static KV cache (transformers' convert_and_export_with_cache: one token
    per call, the cache held as buffers the program updates in place), both as exported and after
    run_decompositions (the functional form with buffer mutations). A prompt is fed token by
    token, then greedy tokens; the library's logits are compared with the module's at each of
    --steps consecutive steps and the greedy tokens must agree. Then the library's state buffers
    must equal the module's, ptc_reset_state must start a new sequence, and the report's arena
    must hold no copy of the cache (the update is in place).
Tolerance: atol = rtol = 1e-3 on the logits (CPU). Exits 1 on any failure.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import warnings

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scripts"))
import ptc  # noqa: E402
from export_models import HFWrapper  # noqa: E402  (input_ids -> logits)

warnings.filterwarnings("ignore")
TOL = 1e-3
VOCAB = 256
MAX_CACHE = 64


def make_model(family, seed=0):
    """A small random-weight decoder of `family` (eval mode, fp32)."""
    import transformers as tf
    torch.manual_seed(seed)
    common = dict(vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                  max_position_embeddings=256)
    if family == "llama":
        cfg, cls = tf.LlamaConfig(num_key_value_heads=2, tie_word_embeddings=True, **common), tf.LlamaForCausalLM
    elif family == "mistral":
        cfg, cls = tf.MistralConfig(num_key_value_heads=2, sliding_window=None, **common), tf.MistralForCausalLM
    elif family == "qwen2":
        cfg, cls = tf.Qwen2Config(num_key_value_heads=2, tie_word_embeddings=True, **common), tf.Qwen2ForCausalLM
    elif family == "phi":
        cfg, cls = tf.PhiConfig(num_key_value_heads=4, partial_rotary_factor=0.5, **common), tf.PhiForCausalLM
    else:
        raise SystemExit(f"unknown family {family}")
    model = cls(cfg).eval()
    with torch.no_grad():  # random biases and norms, so that every parameter matters
        for name, p in model.named_parameters():
            if name.endswith("bias") or "norm" in name:
                p.add_(torch.randn_like(p) * 0.1)
    return model


def export_full(model, path):
    ids = torch.randint(0, VOCAB, (2, 16))
    dims = ({0: torch.export.Dim("batch", min=1, max=8), 1: torch.export.Dim.AUTO},)
    ep = torch.export.export(HFWrapper(model, "logits"), (ids,), dynamic_shapes=dims)
    torch.export.save(ep, path)
    return ep


def export_decode(model, path, functional):
    from transformers import GenerationConfig
    from transformers.integrations.executorch import convert_and_export_with_cache
    model.generation_config = GenerationConfig(use_cache=True, cache_implementation="static", max_length=MAX_CACHE,
                                               cache_config={"batch_size": 1, "max_cache_len": MAX_CACHE})
    ep = convert_and_export_with_cache(model)
    if functional:
        ep = ep.run_decompositions({})
    torch.export.save(ep, path)
    return ep


def compile_lib(args, src, out, extra=()):
    cmd = [args.ptc_binary, "compile", src, "-o", out, "--device", args.device, *extra]
    res = subprocess.run(cmd, capture_output=True, text=True)
    if res.returncode != 0:
        raise AssertionError(f"{' '.join(cmd)}: {res.stderr.strip()}")


def first(x):
    return x[0] if isinstance(x, (tuple, list)) else x


def close(ref, got, what):
    ref, got = ref.detach().float().cpu(), got.detach().float().cpu()
    if ref.shape != got.shape:
        raise AssertionError(f"{what}: shape {tuple(got.shape)}, expected {tuple(ref.shape)}")
    err = (ref - got).abs().max().item() if ref.numel() else 0.0
    if not torch.allclose(got, ref, atol=TOL, rtol=TOL):
        raise AssertionError(f"{what}: max abs error {err:.3g} beyond atol = rtol = {TOL}")
    return err


def check_full(args, family, model, work):
    pt2, so = os.path.join(work, f"{family}_full.pt2"), os.path.join(work, f"{family}_full.so")
    ep = export_full(model, pt2)
    compile_lib(args, pt2, so)
    mod, lib = ep.module(), ptc.load(so)
    worst = 0.0
    for b, t in [(1, 2), (2, 16), (3, 37), (1, 100)]:
        ids = torch.randint(0, VOCAB, (b, t))
        with torch.no_grad():
            ref = mod(ids)
        got = first(lib(ids.to(args.device)))
        worst = max(worst, close(ref, got, f"{family} forward {b}x{t}"))
    return f"forward at 4 shapes, max error {worst:.2g}"


def state_of(mod):
    return {name.split(".")[-1]: b for name, b in mod.named_buffers()}


def check_decode(args, family, model, work, functional):
    tag = "functional" if functional else "in-place"
    pt2 = os.path.join(work, f"{family}_decode_{tag}.pt2")
    so = os.path.join(work, f"{family}_decode_{tag}.so")
    report = os.path.join(work, f"{family}_decode_{tag}.json")
    ep = export_decode(model, pt2, functional)
    compile_lib(args, pt2, so, ["--report", report])
    mod, lib = ep.module(), ptc.load(so)
    names = [i.name for i in lib.inputs]
    if names != ["input_ids", "cache_position"]:
        raise AssertionError(f"{family}: inputs {names}")
    prompt = torch.randint(0, VOCAB, (8,)).tolist()
    tokens, worst, agree = [], 0.0, 0
    tok = prompt[0]
    for step in range(args.steps):
        ids = torch.tensor([[tok]])
        pos = torch.tensor([step])
        with torch.no_grad():
            ref = mod(input_ids=ids, cache_position=pos)
        got = first(lib(ids.to(args.device), pos.to(args.device)))
        worst = max(worst, close(ref, got, f"{family} decode ({tag}) step {step}"))
        nxt_ref, nxt = int(ref[0, -1].argmax()), int(got[0, -1].argmax())
        if step + 1 >= len(prompt):
            if nxt != nxt_ref:
                raise AssertionError(f"{family} decode ({tag}) step {step}: greedy token {nxt}, the module's {nxt_ref}")
            agree += 1
            tokens.append(nxt)
        tok = prompt[step + 1] if step + 1 < len(prompt) else nxt
    # The state: every buffer as the module's after the same calls.
    ref_state = state_of(mod)
    for name, val in lib.buffers().items():
        if name not in ref_state:
            raise AssertionError(f"{family}: the library holds '{name}', which the module has not")
        close(ref_state[name], val, f"{family} decode ({tag}) buffer {name}")
    # A new sequence after ptc_reset_state: the first step's logits again.
    lib.reset_state()
    ids = torch.tensor([[prompt[0]]])
    mod2 = torch.export.load(pt2).module()
    with torch.no_grad():
        ref = mod2(input_ids=ids, cache_position=torch.tensor([0]))
    close(ref, first(lib(ids.to(args.device), torch.tensor([0]).to(args.device))), f"{family} decode ({tag}) after reset")
    # In place: the run's workspace holds no copy of the caches.
    with open(report) as f:
        rep = json.load(f)
    arena = rep["arena"]["bytes_at_max_sizes"]
    caches = [s for s in rep["state"] if "cache" in s["buffer"]]
    cache = sum(s["bytes"] for s in caches)
    if len(caches) != 4 or not all(s["in_place"] for s in caches):
        raise AssertionError(f"{family} decode ({tag}): the report's state {rep['state']} (every cache in place expected)")
    if arena >= cache // 4:
        raise AssertionError(f"{family} decode ({tag}): a {arena}-byte arena for {cache} bytes of cache (a copy?)")
    return f"decode ({tag}): {args.steps} steps, max error {worst:.2g}, {agree} greedy tokens agree, arena {arena} B"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ptc-binary", required=True)
    ap.add_argument("--families", default="llama,mistral,qwen2,phi")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--steps", type=int, default=32)
    ap.add_argument("--work", default=None, help="keep exports and libraries here")
    args = ap.parse_args()
    failures = 0
    with tempfile.TemporaryDirectory(prefix="ptc-llm-") as tmp:
        work = args.work or tmp
        os.makedirs(work, exist_ok=True)
        for family in args.families.split(","):
            model = make_model(family)
            for name, fn in [("forward", lambda: check_full(args, family, model, work)),
                             ("decode", lambda: check_decode(args, family, model, work, False)),
                             ("decode functional", lambda: check_decode(args, family, model, work, True))]:
                try:
                    print(f"ok   {family} {fn()}", flush=True)
                except AssertionError as e:
                    failures += 1
                    print(f"FAIL {family} {name}: {e}", flush=True)
    print(f"{failures} failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
