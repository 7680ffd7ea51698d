"""Peers side by side: mxmoe, OpenAI's triton_kernels (matmul_ogs, MXFP4, as vLLM runs gpt-oss on
Hopper), transformers' GptOssExperts and torch's grouped bf16 matmul, timed in one run on one GPU on the
same weights and inputs, the way `mxmoe bench` times (peer_timing.py), after each agreed with an fp64
reference. Writes one JSON record per model; docs/peers.md says how to read it and how to rerun.

    python bench/peers/peers.py --model gpt-oss-120b --out bench/results/
    python bench/peers/peers.py --model gpt-oss-20b --tokens 1,64,4096 --out /tmp/peers_20b.json

triton_kernels is imported from --deps (default .deps/peers, filled by bench/peers/prepare_peers.sh)."""
from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import platform
import subprocess
import sys
import traceback
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import peer_impls  # noqa: E402
import peer_layers  # noqa: E402
import peer_timing  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
TOKENS = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096]
IMPLEMENTATIONS = ["mxmoe", "triton_kernels", "transformers", "transformers-eager", "torch-grouped-mm"]


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", choices=sorted(peer_layers.SHAPES), default="gpt-oss-120b")
    p.add_argument("--tokens", default=",".join(map(str, TOKENS)), help="batch sizes T, comma-separated")
    p.add_argument("--only", default=",".join(IMPLEMENTATIONS), help="implementations to run, comma-separated")
    p.add_argument("--out", required=True, help="a .json file, or a folder for DATE_DEVICE_peers_MODEL.json")
    p.add_argument("--iterations", type=int, default=60, help="timed replays (mxmoe bench: 60)")
    p.add_argument("--warmup", type=int, default=10, help="untimed replays at least (mxmoe bench: 10)")
    p.add_argument("--warmup-ms", type=float, default=2000, help="untimed replays for at least this long")
    p.add_argument("--layers", type=int, default=0, help="layers rotated (0: past 4x the L2, per format)")
    p.add_argument("--check-tokens", default="3,64", help="batch sizes checked against the fp64 reference")
    p.add_argument("--tolerance", type=float, default=1e-2, help="largest ||out - ref|| / ||ref|| accepted")
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--deps", default=str(ROOT / ".deps" / "peers"), help="folder holding triton_kernels/")
    return p.parse_args(argv)


def int_list(text: str) -> list:
    values = [int(v) for v in text.split(",") if v.strip()]
    if not values or min(values) < 1:
        raise SystemExit(f"expected positive integers, comma-separated, got {text!r}")
    return values


def layers_rotated(expert_bytes: float, top_k: int, layer_bytes: float, budget: float, forced: int) -> int:
    """`mxmoe bench`'s rule: the experts of the smallest batch, times the layers, past 4x the L2;
    between 2 and 64 layers, and no more than `budget` bytes of weights."""
    if forced > 0:
        return forced
    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    n = min(max(math.ceil(4.0 * l2 / (expert_bytes * top_k)), 2), 64)
    return max(1, min(n, int(budget / layer_bytes)))


def versions() -> dict:
    v = {"python": platform.python_version(), "torch": torch.__version__, "cuda": torch.version.cuda}
    for name in ("numpy", "triton", "transformers"):
        try:
            v[name] = __import__(name).__version__
        except ImportError:
            v[name] = None
    try:
        v["driver"] = Path("/proc/driver/nvidia/version").read_text().splitlines()[0]
    except OSError:
        v["driver"] = None
    return v


def commit_id() -> str:
    """MXMOE_COMMIT where the machine's copy has no git history (as `mxmoe bench`), else git's."""
    if os.environ.get("MXMOE_COMMIT"):
        return os.environ["MXMOE_COMMIT"]
    try:
        return subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def output_path(out: str, device: str, model: str) -> Path:
    path = Path(out)
    if path.suffix == ".json":
        return path
    short = next((c for c in ("h100", "h200", "b200", "gb10") if c in device.lower()), None)
    short = short or "".join(ch for ch in device.lower() if ch.isalnum())[:16]
    return path / f"{datetime.date.today().isoformat()}_{short}_peers_{model}.json"


