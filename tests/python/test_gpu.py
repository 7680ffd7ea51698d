"""On a CUDA GPU with PyTorch: the GPU backends through DLPack against a pure-PyTorch fp64 reference
written here (independent of the C++ reference and of conftest's NumPy one), CuPy inputs, the caller's
stream, CUDA graph capture, torch.compile through the custom op, and argument errors on the GPU path.
Skipped without them."""
import numpy as np
import pytest

import mxmoe
from conftest import f64_to_bf16, make_config, random_layer, reference_moe, rel_error

torch = pytest.importorskip("torch")
if not torch.cuda.is_available() or not mxmoe.probe()["gpu_available"]:
    pytest.skip("no usable CUDA GPU", allow_module_level=True)

# Relative error bound (||out - ref|| / ||ref||). The W4A16 backends see the weights exactly and round
# only the activations to bf16. mx-emulated is compared with a reference that quantises both GEMM inputs
# to MXFP8 as the kernels do (unquantised, the MXFP8 rounding alone is 3-5.5% off).
BOUND = 1e-2
MX_BOUND = 2e-2  # the reference's intermediate is fp64 rounded to fp32 before quantising, the kernel's fp32
MXFP8_BACKENDS = {"mx-emulated", "mx"}
E2M1 = [0, 0.5, 1, 1.5, 2, 3, 4, 6, -0.0, -0.5, -1, -1.5, -2, -3, -4, -6]


def to_torch_bf16(bits):
    return torch.from_numpy(bits.view(np.int16)).view(torch.bfloat16).cuda()


def bits(out):
    """A CUDA bfloat16 tensor's bits as a NumPy uint16 array (conftest's format)."""
    return out.view(torch.int16).cpu().numpy().view(np.uint16)


def torch_weights(w):
    return {k: (to_torch_bf16(v) if v.dtype == np.uint16 else torch.from_numpy(v).cuda()) for k, v in w.items()}


def torch_dequantize(blocks, scales):
    """[E, R, K/32, 16] uint8 (element 2j in the low nibble), [E, R, K/32] e8m0 -> [E, R, K] fp64."""
    table = torch.tensor(E2M1, dtype=torch.float64, device=blocks.device)
    codes = torch.stack([blocks & 0xF, blocks >> 4], dim=-1).flatten(-2).long()  # [E, R, K/32, 32]
    values = table[codes] * torch.exp2(scales.double() - 127.0).unsqueeze(-1)
    return values.flatten(-2)


def mxfp8_round_trip(rows):
    """Rows of fp32 values through MXFP8 and back: per 32-block e8m0 scale by RCEIL (the smallest s with
    amax <= 448 * 2^s), elements / 2^s to e4m3 (round to nearest even)."""
    blocks = rows.float().reshape(*rows.shape[:-1], -1, 32).double()
    amax = blocks.abs().amax(dim=-1, keepdim=True)
    s = torch.ceil(torch.log2(amax / 448.0)).clamp(-127, 127)
    s = torch.where(amax > 0, s, torch.zeros_like(s))
    codes = (blocks * torch.exp2(-s)).float().to(torch.float8_e4m3fn)
    return (codes.double() * torch.exp2(s)).reshape(rows.shape)


