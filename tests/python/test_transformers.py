"""gpt-oss in Hugging Face transformers with its MoE layers run by mxmoe (mxmoe.integrations.transformers),
against transformers' own path on the same MXFP4 checkpoint.

The reference is transformers' dequantising MXFP4 path: GptOssForCausalLM.from_pretrained with
Mxfp4Config(dequantize=True), which turns the experts' MXFP4 blocks into bf16 parameters
(integrations.mxfp4.convert_moe_packed_tensors) and runs them with its default experts implementation
(printed). transformers 5.x takes that path by itself wherever its MXFP4 kernels (the `kernels` package
and the hub's gpt-oss triton kernels) are missing; here it is asked for, so that it is the same path
everywhere. The checkpoint: a random GptOssConfig of 2 layers (one sliding-window, one full attention),
a few experts, sizes multiples of 32 (K = 96 is not a multiple of 128), written with Hugging Face names.

The CPU tests run mxmoe's fp64 CPU reference; the same tests run on a GPU with the GPU backends
(skipped without one). Skipped as a whole without torch or transformers."""
import json

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="the transformers integration needs PyTorch")
transformers = pytest.importorskip("transformers", reason="the transformers integration needs transformers")
pytest.importorskip("safetensors", reason="the test checkpoint is written with safetensors")

import mxmoe  # noqa: E402
from conftest import random_layer  # noqa: E402
from mxmoe.integrations import transformers as mxt  # noqa: E402

BOUND = 1e-2  # ||logits - ref|| / ||ref||, over the tokens whose experts are the reference's
# The random model's scales. transformers' bf16 path itself moves the logits by about 0.5% here (its
# eager and grouped_mm experts differ by 0.4%): a MoE output about as large as the embedding (experts'
# outputs scaled by 2^-2) and router logits of std ~2 (decisive routing: few near-ties to flip).
ROUTER_STD = 0.25
EMBED_STD = 2.0
MOE_SHIFT = 2
LAYERS, EXPERTS, TOP_K, HIDDEN, INTER, VOCAB = 2, 6, 3, 64, 96, 160

GPU = torch.cuda.is_available() and mxmoe.probe()["gpu_available"]
DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(not GPU, reason="no usable CUDA GPU"))]
SEAMS = list(mxt.SEAMS)


def write_checkpoint(path, rng):
    """A random gpt-oss MXFP4 checkpoint directory in Hugging Face format (config.json with an mxfp4
    quantization_config, model.safetensors): transformers' own random initialisation for everything but
    the experts, whose MXFP4 blocks, scales and bf16 biases are checkpoint-like random bytes."""
    from safetensors.torch import save_file

    config = transformers.GptOssConfig(
        num_hidden_layers=LAYERS, num_local_experts=EXPERTS, num_experts_per_tok=TOP_K, hidden_size=HIDDEN,
        intermediate_size=INTER, vocab_size=VOCAB, num_attention_heads=4, num_key_value_heads=2, head_dim=32,
        sliding_window=5, max_position_embeddings=256, initializer_range=0.08,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0}, pad_token_id=0, eos_token_id=None,
        bos_token_id=None)
    torch.manual_seed(int(rng.integers(2**62)))
    model = transformers.GptOssForCausalLM(config).to(torch.bfloat16)
    tensors = {k: v.contiguous() for k, v in model.state_dict().items() if ".mlp.experts." not in k}
    tensors["model.embed_tokens.weight"] = torch.randn(VOCAB, HIDDEN).mul(EMBED_STD).to(torch.bfloat16)
    for name in tensors:
        if name.endswith("mlp.router.weight"):
            # Routing decided by wide margins, so that the few flips bf16 differences cause stay few.
            tensors[name] = torch.randn(EXPERTS, HIDDEN).mul(ROUTER_STD).to(torch.bfloat16)
    for layer in range(LAYERS):
        w = random_layer(rng, EXPERTS, HIDDEN, INTER)
        w["w2_scales"] -= MOE_SHIFT
        p = f"model.layers.{layer}.mlp.experts."
        tensors[p + "gate_up_proj_blocks"] = torch.from_numpy(w["w1_blocks"])
        tensors[p + "gate_up_proj_scales"] = torch.from_numpy(w["w1_scales"])
        tensors[p + "gate_up_proj_bias"] = torch.from_numpy(w["w1_bias"].view(np.int16)).view(torch.bfloat16)
        tensors[p + "down_proj_blocks"] = torch.from_numpy(w["w2_blocks"])
        tensors[p + "down_proj_scales"] = torch.from_numpy(w["w2_scales"])
        tensors[p + "down_proj_bias"] = torch.from_numpy(w["w2_bias"].view(np.int16)).view(torch.bfloat16)
    save_file(tensors, str(path / "model.safetensors"), metadata={"format": "pt"})
    config.save_pretrained(path)
    with open(path / "config.json") as f:
        saved = json.load(f)
    saved["quantization_config"] = {"quant_method": "mxfp4"}
    with open(path / "config.json", "w") as f:
        json.dump(saved, f)


@pytest.fixture
def checkpoint(tmp_path, rng):
    write_checkpoint(tmp_path, rng)
    return tmp_path