def make(name: str, shape, model: str, max_tokens: int):
    e, k, h, i = shape
    if name == "mxmoe":
        return peer_impls.Mxmoe(model, max_tokens)
    if name == "triton_kernels":
        return peer_impls.TritonKernels(e, k, h, i)
    if name == "transformers":
        return peer_impls.TransformersExperts(e, k, h, i, "grouped_mm")
    if name == "transformers-eager":
        return peer_impls.TransformersExperts(e, k, h, i, "eager")
    if name == "torch-grouped-mm":
        return peer_impls.TorchGroupedMm(e, k)
    raise SystemExit(f"--only: unknown implementation {name!r} (known: {', '.join(IMPLEMENTATIONS)})")


def cross_check_mxmoe_reference(model, layer, hidden, logits, ref) -> dict:
    """mxmoe's own fp64 CPU reference (backend "reference", output rounded to bf16) against this
    script's fp64 reference: both should say the same layer."""
    try:
        import mxmoe
    except ImportError as e:
        return {"skipped": str(e)}
    try:
        cpu = {k: v.cpu() for k, v in layer.items()}
        out = mxmoe.MoeLayer(model, cpu, backend="reference", max_tokens=hidden.shape[0])(hidden.cpu(), logits.cpu())
    except Exception as err:  # the record says so; the GPU comparison does not depend on it
        return {"failed": f"{type(err).__name__}: {err}"}
    return {"tokens": hidden.shape[0], **peer_layers.agreement(out, ref.cpu())}


def run_implementation(impl, n_layers, weights, hidden, logits, refs, tokens, args, copy, shape) -> dict:
    e, k, h, i = shape
    entry = {"name": impl.name, "about": impl.about, "weights": impl.weights, "versions": impl.versions(),
             "layers_rotated": n_layers, "agreement": [], "rows": []}
    impl.prepare(weights[:n_layers])
    for t, ref in refs.items():
        out = impl.forward(0, hidden[:t], logits[0][:t])
        if out.is_cuda:
            torch.cuda.synchronize()
        entry["agreement"].append({"tokens": t, **peer_layers.agreement(out, ref)})
    worst = max(a["rel_error"] for a in entry["agreement"])
    if not worst <= args.tolerance:
        entry["status"] = "disagrees"
        entry["reason"] = f"rel_error {worst:.3g} > tolerance {args.tolerance:g}: not timed"
        return entry
    for t in tokens:
        def body():
            for layer in range(n_layers):
                impl.forward(layer, hidden[:t], logits[layer][:t])

        timing = peer_timing.time_layers(body, impl.capturable, args.warmup, args.warmup_ms, args.iterations)
        touched = sum(peer_layers.experts_touched(logits[layer][:t], k) for layer in range(n_layers)) / n_layers
        floor_us = peer_layers.floor_bytes(touched, t, e, h, i) / (copy * 1e9) * 1e6
        us = timing["ms"] * 1e3 / n_layers
        row = {"tokens": t, "us": us, "us_min": timing["min_ms"] * 1e3 / n_layers,
               "us_max": timing["max_ms"] * 1e3 / n_layers, "experts_touched": touched, "floor_us": floor_us,
               "fraction_of_floor": floor_us / us, "timing": timing["timing"]}
        if "capture_error" in timing:
            row["capture_error"] = timing["capture_error"]
        if hasattr(impl, "describe"):
            row["plan"] = impl.describe(t)
        entry["rows"].append(row)
        print(f"  {impl.name:18s} T={t:5d} {us:10.1f} us/layer  {100 * floor_us / us:5.1f}% of floor", flush=True)
    entry["timing"] = "eager" if any(r["timing"] == "eager" for r in entry["rows"]) else "cuda-graph"
    entry["status"] = "ok"
    return entry


