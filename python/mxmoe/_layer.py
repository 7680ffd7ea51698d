"""MoeLayer, fused_moe and fused_experts over DLPack tensors (the extension does the work)."""
from __future__ import annotations

import sys

import weakref
from typing import Any, Optional

from ._mxmoe import Error, Layer, MoeConfig

_WEIGHT_NAMES = ("w1_blocks", "w1_scales", "w1_bias", "w2_blocks", "w2_scales", "w2_bias")
_BF16 = ("bfloat16 (a torch or JAX bfloat16 tensor, an ml_dtypes.bfloat16 NumPy array, or the bf16 bit patterns "
         "as uint16, e.g. from NumPy or CuPy)")
# What each argument must hold, for the errors raised here (the extension checks the rest).
_EXPECTED = {"hidden": _BF16, "out": _BF16, "w1_bias": _BF16, "w2_bias": _BF16, "router_logits": "float32",
             "topk_ids": "int32 or int64", "topk_weights": "float32", "w1_blocks": "uint8", "w1_scales": "uint8",
             "w2_blocks": "uint8", "w2_scales": "uint8"}


def _framework(tensor: Any) -> str:
    """The top-level package of a tensor's type: "torch", "cupy", "numpy", "jax" (jaxlib's arrays too)."""
    module = type(tensor).__module__.split(".")[0]
    return "jax" if module == "jaxlib" else module


def _as_tensor(x: Any, name: str, writable: bool = False) -> Any:
    """x as the extension takes it, or an Error naming the argument and saying what to pass: NumPy arrays
    of ml_dtypes.bfloat16 become views of their uint16 bits (NumPy's DLPack has no bfloat16), other
    NumPy dtypes that DLPack cannot carry are refused by name, and a read-only or immutable `out`."""
    if not (hasattr(x, "__dlpack__") or hasattr(x, "__array_interface__")):
        raise Error(f"{name}: expected a tensor (torch, CuPy, JAX or NumPy array) of {_EXPECTED[name]}, got "
                    f"{type(x).__name__}")
    framework = _framework(x)
    if framework == "numpy":
        import numpy

        if x.dtype.name == "bfloat16":  # ml_dtypes
            x = x.view(numpy.uint16)
        elif x.dtype.kind not in "biufc":
            raise Error(f"{name}: expected {_EXPECTED[name]}, got {x.dtype.name}")
        if writable and not x.flags.writeable:
            raise Error(f"{name}: the array is read-only; pass a writable array (or leave out=None)")
    elif writable and framework == "jax":
        raise Error(f"{name}: JAX arrays are immutable; pass a writable NumPy, torch or CuPy array, or leave "
                    "out=None (a new JAX array is returned on the CPU)")
    return x


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

        return numpy.empty(hidden.shape, dtype=hidden.dtype)
    if module == "cupy":
        import cupy

        return cupy.empty_like(hidden)
    raise Error(f"out: pass an output tensor for {type(hidden).__name__} inputs (mxmoe allocates only torch, "
                "numpy and cupy outputs)")


def _routing_args(router_logits: Any, topk_ids: Any, topk_weights: Any) -> tuple:
    """(router_logits,) or (topk_ids, topk_weights): exactly one routing, or an Error saying what to pass."""
    if router_logits is not None:
        if topk_ids is not None or topk_weights is not None:
            raise Error("router_logits, topk_ids: pass router_logits or topk_ids with topk_weights, not both")
        return (router_logits,)
    if topk_ids is None or topk_weights is None:
        missing = "topk_ids" if topk_ids is None else "topk_weights"
        if topk_ids is None and topk_weights is None:
            raise Error("router_logits: pass router_logits [T, E], or topk_ids [T, k] with topk_weights [T, k]")
        raise Error(f"{missing}: routed input needs both topk_ids [T, k] and topk_weights [T, k]")
    return (topk_ids, topk_weights)


