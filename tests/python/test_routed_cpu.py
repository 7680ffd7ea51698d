"""Routed input on the CPU reference: MoeLayer(hidden, topk_ids=, topk_weights=) and mxmoe.fused_experts
give the logits call's bits when routed the same way, take int32 and int64 ids, use the weights as given,
drop pairs whose id is -1, and refuse bad ids, weights and argument combinations by name."""
import numpy as np
import pytest

import mxmoe
from conftest import bf16_to_f64, dequantize, f64_to_bf16, make_config, random_layer, rel_error

E, K, H, I = 8, 4, 64, 96


def equal_top_logits(rng, tokens, experts, k):
    """Logits whose top k per token are tied (so the routing is those k ids ascending, each weight exactly
    1/k in every implementation), and that routing."""
    logits = rng.normal(0, 1, size=(tokens, experts)).astype(np.float32)
    ids = np.zeros((tokens, k), np.int32)
    for t in range(tokens):
        chosen = np.sort(rng.choice(experts, size=k, replace=False))
        logits[t, chosen] = 10.0 + rng.integers(0, 5)
        ids[t] = chosen
    return logits, ids, np.full((tokens, k), 1.0 / k, np.float32)


def routed_reference(hidden_bits, ids, weights, w, alpha=1.702, limit=7.0):
    """The experts in fp64 NumPy with the routing as given (conftest's reference without its router)."""
    x = bf16_to_f64(hidden_bits)
    w1, w2 = dequantize(w["w1_blocks"], w["w1_scales"]), dequantize(w["w2_blocks"], w["w2_scales"])
    b1, b2 = bf16_to_f64(w["w1_bias"]), bf16_to_f64(w["w2_bias"])
    out = np.zeros((x.shape[0], w2.shape[1]))
    for t in range(x.shape[0]):
        for e, wt in zip(ids[t], weights[t]):
            h = w1[e] @ x[t] + b1[e]
            gate, lin = np.minimum(h[0::2], limit), np.clip(h[1::2], -limit, limit)
            out[t] += float(wt) * (w2[e] @ (gate / (1 + np.exp(-alpha * gate)) * (lin + 1)) + b2[e])
    return out


@pytest.mark.parametrize("tokens", [0, 1, 3, 1000])
def test_routed_gives_the_logits_calls_bits(rng, tokens):
    w = random_layer(rng, E, H, I)
    layer = mxmoe.MoeLayer(make_config(E, K, H, I), w, backend="reference", max_tokens=max(tokens, 1))
    hidden = f64_to_bf16(rng.normal(size=(tokens, H)))
    logits, ids, weights = equal_top_logits(rng, tokens, E, K)
    want = layer(hidden, logits, np.full((tokens, H), 0x7FC1, np.uint16))
    for dtype in (np.int32, np.int64):
        out = np.full((tokens, H), 0x7FC1, np.uint16)  # poisoned
        assert layer(hidden, topk_ids=ids.astype(dtype), topk_weights=weights, out=out) is out
        assert np.array_equal(out, want), dtype
        assert np.array_equal(layer(hidden, topk_ids=ids.astype(dtype), topk_weights=weights), want)


def test_weights_are_used_as_given_and_one_expert_may_take_every_token(rng):
    w = random_layer(rng, E, H, I)
    layer = mxmoe.MoeLayer(make_config(E, K, H, I), w, backend="reference", max_tokens=40)
    hidden = f64_to_bf16(rng.normal(size=(40, H)))
    ids = np.stack([rng.permutation(E)[:K] for _ in range(40)]).astype(np.int64)
    ids[:, 0] = 5  # expert 5 takes every token (no token names it twice)
    for t in range(40):
        if 5 in ids[t, 1:]:
            ids[t, 1:][ids[t, 1:] == 5] = [e for e in range(E) if e not in ids[t]][0]
    weights = rng.uniform(0, 2, size=(40, K)).astype(np.float32)  # rows do not sum to 1: no renormalisation
    out = layer(hidden, topk_ids=ids, topk_weights=weights)
    assert rel_error(out, routed_reference(hidden, ids, weights, w)) <= 1e-2
    doubled = layer(hidden, topk_ids=ids, topk_weights=weights * 2)
    assert np.array_equal(bf16_to_f64(doubled), 2 * bf16_to_f64(out))


