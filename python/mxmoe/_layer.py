"""MoeLayer and fused_moe over DLPack tensors (the extension does the work)."""
from __future__ import annotations

import weakref
from typing import Any, Optional

from ._mxmoe import Error, Layer, MoeConfig

_WEIGHT_NAMES = ("w1_blocks", "w1_scales", "w1_bias", "w2_blocks", "w2_scales", "w2_bias")


def _framework(tensor: Any) -> str:
    """The top-level package of a tensor's type: "torch", "cupy", "numpy", "jax" (jaxlib's arrays too)."""
    module = type(tensor).__module__.split(".")[0]
    return "jax" if module == "jaxlib" else module


def _current_stream(tensor: Any) -> int:
    """The caller's current CUDA stream for a framework tensor (0, the legacy stream, otherwise)."""
    module = _framework(tensor)
    if module == "torch" and tensor.is_cuda:
        import torch

        return torch.cuda.current_stream(tensor.device).cuda_stream
    if module == "cupy":
        import cupy

        return cupy.cuda.get_current_stream().ptr
    return 0


def _empty_like(hidden: Any) -> Any:
    """An output tensor like `hidden`, from the caller's own framework."""
    module = _framework(hidden)
    if module == "torch":
        import torch

        return torch.empty_like(hidden, memory_format=torch.contiguous_format)
    if module == "numpy":
        import numpy

        return numpy.empty_like(hidden)
    if module == "cupy":
        import cupy

        return cupy.empty_like(hidden)
    raise Error(f"out: pass an output tensor for {type(hidden).__name__} inputs (mxmoe allocates only torch, "
                "numpy and cupy outputs)")


def _jax_call(layer: "MoeLayer", hidden: Any, router_logits: Any, stream: Optional[int]) -> Any:
    """JAX arrays are immutable, so no JAX array can be written in place: on the CPU the result goes
    to a NumPy buffer that becomes a new JAX array; on a GPU the caller passes a writable `out` (a
    CuPy or torch tensor) instead."""
    import jax.numpy as jnp
    import numpy

    if any(d.platform != "cpu" for d in hidden.devices()):
        raise Error("out: JAX arrays on a GPU are immutable; pass a writable CUDA `out` (CuPy or torch)")
    out = numpy.empty(hidden.shape, dtype=numpy.uint16)  # bf16 bits: NumPy's DLPack has no bfloat16
    layer._forward_into(hidden, router_logits, out, stream)
    return jnp.asarray(out).view(hidden.dtype)


class MoeLayer:
    """One MoE layer: weights in the gpt-oss checkpoint layout, prepared (repacked and uploaded) once.

    config: a MoeConfig (or a preset name). weights: a dict with w1_blocks [E, 2I, H/32, 16] uint8,
    w1_scales [E, 2I, H/32] uint8, w2_blocks [E, H, I/32, 16], w2_scales [E, H, I/32], and optionally
    w1_bias [E, 2I] and w2_bias [E, H] (bfloat16, or their bits as uint16); CPU or CUDA tensors.
    backend: "auto" (the GPU planner with a GPU, else the CPU reference), "reference", "gemv", "mma",
    "mx-emulated" or "mx". max_tokens: the largest T a call may pass (the workspace is sized for it).
    plan: forces parts of the GPU plan, in MXMOE_PLAN's form: "key=value,..." with keys mma, wgmma,
    batch, ksplit, stages, counted, local_route, fused_combine, cluster_combine, mx_expand (e.g.
    "mma=swap32,ksplit=4"); None (or "") leaves the planner's choice, or MXMOE_PLAN's where it is set.
    An unknown key or value raises mxmoe.Error naming the key, and so does, on a GPU backend, a value
    this build or GPU cannot run (the CPU reference has no plan to force).
    """

    def __init__(self, config: MoeConfig | str, weights: dict, *, backend: str = "auto",
                 max_tokens: int = 4096, plan: str | None = None) -> None:
        if isinstance(config, str):
            config = MoeConfig.preset(config)
        missing = [n for n in ("w1_blocks", "w1_scales", "w2_blocks", "w2_scales") if n not in weights]
        if missing:
            raise Error(f"weights: missing {', '.join(missing)}")
        self._layer = Layer(config, weights["w1_blocks"], weights["w1_scales"], weights.get("w1_bias"),
                            weights["w2_blocks"], weights["w2_scales"], weights.get("w2_bias"), backend,
                            max_tokens, plan)

    @property
    def config(self) -> MoeConfig:
        return self._layer.config

    @property
    def backend(self) -> str:
        """The backend the layer resolved to."""
        return self._layer.backend

    @property
    def max_tokens(self) -> int:
        return self._layer.max_tokens

    def describe_plan(self, tokens: int) -> str:
        """The kernels and tiles a call with `tokens` tokens runs."""
        return self._layer.describe_plan(tokens)

    def __call__(self, hidden: Any, router_logits: Any, out: Optional[Any] = None,
                 stream: Optional[int] = None) -> Any:
        """out [T, H] bfloat16 = the MoE block of hidden [T, H] bfloat16 with router_logits [T, E] float32.
        Runs on `stream` (a cudaStream_t as an int), by default the framework's current stream (torch,
        CuPy; the legacy stream otherwise). Torch tensors without `out` go through the custom op
        torch.ops.mxmoe.moe_forward (torch.compile). JAX arrays are read in place; without `out`, CPU
        JAX inputs give a new JAX array, and CUDA JAX inputs need a writable CUDA `out`."""
        if out is None and stream is None and _framework(hidden) == "torch":
            from . import _torch

            return _torch.call(self, hidden, router_logits)
        if out is None and _framework(hidden) == "jax":
            return _jax_call(self, hidden, router_logits, stream)
        if out is None:
            out = _empty_like(hidden)
        self._forward_into(hidden, router_logits, out, stream)
        return out

    def _forward_into(self, hidden: Any, router_logits: Any, out: Any, stream: Optional[int]) -> None:
        if _framework(hidden) == "jax":
            # JAX computes on its own streams, which a given stream does not wait for: the inputs
            # must be complete before the kernels read them.
            hidden.block_until_ready()
            router_logits.block_until_ready()
        self._layer.forward(hidden, router_logits, out, _current_stream(hidden) if stream is None else stream)


