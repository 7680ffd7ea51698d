"""gpt-oss in Hugging Face transformers (5.x) with every MoE layer run by mxmoe.

    from mxmoe.integrations.transformers import load_gpt_oss_model
    model = load_gpt_oss_model("/models/gpt-oss-20b", device="cuda")     # experts stay MXFP4
    out = model.generate(input_ids, max_new_tokens=64)                    # default or static cache

load_gpt_oss_model reads a Hugging Face-format gpt-oss checkpoint directory (config.json, *.safetensors
with `model.layers.N.mlp.experts.gate_up_proj_blocks` ...). It builds transformers' GptOssForCausalLM on
the meta device, deletes the experts' bf16 parameters, reads every other tensor from the checkpoint, and
gives each layer an mxmoe.MoeLayer prepared once from the checkpoint's MXFP4 bytes (mxmoe.load_gpt_oss):
no bf16 copy of the experts is ever made. patch_model does the last step on a model built another way.

Two seams, chosen by `seam`:

- "block" (the default): GptOssMLP.forward of each layer is replaced (on the instance, as transformers'
  own MXFP4 integration replaces it) by router logits (transformers' router weights, the same F.linear
  in bf16) followed by one mxmoe call that does the routing (top-k, softmax over the k: gpt-oss's) and
  the experts. transformers' kernel-layer mapping (`use_kernel_forward_from_hub("MegaBlocksMoeMLP")`,
  `kernelize`) would be the seam here, but it needs the `kernels` package and a kernel repository in
  that package's layout, so the forward is replaced instead. The router's outputs are not recorded
  (`output_router_logits` gets none from these layers).
- "experts": the experts-implementation registry. register_experts_implementation() adds "mxmoe" to
  transformers' ALL_EXPERTS_FUNCTIONS and the model's experts implementation is set to it; transformers'
  own router runs (top-k, then softmax over the k, in bf16), and GptOssExperts.forward hands its
  top_k_index and top_k_weights to mxmoe's routed input (`MoeLayer(hidden, topk_ids=, topk_weights=)`).

Tokens: hidden states go to mxmoe in bf16 (the model is bf16); calls above the layer's max_tokens are
split into chunks. CUDA tensors run the mxmoe GPU backends on torch's current stream through the custom
ops torch.ops.mxmoe.moe_forward (block) and moe_forward_routed (experts), so torch.compile (which generate() applies itself with a static cache on
a GPU) and CUDA graphs see one opaque op per layer; CPU tensors run the fp64 CPU reference (slow, exact).
"""
from __future__ import annotations

from pathlib import Path
from types import MethodType
from typing import Any, Callable, Iterable, Optional, Union

import torch
import torch.nn.functional as F

from .._layer import MoeLayer
from .._mxmoe import Error, MoeConfig, load_gpt_oss
from . import _hf_gpt_oss

SEAMS = ("block", "experts")
EXPERTS_IMPLEMENTATION = "mxmoe"
_WEIGHTS = ("w1_blocks", "w1_scales", "w1_bias", "w2_blocks", "w2_scales", "w2_bias")


def load_gpt_oss_model(path: Union[str, Path], *, device: Union[str, torch.device, None] = None,
                       backend: str = "auto", seam: str = "block", max_tokens: int = 4096,
                       plan: Optional[str] = None, attn_implementation: Optional[str] = None):
    """A transformers GptOssForCausalLM (bf16, eval mode) on `device` from the Hugging Face-format gpt-oss
    MXFP4 checkpoint directory `path`, with every MoE layer run by mxmoe from the checkpoint's MXFP4 bytes.

    device: "cuda" (the default where torch sees a GPU), "cuda:N" or "cpu" (mxmoe's fp64 CPU reference).
    backend, max_tokens, plan: mxmoe.MoeLayer's, for every layer ("auto": the GPU planner on a GPU, the
    CPU reference on the CPU). seam: "block" or "experts" (the module docstring says what each replaces).
    attn_implementation: transformers' (None: its default for gpt-oss, "eager").
    Raises mxmoe.Error naming the argument or the checkpoint tensor that is wrong.
    """
    path = Path(path)
    device = _resolve_device(device)
    _check_seam(seam)
    model = _hf_gpt_oss.build_model(path, device, attn_implementation)
    return patch_model(model, path, backend=backend, seam=seam, max_tokens=max_tokens, plan=plan)