def test_minus_one_drops_the_pair(rng):
    """vLLM's expert_map convention: an id of -1 adds nothing (its weight is not read); a token whose ids
    are all -1 gets zeros. Against the NumPy reference over the remaining pairs."""
    w = random_layer(rng, E, H, I)
    layer = mxmoe.MoeLayer(make_config(E, K, H, I), w, backend="reference", max_tokens=20)
    hidden = f64_to_bf16(rng.normal(size=(20, H)))
    ids = np.stack([rng.permutation(E)[:K] for _ in range(20)]).astype(np.int64)
    weights = rng.uniform(0, 1, size=(20, K)).astype(np.float32)
    ids[rng.uniform(size=ids.shape) < 0.4] = -1
    ids[3] = -1
    weights[ids < 0] = np.nan  # never read
    out = layer(hidden, topk_ids=ids, topk_weights=weights)
    assert np.array_equal(layer(hidden, topk_ids=ids.astype(np.int32), topk_weights=weights), out)
    kept = [[(e, wt) for e, wt in zip(ids[t], weights[t]) if e >= 0] for t in range(20)]
    want = routed_reference(hidden, [[e for e, _ in k] for k in kept], [[wt for _, wt in k] for k in kept], w)
    assert not np.any(bf16_to_f64(out[3]))
    assert rel_error(out, want) <= 1e-2


def test_fused_experts_maps_global_ids_through_expert_map(rng):
    """Expert parallelism as vLLM calls it: this rank holds experts 1, 4, 6, 9 and 10 of 12 (local 0..4),
    topk_ids are global, expert_map sends the others to -1: the rank's partial output is the NumPy
    reference over the pairs of its own experts."""
    e_global, mine = 12, [1, 4, 6, 9, 10]
    whole = random_layer(rng, e_global, H, I)
    local = {k: v[mine] for k, v in whole.items()}
    expert_map = np.full(e_global, -1, np.int32)
    expert_map[mine] = np.arange(len(mine), dtype=np.int32)
    hidden = f64_to_bf16(rng.normal(size=(30, H)))
    ids = np.stack([rng.permutation(e_global)[:K] for _ in range(30)]).astype(np.int64)
    ids[0] = [0, 2, 3, 5]  # no expert of this rank: zeros
    weights = rng.uniform(0, 1, size=(30, K)).astype(np.float32)
    out = mxmoe.fused_experts(hidden, *(local[n] for n in ("w1_blocks", "w1_scales", "w1_bias", "w2_blocks",
                                                            "w2_scales", "w2_bias")),
                              weights, ids, backend="reference", max_tokens=30, expert_map=expert_map)
    kept = [[(e, wt) for e, wt in zip(ids[t], weights[t]) if e in mine] for t in range(30)]
    want = routed_reference(hidden, [[e for e, _ in k] for k in kept], [[wt for _, wt in k] for k in kept], whole)
    assert not np.any(bf16_to_f64(out[0]))
    assert rel_error(out, want) <= 1e-2
    bad = ids.copy()
    bad[2, 1] = e_global
    args = tuple(local[n] for n in ("w1_blocks", "w1_scales", "w1_bias", "w2_blocks", "w2_scales", "w2_bias"))
    with pytest.raises(mxmoe.Error, match=r"topk_ids\[2, 1\] = 12"):
        mxmoe.fused_experts(hidden, *args, weights, bad, backend="reference", max_tokens=30, expert_map=expert_map)
    with pytest.raises(mxmoe.Error, match="expert_map"):
        mxmoe.fused_experts(hidden, *args, weights, ids, backend="reference", max_tokens=30,
                            expert_map=expert_map.reshape(3, 4))


def test_routed_experts_is_checked_by_name(rng):
    """MoeLayer(routed_experts=): the experts the tokens are routed among (an expert-parallel rank's whole
    layer), at least the layer's own; with a shard the shard says it."""
    w = random_layer(rng, 5, H, I)
    cfg = make_config(5, K, H, I)
    mxmoe.MoeLayer(cfg, w, backend="reference", max_tokens=4, routed_experts=12)
    with pytest.raises(mxmoe.Error, match="routed_experts"):
        mxmoe.MoeLayer(cfg, w, backend="reference", max_tokens=4, routed_experts=4)
    with pytest.raises(mxmoe.Error, match="routed_experts"):
        mxmoe.MoeLayer(cfg, w, backend="reference", max_tokens=4, routed_experts=12,
                       shard=mxmoe.ShardSpec("ep", 0, 1))


