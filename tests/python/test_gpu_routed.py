"""Routed input on a CUDA GPU with PyTorch: MoeLayer(hidden, topk_ids=, topk_weights=) and
mxmoe.fused_experts give the logits call's bits on every backend when routed the same way (logits whose
top k tie: the route picks those k ascending, each weight exactly 1/k), int32 and int64 ids, the torch
custom op (torch.compile), CUDA graphs, bad ids as NaN rows, and argument errors. Skipped without them."""
import numpy as np
import pytest

import mxmoe
from conftest import f64_to_bf16, make_config, random_layer, reference_moe, rel_error

torch = pytest.importorskip("torch")
if not torch.cuda.is_available() or not mxmoe.probe()["gpu_available"]:
    pytest.skip("no usable CUDA GPU", allow_module_level=True)

E, K, H, I = 32, 4, 256, 192


def cuda_weights(w):
    return {k: (torch.from_numpy(v.view(np.int16)).view(torch.bfloat16) if v.dtype == np.uint16
                else torch.from_numpy(v)).cuda() for k, v in w.items()}


def tied_case(rng, tokens, one_expert=False):
    """hidden (torch bf16), logits with each token's top k tied, and that routing (ids ascending, 1/k)."""
    hidden = f64_to_bf16(rng.normal(size=(tokens, H)))
    logits = rng.normal(0, 1, size=(tokens, E)).astype(np.float32)
    ids = np.zeros((tokens, K), np.int64)
    for t in range(tokens):
        chosen = np.sort(rng.choice(E, size=K, replace=False))
        if one_expert and 7 not in chosen:
            chosen = np.sort(np.append(chosen[1:], 7))
        logits[t, chosen] = 10.0 + rng.integers(0, 5)
        ids[t] = chosen
    th = torch.from_numpy(hidden.view(np.int16)).view(torch.bfloat16).cuda()
    return hidden, logits, th, torch.from_numpy(logits).cuda(), torch.from_numpy(ids).cuda(), \
        torch.full((tokens, K), 1.0 / K, dtype=torch.float32, device="cuda")


def same_bits(a, b):
    return torch.equal(a.view(torch.int16), b.view(torch.int16))


@pytest.mark.parametrize("backend", ["auto", "gemv", "mma", "mx-emulated"])
@pytest.mark.parametrize("tokens", [0, 1, 3, 4, 37, 1000])
def test_routed_gives_the_logits_calls_bits(rng, backend, tokens):
    w = random_layer(rng, E, H, I)
    layer = mxmoe.MoeLayer(make_config(E, K, H, I), cuda_weights(w), backend=backend, max_tokens=max(tokens, 1))
    hidden, logits, th, tl, ids, weights = tied_case(rng, tokens, one_expert=tokens == 37)
    want = layer(th, tl)
    for dtype in (torch.int64, torch.int32):
        out = torch.full_like(th, float("nan"))
        layer(th, out=out, topk_ids=ids.to(dtype), topk_weights=weights)
        torch.cuda.synchronize()
        assert same_bits(out, want), (backend, tokens, dtype)
        assert same_bits(layer(th, topk_ids=ids.to(dtype), topk_weights=weights), want)  # the custom op
    if tokens and backend != "mx-emulated":
        out_bits = want.view(torch.int16).cpu().numpy().view(np.uint16)
        assert rel_error(out_bits, reference_moe(hidden, logits, w, K)) <= 1e-2


def test_fused_experts_torch_compile_and_graphs(rng):
    w = random_layer(rng, E, H, I)
    tw = cuda_weights(w)
    args = (tw["w1_blocks"], tw["w1_scales"], tw["w1_bias"], tw["w2_blocks"], tw["w2_scales"], tw["w2_bias"])
    _, _, th, tl, ids, weights = tied_case(rng, 5)
    want = mxmoe.fused_moe(th, tl, *args, top_k=K)
    assert same_bits(mxmoe.fused_experts(th, *args, weights, ids), want)
    layer = mxmoe.MoeLayer(make_config(E, K, H, I), tw, max_tokens=16)
    compiled = torch.compile(lambda x, i, p: layer(x, topk_ids=i, topk_weights=p) * 2, fullgraph=True)
    assert torch.equal(compiled(th, ids, weights), layer(th, tl) * 2)
    out = torch.empty_like(th)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        layer(th, out=out, topk_ids=ids, topk_weights=weights)  # warm-up on the capture stream
    torch.cuda.current_stream().wait_stream(s)
    graph = torch.cuda.CUDAGraph()
    out.fill_(float("nan"))
    with torch.cuda.graph(graph):
        layer(th, out=out, topk_ids=ids, topk_weights=weights)
    graph.replay()
    torch.cuda.synchronize()
    assert same_bits(out, want)


def test_bad_ids_give_nan_rows_and_errors_name_the_argument(rng):
    w = random_layer(rng, E, H, I)
    layer = mxmoe.MoeLayer(make_config(E, K, H, I), cuda_weights(w), max_tokens=8)
    _, _, th, tl, ids, weights = tied_case(rng, 6)
    want = layer(th, tl)
    bad = ids.clone()
    bad[1, 2] = E           # out of range
    bad[4, 0] = bad[4, 3]   # an expert twice
    out = layer(th, topk_ids=bad, topk_weights=weights)
    torch.cuda.synchronize()
    assert torch.isnan(out[[1, 4]].float()).all()
    keep = [0, 2, 3, 5]
    assert same_bits(out[keep], want[keep])
    with pytest.raises(mxmoe.Error, match="topk_ids: expected a CUDA tensor"):
        layer(th, topk_ids=ids.cpu(), topk_weights=weights)
    with pytest.raises(mxmoe.Error, match="topk_weights: expected float32, got bfloat16"):
        layer(th, topk_ids=ids, topk_weights=weights.bfloat16())
    with pytest.raises(mxmoe.Error, match="topk_ids: expected int32 or int64, got float32"):
        layer(th, topk_ids=ids.float(), topk_weights=weights)
    with pytest.raises(mxmoe.Error, match="topk_ids: must be C-contiguous"):
        layer(th, topk_ids=ids.t().contiguous().t(), topk_weights=weights)
    with pytest.raises(mxmoe.Error, match="hidden: expected a CUDA tensor .*move it to the GPU"):
        layer(th.cpu(), topk_ids=ids, topk_weights=weights, out=torch.empty_like(th))
    assert same_bits(layer(th, topk_ids=ids, topk_weights=weights), want)  # still works