# Layers prepared by fused_moe, by the identity of their weight tensors (held weakly: a freed tensor's
# id may be reused by a new one, which must not find the old layer) and the parameters.
_CACHE: dict = {}
_CACHE_LIMIT = 64


def _cached_layer(tensors: tuple, params: tuple) -> Optional[MoeLayer]:
    entry = _CACHE.get((tuple(id(t) for t in tensors), params))
    if entry is None:
        return None
    layer, refs = entry
    if all((r is None and t is None) or (r is not None and r() is t) for r, t in zip(refs, tensors)):
        return layer
    return None


def _remember(tensors: tuple, params: tuple, layer: MoeLayer) -> None:
    if len(_CACHE) >= _CACHE_LIMIT:
        _CACHE.pop(next(iter(_CACHE)))
    refs = tuple(None if t is None else weakref.ref(t) for t in tensors)
    _CACHE[(tuple(id(t) for t in tensors), params)] = (layer, refs)


def fused_moe(hidden: Any, router_logits: Any, w1_blocks: Any, w1_scales: Any, w1_bias: Any, w2_blocks: Any,
              w2_scales: Any, w2_bias: Any, top_k: int, *, routing: str = "topk_softmax",
              swiglu_alpha: float = 1.702, swiglu_limit: float = 7.0, backend: str = "auto",
              out: Optional[Any] = None, max_tokens: int = 4096, plan: Optional[str] = None) -> Any:
    """The gpt-oss MoE block on checkpoint-layout weights, as a drop-in function.

    The shapes give E, H and I; the weights are prepared on the first call and cached by the identity
    of the weight tensors and the parameters, so later calls with the same tensors pay only the
    forward (changing a weight tensor in place after that is not seen: make a new tensor, or a
    MoeLayer). backend, max_tokens and plan are MoeLayer's.
    """
    e, two_i, h_blocks = int(w1_blocks.shape[0]), int(w1_blocks.shape[1]), int(w1_blocks.shape[2])
    tensors = (w1_blocks, w1_scales, w1_bias, w2_blocks, w2_scales, w2_bias)
    params = (int(top_k), routing, float(swiglu_alpha), float(swiglu_limit), backend, int(max_tokens), plan)
    layer = _cached_layer(tensors, params)
    if layer is None:
        config = MoeConfig()
        config.name = "fused_moe"
        config.num_experts = e
        config.top_k = int(top_k)
        config.hidden = h_blocks * 32
        config.intermediate = two_i // 2
        config.routing = routing
        config.swiglu_alpha = float(swiglu_alpha)
        config.swiglu_limit = float(swiglu_limit)
        if two_i % 2:
            raise Error(f"w1_blocks: dimension 1 is 2 * intermediate and must be even, got {two_i}")
        weights = dict(zip(_WEIGHT_NAMES, (w1_blocks, w1_scales, w1_bias, w2_blocks, w2_scales, w2_bias)))
        layer = MoeLayer(config, {k: v for k, v in weights.items() if v is not None}, backend=backend,
                         max_tokens=max_tokens, plan=plan)
        _remember(tensors, params, layer)
    return layer(hidden, router_logits, out)