def reference_model(path, device):
    """transformers' dequantising MXFP4 path on the same checkpoint."""
    model = transformers.GptOssForCausalLM.from_pretrained(
        path, dtype=torch.bfloat16, quantization_config=transformers.Mxfp4Config(dequantize=True)).to(device)
    print(f"reference: transformers {transformers.__version__} GptOssForCausalLM.from_pretrained, "
          f"Mxfp4Config(dequantize=True) (experts dequantised to bf16), experts implementation "
          f"'{model.config._experts_implementation}', attention '{model.config._attn_implementation}', {device}")
    return model.eval()


def record_routes(model):
    """Per decoder layer, a list (one entry per forward) of the experts the router picks for each token,
    sorted, and whether the k-th and (k+1)-th router logits tie (mxmoe takes the lower expert on a tie,
    torch.topk need not)."""
    routes = {}

    def hook(index, layer):
        def run(module, args, output):
            x = output.reshape(-1, output.shape[-1])
            logits = torch.nn.functional.linear(x, layer.mlp.router.weight, layer.mlp.router.bias)
            top = torch.topk(logits.float(), TOP_K + 1, dim=-1)
            tie = top.values[:, TOP_K - 1] == top.values[:, TOP_K]
            routes.setdefault(index, []).append((top.indices[:, :TOP_K].sort(-1).values, tie))
        return run

    for i, layer in enumerate(model.model.layers):
        layer.post_attention_layernorm.register_forward_hook(hook(i, layer))
    return routes


def rerouted_tokens(ours, theirs, forward=0):
    """Tokens whose experts may differ between the two models in a forward: other experts, or a tie."""
    flagged = None
    for layer in ours:
        (a, tie_a), (b, tie_b) = ours[layer][forward], theirs[layer][forward]
        f = (a != b).any(-1) | tie_a | tie_b
        flagged = f if flagged is None else flagged | f
    return flagged


def record_moe(model, layer=0):
    """The input and output of one layer's MoE block, per forward."""
    seen = []
    model.model.layers[layer].mlp.register_forward_hook(lambda m, args, out: seen.append((args[0], out[0])))
    return seen


def rel(a, b):
    a, b = a.double(), b.double()
    return ((a - b).norm() / b.norm()).item()


def prompts(rng, batch, length):
    return torch.from_numpy(rng.integers(1, VOCAB, size=(batch, length))).long()


def test_loader_reads_every_tensor_and_makes_no_bf16_experts(checkpoint):
    model = mxt.load_gpt_oss_model(checkpoint, device="cpu")
    ref = reference_model(checkpoint, "cpu")
    ours, theirs = model.state_dict(), ref.state_dict()
    assert not any(".mlp.experts." in k for k in ours), "the experts hold no bf16 parameters"
    assert set(theirs) - set(ours) == {f"model.layers.{n}.mlp.experts.{p}" for n in range(LAYERS)
                                       for p in ("gate_up_proj", "gate_up_proj_bias", "down_proj", "down_proj_bias")}
    for name, value in ours.items():
        assert value.dtype == theirs[name].dtype, name
        assert torch.equal(value, theirs[name]), name
    for name, buf in ref.named_buffers():  # the rotary frequencies, computed rather than read
        assert torch.equal(dict(model.named_buffers())[name], buf), name
    assert all(layer.mlp.experts._mxmoe.backend == "reference" for layer in model.model.layers)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("seam", SEAMS)
