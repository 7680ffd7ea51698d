"""The weights, inputs and fp64 reference the peer comparison shares: random checkpoint-like MXFP4 layers
in the gpt-oss checkpoint layout, their dequantisation, the gpt-oss routing, and the memory floor.
Plain torch on any device (the CPU tests run it without a GPU); FACTS.md section 1 and 2 give the math."""
from __future__ import annotations

import math

import torch

# name: (experts E, top-k, hidden H, intermediate I)
SHAPES = {"gpt-oss-120b": (128, 4, 2880, 2880), "gpt-oss-20b": (32, 4, 2880, 2880)}
ALPHA, LIMIT = 1.702, 7.0
E2M1 = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0)


def scale_base(k: int) -> int:
    """The centre scale byte of mxmoe's random layers (MoeLayerData::random): e2m1 values have std ~2.93,
    so 2^-2 times 1/sqrt(K) gives a dequantised std of ~1/sqrt(K), as a trained checkpoint has."""
    return 127 - round(math.log2(math.sqrt(k))) - 2


def random_layer(experts: int, hidden: int, intermediate: int, seed: int, device="cpu") -> dict:
    """One random layer in the checkpoint layout: random nibbles, scale bytes base-1..base+1, biases
    N(0, 0.1^2) in bf16. Generated on `device` (GPU generation keeps 120b's 1.6 GB a layer fast)."""
    g = torch.Generator(device=device)
    g.manual_seed(seed)

    def blocks(rows, k):
        return torch.randint(0, 256, (experts, rows, k // 32, 16), generator=g, dtype=torch.uint8, device=device)

    def scales(rows, k):
        spread = torch.randint(0, 3, (experts, rows, k // 32), generator=g, dtype=torch.int16, device=device)
        return (spread + (scale_base(k) - 1)).to(torch.uint8)

    def bias(rows):
        return (0.1 * torch.randn((experts, rows), generator=g, device=device)).to(torch.bfloat16)

    return {
        "w1_blocks": blocks(2 * intermediate, hidden), "w1_scales": scales(2 * intermediate, hidden),
        "w1_bias": bias(2 * intermediate),
        "w2_blocks": blocks(hidden, intermediate), "w2_scales": scales(hidden, intermediate),
        "w2_bias": bias(hidden),
    }


def random_inputs(tokens: int, experts: int, hidden: int, seed: int, device="cpu"):
    """hidden [T, H] bf16 ~ N(0, 1) and router logits [T, E] fp32 ~ N(0, 2^2), as `mxmoe bench` draws them."""
    g = torch.Generator(device=device)
    g.manual_seed(seed)
    x = torch.randn((tokens, hidden), generator=g, device=device).to(torch.bfloat16)
    logits = 2.0 * torch.randn((tokens, experts), generator=g, device=device)
    return x, logits


def dequantize_expert(blocks: torch.Tensor, scales: torch.Tensor, dtype=torch.float64) -> torch.Tensor:
    """[R, K/32, 16] uint8 (element 2j in the low nibble) and [R, K/32] e8m0 -> [R, K] values. Exact in
    bf16 too: an e2m1 value times a power of two in bf16's range."""
    table = torch.tensor(E2M1, dtype=torch.float32, device=blocks.device)
    codes = torch.stack([blocks & 0xF, blocks >> 4], dim=-1).flatten(-2).long()  # [R, K/32, 32]
    values = table[codes] * torch.exp2(scales.float() - 127.0).unsqueeze(-1)
    return values.flatten(-2).to(dtype)


def dequantize(blocks: torch.Tensor, scales: torch.Tensor, dtype=torch.bfloat16, transpose=False) -> torch.Tensor:
    """All experts, one at a time (the int64 codes of a whole 120b tensor would need 17 GB): [E, R, K],
    or [E, K, R] with transpose (transformers' GptOssExperts layout: gate_up_proj [E, H, 2I])."""
    e, r, kb, _ = blocks.shape
    shape = (e, kb * 32, r) if transpose else (e, r, kb * 32)
    out = torch.empty(shape, dtype=dtype, device=blocks.device)
    for i in range(e):
        w = dequantize_expert(blocks[i], scales[i], dtype)
        out[i].copy_(w.T if transpose else w)
    return out


def route(logits: torch.Tensor, top_k: int):
    """gpt-oss routing: top-k of the logits (ties to the lower expert id), softmax over the k selected.
    Returns experts [T, k] int64 and weights [T, k] in the logits' dtype."""
    values, order = torch.sort(logits, dim=1, descending=True, stable=True)
    return order[:, :top_k], torch.softmax(values[:, :top_k], dim=1)


def swiglu(h: torch.Tensor, alpha=ALPHA, limit=LIMIT) -> torch.Tensor:
    """gpt-oss's clamped SwiGLU on interleaved [.., 2I] rows: gate h[0::2], linear h[1::2]."""
    gate = h[..., 0::2].clamp(max=limit)
    lin = h[..., 1::2].clamp(-limit, limit)
    return gate * torch.sigmoid(alpha * gate) * (lin + 1)


def reference(hidden: torch.Tensor, logits: torch.Tensor, layer: dict, top_k: int) -> torch.Tensor:
    """The MoE block in fp64 on the checkpoint-layout weights, dequantising only the experts in use."""
    x = hidden.double()
    experts, weights = route(logits.double(), top_k)
    out = torch.zeros(x.shape[0], layer["w2_blocks"].shape[1], dtype=torch.float64, device=x.device)
    for e in experts.unique().tolist():
        rows, slots = (experts == e).nonzero(as_tuple=True)
        w1 = dequantize_expert(layer["w1_blocks"][e], layer["w1_scales"][e])
        w2 = dequantize_expert(layer["w2_blocks"][e], layer["w2_scales"][e])
        a = swiglu(x[rows] @ w1.T + layer["w1_bias"][e].double())
        y = a @ w2.T + layer["w2_bias"][e].double()
        out.index_add_(0, rows, y * weights[rows, slots].unsqueeze(1))
    return out


def agreement(out: torch.Tensor, ref: torch.Tensor) -> dict:
    """||out - ref|| / ||ref|| (the project's tests' measure) and the largest element error against the
    largest |ref|; non-finite or unwritten outputs count as infinitely wrong."""
    out = out.double().to(ref.device)
    if not torch.isfinite(out).all():
        return {"rel_error": math.inf, "max_abs_error_rel": math.inf, "finite": False}
    norm = torch.linalg.norm(ref).clamp_min(1e-30)
    return {"rel_error": (torch.linalg.norm(out - ref) / norm).item(),
            "max_abs_error_rel": ((out - ref).abs().max() / ref.abs().max().clamp_min(1e-30)).item(),
            "finite": True}


def experts_touched(logits: torch.Tensor, top_k: int) -> int:
    """Distinct experts one forward reads at these logits."""
    experts, _ = route(logits, top_k)
    return int(experts.unique().numel())


def mxfp4_expert_bytes(hidden: int, intermediate: int) -> int:
    """What one expert streams: MXFP4 blocks and e8m0 scales of both GEMMs (mxmoe bench's expert_bytes)
    plus the bf16 biases."""
    w1 = 2 * intermediate * hidden // 2 + 2 * intermediate * hidden // 32
    w2 = hidden * intermediate // 2 + hidden * intermediate // 32
    return w1 + w2 + 2 * (2 * intermediate + hidden)


def floor_bytes(touched: float, tokens: int, experts: int, hidden: int, intermediate: int) -> float:
    """The bytes a layer must move at least: the selected experts' MXFP4 weights, the hidden rows read,
    the router logits read and the output rows written. The same floor for every implementation: it is
    the problem's, whatever format an implementation keeps its weights in."""
    activations = tokens * hidden * 2 * 2 + tokens * experts * 4
    return touched * mxfp4_expert_bytes(hidden, intermediate) + activations
