#!/usr/bin/env python3
"""Decode speed of a whole gpt-oss model in Hugging Face transformers: mxmoe against transformers' own MoE.

gpt-oss-20b's architecture (24 layers, 32 experts, top-4, H = I = 2880, vocab 201088; transformers'
GptOssConfig) with random weights on one GPU: the experts random checkpoint-like MXFP4 bytes (blocks,
e8m0 scales, bf16 biases), everything else random bf16. Greedy generate() of `--new` tokens after a
random prompt of `--prompt` tokens, at each batch size, for each path:

  mxmoe          the MoE blocks through mxmoe.integrations.transformers, seam "block" (router logits
                 and experts in one mxmoe call per layer), the experts kept in MXFP4
  mxmoe-experts  the same layers through transformers' experts-implementation registry ("mxmoe")
  grouped_mm, eager, batched_mm
                 transformers' own MoE: its dequantising MXFP4 path (the experts turned into bf16
                 parameters by transformers.integrations.mxfp4.convert_moe_packed_tensors, as
                 from_pretrained does with Mxfp4Config(dequantize=True), and as transformers 5.x does by
                 itself where its MXFP4 triton kernels from the hub are missing), run by the experts
                 implementation of that name (grouped_mm is transformers' default)
  no-moe         every MoE block replaced by a block that returns zeros: the rest of the step, from
                 which each path's MoE share of the decode step is computed

The same weights serve every path (regenerated per layer from the same seeds). Timing: a warm-up
generate, then a 1-token generate (prefill) and a full one, each between torch.cuda.synchronize();
decode time per step = (full - prefill) / (new - 1). MoE share = 1 - step(no-moe) / step(path).

    python bench/decode_bench.py --json bench/results/DATE_h100_decode_gpt-oss-20b.json

batched_mm gathers a bf16 copy of every selected expert per token ([T * k, 2880, 5760]): it does not
fit at a prompt of 128 and is left out unless named in --paths. The cache is transformers' default
(DynamicCache, eager PyTorch dispatch) unless --cache static, which makes generate() compile the step
(torch.compile, CUDA graphs) for the paths that allow it (minutes of compilation per path and batch).
"""
from __future__ import annotations

import argparse
import datetime
import json
import platform
import time
from types import MethodType

import torch

import mxmoe
from mxmoe.integrations import _hf_gpt_oss
from mxmoe.integrations import transformers as mxt

TRANSFORMERS_PATHS = ("grouped_mm", "eager", "batched_mm")
ALL_PATHS = ("mxmoe", "mxmoe-experts", "no-moe") + TRANSFORMERS_PATHS


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--json", help="write the record here")
    p.add_argument("--batches", default="1,32")
    p.add_argument("--prompt", type=int, default=128)
    p.add_argument("--new", type=int, default=128)
    p.add_argument("--paths", default="mxmoe,mxmoe-experts,no-moe,grouped_mm,eager",
                   help=f"comma-separated, of {', '.join(ALL_PATHS)}")
    p.add_argument("--layers", type=int, default=24)
    p.add_argument("--experts", type=int, default=32)
    p.add_argument("--cache", choices=("dynamic", "static"), default="dynamic")
    p.add_argument("--plan", default=None, help="mxmoe plan override (MoeLayer's plan=)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--smoke", action="store_true",
                   help="a tiny model (2 layers, H = I = 64) on --device, to check the script itself (mxmoe's fp64 "
                        "CPU reference on the CPU): its numbers mean nothing")
    p.add_argument("--device", default="cuda")
    args = p.parse_args()
    args.batches = [int(b) for b in args.batches.split(",")]
    args.paths = args.paths.split(",")
    bad = [x for x in args.paths if x not in ALL_PATHS]
    if bad:
        p.error(f"--paths: unknown {', '.join(bad)}")
    return args


def gpt_oss_20b_config(layers: int, experts: int, smoke: bool = False):
    from transformers import GptOssConfig

    if smoke:
        return GptOssConfig(num_hidden_layers=2, num_local_experts=4, num_experts_per_tok=2, hidden_size=64,
                            intermediate_size=64, vocab_size=128, num_attention_heads=2, num_key_value_heads=1,
                            head_dim=32, sliding_window=8, rope_parameters={"rope_type": "default", "rope_theta": 1e4})
    # GptOssConfig's defaults are gpt-oss's shapes (H = I = 2880, 64 heads of 64, 8 KV heads, sliding
    # window 128, yarn rope, vocab 201088); gpt-oss-20b has 24 layers and 32 experts.
    return GptOssConfig(num_hidden_layers=layers, num_local_experts=experts, num_experts_per_tok=4)


