"""PyTorch integration: a custom op (with a fake implementation) so that torch.compile traces MoeLayer
calls and CUDA graphs capture them. Registered when a MoeLayer first sees a torch tensor.

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


def register() -> None:
    global _REGISTERED
    if _REGISTERED:
        return
    import torch

    @torch.library.custom_op("mxmoe::moe_forward", mutates_args=())
    def moe_forward(hidden: torch.Tensor, router_logits: torch.Tensor, layer: int) -> torch.Tensor:
        target = _LAYERS.get(layer)
        if target is None:
            raise RuntimeError(f"mxmoe::moe_forward: layer handle {layer} is not alive")
        out = torch.empty_like(hidden, memory_format=torch.contiguous_format)
        target._forward_into(hidden, router_logits, out, None)
        return out

    @moe_forward.register_fake
    def _(hidden, router_logits, layer):
        return torch.empty_like(hidden, memory_format=torch.contiguous_format)

    _REGISTERED = True


def call(layer, hidden, router_logits):
    register()
    import torch

    return torch.ops.mxmoe.moe_forward(hidden, router_logits, handle_for(layer))
