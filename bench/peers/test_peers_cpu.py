"""CPU checks of the peer comparison's shared parts (no GPU needed; torch, and transformers where
installed): dequantisation, the fp64 reference against transformers' GptOssExperts in fp64, the bf16
peers against the reference, the agreement check, the floor, the record's name and the plot.

    python -m pytest bench/peers/test_peers_cpu.py
"""
import json
import math
import os
import random
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
sys.path.insert(0, str(Path(__file__).resolve().parent))
import peer_impls  # noqa: E402
import peer_layers  # noqa: E402


@pytest.fixture
def seed():
    s = int.from_bytes(os.urandom(4), "little")
    print(f"seed {s}")
    return s


def small_case(seed, tokens, experts=8, top_k=4, hidden=96, intermediate=160):
    """K = 96 and 160: multiples of 32, not of 128."""
    layer = peer_layers.random_layer(experts, hidden, intermediate, seed)
    x, logits = peer_layers.random_inputs(tokens, experts, hidden, seed + 1)
    return layer, x, logits


def test_dequantize_decodes_nibbles_and_scales(seed):
    layer = peer_layers.random_layer(3, 64, 32, seed)
    blocks, scales = layer["w1_blocks"], layer["w1_scales"]
    w = peer_layers.dequantize(blocks, scales, torch.float64)
    wt = peer_layers.dequantize(blocks, scales, torch.bfloat16, transpose=True)
    rng = random.Random(seed)
    for _ in range(200):
        e, r, c = rng.randrange(3), rng.randrange(64), rng.randrange(64)
        byte = int(blocks[e, r, c // 32, (c % 32) // 2])
        code = byte & 0xF if c % 2 == 0 else byte >> 4
        want = peer_layers.E2M1[code] * 2.0 ** (int(scales[e, r, c // 32]) - 127)
        assert w[e, r, c].item() == want
        assert wt[e, c, r].item() == want  # exact in bf16
    base = peer_layers.scale_base(64)
    assert set(scales.unique().tolist()) <= {base - 1, base, base + 1}


def test_route_takes_top_k_then_softmax_and_breaks_ties_low():
    logits = torch.tensor([[1.0, 3.0, 3.0, 0.5, 3.0]])
    experts, weights = peer_layers.route(logits, 2)
    assert experts.tolist() == [[1, 2]]
    assert torch.allclose(weights, torch.tensor([[0.5, 0.5]]))


def transformers_experts(layer, top_k, implementation, dtype):
    pytest.importorskip("transformers")
    e, two_i, kb, _ = layer["w1_blocks"].shape
    impl = peer_impls.TransformersExperts(e, top_k, kb * 32, two_i // 2, implementation)
    bf = peer_impls.Bf16Layer(peer_layers.dequantize(layer["w1_blocks"], layer["w1_scales"], dtype, True),
                              layer["w1_bias"].to(dtype),
                              peer_layers.dequantize(layer["w2_blocks"], layer["w2_scales"], dtype, True),
                              layer["w2_bias"].to(dtype))
    impl.prepare([bf])
    return impl


@pytest.mark.parametrize("tokens", [1, 3, 37])
def test_reference_equals_transformers_eager_in_fp64(seed, tokens):
    """An independent implementation of the same semantics: transformers' experts loop and router math."""
    layer, x, logits = small_case(seed, tokens)
    ref = peer_layers.reference(x, logits, layer, 4)
    impl = transformers_experts(layer, 4, "eager", torch.float64)
    out = impl.forward(0, x.double(), logits.double())
    assert peer_layers.agreement(out, ref)["rel_error"] < 1e-12


@pytest.mark.parametrize("name", ["torch-grouped-mm", "transformers", "transformers-eager"])
@pytest.mark.parametrize("tokens", [1, 3, 64])
def test_bf16_peers_agree_with_the_reference(seed, name, tokens):
    layer, x, logits = small_case(seed, tokens)
    ref = peer_layers.reference(x, logits, layer, 4)
    if name == "torch-grouped-mm":
        if peer_impls.grouped_mm_function() is None:
            pytest.skip("no grouped_mm in this torch")
        impl = peer_impls.TorchGroupedMm(8, 4)
        impl.prepare([peer_impls.Bf16Layer.from_checkpoint(layer)])
    else:
        impl = transformers_experts(layer, 4, "grouped_mm" if name == "transformers" else "eager", torch.bfloat16)
    out = impl.forward(0, x, logits)
    assert out.dtype == torch.bfloat16 and out.shape == x.shape
    err = peer_layers.agreement(out, ref)
    assert err["rel_error"] < 1e-2, err


def test_one_expert_takes_every_token_and_the_rest_none(seed):
    layer, x, logits = small_case(seed, 19)
    logits[:, :4] += 100.0  # experts 0..3 take every token, 4..7 none
    ref = peer_layers.reference(x, logits, layer, 4)
    impl = peer_impls.TorchGroupedMm(8, 4)
    impl.prepare([peer_impls.Bf16Layer.from_checkpoint(layer)])
    assert peer_layers.agreement(impl.forward(0, x, logits), ref)["rel_error"] < 1e-2
    assert peer_layers.experts_touched(logits, 4) == 4


def test_agreement_rejects_a_wrong_layer_and_unwritten_outputs(seed):
    layer, x, logits = small_case(seed, 16)
    ref = peer_layers.reference(x, logits, layer, 4)
    swapped = dict(layer)  # gate and linear halves exchanged: the kind of bug the check exists for
    e, two_i, kb, _ = layer["w1_blocks"].shape
    swapped["w1_blocks"] = layer["w1_blocks"].view(e, two_i // 2, 2, kb, 16).flip(2).reshape(layer["w1_blocks"].shape)
    swapped["w1_scales"] = layer["w1_scales"].view(e, two_i // 2, 2, kb).flip(2).reshape(layer["w1_scales"].shape)
    swapped["w1_bias"] = layer["w1_bias"].view(e, two_i // 2, 2).flip(2).reshape(e, two_i)
    wrong = peer_layers.reference(x, logits, swapped, 4)
    assert peer_layers.agreement(wrong, ref)["rel_error"] > 0.1
    poisoned = torch.full(x.shape, float("nan"), dtype=torch.bfloat16)
    assert peer_layers.agreement(poisoned, ref)["rel_error"] == math.inf


def test_floor_counts_selected_experts_and_activations():
    e, k, h, i = peer_layers.SHAPES["gpt-oss-120b"]
    expert = (2 * i * h + 2 * i * h // 16 + h * i + h * i // 16) // 2 + 2 * (2 * i + h)
    assert peer_layers.mxfp4_expert_bytes(h, i) == expert
    assert peer_layers.floor_bytes(4, 1, e, h, i) == 4 * expert + 4 * h + 4 * e


def test_output_path_names_device_and_model(tmp_path):
    import peers

    p = peers.output_path(str(tmp_path), "NVIDIA H100 80GB HBM3", "gpt-oss-20b")
    assert p.parent == tmp_path and p.name.endswith("_h100_peers_gpt-oss-20b.json")
    assert peers.output_path(str(tmp_path / "x.json"), "NVIDIA H200", "gpt-oss-120b") == tmp_path / "x.json"


def synthetic_record(model, seed):
    rng = random.Random(seed)
    impls = []
    for name in ["mxmoe", "triton_kernels", "transformers", "transformers-eager", "torch-grouped-mm"]:
        rows = [{"tokens": t, "us": 20 * (1 + t / 64) * rng.uniform(1, 3), "fraction_of_floor": rng.uniform(0.1, 0.9)}
                for t in [1, 4, 64, 1024, 4096]]
        impls.append({"name": name, "status": "ok", "timing": "eager" if "eager" in name else "cuda-graph",
                      "rows": rows})
    impls.append({"name": "broken", "status": "disagrees", "reason": "synthetic"})
    return {"kind": "peers", "model": model, "device": "synthetic", "copy_gbps": 3000.0, "implementations": impls}


def test_plot_draws_a_png_from_records(tmp_path, seed):
    pytest.importorskip("matplotlib")
    import plot_peers

    paths = []
    for model in ["gpt-oss-120b", "gpt-oss-20b"]:
        paths.append(tmp_path / f"{model}.json")
        paths[-1].write_text(json.dumps(synthetic_record(model, seed)))
    out = tmp_path / "peers.png"
    assert plot_peers.main([str(p) for p in paths] + ["--out", str(out)]) == 0
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and out.stat().st_size > 10_000
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"kind": "bench"}))
    with pytest.raises(SystemExit):
        plot_peers.main([str(bad), "--out", str(tmp_path / "bad.png")])


def test_driver_times_agreeing_peers_and_not_disagreeing_ones(seed, monkeypatch):
    """peers.run_implementation with the GPU timing replaced: the rows and floor fractions of a peer that
    agrees; no rows for one whose weights are wrong."""
    import argparse

    import peer_timing
    import peers

    calls = []

    def fake_time(body, capturable, warmup, warmup_ms, iterations):
        body()
        calls.append(capturable)
        return {"ms": 2.0, "min_ms": 1.0, "max_ms": 3.0, "timing": "cuda-graph"}

    monkeypatch.setattr(peer_timing, "time_layers", fake_time)
    shape = (8, 4, 96, 160)
    layers = [peer_layers.random_layer(8, 96, 160, seed + n) for n in range(2)]
    hidden, _ = peer_layers.random_inputs(64, 8, 96, seed + 1)
    logits = [peer_layers.random_inputs(64, 8, 96, seed + 100 + n)[1] for n in range(2)]
    refs = {t: peer_layers.reference(hidden[:t], logits[0][:t], layers[0], 4) for t in (3, 64)}
    args = argparse.Namespace(tolerance=1e-2, warmup=1, warmup_ms=0, iterations=1)
    impl = peer_impls.TorchGroupedMm(8, 4)
    entry = peers.run_implementation(impl, 2, [peer_impls.Bf16Layer.from_checkpoint(w) for w in layers], hidden,
                                     logits, refs, [1, 5, 64], args, 1000.0, shape)
    assert entry["status"] == "ok" and [r["tokens"] for r in entry["rows"]] == [1, 5, 64] and calls == [True] * 3
    row = entry["rows"][1]
    assert row["us"] == 1000.0  # 2 ms over 2 layers
    touched = sum(peer_layers.experts_touched(l[:5], 4) for l in logits) / 2
    assert row["floor_us"] == pytest.approx(peer_layers.floor_bytes(touched, 5, 8, 96, 160) / 1e12 * 1e6)
    assert row["fraction_of_floor"] == pytest.approx(row["floor_us"] / 1000.0)

    wrong = [peer_impls.Bf16Layer.from_checkpoint(w) for w in layers]
    wrong[0].down = -wrong[0].down
    calls.clear()
    entry = peers.run_implementation(impl, 2, wrong, hidden, logits, refs, [1, 5], args, 1000.0, shape)
    assert entry["status"] == "disagrees" and entry["rows"] == [] and calls == []
    assert min(a["rel_error"] for a in entry["agreement"]) > 0.1
