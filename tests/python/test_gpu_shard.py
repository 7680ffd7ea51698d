"""Several GPUs, one process each (torch.multiprocessing.spawn, torch.distributed over NCCL):
MoeLayer(shard=..., group=True) on gpt-oss-20b-shaped random layers, tensor- and expert-parallel at
world sizes 2 and 4, against a one-GPU MoeLayer's output computed in rank 0. Every rank must get the
same bits; the data-parallel expert-parallel path (forward_dp) against one GPU over the ranks'
concatenated tokens. The ranks write their outputs to files and this process compares them (an
assertion inside a rank would leave the others waiting in a collective). Skipped without the GPUs."""
import os
import socket
from datetime import timedelta

import numpy as np
import pytest

torch = pytest.importorskip("torch")  # before mxmoe: torch loads its own NCCL first
import mxmoe  # noqa: E402
from conftest import bf16_to_f64, f64_to_bf16, random_layer, rel_error  # noqa: E402

# Cheap checks only at import: the spawned ranks import this module too (mxmoe.probe() is in the test).
if not torch.cuda.is_available():
    pytest.skip("no CUDA GPU", allow_module_level=True)
if not torch.distributed.is_available() or not torch.distributed.is_nccl_available():
    pytest.skip("torch.distributed without NCCL", allow_module_level=True)

TOKENS = (1, 3, 64, 1000)
# ||out - one GPU|| / ||one GPU||: bf16 partials round each rank's partial and NCCL's sum rounds again;
# fp32 partials are summed in fp32 and rounded once.
BOUND, F32_BOUND = 1e-2, 5e-3


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _inputs(seed, world):
    """The layer and every T's inputs, the same in every process (one seed): hidden and logits for the
    replicated-token calls, and [world, T, ...] of them for the data-parallel ones."""
    rng = np.random.default_rng(seed)
    config = mxmoe.MoeConfig.preset("gpt-oss-20b")
    e, h, i = config.num_experts, config.hidden, config.intermediate
    w = random_layer(rng, e, h, i)
    calls = {t: (f64_to_bf16(rng.normal(size=(t, h))), rng.normal(0, 2, size=(t, e)).astype(np.float32))
             for t in TOKENS}
    dp = {t: (f64_to_bf16(rng.normal(size=(world * t, h))), rng.normal(0, 2, size=(world * t, e)).astype(np.float32))
          for t in TOKENS}
    return config, w, calls, dp


def _rank(rank, world, port, seed, results):
    import torch.distributed as dist

    torch.cuda.set_device(rank)
    device = torch.device("cuda", rank)
    torch.zeros(1, device=device)  # the device's context, current for mxmoe's runtime too
    dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world,
                            timeout=timedelta(seconds=120))
    try:
        config, w, calls, dp = _inputs(seed, world)
        k = config.top_k

        def cuda(a):
            if a.dtype == np.uint16:
                return torch.from_numpy(a.view(np.int16)).to(device).view(torch.bfloat16)
            return torch.from_numpy(a).to(device)

        def bits(y):
            return y.view(torch.int16).cpu().numpy().view(np.uint16)

        def routing(logits):
            top = torch.topk(logits, k, dim=1)  # distinct experts; softmax over the k, as gpt-oss
            return top.indices.to(torch.int32), torch.softmax(top.values, dim=1)

        out = {}
        if rank == 0:  # the one-GPU outputs
            one = mxmoe.MoeLayer(config, w, max_tokens=4096)
            for t, (h, lg) in calls.items():
                out[f"one_{t}"] = bits(one(cuda(h), cuda(lg)))
                ids, weights = routing(cuda(lg))
                out[f"one_routed_{t}"] = bits(one(cuda(h), topk_ids=ids, topk_weights=weights))
            for t, (h, lg) in dp.items():
                out[f"one_dp_{t}"] = bits(one(cuda(h), cuda(lg)))
            del one
        dist.barrier(device_ids=[rank])
        for mode in ("tp", "ep"):
            for fp32 in (False, True):
                layer = mxmoe.MoeLayer(config, w, max_tokens=4096, shard=mxmoe.ShardSpec(mode, rank, world),
                                       group=True, fp32_partials=fp32)
                for t, (h, lg) in calls.items():
                    out[f"{mode}_{int(fp32)}_{t}"] = bits(layer(cuda(h), cuda(lg)))
                    if not fp32:
                        ids, weights = routing(cuda(lg))
                        out[f"{mode}_routed_{t}"] = bits(layer(cuda(h), topk_ids=ids.long(), topk_weights=weights))
                if mode == "ep":
                    for t, (h, lg) in dp.items():
                        mine = slice(rank * t, (rank + 1) * t)
                        out[f"dp_{int(fp32)}_{t}"] = bits(layer.forward_dp(cuda(h[mine]), cuda(lg[mine])))
                del layer
        torch.cuda.synchronize()
        np.savez(os.path.join(results, f"rank{rank}.npz"), **out)
    finally:
        dist.destroy_process_group()


@pytest.mark.parametrize("world", [2, 4])
def test_sharded_layer_over_nccl_matches_one_gpu(rng, tmp_path, monkeypatch, world):
    if torch.cuda.device_count() < world:
        pytest.skip(f"world size {world} needs {world} GPUs, this machine has {torch.cuda.device_count()}")
    if not mxmoe.probe()["gpu_available"]:
        pytest.skip(f"no usable GPU for mxmoe: {mxmoe.probe()['no_gpu_reason']}")
    monkeypatch.setenv("NCCL_NVLS_ENABLE", "0")  # the spawned ranks inherit it (NVLink multicast off)
    seed = int(rng.integers(1 << 62))
    torch.multiprocessing.spawn(_rank, nprocs=world, args=(world, _free_port(), seed, str(tmp_path)))
    ranks = [np.load(tmp_path / f"rank{r}.npz") for r in range(world)]
    worst = {}
    for key in ranks[0].files:
        if key.startswith("one_"):
            continue
        mode, kind, t = key.split("_")  # tp|ep|dp, 0|1 (fp32 partials)|routed, T
        t = int(t)
        for r in range(world):
            got = ranks[r][key]
            assert got.shape == (t, 2880), key
            if mode == "dp":
                want = bf16_to_f64(ranks[0][f"one_dp_{t}"][r * t:(r + 1) * t])
            else:
                assert np.array_equal(got, ranks[0][key]), f"{key}: rank {r}'s bits differ from rank 0's"
                want = bf16_to_f64(ranks[0][f"one_routed_{t}" if kind == "routed" else f"one_{t}"])
            err = rel_error(got, want)
            bound = F32_BOUND if kind == "1" else BOUND
            worst[key] = max(worst.get(key, 0.0), err)
            assert err <= bound, f"{key}, rank {r}: {err:.3g} relative to one GPU (bound {bound})"
    print(f"world {world}, relative difference to one GPU: "
          + ", ".join(f"{k} {v:.2e}" for k, v in sorted(worst.items())))