def random_experts(config, layer: int, seed: int, device) -> dict:
    """One layer's experts in the checkpoint layout, the same for a given (seed, layer): uniform random
    nibbles, e8m0 scales about 1/sqrt(K) (as a checkpoint's), bf16 biases of std 0.1."""
    g = torch.Generator(device=device).manual_seed(seed * 1000 + layer)
    e, h, i = config.num_local_experts, config.hidden_size, config.intermediate_size

    def scales(rows, k):
        centre = 127 - round(torch.log2(torch.tensor(k ** 0.5)).item()) - 1
        return torch.randint(centre - 2, centre + 2, (e, rows, k // 32), generator=g, device=device).to(torch.uint8)

    def blocks(rows, k):
        return torch.randint(0, 256, (e, rows, k // 32, 16), generator=g, device=device, dtype=torch.uint8)

    def bias(rows):
        return (torch.randn(e, rows, generator=g, device=device) * 0.1).to(torch.bfloat16)

    return {"w1_blocks": blocks(2 * i, h), "w1_scales": scales(2 * i, h), "w1_bias": bias(2 * i),
            "w2_blocks": blocks(h, i), "w2_scales": scales(h, i), "w2_bias": bias(h)}


def random_model(config, device, seed: int):
    """The model without experts' parameters, every other tensor random (norms 1)."""
    model = _hf_gpt_oss.build_empty_model(config, device)
    g = torch.Generator(device=device).manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight") or name.endswith("layernorm.weight"):
                p.fill_(1.0)
            else:
                p.copy_(torch.randn(p.shape, generator=g, device=device) * config.initializer_range)
    return model.eval()


def dequantised_experts(model, config, seed: int, device) -> None:
    """transformers' own path: every layer's experts as bf16 parameters, dequantised by transformers'
    convert_moe_packed_tensors (its Mxfp4Dequantize) from the same MXFP4 bytes mxmoe gets."""
    from transformers.integrations.mxfp4 import convert_moe_packed_tensors

    for index, layer in enumerate(model.model.layers):
        w = random_experts(config, index, seed, device)
        experts = layer.mlp.experts
        for name, value in (("gate_up_proj", convert_moe_packed_tensors(w["w1_blocks"], w["w1_scales"])),
                            ("gate_up_proj_bias", w["w1_bias"]),
                            ("down_proj", convert_moe_packed_tensors(w["w2_blocks"], w["w2_scales"])),
                            ("down_proj_bias", w["w2_bias"])):
            setattr(experts, name, torch.nn.Parameter(value.to(torch.bfloat16), requires_grad=False))
        del w


def _no_moe_forward(self, hidden_states):
    return torch.zeros_like(hidden_states), None


def use_path(model, path: str) -> None:
    """Points every MoE block of the model at `path` (the weights for it must already be in place)."""
    for layer in model.model.layers:
        layer.mlp.__dict__.pop("forward", None)
        if path == "no-moe":
            layer.mlp.forward = MethodType(_no_moe_forward, layer.mlp)
    if path == "mxmoe":
        mxt.set_seam(model, "block")
    elif path == "mxmoe-experts":
        mxt.set_seam(model, "experts")
    elif path in TRANSFORMERS_PATHS:
        model.set_experts_implementation(path)


def synchronize(device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed_generate(model, ids, new: int, cache: str) -> float:
    kwargs = dict(max_new_tokens=new, min_new_tokens=new, do_sample=False, attention_mask=torch.ones_like(ids),
                  pad_token_id=0)
    if cache == "static":
        kwargs["cache_implementation"] = "static"
    synchronize(ids.device)
    start = time.perf_counter()
    with torch.no_grad():
        out = model.generate(ids, **kwargs)
    synchronize(ids.device)
    assert out.shape == (ids.shape[0], ids.shape[1] + new)
    return time.perf_counter() - start


def measure(model, path: str, batch: int, args) -> dict:
    device = next(model.parameters()).device
    g = torch.Generator(device=device).manual_seed(args.seed + batch)
    ids = torch.randint(1, model.config.vocab_size, (batch, args.prompt), generator=g, device=device)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    timed_generate(model, ids, min(8, args.new), args.cache)  # warm-up (and compilation, with --cache static)
    if args.cache == "static":
        timed_generate(model, ids, min(8, args.new), args.cache)
    prefill = min(timed_generate(model, ids, 1, args.cache) for _ in range(2))
    total = timed_generate(model, ids, args.new, args.cache)
    step = (total - prefill) / max(args.new - 1, 1)
    row = {"path": path, "batch": batch, "prefill_s": prefill, "total_s": total, "decode_step_ms": step * 1e3,
           "decode_tokens_per_s": batch / step, "end_to_end_tokens_per_s": batch * args.new / total,
           "peak_memory_gib": torch.cuda.max_memory_allocated(device) / 2**30 if device.type == "cuda" else None}
    print(f"{path:>14} batch {batch:>3}: prefill {prefill * 1e3:8.1f} ms, decode step {step * 1e3:7.2f} ms, "
          f"{row['decode_tokens_per_s']:8.1f} tokens/s decode, {row['end_to_end_tokens_per_s']:8.1f} end to end",
          flush=True)
    return row


def versions() -> dict:
    import transformers

    out = {"python": platform.python_version(), "torch": torch.__version__, "cuda": torch.version.cuda,
           "transformers": transformers.__version__, "mxmoe": getattr(mxmoe, "__version__", None)}
    try:
        import triton

        out["triton"] = triton.__version__
    except ImportError:
        out["triton"] = None
    from transformers.utils import is_kernels_available

    out["kernels_package"] = is_kernels_available()
    return out


def main() -> None:
    args = parse_args()
    device = torch.device(args.device)
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise SystemExit("decode_bench: no CUDA GPU (--smoke --device cpu checks the script on the CPU)")
        device = torch.device("cuda", torch.cuda.current_device() if device.index is None else device.index)
        torch.cuda.set_device(device)
    config = gpt_oss_20b_config(args.layers, args.experts, args.smoke)
    record = {
        "what": "decode speed of gpt-oss-20b's architecture with random MXFP4 experts in transformers: mxmoe "
                "against transformers' own MoE paths (bench/decode_bench.py)",
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor() or "cpu",
        "versions": versions(), "smoke": args.smoke,
        "model": {"layers": config.num_hidden_layers, "experts": config.num_local_experts,
                  "top_k": config.num_experts_per_tok, "hidden": config.hidden_size,
                  "intermediate": config.intermediate_size, "vocab": config.vocab_size,
                  "weights": "random: experts checkpoint-like MXFP4 bytes, the rest bf16 N(0, 0.02), norms 1"},
        "prompt": args.prompt, "new_tokens": args.new, "cache": args.cache, "seed": args.seed,
        "transformers_path": "transformers' dequantising MXFP4 path: the experts as bf16 parameters from "
                             "transformers.integrations.mxfp4.convert_moe_packed_tensors (what from_pretrained does "
                             "with Mxfp4Config(dequantize=True), and by itself without the kernels package), run by "
                             "the experts implementation named in each row's path",
        "results": [],
    }
    print(f"{record['device']}: {config.num_hidden_layers} layers, {config.num_local_experts} experts, prompt "
          f"{args.prompt}, {args.new} new tokens, {args.cache} cache", flush=True)

    model = random_model(config, device, args.seed)
    record["attn_implementation"] = model.config._attn_implementation
    mx_paths = [p for p in args.paths if p not in TRANSFORMERS_PATHS]
    if mx_paths:
        mxt.patch_model(model, lambda index: random_experts(config, index, args.seed, device),
                        max_tokens=max(args.batches) * args.prompt, plan=args.plan)
        layer = model.model.layers[0].mlp.experts._mxmoe
        record["mxmoe_backend"] = layer.backend
        tokens = sorted({1, *args.batches, *(b * args.prompt for b in args.batches)})  # decode and prefill calls
        record["mxmoe_plans"] = {str(t): layer.describe_plan(t) for t in tokens}
        for path in mx_paths:
            use_path(model, path)
            for batch in args.batches:
                record["results"].append(measure(model, path, batch, args))
        for layer in model.model.layers:
            del layer.mlp.experts._mxmoe
        torch.cuda.empty_cache()
    tf_paths = [p for p in args.paths if p in TRANSFORMERS_PATHS]
    if tf_paths:
        dequantised_experts(model, config, args.seed, device)
        for path in tf_paths:
            use_path(model, path)
            for batch in args.batches:
                try:
                    record["results"].append(measure(model, path, batch, args))
                except torch.OutOfMemoryError as e:  # batched_mm at a long prompt
                    print(f"{path:>14} batch {batch:>3}: out of memory ({str(e).splitlines()[0]})", flush=True)
                    record["results"].append({"path": path, "batch": batch, "error": "out of memory"})
                    torch.cuda.empty_cache()

    steps = {(r["path"], r["batch"]): r["decode_step_ms"] for r in record["results"] if "decode_step_ms" in r}
    for r in record["results"]:
        base = steps.get(("no-moe", r["batch"]))
        if base is not None and r["path"] != "no-moe" and "decode_step_ms" in r:
            r["moe_share_of_decode_step"] = 1.0 - base / r["decode_step_ms"]
    print("\n  path            batch  decode tokens/s  MoE share of the step")
    for r in record["results"]:
        share = r.get("moe_share_of_decode_step")
        print(f"  {r['path']:<15} {r['batch']:>5}  {r.get('decode_tokens_per_s', float('nan')):>15.1f}  "
              f"{'' if share is None else f'{share:.0%}'}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(record, f, indent=2)
            f.write("\n")
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
