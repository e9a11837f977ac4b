#!/usr/bin/env python3
"""Decoder LLM latency: ptc against eager and torch.compile of the same exports, in one process.

    OMP_NUM_THREADS=2 .venv/bin/python scripts/bench_llm.py [--threads 2] [--device cpu|cuda]
        [--layers 12 --hidden 768 ...] [--cuda-graphs] [--gpu-profile N] [--json out.json]

The model: a Llama from transformers with random weights (default: about 100M parameters: 12
layers, hidden 768, 12 heads with 4 key/value heads, MLP 2048, vocabulary 32000, tied embeddings).
Two exports, each compiled by ptc and run through the ptc package:
  - decode: transformers' convert_and_export_with_cache (one token per call, a static KV cache of
    --max-cache positions held by the library). The cache is first filled to P positions (P in
    --fill, default 32 and 256), then the step at position P is timed (each timed call writes the
    same slot, so the work per call stays that of a cache filled to P).
  - prefill: the whole-sequence forward (logits) on 1 x --prefill tokens.
Compared: eager (the exported module), torch.compile of it (default mode on the CPU;
reduce-overhead on CUDA, where --cuda-graphs also builds ptc with CUDA graphs), and ptc.
Latency = the best over --rounds rounds of the median of --reps calls, the backends taking turns.
Ratios are eager/ptc and torch.compile/ptc, side by side from one run; the CPU model is printed.
"""
import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n", 2)[2])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--cuda-graphs", action="store_true")
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--hidden", type=int, default=768)
    ap.add_argument("--heads", type=int, default=12)
    ap.add_argument("--kv-heads", type=int, default=4)
    ap.add_argument("--intermediate", type=int, default=2048)
    ap.add_argument("--vocab", type=int, default=32000)
    ap.add_argument("--max-cache", type=int, default=512)
    ap.add_argument("--fill", type=int, nargs="+", default=[32, 256])
    ap.add_argument("--prefill", type=int, default=128)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--no-compile", action="store_true", help="skip torch.compile")
    ap.add_argument("--ptc-binary", default=str(ROOT / "build" / "ptc"))
    ap.add_argument("--work", default=None)
    ap.add_argument("--json", default=None)
    ap.add_argument("--gpu-profile", type=int, default=0, metavar="N",
                    help="on CUDA, also profile each backend's decode step at the largest fill: GPU time and top N kernels")
    return ap.parse_args()


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def main():
    args = parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", str(args.threads))
    import torch
    warnings.filterwarnings("ignore")
    torch.set_num_threads(args.threads)
    sys.path.insert(0, str(ROOT / "python"))
    sys.path.insert(0, str(ROOT / "scripts"))
    import ptc
    from export_models import HFWrapper  # input_ids -> logits
    from cuda_check import eager_on
    from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM
    from transformers.integrations.executorch import convert_and_export_with_cache

    dev = args.device
    sync = (lambda: torch.cuda.synchronize()) if dev == "cuda" else (lambda: None)
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=args.vocab, hidden_size=args.hidden, intermediate_size=args.intermediate,
                      num_hidden_layers=args.layers, num_attention_heads=args.heads, num_key_value_heads=args.kv_heads,
                      max_position_embeddings=max(args.max_cache, args.prefill) * 2, tie_word_embeddings=True)
    model = LlamaForCausalLM(cfg).eval()
    params = sum(p.numel() for p in model.parameters())
    work = Path(args.work or tempfile.mkdtemp(prefix="ptc-bench-llm-"))
    work.mkdir(parents=True, exist_ok=True)

    ids = torch.randint(0, args.vocab, (1, args.prefill))
    ep_full = torch.export.export(HFWrapper(model, "logits"), (ids,))
    torch.export.save(ep_full, work / "prefill.pt2")
    model.generation_config = GenerationConfig(use_cache=True, cache_implementation="static", max_length=args.max_cache,
                                               cache_config={"batch_size": 1, "max_cache_len": args.max_cache})
    ep_dec = convert_and_export_with_cache(model)
    torch.export.save(ep_dec, work / "decode.pt2")
    if dev == "cuda":
        ep_full = torch.export.load(work / "prefill.pt2")
        ep_dec = torch.export.load(work / "decode.pt2")

    compile_s = {}
    libs = {}
    for name in ["decode", "prefill"]:
        cmd = [args.ptc_binary, "compile", str(work / f"{name}.pt2"), "-o", str(work / f"{name}.so"), "--device", dev, "--no-cache"]
        if args.cuda_graphs:
            cmd.append("--cuda-graphs")
        t0 = time.perf_counter()
        subprocess.run(cmd, check=True, capture_output=True)
        compile_s[name] = time.perf_counter() - t0
        libs[name] = ptc.load(str(work / f"{name}.so"))

    eager_dec = eager_on(ep_dec, dev)
    eager_full = eager_on(ep_full, dev)
    backends_dec = {"eager": eager_dec}
    backends_full = {"eager": eager_full}
    if not args.no_compile:
        mode = "reduce-overhead" if dev == "cuda" else "default"
        backends_dec["torch.compile"] = torch.compile(eager_on(torch.export.load(work / "decode.pt2"), dev), mode=mode)
        backends_full["torch.compile"] = torch.compile(eager_full, mode=mode)

    def step_fn(backend, tok, pos):
        if backend == "ptc":
            return lambda: libs["decode"](tok, pos)
        m = backends_dec[backend]
        return lambda: m(input_ids=tok, cache_position=pos)

    def timeit(fn):
        for _ in range(2):
            fn()
        sync()
        ts = []
        for _ in range(args.reps):
            t0 = time.perf_counter()
            fn()
            sync()
            ts.append(time.perf_counter() - t0)
        return statistics.median(ts) * 1e3

    results = {"cpu": cpu_model(), "threads": args.threads, "device": dev, "params": params,
               "torch": torch.__version__, "compile_s": compile_s, "decode": {}, "prefill": {}}
    names = list(backends_dec) + ["ptc"]
    with torch.inference_mode():
        # Fill every backend's cache to P, then time the step at P.
        filled = 0
        for fill in sorted(args.fill):
            for pos in range(filled, fill):
                tok = torch.randint(0, args.vocab, (1, 1), device=dev)
                p = torch.tensor([pos], device=dev)
                for b in names:
                    step_fn(b, tok, p)()
            filled = fill
            tok = torch.randint(0, args.vocab, (1, 1), device=dev)
            p = torch.tensor([fill], device=dev)
            ref = eager_dec(input_ids=tok, cache_position=p)
            got = libs["decode"](tok, p)[0]
            err = (ref - got).abs().max().item()
            best = {b: float("inf") for b in names}
            for _ in range(args.rounds):
                for b in names:
                    best[b] = min(best[b], timeit(step_fn(b, tok, p)))
            results["decode"][fill] = {"ms": best, "max_err": err}
            if args.gpu_profile and dev == "cuda" and fill == max(args.fill):
                from gpu_profile import gpu_profile
                for b in names:
                    gpu_profile(f"decode step at {fill}, {b}", step_fn(b, tok, p), sync, args.gpu_profile)
        x = torch.randint(0, args.vocab, (1, args.prefill), device=dev)
        ref = eager_full(x)
        err = (ref - libs["prefill"](x)[0]).abs().max().item()
        best = {b: float("inf") for b in names}
        fns = {b: (lambda m=m: m(x)) for b, m in backends_full.items()}
        fns["ptc"] = lambda: libs["prefill"](x)
        for _ in range(args.rounds):
            for b in names:
                best[b] = min(best[b], timeit(fns[b]))
        results["prefill"] = {"tokens": args.prefill, "ms": best, "max_err": err}

    print(f"# {cpu_model()}, {args.threads} threads, torch {torch.__version__}, Llama {params / 1e6:.0f}M params, "
          f"cache {args.max_cache}; ptc compile {compile_s['decode']:.1f} s (decode), {compile_s['prefill']:.1f} s (prefill)")
    print("| case | " + " | ".join(f"{b} ms" for b in names) + " | eager/ptc | " +
          ("torch.compile/ptc | " if "torch.compile" in names else "") + "max err |")
    print("|---" * (len(names) + 3 + ("torch.compile" in names)) + "|")
    rows = [(f"decode, cache at {f}", results["decode"][f]) for f in sorted(results["decode"])]
    rows.append((f"prefill {args.prefill}", results["prefill"]))
    for label, r in rows:
        ms = r["ms"]
        cells = [f"{ms[b]:.2f}" for b in names] + [f"{ms['eager'] / ms['ptc']:.2f}"]
        if "torch.compile" in names:
            cells.append(f"{ms['torch.compile'] / ms['ptc']:.2f}")
        print(f"| {label} | " + " | ".join(cells) + f" | {r['max_err']:.1e} |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