def torch_reference(hidden, logits, w, top_k, alpha=1.702, limit=7.0, mxfp8=False):
    """The gpt-oss MoE block in fp64 torch on the GPU: top-k of the logits (ties to the lower expert),
    softmax over the k, clamped interleaved SwiGLU with biases, the weighted sum of the k experts.
    mxfp8: both GEMM inputs (the tokens, the SwiGLU output) rounded through MXFP8 first."""
    x, lg = hidden.double(), logits.double()
    if mxfp8:
        x = mxfp8_round_trip(x)
    w1 = torch_dequantize(w["w1_blocks"], w["w1_scales"])
    w2 = torch_dequantize(w["w2_blocks"], w["w2_scales"])
    b1 = w["w1_bias"].double() if "w1_bias" in w else torch.zeros(w1.shape[:2], dtype=torch.float64, device=x.device)
    b2 = w["w2_bias"].double() if "w2_bias" in w else torch.zeros(w2.shape[:2], dtype=torch.float64, device=x.device)
    out = torch.zeros(x.shape[0], w2.shape[1], dtype=torch.float64, device=x.device)
    if x.shape[0] == 0:
        return out
    values, order = torch.sort(lg, dim=1, descending=True, stable=True)
    experts, weights = order[:, :top_k], torch.softmax(values[:, :top_k], dim=1)
    for e in experts.unique().tolist():
        rows, slots = (experts == e).nonzero(as_tuple=True)
        h = x[rows] @ w1[e].T + b1[e]
        gate = h[:, 0::2].clamp(max=limit)
        lin = h[:, 1::2].clamp(-limit, limit)
        act = gate * torch.sigmoid(alpha * gate) * (lin + 1)
        if mxfp8:
            act = mxfp8_round_trip(act)
        y = act @ w2[e].T + b2[e]
        out.index_add_(0, rows, y * weights[rows, slots].unsqueeze(1))
    return out


def torch_rel_error(out, ref):
    out = out.double()
    assert torch.isfinite(out).all(), "non-finite or unwritten outputs"
    return (torch.linalg.norm(out - ref) / torch.linalg.norm(ref).clamp_min(1e-30)).item()


def random_case(rng, tokens, experts=None):
    """A random layer shape (K a multiple of 32, often not of 128), weights, inputs and logits."""
    e = experts or int(rng.integers(1, 65))
    k = int(rng.integers(1, min(e, 8) + 1))
    h, i = 32 * int(rng.integers(1, 17)), 32 * int(rng.integers(1, 17))
    w = random_layer(rng, e, h, i, bias=bool(rng.integers(0, 4)))
    hidden = to_torch_bf16(f64_to_bf16(rng.normal(size=(tokens, h))))
    logits = torch.from_numpy(rng.normal(0, 2, size=(tokens, e)).astype(np.float32)).cuda()
    return (e, k, h, i), torch_weights(w), hidden, logits


def poisoned(like):
    return torch.full_like(like, float("nan"))


@pytest.mark.parametrize("backend", ["auto", "gemv", "mma", "mx-emulated"])
@pytest.mark.parametrize("tokens", [0, 1, 3, 37, 1000])
def test_random_shapes_match_torch_reference(rng, backend, tokens):
    for _ in range(3):
        (e, k, h, i), w, hidden, logits = random_case(rng, tokens)
        layer = mxmoe.MoeLayer(make_config(e, k, h, i), w, backend=backend, max_tokens=max(tokens, 1))
        out = poisoned(hidden)
        layer(hidden, logits, out)
        torch.cuda.synchronize()
        if tokens:
            mx = backend in MXFP8_BACKENDS
            err = torch_rel_error(out, torch_reference(hidden, logits, w, k, mxfp8=mx))
            assert err <= (MX_BOUND if mx else BOUND), f"E={e} k={k} H={h} I={i} T={tokens}: {err}"


@pytest.mark.parametrize("backend", ["auto", "gemv", "mma"])
def test_one_expert_takes_every_token_and_the_rest_none(rng, backend):
    (e, k, h, i), w, hidden, logits = random_case(rng, 200, experts=16)
    logits[:, 5] += 100.0
    layer = mxmoe.MoeLayer(make_config(e, k, h, i), w, backend=backend, max_tokens=200)
    out = poisoned(hidden)
    layer(hidden, logits, out)
    assert torch_rel_error(out, torch_reference(hidden, logits, w, k)) <= BOUND