def patch_model(model, weights: Union[str, Path, Callable[[int], dict], Iterable[dict]], *, backend: str = "auto",
                seam: str = "block", max_tokens: int = 4096, plan: Optional[str] = None):
    """Runs every MoE layer of a transformers gpt-oss model (GptOssForCausalLM or GptOssModel) through
    mxmoe; returns the model. The experts' bf16 parameters, where the model has them, are deleted.

    weights: a gpt-oss MXFP4 checkpoint directory (read one layer at a time with mxmoe.load_gpt_oss),
    or per layer a dict in mxmoe.MoeLayer's layout (w1_blocks [E, 2I, H/32, 16] uint8, w1_scales,
    w1_bias [E, 2I] bf16, w2_blocks, w2_scales, w2_bias; CPU or CUDA tensors), given as a function of
    the layer index or an iterable in layer order. Each layer is prepared once (the dict may be
    dropped after). The router stays transformers' (its weights are the model's).
    """
    _check_seam(seam)
    layers = _decoder_layers(model)
    config = model.config
    device = next(model.parameters()).device
    moe_config = _moe_config(config)
    if backend == "auto" and device.type == "cpu":
        backend = "reference"  # "auto" would take a GPU where there is one, and CPU tensors could not reach it
    source = _weight_source(weights, len(layers), moe_config)
    for index, layer in enumerate(layers):
        w = source(index)
        with _on_device(device):
            mx = MoeLayer(moe_config, {k: w[k] for k in _WEIGHTS if k in w and w[k] is not None},
                          backend=backend, max_tokens=max_tokens, plan=plan)
        if (mx.backend == "reference") != (device.type == "cpu"):
            raise Error(f"backend: layer {index} resolved to mxmoe backend '{mx.backend}', which cannot take "
                        f"tensors on {device}")
        del w
        experts = layer.mlp.experts
        _hf_gpt_oss.drop_expert_parameters(experts)
        experts._mxmoe = mx
        experts._mxmoe_max_tokens = mx.max_tokens  # a plain int: torch.compile reads it without a graph break
    set_seam(model, seam)
    return model


def set_seam(model, seam: str) -> None:
    """Switches a model patched by patch_model (or loaded by load_gpt_oss_model) to the other seam,
    "block" or "experts"; the mxmoe layers are kept as prepared."""
    _check_seam(seam)
    for index, layer in enumerate(_decoder_layers(model)):
        mlp = layer.mlp
        if getattr(mlp.experts, "_mxmoe", None) is None:
            raise Error(f"model: layer {index} has no mxmoe layer (run patch_model first)")
        if seam == "block":
            mlp.forward = MethodType(_block_forward, mlp)
        else:
            mlp.__dict__.pop("forward", None)  # back to GptOssMLP.forward: transformers' router, then the experts
    if seam == "experts":
        register_experts_implementation()
        model.set_experts_implementation(EXPERTS_IMPLEMENTATION)


def register_experts_implementation() -> None:
    """Adds "mxmoe" to transformers' experts-implementation registry (ALL_EXPERTS_FUNCTIONS). Experts
    modules that use it need an mxmoe.MoeLayer in their `_mxmoe` attribute (patch_model sets it)."""
    from transformers.integrations.moe import ALL_EXPERTS_FUNCTIONS

    ALL_EXPERTS_FUNCTIONS.register(EXPERTS_IMPLEMENTATION, mxmoe_experts_forward)


def mxmoe_experts_forward(self, hidden_states: torch.Tensor, top_k_index: torch.Tensor,
                          top_k_weights: torch.Tensor) -> torch.Tensor:
    """The "mxmoe" experts implementation: out [T, H] = the experts of `self` (a GptOssExperts with an
    mxmoe.MoeLayer in `_mxmoe`) on hidden_states [T, H] routed by top_k_index [T, k] and top_k_weights
    [T, k] (transformers' router output)."""
    x = hidden_states.to(torch.bfloat16).contiguous()
    ids = top_k_index.contiguous()
    weights = top_k_weights.to(torch.float32).contiguous()  # bf16 from transformers' router
    out = _chunked(self._mxmoe, self._mxmoe_max_tokens, x,
                   lambda lo, hi: {"topk_ids": ids[lo:hi], "topk_weights": weights[lo:hi]})
    return out.to(hidden_states.dtype)


