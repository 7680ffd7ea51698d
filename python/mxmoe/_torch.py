"""PyTorch integration: custom ops (with fake implementations) so that torch.compile traces MoeLayer
calls and CUDA graphs capture them: mxmoe::moe_forward (routed by the logits) and
mxmoe::moe_forward_routed (by the caller's ids and weights). Registered when a MoeLayer first sees a
torch tensor.

No `from __future__ import annotations` here: torch.library infers the op's schema from the
annotations, and string annotations would name `torch` outside this function's scope."""
import itertools
import weakref

_LAYERS: "weakref.WeakValueDictionary[int, object]" = weakref.WeakValueDictionary()
_NEXT = itertools.count(1)
_REGISTERED = False


def handle_for(layer) -> int:
    """A stable integer for a layer (custom ops take tensors and numbers, not Python objects)."""
    handle = getattr(layer, "_torch_handle", None)
    if handle is None:
        handle = next(_NEXT)
        layer._torch_handle = handle
        _LAYERS[handle] = layer
    return handle


def _layer(handle: int, op: str):
    target = _LAYERS.get(handle)
    if target is None:
        raise RuntimeError(f"mxmoe::{op}: layer handle {handle} is not alive")
    return target


def register() -> None:
    global _REGISTERED
    if _REGISTERED:
        return
    import torch

    @torch.library.custom_op("mxmoe::moe_forward", mutates_args=())
    def moe_forward(hidden: torch.Tensor, router_logits: torch.Tensor, layer: int) -> torch.Tensor:
        out = torch.empty_like(hidden, memory_format=torch.contiguous_format)
        _layer(layer, "moe_forward")._forward_into(hidden, (router_logits,), out, None)
        return out

    @moe_forward.register_fake
    def _(hidden, router_logits, layer):
        return torch.empty_like(hidden, memory_format=torch.contiguous_format)

    @torch.library.custom_op("mxmoe::moe_forward_routed", mutates_args=())
    def moe_forward_routed(hidden: torch.Tensor, topk_ids: torch.Tensor, topk_weights: torch.Tensor,
                           layer: int) -> torch.Tensor:
        out = torch.empty_like(hidden, memory_format=torch.contiguous_format)
        _layer(layer, "moe_forward_routed")._forward_into(hidden, (topk_ids, topk_weights), out, None)
        return out

    @moe_forward_routed.register_fake
    def _(hidden, topk_ids, topk_weights, layer):
        return torch.empty_like(hidden, memory_format=torch.contiguous_format)

    _REGISTERED = True


def call(layer, hidden, routing: tuple):
    """layer(hidden, ...) through the custom op of the routing's form: (router_logits,) or (ids, weights)."""
    register()
    import torch

    if len(routing) == 1:
        return torch.ops.mxmoe.moe_forward(hidden, routing[0], handle_for(layer))
    return torch.ops.mxmoe.moe_forward_routed(hidden, routing[0], routing[1], handle_for(layer))