@pytest.mark.parametrize("backend", ["auto", "gemv", "mma"])
@pytest.mark.parametrize("tokens", [0, 1, 3, 1000])
def test_fused_moe_matches_both_references(rng, backend, tokens):
    e, k, h, i = 32, 4, 256, 192
    w = random_layer(rng, e, h, i)
    hidden = f64_to_bf16(rng.normal(size=(tokens, h)))
    logits = rng.normal(0, 2, size=(tokens, e)).astype(np.float32)
    if tokens == 3:
        logits[:, 7] += 100.0  # one expert takes every token
    tw = torch_weights(w)
    th, tl = to_torch_bf16(hidden), torch.from_numpy(logits).cuda()
    out = mxmoe.fused_moe(th, tl, tw["w1_blocks"], tw["w1_scales"], tw["w1_bias"], tw["w2_blocks"], tw["w2_scales"],
                          tw["w2_bias"], top_k=k, backend=backend)
    torch.cuda.synchronize()
    assert out.shape == (tokens, h) and out.dtype == torch.bfloat16
    if tokens:
        assert torch_rel_error(out, torch_reference(th, tl, tw, k)) <= BOUND
        assert rel_error(bits(out), reference_moe(hidden, logits, w, k)) <= BOUND


def test_plan_forces_parts_of_the_gpu_plan(rng):
    (e, k, h, i), w, hidden, logits = random_case(rng, 8, experts=32)
    config = make_config(e, k, h, i)
    for plan, combines in (("fused_combine=8", True), ("fused_combine=0", False)):
        layer = mxmoe.MoeLayer(config, w, backend="gemv", max_tokens=8, plan=plan)
        assert ("combine in gemm2" in layer.describe_plan(8)) == combines, (plan, layer.describe_plan(8))
        out = poisoned(hidden)
        layer(hidden, logits, out)
        assert torch_rel_error(out, torch_reference(hidden, logits, w, k)) <= BOUND, plan
    # A value the key takes but the runner cannot run (the 16-row batch runs 2 ring stages only; the
    # minimal profile has no 3-stage ring) is refused by its key when the layer is built.
    with pytest.raises(mxmoe.Error, match="batch=16|stages=3"):
        mxmoe.MoeLayer(config, w, backend="gemv", max_tokens=8, plan="batch=16,stages=3")


def test_runs_on_the_callers_stream(rng):
    (e, k, h, i), w, hidden, logits = random_case(rng, 64, experts=32)
    layer = mxmoe.MoeLayer(make_config(e, k, h, i), w, max_tokens=64)
    expected = layer(hidden, logits).clone()
    side = torch.cuda.Stream()
    out = poisoned(hidden)
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        torch.cuda._sleep(20_000_000)  # keeps the side stream busy: a forward on another stream would race ahead
        layer(hidden, logits, out)
        done = torch.cuda.Event()
        done.record()
    done.synchronize()
    assert torch.equal(out.view(torch.int16), expected.view(torch.int16))


def test_cupy_arrays_through_dlpack(rng):
    cupy = pytest.importorskip("cupy")
    e, k, h, i = 24, 3, 160, 96
    w = random_layer(rng, e, h, i)
    hidden = f64_to_bf16(rng.normal(size=(9, h)))
    logits = rng.normal(0, 2, size=(9, e)).astype(np.float32)
    cw = {name: cupy.asarray(v) for name, v in w.items()}  # bf16 as its uint16 bits (CuPy has no bfloat16)
    layer = mxmoe.MoeLayer(make_config(e, k, h, i), cw, max_tokens=16)
    out = cupy.full(hidden.shape, 0x7FC0, dtype=cupy.uint16)  # NaN bits
    layer(cupy.asarray(hidden), cupy.asarray(logits), out)
    cupy.cuda.get_current_stream().synchronize()
    assert rel_error(cupy.asnumpy(out), reference_moe(hidden, logits, w, k)) <= BOUND