def _block_forward(self, hidden_states: torch.Tensor):
    """GptOssMLP.forward with router and experts in one mxmoe call. Returns (out, None): the decoder
    layer discards the second value (transformers returns the router scores there)."""
    shape = hidden_states.shape
    x = hidden_states.reshape(-1, shape[-1]).to(torch.bfloat16).contiguous()
    # Exactly transformers' router logits (bf16 F.linear), so that the experts chosen are the same.
    logits = F.linear(x, self.router.weight, self.router.bias).float()
    experts = self.experts
    out = _chunked(experts._mxmoe, experts._mxmoe_max_tokens, x, lambda lo, hi: (logits[lo:hi],))
    return out.to(hidden_states.dtype).reshape(shape), None


def _chunked(layer: MoeLayer, step: int, x: torch.Tensor, args: Callable[[int, int], Any]) -> torch.Tensor:
    """layer(x, ...) in pieces of at most `step` (the layer's max_tokens: its workspace's size) rows."""
    tokens = x.shape[0]
    pieces = []
    for lo in range(0, max(tokens, 1), step):
        hi = min(lo + step, tokens)
        extra = args(lo, hi)
        pieces.append(layer(x[lo:hi], **extra) if isinstance(extra, dict) else layer(x[lo:hi], *extra))
    return pieces[0] if len(pieces) == 1 else torch.cat(pieces)


def _decoder_layers(model) -> list:
    base = getattr(model, "model", model)
    layers = getattr(base, "layers", None)
    if layers is None or not all(type(l.mlp).__name__ == "GptOssMLP" for l in layers):
        raise Error(f"model: expected a transformers gpt-oss model (GptOssForCausalLM or GptOssModel), got "
                    f"{type(model).__name__}")
    return list(layers)


def _moe_config(config) -> MoeConfig:
    c = MoeConfig()
    c.name = "transformers"
    c.num_experts = config.num_local_experts
    c.top_k = config.num_experts_per_tok
    c.hidden = config.hidden_size
    c.intermediate = config.intermediate_size
    c.routing = "topk_softmax"  # GptOssTopKRouter: top-k of the logits, softmax over the k
    c.swiglu_alpha = 1.702  # GptOssExperts.alpha
    c.swiglu_limit = float(getattr(config, "swiglu_limit", 7.0))
    c.validate()
    return c


def _weight_source(weights, layers: int, want: MoeConfig) -> Callable[[int], dict]:
    if isinstance(weights, (str, Path)):
        path = str(weights)

        def from_checkpoint(index: int) -> dict:
            got, w = load_gpt_oss(path, index)
            for field in ("num_experts", "top_k", "hidden", "intermediate", "swiglu_limit"):
                if getattr(got, field) != getattr(want, field):
                    raise Error(f"weights: checkpoint '{path}' has {field} = {getattr(got, field)}, the model "
                                f"{getattr(want, field)}")
            return w

        return from_checkpoint
    if callable(weights):
        return weights
    items = list(weights)
    if len(items) != layers:
        raise Error(f"weights: {len(items)} layers given, the model has {layers}")
    return items.__getitem__


def _resolve_device(device) -> torch.device:
    if device is None:
        return torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() else torch.device("cpu")
    device = torch.device(device)
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    if device.type not in ("cuda", "cpu"):
        raise Error(f"device: expected 'cuda', 'cuda:N' or 'cpu', got '{device}'")
    return device


def _check_seam(seam: str) -> None:
    if seam not in SEAMS:
        raise Error(f"seam: expected one of {', '.join(SEAMS)}, got '{seam}'")


def _on_device(device: torch.device):
    """mxmoe prepares a GPU layer on the current CUDA device: make it the model's."""
    import contextlib

    return torch.cuda.device(device) if device.type == "cuda" else contextlib.nullcontext()
