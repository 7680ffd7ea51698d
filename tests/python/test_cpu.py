"""What runs without a GPU: import, probe, configs, checkpoint reading, the CPU reference path of
MoeLayer / fused_moe against the NumPy reference, and argument errors."""
import numpy as np
import pytest

import mxmoe
from conftest import f64_to_bf16, make_config, random_layer, reference_moe, rel_error


def test_probe_needs_no_gpu():
    p = mxmoe.probe()
    assert p["version"]
    assert "sm_90a" in p["compiled_archs"]
    assert isinstance(p["gpus"], list)
    if not p["gpu_available"]:
        assert p["no_gpu_reason"], "without a GPU the probe says why"


def test_presets_and_validation():
    c = mxmoe.MoeConfig.preset("gpt-oss-120b")
    assert (c.num_experts, c.top_k, c.hidden, c.intermediate) == (128, 4, 2880, 2880)
    assert c.routing == "topk_softmax"
    assert "tiny" in mxmoe.MoeConfig.preset_names()
    with pytest.raises(mxmoe.Error, match="preset"):
        mxmoe.MoeConfig.preset("gpt-oss-7b")
    c.top_k = 300
    with pytest.raises(mxmoe.Error, match="top_k"):
        c.validate()
    with pytest.raises(mxmoe.Error, match="routing"):
        c.routing = "sideways"


@pytest.mark.parametrize("tokens", [0, 1, 3, 17])
@pytest.mark.parametrize("bias", [True, False])
def test_fused_moe_on_cpu_matches_numpy_reference(rng, tokens, bias):
    e, k, h, i = 8, 2, 64, 96
    w = random_layer(rng, e, h, i, bias)
    hidden = f64_to_bf16(rng.normal(size=(tokens, h)))
    logits = rng.normal(0, 2, size=(tokens, e)).astype(np.float32)
    out = mxmoe.fused_moe(hidden, logits, w["w1_blocks"], w["w1_scales"], w.get("w1_bias"), w["w2_blocks"],
                          w["w2_scales"], w.get("w2_bias"), top_k=k, backend="reference")
    assert out.shape == (tokens, h) and out.dtype == np.uint16
    if tokens:
        assert rel_error(out, reference_moe(hidden, logits, w, k)) <= 1e-2


def test_jax_arrays_through_dlpack(rng):
    jax = pytest.importorskip("jax")
    jnp = jax.numpy
    e, k, h, i = 8, 2, 64, 96
    w = random_layer(rng, e, h, i)
    hidden = f64_to_bf16(rng.normal(size=(5, h)))
    logits = rng.normal(0, 2, size=(5, e)).astype(np.float32)
    cpu = jax.devices("cpu")[0]  # the default device may be a GPU where JAX has one

    def put(x):
        return jax.device_put(x, cpu)

    jw = {name: put(v) for name, v in w.items()}
    jw["w1_bias"], jw["w2_bias"] = jw["w1_bias"].view(jnp.bfloat16), jw["w2_bias"].view(jnp.bfloat16)
    jh, jl = put(hidden).view(jnp.bfloat16), put(logits)
    ref = reference_moe(hidden, logits, w, k)
    # Without `out`: a new JAX array (JAX arrays are immutable; nothing is written in place).
    out = mxmoe.fused_moe(jh, jl, jw["w1_blocks"], jw["w1_scales"], jw["w1_bias"], jw["w2_blocks"], jw["w2_scales"],
                          jw["w2_bias"], top_k=k, backend="reference")
    assert isinstance(out, jax.Array) and out.dtype == jnp.bfloat16 and out.shape == (5, h)
    assert rel_error(np.asarray(out.view(jnp.uint16)), ref) <= 1e-2
    # Into a NumPy buffer.
    layer = mxmoe.MoeLayer(make_config(e, k, h, i), jw, backend="reference", max_tokens=8)
    buf = np.full((5, h), 0x7FC0, np.uint16)
    layer(jh, jl, buf)
    assert rel_error(buf, ref) <= 1e-2
    with pytest.raises(mxmoe.Error, match="hidden"):
        layer(jh.astype(jnp.float32), jl, buf)


def test_one_expert_takes_every_token_and_layer_is_reused(rng):
    e, k, h, i = 8, 2, 64, 64
    w = random_layer(rng, e, h, i)
    layer = mxmoe.MoeLayer("tiny", w, backend="reference", max_tokens=16)
    assert layer.backend == "reference" and layer.max_tokens == 16
    for _ in range(2):
        hidden = f64_to_bf16(rng.normal(size=(16, h)))
        logits = rng.normal(size=(16, e)).astype(np.float32)
        logits[:, 5] += 100.0
        out = np.full((16, h), 0x7FC0, np.uint16)  # poisoned
        assert layer(hidden, logits, out) is out
        assert rel_error(out, reference_moe(hidden, logits, w, k)) <= 1e-2