def test_expert_map_in_torch_gives_numpy_bits(rng):
    """The same map applied by torch (CPU tensors here; on a GPU it stays on the device): the same bits,
    and an out-of-range global id becomes a NaN-marked pair (-2), never an out-of-bounds index."""
    torch = pytest.importorskip("torch")
    from mxmoe._expert_map import map_ids

    e_global, mine = 10, [0, 3, 5, 7, 8]
    expert_map = np.full(e_global, -1, np.int32)
    expert_map[mine] = np.arange(len(mine), dtype=np.int32)
    ids = np.stack([rng.permutation(e_global)[:K] for _ in range(9)]).astype(np.int64)
    want = map_ids(expert_map, ids)
    got = map_ids(torch.from_numpy(expert_map), torch.from_numpy(ids))
    assert got.dtype == torch.int64 and np.array_equal(got.numpy(), want)
    ids[4, 2], ids[5, 0] = 99, -1
    got = map_ids(torch.from_numpy(expert_map), torch.from_numpy(ids)).numpy()
    assert got[4, 2] == -2 and got[5, 0] == -1


def test_fused_experts_matches_fused_moe_and_the_reference(rng):
    w = random_layer(rng, E, H, I)
    args = (w["w1_blocks"], w["w1_scales"], w["w1_bias"], w["w2_blocks"], w["w2_scales"], w["w2_bias"])
    hidden = f64_to_bf16(rng.normal(size=(9, H)))
    logits, ids, weights = equal_top_logits(rng, 9, E, K)
    by_logits = mxmoe.fused_moe(hidden, logits, *args, top_k=K, backend="reference")
    routed = mxmoe.fused_experts(hidden, *args, weights, ids.astype(np.int64), backend="reference")
    assert np.array_equal(routed, by_logits)
    assert rel_error(routed, routed_reference(hidden, ids, weights, w)) <= 1e-2
    out = np.full((9, H), 0x7FC1, np.uint16)
    assert mxmoe.fused_experts(hidden, *args, weights, ids, backend="reference", out=out) is out
    assert np.array_equal(out, by_logits)
    with pytest.raises(mxmoe.Error, match="topk_ids: expected a .T, k. tensor"):
        mxmoe.fused_experts(hidden, *args, weights, ids.reshape(-1), backend="reference")


def test_jax_routed_on_the_cpu(rng):
    jax = pytest.importorskip("jax")
    cpu = jax.devices("cpu")[0]
    w = random_layer(rng, E, H, I)
    layer = mxmoe.MoeLayer(make_config(E, K, H, I), w, backend="reference", max_tokens=8)
    hidden = f64_to_bf16(rng.normal(size=(5, H)))
    logits, ids, weights = equal_top_logits(rng, 5, E, K)
    jh = jax.device_put(hidden, cpu).view(jax.numpy.bfloat16)
    out = layer(jh, topk_ids=jax.device_put(ids, cpu), topk_weights=jax.device_put(weights, cpu))
    assert isinstance(out, jax.Array) and out.dtype == jax.numpy.bfloat16
    assert np.array_equal(np.asarray(out.view(jax.numpy.uint16)), layer(hidden, logits))


def test_bad_routing_is_refused_by_name(rng):
    w = random_layer(rng, E, H, I)
    layer = mxmoe.MoeLayer(make_config(E, K, H, I), w, backend="reference", max_tokens=4)
    hidden = f64_to_bf16(rng.normal(size=(2, H)))
    logits = rng.normal(size=(2, E)).astype(np.float32)
    ids = np.array([[0, 1, 2, 3], [7, 6, 5, 4]], np.int32)
    weights = np.full((2, K), 0.25, np.float32)

    def call(i=ids, wt=weights):
        return layer(hidden, topk_ids=i, topk_weights=wt)

    call()
    bad = ids.copy()
    bad[1, 2] = E
    with pytest.raises(mxmoe.Error, match=r"topk_ids\[1, 2\] = 8: expected an expert id in \[0, 8\)"):
        call(bad)
    bad[1, 2] = -3
    with pytest.raises(mxmoe.Error, match=r"topk_ids\[1, 2\] = -3"):
        call(bad)
    with pytest.raises(mxmoe.Error, match=r"topk_ids\[1, 2\] = -3"):
        call(bad.astype(np.int64))
    big = ids.astype(np.int64)
    big[0, 1] = 2**40
    with pytest.raises(mxmoe.Error, match=r"topk_ids\[0, 1\] = 1099511627776"):
        call(big)
    dup = ids.copy()
    dup[0, 3] = 1
    with pytest.raises(mxmoe.Error, match="topk_ids: token 0 names expert 1 twice"):
        call(dup)
    for value in (-0.5, np.nan, np.inf):
        bad_w = weights.copy()
        bad_w[1, 0] = value
        with pytest.raises(mxmoe.Error, match=r"topk_weights\[1, 0\] = .*expected a finite weight >= 0"):
            call(wt=bad_w)
    with pytest.raises(mxmoe.Error, match="topk_ids: expected int32 or int64, got float32"):
        call(ids.astype(np.float32))
    with pytest.raises(mxmoe.Error, match="topk_ids: expected int32 or int64, got uint8"):
        call(ids.astype(np.uint8))
    with pytest.raises(mxmoe.Error, match="topk_weights: expected float32, got float64"):
        call(wt=weights.astype(np.float64))
    with pytest.raises(mxmoe.Error, match=r"topk_ids: expected shape \[2, 4\], got \[2, 3\]"):
        call(ids[:, :3].copy())
    with pytest.raises(mxmoe.Error, match=r"topk_weights: expected shape \[2, 4\]"):
        call(wt=weights[:1].copy())
    with pytest.raises(mxmoe.Error, match="topk_ids: must be C-contiguous"):
        call(np.asfortranarray(ids))
    with pytest.raises(mxmoe.Error, match="not both"):
        layer(hidden, logits, topk_ids=ids, topk_weights=weights)
    with pytest.raises(mxmoe.Error, match="router_logits: pass router_logits"):
        layer(hidden)
    with pytest.raises(mxmoe.Error, match="topk_weights: routed input needs both"):
        layer(hidden, topk_ids=ids)
    with pytest.raises(mxmoe.Error, match="topk_ids: routed input needs both"):
        layer(hidden, topk_weights=weights)
    with pytest.raises(mxmoe.Error, match="topk_ids: expected a tensor"):
        call([[0, 1, 2, 3], [4, 5, 6, 7]])
    # The layer still works after every refusal.
    assert np.array_equal(call(), call())


