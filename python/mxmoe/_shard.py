"""A MoeLayer's shard over several ranks (issue 45): the rank's partial output from the extension's
ShardedLayer, and the sums over the ranks through torch.distributed (all_reduce; all_gather and
reduce_scatter for expert-parallel with data-parallel tokens). No NCCL handle crosses into C++: the
collectives are torch's, on its process group."""
from __future__ import annotations

from contextlib import nullcontext
from typing import Any, Optional

from ._layer import _framework
from ._mxmoe import Error, ShardedLayer, ShardSpec


def check_spec(shard: Any) -> None:
    if shard is not None and not isinstance(shard, ShardSpec):
        raise Error(f"shard: expected an mxmoe.ShardSpec (e.g. mxmoe.ShardSpec('tp', rank, world_size)), got "
                    f"{type(shard).__name__}")


def make_layer(config: Any, weights: dict, shard: ShardSpec, backend: str, max_tokens: int,
               plan: Optional[str]) -> ShardedLayer:
    """The extension's ShardedLayer of `weights` (the whole layer, or already the rank's part)."""
    return ShardedLayer(config, shard, weights["w1_blocks"], weights["w1_scales"], weights["w1_bias"],
                        weights["w2_blocks"], weights["w2_scales"], weights["w2_bias"], backend, max_tokens, plan)


def resolve_group(group: Any, shard: Optional[ShardSpec]) -> Any:
    """The process group to sum over (None: none; True: the default group), checked against the spec:
    its size must be shard.world_size and this process its rank shard.rank."""
    if group is None or group is False:
        return None
    if shard is None:
        raise Error("group: only a sharded layer sums over a group; pass shard=mxmoe.ShardSpec(...) too")
    try:
        import torch.distributed as dist
    except ImportError:
        raise Error("group: needs torch.distributed (PyTorch is not installed)") from None
    if not dist.is_available() or not dist.is_initialized():
        raise Error("group: torch.distributed is not initialized; call torch.distributed.init_process_group first")
    if group is True:
        group = dist.group.WORLD
    size, rank = dist.get_world_size(group), dist.get_rank(group)
    if size != shard.world_size or rank != shard.rank:
        where = "which this process is not in" if rank < 0 else f"in which this process is rank {rank}"
        raise Error(f"group: a group of {size} ranks {where}, but shard is rank {shard.rank} of "
                    f"{shard.world_size}")
    return group


def _torch_only(what: str, hidden: Any, out: Optional[Any]) -> None:
    """hidden and out torch bfloat16 tensors: the collectives sum values (bf16 bits as uint16 would sum as
    integers)."""
    for name, t in (("hidden", hidden), ("out", out)):
        if t is None:
            continue
        if _framework(t) != "torch":
            raise Error(f"{name}: {what} sums over torch.distributed and needs torch tensors, got {type(t).__name__}")
        import torch

        if t.dtype != torch.bfloat16:
            raise Error(f"{name}: {what} needs torch.bfloat16 (its sums are over values), got {t.dtype}")


def _on_stream(hidden: Any, stream: Optional[int]):
    """The torch stream context of a caller's explicit stream (the collectives must follow the partial on
    it), or none: torch.distributed orders its collectives after the current stream."""
    if stream is None or not hidden.is_cuda:
        return nullcontext()
    import torch

    return torch.cuda.stream(torch.cuda.ExternalStream(stream, device=hidden.device))


def _f32_like(hidden: Any) -> Any:
    """An fp32 [T, H] buffer of hidden's framework and device."""
    module = _framework(hidden)
    if module == "torch":
        import torch

        return torch.empty(tuple(hidden.shape), dtype=torch.float32, device=hidden.device)
    if module == "numpy":
        import numpy

        return numpy.empty(hidden.shape, dtype=numpy.float32)
    if module == "cupy":
        import cupy

        return cupy.empty(hidden.shape, dtype=cupy.float32)
    raise Error(f"out: pass an fp32 output tensor for {type(hidden).__name__} inputs with fp32_partials (mxmoe "
                "allocates only torch, numpy and cupy outputs)")


