"""Shared pieces of the mxmoe pytest suite: random checkpoint-layout layers and a pure-NumPy reference
of the gpt-oss MoE block, written here independently of the C++ reference."""
import os

import numpy as np
import pytest

# JAX (the DLPack tests) would otherwise reserve most of a GPU's memory on its first array there.
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")

E2M1 = np.array([0, 0.5, 1, 1.5, 2, 3, 4, 6, -0.0, -0.5, -1, -1.5, -2, -3, -4, -6], np.float64)


def bf16_to_f64(bits):
    return (np.asarray(bits, np.uint16).astype(np.uint32) << 16).view(np.float32).astype(np.float64)


def f64_to_bf16(x):
    """Round to nearest even (finite inputs)."""
    u = np.asarray(x, np.float32).view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def dequantize(blocks, scales):
    """[..., R, K/32, 16] uint8 nibbles (element 2j low) and [..., R, K/32] e8m0 -> [..., R, K]."""
    codes = np.stack([blocks & 0xF, blocks >> 4], axis=-1).reshape(*blocks.shape[:-1], 32)
    values = E2M1[codes] * np.exp2(scales.astype(np.float64) - 127.0)[..., None]
    return values.reshape(*blocks.shape[:-2], -1)


def random_layer(rng, experts, hidden, inter, bias=True):
    def scales(shape, k):
        # exponents spread so the weights have a std of about 1/sqrt(K), as in a checkpoint
        centre = 127 - int(np.round(np.log2(np.sqrt(k)))) - 1
        return rng.integers(centre - 2, centre + 2, size=shape, dtype=np.uint8)

    w = {
        "w1_blocks": rng.integers(0, 256, size=(experts, 2 * inter, hidden // 32, 16), dtype=np.uint8),
        "w1_scales": scales((experts, 2 * inter, hidden // 32), hidden),
        "w2_blocks": rng.integers(0, 256, size=(experts, hidden, inter // 32, 16), dtype=np.uint8),
        "w2_scales": scales((experts, hidden, inter // 32), inter),
    }
    if bias:
        w["w1_bias"] = f64_to_bf16(rng.normal(0, 0.1, size=(experts, 2 * inter)))
        w["w2_bias"] = f64_to_bf16(rng.normal(0, 0.1, size=(experts, hidden)))
    return w


def reference_moe(hidden_bits, logits, w, top_k, alpha=1.702, limit=7.0):
    """gpt-oss: top-k of the logits (ties to the lower expert), softmax over the k, clamped interleaved
    SwiGLU with biases, the k expert outputs weighted and summed. fp64; returns [T, H] float64."""
    x = bf16_to_f64(hidden_bits)
    w1 = dequantize(w["w1_blocks"], w["w1_scales"])
    w2 = dequantize(w["w2_blocks"], w["w2_scales"])
    b1 = bf16_to_f64(w["w1_bias"]) if "w1_bias" in w else np.zeros(w1.shape[:2])
    b2 = bf16_to_f64(w["w2_bias"]) if "w2_bias" in w else np.zeros(w2.shape[:2])
    out = np.zeros((x.shape[0], w2.shape[1]))
    for t in range(x.shape[0]):
        order = np.argsort(-logits[t].astype(np.float64), kind="stable")[:top_k]
        sel = logits[t, order].astype(np.float64)
        weights = np.exp(sel - sel.max())
        weights /= weights.sum()
        for e, wt in zip(order, weights):
            h = w1[e] @ x[t] + b1[e]
            gate = np.minimum(h[0::2], limit)
            lin = np.clip(h[1::2], -limit, limit)
            act = gate / (1 + np.exp(-alpha * gate)) * (lin + 1)
            out[t] += wt * (w2[e] @ act + b2[e])
    return out


def make_config(e, k, h, i):
    """A MoeConfig of E experts, top-k, hidden H and intermediate I (gpt-oss semantics otherwise)."""
    import mxmoe

    c = mxmoe.MoeConfig()
    c.num_experts, c.top_k, c.hidden, c.intermediate = e, k, h, i
    return c


def rel_error(out_bits, ref):
    out = bf16_to_f64(out_bits)
    assert np.isfinite(out).all(), "non-finite or unwritten outputs"
    return np.linalg.norm(out - ref) / max(np.linalg.norm(ref), 1e-30)


@pytest.fixture
def rng(request):
    seed = int(np.random.SeedSequence().entropy % (2**63))
    print(f"seed {seed}")  # shown when a test fails
    return np.random.default_rng(seed)
