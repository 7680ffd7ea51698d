"""On a CUDA GPU with PyTorch: the GPU backends through DLPack against the NumPy reference, CUDA graph
capture, torch.compile through the custom op. Skipped without them."""
import numpy as np
import pytest

import mxmoe
from conftest import f64_to_bf16, random_layer, reference_moe, rel_error

torch = pytest.importorskip("torch")
if not torch.cuda.is_available() or not mxmoe.probe()["gpu_available"]:
    pytest.skip("no usable CUDA GPU", allow_module_level=True)


def to_torch_bf16(bits):
    return torch.from_numpy(bits.view(np.int16)).view(torch.bfloat16).cuda()


def bits(out):
    """A CUDA bfloat16 tensor's bits as a NumPy uint16 array (conftest's format)."""
    return out.view(torch.int16).cpu().numpy().view(np.uint16)


def torch_weights(w):
    return {k: (to_torch_bf16(v) if v.dtype == np.uint16 else torch.from_numpy(v).cuda()) for k, v in w.items()}


@pytest.mark.parametrize("backend", ["auto", "gemv", "mma"])
@pytest.mark.parametrize("tokens", [0, 1, 3, 1000])
def test_fused_moe_matches_numpy_reference(rng, backend, tokens):
    e, k, h, i = 32, 4, 256, 192
    w = random_layer(rng, e, h, i)
    hidden = f64_to_bf16(rng.normal(size=(tokens, h)))
    logits = rng.normal(0, 2, size=(tokens, e)).astype(np.float32)
    if tokens == 3:
        logits[:, 7] += 100.0  # one expert takes every token
    tw = torch_weights(w)
    out = mxmoe.fused_moe(to_torch_bf16(hidden), torch.from_numpy(logits).cuda(), tw["w1_blocks"], tw["w1_scales"],
                          tw["w1_bias"], tw["w2_blocks"], tw["w2_scales"], tw["w2_bias"], top_k=k, backend=backend)
    torch.cuda.synchronize()
    assert out.shape == (tokens, h) and out.dtype == torch.bfloat16
    if tokens:
        assert rel_error(bits(out), reference_moe(hidden, logits, w, k)) <= 1e-2


def test_cuda_graph_capture_replays_the_same_bits(rng):
    e, k, h, i = 32, 4, 256, 192
    w = random_layer(rng, e, h, i)
    layer = mxmoe.MoeLayer(_config(e, k, h, i), torch_weights(w), max_tokens=64)
    hidden = to_torch_bf16(f64_to_bf16(rng.normal(size=(37, h))))
    logits = torch.from_numpy(rng.normal(size=(37, e)).astype(np.float32)).cuda()
    eager = layer(hidden, logits).clone()
    out = torch.empty_like(hidden)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        layer(hidden, logits, out)  # warm-up on the capture stream
    torch.cuda.current_stream().wait_stream(s)
    graph = torch.cuda.CUDAGraph()
    out.fill_(float("nan"))
    with torch.cuda.graph(graph):
        layer(hidden, logits, out)
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(out.view(torch.int16), eager.view(torch.int16))


def test_torch_compile_traces_the_custom_op(rng):
    e, k, h, i = 32, 4, 256, 192
    w = random_layer(rng, e, h, i)
    layer = mxmoe.MoeLayer(_config(e, k, h, i), torch_weights(w), max_tokens=16)
    hidden = to_torch_bf16(f64_to_bf16(rng.normal(size=(5, h))))
    logits = torch.from_numpy(rng.normal(size=(5, e)).astype(np.float32)).cuda()
    eager = layer(hidden, logits) * 2  # registers the op and the layer's handle first
    compiled = torch.compile(lambda x, l: layer(x, l) * 2, fullgraph=True)
    assert torch.equal(compiled(hidden, logits), eager)


def _config(e, k, h, i):
    c = mxmoe.MoeConfig()
    c.num_experts, c.top_k, c.hidden, c.intermediate = e, k, h, i
    return c