def test_logits_match_transformers(checkpoint, rng, device, seam):
    model = mxt.load_gpt_oss_model(checkpoint, device=device, seam=seam)
    ref = reference_model(checkpoint, device)
    routing = "router logits" if seam == "block" else "routed input: top_k_index, top_k_weights"
    print(f"mxmoe: seam '{seam}' ({routing}), backend '{model.model.layers[0].mlp.experts._mxmoe.backend}'")
    ids = prompts(rng, 3, 11).to(device)
    ours_routes, ref_routes = record_routes(model), record_routes(ref)
    ours_moe, ref_moe = record_moe(model), record_moe(ref)
    with torch.no_grad():
        logits = model(ids).logits.double().flatten(0, 1)
        expected = ref(ids).logits.double().flatten(0, 1)
    assert torch.isfinite(logits).all()
    # Layer 0's MoE block sees the same bits in both models (the loader read the same tensors): its
    # output differs only by the two MoE paths.
    assert torch.equal(ours_moe[0][0], ref_moe[0][0])
    moe_err = rel(ours_moe[0][1].flatten(0, 1), ref_moe[0][1].flatten(0, 1))
    # A token whose experts may differ (bf16 differences of layer 0 moved a near-tie of layer 1's router,
    # or a tie) is left out; with 2 layers nothing later depends on the last layer's routing.
    flagged = rerouted_tokens(ours_routes, ref_routes)
    print(f"tokens whose experts may differ from the reference's: {flagged.nonzero().flatten().tolist()}")
    assert flagged.sum() <= max(2, logits.shape[0] // 8), "too many routing differences"
    keep = ~flagged
    err = rel(logits[keep], expected[keep])
    print(f"relative error: layer 0's MoE output {moe_err:.2e}, logits {err:.2e} (bound {BOUND})")
    assert moe_err <= BOUND
    assert err <= BOUND


def first_divergences(ours, theirs, prompt_len):
    """Per sequence: the first generated step where the tokens differ, or None."""
    steps = []
    for a, b in zip(ours.sequences[:, prompt_len:], theirs.sequences[:, prompt_len:]):
        diff = (a != b).nonzero()
        steps.append(int(diff[0]) if len(diff) else None)
    return steps


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("seam", SEAMS)
@pytest.mark.parametrize("cache", ["dynamic", "static"])
@pytest.mark.parametrize("batch", [1, 3])
def test_greedy_generation_matches_transformers(checkpoint, rng, device, seam, cache, batch):
    new = 12
    model = mxt.load_gpt_oss_model(checkpoint, device=device, seam=seam)
    ref = reference_model(checkpoint, device)
    ids = prompts(rng, batch, 6).to(device)
    kwargs = dict(max_new_tokens=new, min_new_tokens=new, do_sample=False, output_logits=True,
                  return_dict_in_generate=True, attention_mask=torch.ones_like(ids))
    if cache == "static":
        kwargs["cache_implementation"] = "static"
    with torch.no_grad():
        ours = model.generate(ids, **kwargs)
        theirs = ref.generate(ids, **kwargs)
    assert ours.sequences.shape == theirs.sequences.shape == (batch, ids.shape[1] + new)
    ours_logits, ref_logits = torch.stack(ours.logits, 1).float(), torch.stack(theirs.logits, 1).float()
    assert torch.isfinite(ours_logits).all()
    divergence = first_divergences(ours, theirs, ids.shape[1])
    # The logit error measured where both saw the same tokens, away from any divergence: how far a
    # top-two gap may be closed by the numerical difference of the two paths.
    same = [(s, t) for s, d in enumerate(divergence) for t in range(new if d is None else d)]
    measured = max((ours_logits[s, t] - ref_logits[s, t]).abs().max().item() for s, t in same) if same else 0.0
    for s, d in enumerate(divergence):
        if d is None:
            continue
        top2 = torch.topk(ref_logits[s, d], 2).values
        gap = (top2[0] - top2[1]).item()
        print(f"sequence {s}: first differs at step {d}: reference top-two gap {gap:.4g}, measured logit error "
              f"{measured:.4g}")
        assert gap < 2 * measured, f"sequence {s} step {d}: a gap of {gap} is beyond the paths' difference"
    print(f"{cache} cache, batch {batch}: {sum(d is None for d in divergence)} of {batch} sequences identical, "
          f"measured logit error {measured:.4g}")


def test_long_inputs_split_into_chunks_give_the_same_bits(checkpoint, rng):
    ids = prompts(rng, 2, 9)
    whole = mxt.load_gpt_oss_model(checkpoint, device="cpu")
    chunked = mxt.load_gpt_oss_model(checkpoint, device="cpu", max_tokens=4)  # 18 tokens: 5 calls a layer
    with torch.no_grad():
        assert torch.equal(whole(ids).logits, chunked(ids).logits)


def test_bad_arguments_name_themselves(checkpoint, tmp_path_factory):
    with pytest.raises(mxmoe.Error, match="seam"):
        mxt.load_gpt_oss_model(checkpoint, device="cpu", seam="router")
    with pytest.raises(mxmoe.Error, match="path"):
        mxt.load_gpt_oss_model(checkpoint / "absent", device="cpu")
    with pytest.raises(mxmoe.Error, match="model"):
        mxt.patch_model(torch.nn.Linear(2, 2), checkpoint)
    # A checkpoint missing one of the model's tensors.
    from safetensors.torch import load_file, save_file

    broken = tmp_path_factory.mktemp("broken")
    tensors = load_file(str(checkpoint / "model.safetensors"))
    del tensors["model.layers.1.self_attn.o_proj.weight"]
    save_file(tensors, str(broken / "model.safetensors"))
    (broken / "config.json").write_text((checkpoint / "config.json").read_text())
    with pytest.raises(mxmoe.Error, match="model.layers.1.self_attn.o_proj.weight"):
        mxt.load_gpt_oss_model(broken, device="cpu")


def test_set_seam_switches_without_preparing_again(checkpoint, rng):
    ids = prompts(rng, 2, 5)
    model = mxt.load_gpt_oss_model(checkpoint, device="cpu", seam="block")
    layers = [layer.mlp.experts._mxmoe for layer in model.model.layers]
    with torch.no_grad():
        block = model(ids).logits
        mxt.set_seam(model, "experts")
        experts = model(ids).logits
        mxt.set_seam(model, "block")
        again = model(ids).logits
        fresh = mxt.load_gpt_oss_model(checkpoint, device="cpu", seam="experts")(ids).logits
    assert [layer.mlp.experts._mxmoe for layer in model.model.layers] == layers
    assert torch.equal(experts, fresh) and torch.equal(block, again)
    with pytest.raises(mxmoe.Error, match="seam"):
        mxt.set_seam(model, "none")