def test_first_call_inside_torch_compile(tmp_path):
    """A layer whose first call is inside torch.compile(fullgraph=True): its custom-op handle and the
    ops are taken when the layer is made, so Dynamo traces neither (skipped without torch)."""
    torch = pytest.importorskip("torch")
    cfg = mxmoe.MoeConfig.preset("tiny")
    mxmoe.write_random_checkpoint(str(tmp_path), cfg, 1, 3)
    config, w = mxmoe.load_gpt_oss(str(tmp_path), layer=0)
    layer = mxmoe.MoeLayer(config, {k: torch.from_numpy(np.asarray(v)) for k, v in w.items()}, max_tokens=8,
                           backend="reference")  # CPU tensors, on a machine with a GPU too
    x = torch.randn(5, config.hidden).to(torch.bfloat16)
    ids = torch.tensor([[0, 1], [2, 3], [4, 5], [6, 7], [1, 0]], dtype=torch.int64)
    p = torch.full((5, 2), 0.5)
    compiled = torch.compile(lambda a, i, q: layer(a, topk_ids=i, topk_weights=q) * 2, fullgraph=True, backend="eager")
    assert torch.equal(compiled(x, ids, p), layer(x, topk_ids=ids, topk_weights=p) * 2)


def test_precision_fp8_on_the_reference(rng):
    """precision="fp8" runs the W4A8 numerics (e4m3 tokens with one scale each, GEMM2's input at the
    SwiGLU bound's static scale): close to bf16's output (W4A8 is about 4% off), not equal to it; the layer
    says its precision; bad names and the W4A16 backends raise mxmoe.Error naming precision, and a SwiGLU
    without a bound (alpha <= 0) one naming swiglu_alpha."""
    w = random_layer(rng, E, H, I)
    cfg = make_config(E, K, H, I)
    hidden = f64_to_bf16(rng.normal(size=(6, H)))
    logits = rng.normal(size=(6, E)).astype(np.float32)
    bf16 = mxmoe.MoeLayer(cfg, w, backend="reference", max_tokens=6)
    fp8 = mxmoe.MoeLayer(cfg, w, backend="reference", max_tokens=6, precision="fp8")
    assert (bf16.precision, fp8.precision) == ("bf16", "fp8")
    a, b = bf16(hidden, logits), fp8(hidden, logits)
    assert not np.array_equal(a, b)
    assert rel_error(b, bf16_to_f64(a)) <= 8e-2
    with pytest.raises(mxmoe.Error, match="precision"):
        mxmoe.MoeLayer(cfg, w, backend="reference", max_tokens=6, precision="fp16")
    with pytest.raises(mxmoe.Error, match="precision"):
        mxmoe.MoeLayer(cfg, w, backend="gemv", max_tokens=6, precision="fp8")
    unbounded = make_config(E, K, H, I)
    unbounded.swiglu_alpha = -1.0
    with pytest.raises(mxmoe.Error, match="swiglu_alpha"):
        mxmoe.MoeLayer(unbounded, w, backend="reference", max_tokens=6, precision="fp8")
    assert mxmoe.MoeLayer(unbounded, w, backend="reference", max_tokens=6).precision == "bf16"