def _jax_call(layer: "MoeLayer", hidden: Any, routing: tuple, stream: Optional[int]) -> Any:
    """JAX arrays are immutable, so no JAX array can be written in place: on the CPU the result goes
    to a NumPy buffer that becomes a new JAX array; on a GPU the caller passes a writable `out` (a
    CuPy or torch tensor) instead."""
    import jax.numpy as jnp
    import numpy

    if any(d.platform != "cpu" for d in hidden.devices()):
        raise Error("out: JAX arrays on a GPU are immutable; pass a writable CUDA `out` (CuPy or torch)")
    out = numpy.empty(hidden.shape, dtype=numpy.uint16)  # bf16 bits: NumPy's DLPack has no bfloat16
    layer._forward_into(hidden, routing, out, stream)
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
    this build or GPU cannot run (the CPU reference has no plan to force). routed_experts: the experts
    the tokens are routed among when `weights` hold only some of them (an expert-parallel rank whose
    other ranks' pairs arrive as -1): the planner then picks tiles for this rank's share of the pairs;
    0 (default): the layer's own experts. fused_experts(expert_map=) sets it to the map's length.
    precision: "bf16" (default: bf16 activations, W4A16) or "fp8" (e4m3 activations: on Hopper the W4A8
    wgmma tiles, on SM120/SM121 the MXFP8 path, on the CPU reference the same W4A8 numerics; about 4%
    error against fp64 where bf16 has 0.2-0.3%, docs/fp8.md). fp8 with backend "gemv" or "mma" raises.

    bfloat16 tensors may be torch or JAX bfloat16, ml_dtypes.bfloat16 NumPy arrays, or the bf16 bit
    patterns as uint16 (NumPy, CuPy). Any other dtype, a non-contiguous tensor, a tensor on the wrong
    device, or a read-only `out` raises mxmoe.Error naming the argument.

    Several ranks (docs/multi-gpu.md): shard=mxmoe.ShardSpec("tp" or "ep", rank, world_size) makes the
    rank's shard, from `weights` that are the whole layer (sliced here) or already the rank's part
    (mxmoe.load_gpt_oss(path, layer, shard=spec) reads only its bytes), told apart by their shapes. A call
    then returns the rank's partial output (the ranks' partials sum to the layer's output); with group
    (a torch.distributed ProcessGroup, or True for the default group, of world_size ranks in which this
    process is `rank`) it all-reduces the partial (torch tensors, on the current stream) and returns the
    layer's output on every rank (tokens replicated: the layout after tensor-parallel attention).
    fp32_partials: the partial as fp32 sums (logits only), summed over the group in fp32 and rounded
    once to bf16; without a group a call returns the fp32 partial. forward_dp: expert-parallel over
    data-parallel tokens.
    """

    def __init__(self, config: MoeConfig | str, weights: dict, *, backend: str = "auto",
                 max_tokens: int = 4096, plan: str | None = None, shard: Any = None, group: Any = None,
                 fp32_partials: bool = False, routed_experts: int = 0, precision: str = "bf16") -> None:
        if isinstance(config, str):
            config = MoeConfig.preset(config)
        missing = [n for n in ("w1_blocks", "w1_scales", "w2_blocks", "w2_scales") if n not in weights]
        if missing:
            raise Error(f"weights: missing {', '.join(missing)}")
        w = {n: _as_tensor(weights[n], n) if weights.get(n) is not None else None for n in _WEIGHT_NAMES}
        from . import _shard

        if precision != "bf16" and shard is not None:
            raise Error("precision: a sharded layer runs bf16 activations only")
        if routed_experts and shard is not None:
            raise Error("routed_experts: a sharded layer knows its whole layer's experts; pass shard only")
        if fp32_partials and shard is None:
            raise Error("fp32_partials: only a sharded layer has partials; pass shard=mxmoe.ShardSpec(...) too")
        _shard.check_spec(shard)
        self._group = _shard.resolve_group(group, shard)  # checked before the weights are prepared
        self._fp32_partials = bool(fp32_partials)
        self._sharded = shard is not None
        if shard is None:
            self._layer = Layer(config, w["w1_blocks"], w["w1_scales"], w["w1_bias"], w["w2_blocks"],
                                w["w2_scales"], w["w2_bias"], backend, max_tokens, plan, int(routed_experts),
                                precision)
        else:
            self._layer = _shard.make_layer(config, w, shard, backend, max_tokens, plan)
        # The custom ops' handle, and the ops themselves where torch is loaded, taken now: a first call
        # inside torch.compile then reads a constant and finds the ops registered (Dynamo can trace
        # neither the handle counter nor the registration).
        from . import _torch

        _torch.handle_for(self)
        if "torch" in sys.modules:
            _torch.register()

    @property
    def config(self) -> MoeConfig:
        return self._layer.config

    @property
    def precision(self) -> str:
        """The activations' precision the layer runs at: "bf16" or "fp8"."""
        return self._layer.precision if not self._sharded else "bf16"

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

    @property
    def shard(self) -> Any:
        """The layer's mxmoe.ShardSpec, or None for a whole layer."""
        return getattr(self._layer, "shard", None)

    @property
    def local_config(self) -> MoeConfig:
        """The rank's part as a layer: tensor-parallel, intermediate = its slice; expert-parallel,
        num_experts = its experts (the config itself for a whole layer)."""
        return getattr(self._layer, "local_config", self._layer.config)

    @property
    def group(self) -> Any:
        """The torch.distributed group a call sums over, or None."""
        return self._group

    @property
    def fp32_partials(self) -> bool:
        return self._fp32_partials

    def __call__(self, hidden: Any, router_logits: Any = None, out: Optional[Any] = None, *,
                 topk_ids: Any = None, topk_weights: Any = None, stream: Optional[int] = None) -> Any:
        """out [T, H] bfloat16 = the MoE block of hidden [T, H] bfloat16, routed by router_logits [T, E]
        float32 (top-k and softmax in the config's order) or by the caller's own routing: topk_ids [T, k]
        int32 or int64 and topk_weights [T, k] float32 (exactly one of the two). The weights are used as
        given: no softmax, no renormalisation; slot order is the summation order. Given the ids and
        weights the logits route computes, the output bits are the logits call's. An id of -1 drops its
        pair (vLLM's expert_map convention: no row, nothing added). On the CPU reference, other ids
        outside [0, E), an expert twice in a token, or a negative or non-finite weight raise
        mxmoe.Error naming topk_ids or topk_weights; on a GPU the ids are not read on the host (the call
        is CUDA-graph safe), and a token whose ids are not k distinct experts in range gets a NaN row.
        A sharded layer returns the rank's partial (fp32 with fp32_partials), or with a group the sum
        over the ranks (see the class).

        Runs on `stream` (a cudaStream_t as an int), by default the framework's current stream (torch,
        CuPy; the legacy stream otherwise). Torch tensors without `out` go through the custom ops
        torch.ops.mxmoe.moe_forward / moe_forward_routed (torch.compile). JAX arrays are read in place;
        without `out`, CPU JAX inputs give a new JAX array, and CUDA JAX inputs need a writable CUDA `out`."""
        routing = _routing_args(router_logits, topk_ids, topk_weights)
        if self._sharded:
            from . import _shard

            return _shard.call(self, hidden, routing, out, stream)
        return self._single_call(hidden, routing, out, stream)

    def forward_dp(self, hidden: Any, router_logits: Any = None, out: Optional[Any] = None, *,
                   topk_ids: Any = None, topk_weights: Any = None, stream: Optional[int] = None) -> Any:
        """Expert-parallel with data-parallel tokens (a layer with shard=ShardSpec("ep", ...) and group;
        a tensor-parallel shard works too): each rank passes its own tokens, hidden [T, H] torch.bfloat16 with router_logits [T, E] (or
        topk_ids and topk_weights [T, k]); the ranks' tokens and routing are all-gathered, the rank's
        experts run over all world_size x T of them (max_tokens must allow that), and the partials are
        reduce-scattered (summed): out [T, H] is the layer's output for this rank's own tokens. Every
        rank must pass the same T (the collectives assume it and cannot check it) and call together."""
        from . import _shard

        return _shard.forward_dp(self, hidden, _routing_args(router_logits, topk_ids, topk_weights), out, stream)

    def _single_call(self, hidden: Any, routing: tuple, out: Optional[Any], stream: Optional[int]) -> Any:
        """The layer's own output (a whole layer) or its partial (a shard), with nothing summed."""
        if out is None and stream is None and _framework(hidden) == "torch":
            from . import _torch

            return _torch.call(self, hidden, routing)
        if out is None and _framework(hidden) == "jax":
            return _jax_call(self, hidden, routing, stream)
        if out is None:
            _as_tensor(hidden, "hidden")  # a non-tensor is named before anything is allocated
            out = _empty_like(hidden)
        self._forward_into(hidden, routing, out, stream)
        return out

    def _forward_into(self, hidden: Any, routing: tuple, out: Any, stream: Optional[int], f32: bool = False) -> None:
        names = ("router_logits",) if len(routing) == 1 else ("topk_ids", "topk_weights")
        args = [_as_tensor(hidden, "hidden")] + [_as_tensor(t, n) for t, n in zip(routing, names)]
        args.append(_as_tensor(out, "out", writable=True))
        if _framework(hidden) == "jax":
            # JAX computes on its own streams, which a given stream does not wait for: the inputs
            # must be complete before the kernels read them.
            for t in (hidden,) + routing:
                if _framework(t) == "jax":
                    t.block_until_ready()
        forward = self._layer.forward if len(routing) == 1 else self._layer.forward_routed
        if f32:  # a shard's fp32 partial (logits only)
            forward = self._layer.forward_f32
        try:
            forward(*args, _current_stream(hidden) if stream is None else stream)
        except TypeError as e:  # a tensor the extension's DLPack import refused
            raise Error(f"{', '.join(('hidden',) + names + ('out',))}: not accepted as tensors ({e}); pass "
                        "C-contiguous torch, CuPy, JAX or NumPy arrays") from None


# Layers prepared by fused_moe and fused_experts, by the identity of their weight tensors (held weakly:
# a freed tensor's id may be reused by a new one, which must not find the old layer) and the parameters.
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


def _layer_for(tensors: tuple, top_k: int, routing: str, swiglu_alpha: float, swiglu_limit: float, backend: str,
               max_tokens: int, plan: Optional[str], routed_experts: int = 0, precision: str = "bf16") -> MoeLayer:
    """The layer of checkpoint-layout weight tensors (w1_blocks, ..., w2_bias), prepared on first use and
    then cached; the shapes give E, H and I."""
    params = (int(top_k), routing, float(swiglu_alpha), float(swiglu_limit), backend, int(max_tokens), plan,
              int(routed_experts), precision)
    layer = _cached_layer(tensors, params)
    if layer is not None:
        return layer
    w1_blocks = tensors[0]
    if len(w1_blocks.shape) != 4:
        raise Error(f"w1_blocks: expected shape [E, 2I, H/32, 16], got {list(w1_blocks.shape)}")
    e, two_i, h_blocks = int(w1_blocks.shape[0]), int(w1_blocks.shape[1]), int(w1_blocks.shape[2])
    if two_i % 2:
        raise Error(f"w1_blocks: dimension 1 is 2 * intermediate and must be even, got {two_i}")
    config = MoeConfig()
    config.name = "fused_moe"
    config.num_experts = e
    config.top_k = int(top_k)
    config.hidden = h_blocks * 32
    config.intermediate = two_i // 2
    config.routing = routing
    config.swiglu_alpha = float(swiglu_alpha)
    config.swiglu_limit = float(swiglu_limit)
    weights = {k: v for k, v in zip(_WEIGHT_NAMES, tensors) if v is not None}
    layer = MoeLayer(config, weights, backend=backend, max_tokens=max_tokens, plan=plan, routed_experts=routed_experts,
                     precision=precision)
    _remember(tensors, params, layer)
    return layer


def fused_moe(hidden: Any, router_logits: Any, w1_blocks: Any, w1_scales: Any, w1_bias: Any, w2_blocks: Any,
              w2_scales: Any, w2_bias: Any, top_k: int, *, routing: str = "topk_softmax",
              swiglu_alpha: float = 1.702, swiglu_limit: float = 7.0, backend: str = "auto",
              out: Optional[Any] = None, max_tokens: int = 4096, plan: Optional[str] = None,
              precision: str = "bf16") -> Any:
    """The gpt-oss MoE block on checkpoint-layout weights, as a drop-in function, routed by router_logits.

    The shapes give E, H and I; the weights are prepared on the first call and cached by the identity
    of the weight tensors and the parameters, so later calls with the same tensors pay only the
    forward (changing a weight tensor in place after that is not seen: make a new tensor, or a
    MoeLayer). backend, max_tokens, plan and precision are MoeLayer's.
    """
    tensors = (w1_blocks, w1_scales, w1_bias, w2_blocks, w2_scales, w2_bias)
    layer = _layer_for(tensors, top_k, routing, swiglu_alpha, swiglu_limit, backend, max_tokens, plan, 0, precision)
    return layer(hidden, router_logits, out)


def fused_experts(hidden: Any, w1_blocks: Any, w1_scales: Any, w1_bias: Any, w2_blocks: Any, w2_scales: Any,
                  w2_bias: Any, topk_weights: Any, topk_ids: Any, *, swiglu_alpha: float = 1.702,
                  swiglu_limit: float = 7.0, backend: str = "auto", out: Optional[Any] = None,
                  max_tokens: int = 4096, plan: Optional[str] = None, expert_map: Optional[Any] = None,
                  precision: str = "bf16") -> Any:
    """The experts of the gpt-oss MoE block on checkpoint-layout weights, routed by the caller (as an
    engine's fused-experts call is): topk_ids [T, k] int32 or int64 and topk_weights [T, k] float32,
    the weights used as given (no softmax, no renormalisation). k is topk_ids' second dimension. An id
    of -1 drops its pair.

    expert_map (expert parallelism, vLLM's argument): [E_global] local ids of this rank's experts, -1
    for other ranks'; topk_ids are then global ids, mapped through it (other ranks' pairs dropped), and
    the weight tensors hold this rank's E_local experts. The result is the rank's partial output; the
    tiles are planned for the rank's share of the pairs (MoeLayer's routed_experts = E_global).

    Weights are prepared once and cached as fused_moe's are (the same cache: fused_moe and
    fused_experts with the same tensors, top-k and parameters share one prepared layer). Errors and
    backend, max_tokens, plan and precision are MoeLayer's.
    """
    shape = getattr(topk_ids, "shape", None)
    if shape is None or len(shape) != 2:
        raise Error(f"topk_ids: expected a [T, k] tensor of int32 or int64, got "
                    f"{list(shape) if shape is not None else type(topk_ids).__name__}")
    routed_experts = 0
    if expert_map is not None:
        from ._expert_map import map_ids

        topk_ids = map_ids(expert_map, topk_ids)
        routed_experts = int(expert_map.shape[0])
    tensors = (w1_blocks, w1_scales, w1_bias, w2_blocks, w2_scales, w2_bias)
    layer = _layer_for(tensors, int(shape[1]), "topk_softmax", swiglu_alpha, swiglu_limit, backend, max_tokens, plan,
                       routed_experts, precision)
    return layer(hidden, out=out, topk_ids=topk_ids, topk_weights=topk_weights)