def main(argv=None) -> int:
    args = parse_args(argv)
    if not torch.cuda.is_available():
        raise SystemExit("peers.py: needs a CUDA GPU")
    provenance = None
    if Path(args.deps).is_dir():
        sys.path.insert(0, str(Path(args.deps).resolve()))
        if (Path(args.deps) / "PROVENANCE.txt").is_file():
            provenance = (Path(args.deps) / "PROVENANCE.txt").read_text().strip()
    tokens, check_tokens = int_list(args.tokens), int_list(args.check_tokens)
    names = [n.strip() for n in args.only.split(",") if n.strip()]
    shape = e, k, h, i = peer_layers.SHAPES[args.model]
    props = torch.cuda.get_device_properties(0)
    t_max = max(tokens + check_tokens)
    torch.backends.cuda.matmul.allow_tf32 = False

    print(f"{props.name}: measuring the copy ceiling...", flush=True)
    copy = peer_timing.copy_gbps(args.warmup_ms)
    mx_expert = peer_layers.mxfp4_expert_bytes(h, i) - 2 * (2 * i + h)  # blocks and scales, as mxmoe bench
    bf16_expert = 2 * 3 * h * i
    n_mx = layers_rotated(mx_expert, k, mx_expert * e, 0.15 * props.total_memory, args.layers)
    n_bf16 = layers_rotated(bf16_expert, k, bf16_expert * e, 0.35 * props.total_memory, args.layers)
    print(f"{args.model}: {n_mx} MXFP4 layers, {n_bf16} bf16 layers rotated; copy {copy:.0f} GB/s", flush=True)

    with torch.no_grad():
        layers = [peer_layers.random_layer(e, h, i, args.seed + 1000 * n, "cuda") for n in range(max(n_mx, n_bf16))]
        hidden, _ = peer_layers.random_inputs(t_max, e, h, args.seed + 1, "cuda")
        logits = [peer_layers.random_inputs(t_max, e, h, args.seed + 100 + n, "cuda")[1] for n in range(len(layers))]
        refs = {t: peer_layers.reference(hidden[:t], logits[0][:t], layers[0], k) for t in check_tokens}
        cross = cross_check_mxmoe_reference(args.model, layers[0], hidden[:3], logits[0][:3],
                                            peer_layers.reference(hidden[:3], logits[0][:3], layers[0], k))
        record = {"kind": "peers", "device": props.name, "compute_capability": f"{props.major}.{props.minor}",
                  "sm_count": props.multi_processor_count, "l2_bytes": props.L2_cache_size,
                  "commit": commit_id(), "date": datetime.datetime.now(datetime.timezone.utc).strftime(
                      "%Y-%m-%dT%H:%M:%SZ"),
                  "model": args.model, "shape": {"experts": e, "top_k": k, "hidden": h, "intermediate": i},
                  "versions": {**versions(), "triton_kernels_source": provenance}, "copy_gbps": copy,
                  "iterations": args.iterations, "warmup": args.warmup,
                  "warmup_ms": args.warmup_ms, "tolerance": args.tolerance, "seed": args.seed,
                  "floor": "selected experts' MXFP4 blocks, scales and biases + hidden, logits and output, "
                           "at copy_gbps (read + written per second, as mxmoe bench)",
                  "reference_cross_check": cross, "implementations": []}
        bf16 = None
        for name in names:
            print(f"{name}:", flush=True)
            try:
                impl = make(name, shape, args.model, t_max)
            except ImportError as err:
                record["implementations"].append({"name": name, "status": "unavailable", "reason": str(err)})
                print(f"  unavailable: {err}", flush=True)
                continue
            try:
                if impl.weights == "bf16" and bf16 is None:
                    bf16 = [peer_impls.Bf16Layer.from_checkpoint(w) for w in layers[:n_bf16]]
                weights = bf16 if impl.weights == "bf16" else layers
                n = n_bf16 if impl.weights == "bf16" else n_mx
                entry = run_implementation(impl, n, weights, hidden, logits, refs, tokens, args, copy, shape)
            except Exception as err:  # one peer failing must not lose the others' numbers
                traceback.print_exc()
                entry = {"name": name, "status": "failed", "reason": f"{type(err).__name__}: {err}"}
            if entry.get("status") != "ok":
                print(f"  {entry['status']}: {entry.get('reason', '')}", flush=True)
            record["implementations"].append(entry)
            del impl
            torch.cuda.empty_cache()

    path = output_path(args.out, props.name, args.model)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record, indent=1) + "\n")
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