def test_fused_moe_prepares_weights_once_and_never_confuses_layers(rng):
    e, k, h, i = 8, 2, 64, 64
    hidden = f64_to_bf16(rng.normal(size=(3, h)))
    logits = rng.normal(size=(3, e)).astype(np.float32)
    for _ in range(3):  # new weights each round, possibly at a freed array's address
        w = random_layer(rng, e, h, i)
        args = (w["w1_blocks"], w["w1_scales"], w["w1_bias"], w["w2_blocks"], w["w2_scales"], w["w2_bias"])
        first = mxmoe.fused_moe(hidden, logits, *args, top_k=k, backend="reference")
        assert rel_error(first, reference_moe(hidden, logits, w, k)) <= 1e-2
        again = mxmoe.fused_moe(hidden, logits, *args, top_k=k, backend="reference")
        assert np.array_equal(first, again)
        del w, args


def test_checkpoint_round_trip(tmp_path):
    config = mxmoe.MoeConfig.preset("tiny")
    mxmoe.write_random_checkpoint(str(tmp_path), config, layers=2, seed=7)
    got_config, w = mxmoe.load_gpt_oss(str(tmp_path), 1)
    assert (got_config.num_experts, got_config.hidden) == (8, 64)
    assert w["w1_blocks"].shape == (8, 128, 2, 16) and w["w1_blocks"].dtype == np.uint8
    assert w["w2_scales"].shape == (8, 64, 2)
    assert w["router_weight"].shape == (8, 64)
    with pytest.raises(mxmoe.Error, match="layer"):
        mxmoe.load_gpt_oss(str(tmp_path), 5)
    with pytest.raises(mxmoe.Error):
        mxmoe.load_gpt_oss(str(tmp_path / "missing"), 0)


def test_bad_arguments_name_themselves(rng):
    e, k, h, i = 8, 2, 64, 64
    w = random_layer(rng, e, h, i)
    layer = mxmoe.MoeLayer("tiny", w, backend="reference", max_tokens=4)
    hidden = f64_to_bf16(rng.normal(size=(2, h)))
    logits = rng.normal(size=(2, e)).astype(np.float32)
    with pytest.raises(mxmoe.Error, match="hidden: expected bfloat16"):
        layer(hidden.astype(np.float32), logits)
    with pytest.raises(mxmoe.Error, match="router_logits: expected float32"):
        layer(hidden, logits.astype(np.float64))
    with pytest.raises(mxmoe.Error, match="router_logits: expected shape"):
        layer(hidden, logits[:, :4].copy())
    with pytest.raises(mxmoe.Error, match="out: expected shape"):
        layer(hidden, logits, np.empty((2, h + 1), np.uint16))
    with pytest.raises(mxmoe.Error, match="max_tokens|tokens"):
        layer(np.zeros((5, h), np.uint16), np.zeros((5, e), np.float32))
    with pytest.raises(mxmoe.Error, match="hidden: must be C-contiguous"):
        layer(np.zeros((2, 2 * h), np.uint16)[:, ::2], logits)
    with pytest.raises(mxmoe.Error, match="out: must be C-contiguous"):
        layer(hidden, logits, np.zeros((2, 2 * h), np.uint16)[:, ::2])
    with pytest.raises(mxmoe.Error, match="w1_blocks: expected shape"):  # blocks of 16 elements, not 32
        mxmoe.fused_moe(hidden, logits, w["w1_blocks"][..., :8].copy(), w["w1_scales"], None, w["w2_blocks"],
                        w["w2_scales"], None, top_k=k, backend="reference")
    with pytest.raises(mxmoe.Error, match="top_k"):
        mxmoe.fused_moe(hidden, logits, w["w1_blocks"], w["w1_scales"], None, w["w2_blocks"], w["w2_scales"], None,
                        top_k=e + 1, backend="reference")
    with pytest.raises(mxmoe.Error, match="backend"):
        mxmoe.MoeLayer("tiny", w, backend="warp-speed")
    nan_scales = dict(w, w2_scales=w["w2_scales"].copy())
    nan_scales["w2_scales"][1, 3, 0] = 0xFF  # NaN: never in a gpt-oss checkpoint
    with pytest.raises(mxmoe.Error, match="w2_scales: scale byte 0xFF .NaN. at expert 1, row 3, block 0"):
        mxmoe.MoeLayer("tiny", nan_scales, backend="reference")
    with pytest.raises(mxmoe.Error, match="missing"):
        mxmoe.MoeLayer("tiny", {"w1_blocks": w["w1_blocks"]})
    # plan= (MXMOE_PLAN's form): a value or key it does not take is refused by name, whatever the backend.
    with pytest.raises(mxmoe.Error, match="plan: ksplit=3 is not valid"):
        mxmoe.MoeLayer("tiny", w, backend="reference", plan="ksplit=3")
    with pytest.raises(mxmoe.Error, match="plan: unknown key 'tile'"):
        mxmoe.MoeLayer("tiny", w, backend="reference", plan="tile=16")