def partial(layer: Any, hidden: Any, routing: tuple, out: Optional[Any], stream: Optional[int]) -> Any:
    """The rank's partial output: bf16 (through the custom ops for torch tensors, as MoeLayer's calls), or
    with fp32_partials the fp32 sums before the rounding (logits only)."""
    if not layer._fp32_partials:
        return layer._single_call(hidden, routing, out, stream)
    if len(routing) != 1:
        raise Error("fp32_partials: routed input (topk_ids, topk_weights) has no fp32 partial in mxmoe "
                    "(ShardedMoe::forward_partial_f32 is logits-only); pass router_logits, or make the layer "
                    "with fp32_partials=False")
    if out is None:
        out = _f32_like(hidden)
    layer._forward_into(hidden, routing, out, stream, f32=True)
    return out


def call(layer: Any, hidden: Any, routing: tuple, out: Optional[Any], stream: Optional[int]) -> Any:
    """A sharded layer's __call__: the partial, summed over the group where there is one."""
    group = layer._group
    if group is None:
        return partial(layer, hidden, routing, out, stream)
    _torch_only("a layer with group=", hidden, out)
    import torch
    import torch.distributed as dist

    if not layer._fp32_partials:
        result = partial(layer, hidden, routing, out, stream)
        with _on_stream(hidden, stream):
            dist.all_reduce(result, op=dist.ReduceOp.SUM, group=group)
        return result
    sums = partial(layer, hidden, routing, None, stream)
    with _on_stream(hidden, stream):
        dist.all_reduce(sums, op=dist.ReduceOp.SUM, group=group)
        rounded = sums.to(torch.bfloat16)  # once, after the fp32 sum
        if out is None:
            return rounded
        out.copy_(rounded)
    return out


def forward_dp(layer: Any, hidden: Any, routing: tuple, out: Optional[Any], stream: Optional[int]) -> Any:
    """Data-parallel tokens (expert-parallel, as engines do; a tensor-parallel shard works too): all-gather
    every rank's tokens and routing, the rank's partial over all of them, reduce-scatter (sum) each rank's
    rows back."""
    if layer._group is None:
        raise Error("group: forward_dp gathers and sums over a torch.distributed group; make the layer with "
                    "shard= and group=")
    _torch_only("forward_dp", hidden, out)
    import torch
    import torch.distributed as dist

    world, tokens = layer._layer.shard.world_size, int(hidden.shape[0])
    if world * tokens > layer.max_tokens:
        raise Error(f"hidden: forward_dp gathers world_size x T = {world} x {tokens} = {world * tokens} tokens, more "
                    f"than max_tokens = {layer.max_tokens}; make the layer with max_tokens >= {world * tokens}")
    names = ("router_logits",) if len(routing) == 1 else ("topk_ids", "topk_weights")
    for t, name in zip((hidden,) + routing, ("hidden",) + names):
        if not isinstance(t, torch.Tensor) or t.dim() != 2 or int(t.shape[0]) != tokens:
            raise Error(f"{name}: expected a torch tensor of {tokens} rows (hidden's T), got "
                        f"{list(getattr(t, 'shape', [])) or type(t).__name__}")
    with _on_stream(hidden, stream):
        gathered = []
        for t in (hidden,) + routing:
            t = t.contiguous()
            g = torch.empty((world * tokens,) + tuple(t.shape[1:]), dtype=t.dtype, device=t.device)
            dist.all_gather_into_tensor(g, t, group=layer._group)
            gathered.append(g)
        # The partial on the current stream (the stream context above, where one was given).
        sums = partial(layer, gathered[0], tuple(gathered[1:]), None, None)
        mine = torch.empty((tokens,) + tuple(sums.shape[1:]), dtype=sums.dtype, device=sums.device)
        dist.reduce_scatter_tensor(mine, sums, op=dist.ReduceOp.SUM, group=layer._group)
        if layer._fp32_partials:
            mine = mine.to(torch.bfloat16)  # once, after the fp32 sum
        if out is None:
            return mine
        out.copy_(mine)
    return out