def test_jax_cuda_arrays_into_a_torch_out(rng):
    jax = pytest.importorskip("jax")
    try:
        gpu = jax.devices("gpu")[0]
    except RuntimeError:
        pytest.skip("this JAX has no GPU backend")
    e, k, h, i = 16, 4, 128, 96
    w = random_layer(rng, e, h, i)
    hidden = f64_to_bf16(rng.normal(size=(7, h)))
    logits = rng.normal(0, 2, size=(7, e)).astype(np.float32)
    jw = {name: jax.device_put(v, gpu) for name, v in w.items()}
    jh = jax.device_put(hidden, gpu).view(jax.numpy.bfloat16)
    jl = jax.device_put(logits, gpu) + 0.0  # made by a JAX kernel, on a JAX stream
    layer = mxmoe.MoeLayer(make_config(e, k, h, i), jw, max_tokens=8)
    with pytest.raises(mxmoe.Error, match="out"):
        layer(jh, jl)  # JAX arrays are immutable: no output is made for them on a GPU
    out = torch.full((7, h), float("nan"), dtype=torch.bfloat16, device="cuda")
    layer(jh, jl, out)
    torch.cuda.synchronize()
    assert rel_error(bits(out), reference_moe(hidden, logits, w, k)) <= BOUND


def layer_and_inputs(rng, tokens, max_tokens):
    """A 32-expert layer (top-4, H 256, I 192) with random weights, and random inputs of `tokens` rows."""
    e, k, h, i = 32, 4, 256, 192
    layer = mxmoe.MoeLayer(make_config(e, k, h, i), torch_weights(random_layer(rng, e, h, i)), max_tokens=max_tokens)
    hidden = to_torch_bf16(f64_to_bf16(rng.normal(size=(tokens, h))))
    logits = torch.from_numpy(rng.normal(size=(tokens, e)).astype(np.float32)).cuda()
    return layer, hidden, logits


def test_cuda_graph_capture_replays_the_same_bits(rng):
    layer, hidden, logits = layer_and_inputs(rng, 37, max_tokens=64)
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
    layer, hidden, logits = layer_and_inputs(rng, 5, max_tokens=16)
    eager = layer(hidden, logits) * 2  # registers the op and the layer's handle first
    compiled = torch.compile(lambda x, l: layer(x, l) * 2, fullgraph=True)
    assert torch.equal(compiled(hidden, logits), eager)


def test_gpu_argument_errors_name_the_argument(rng):
    (e, k, h, i), w, hidden, logits = random_case(rng, 8, experts=8)
    layer = mxmoe.MoeLayer(make_config(e, k, h, i), w, max_tokens=8)
    cases = {
        "hidden": lambda: layer(hidden.float(), logits, torch.empty_like(hidden)),
        "router_logits": lambda: layer(hidden, logits.double(), torch.empty_like(hidden)),
        "out": lambda: layer(hidden, logits, torch.empty(8, h + 32, dtype=torch.bfloat16, device="cuda")),
        "tokens": lambda: layer(torch.cat([hidden, hidden]), torch.cat([logits, logits]),
                                torch.empty(16, h, dtype=torch.bfloat16, device="cuda")),
    }
    for name, call in cases.items():
        with pytest.raises(mxmoe.Error, match=name):
            call()
    # A CPU tensor on a GPU layer, and a transposed (strided) view: refused, not read wrongly.
    with pytest.raises(mxmoe.Error):
        layer(hidden.cpu(), logits.cpu(), torch.empty_like(hidden).cpu())
    square = torch.zeros(h, h, dtype=torch.bfloat16, device="cuda")
    with pytest.raises(mxmoe.Error, match="contiguous"):
        layer(square.t()[:8], logits, torch.empty_like(hidden))
    # The layer still works after every refusal.
    out = poisoned(hidden)
    layer(hidden, logits, out)
    assert torch_rel_error(out, torch_reference(hidden, logits, w, k)) <= BOUND
