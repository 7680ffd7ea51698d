"""MoeLayer(shard=...) on the CPU reference backend: the ranks' partial outputs sum to the NumPy
reference, a shard read from a checkpoint is the slice of the whole layer (bit for bit), bad specs,
weights and groups are mxmoe.Error naming the argument, and (with PyTorch) the sums over a real
torch.distributed group (gloo, one process per rank).

Tolerance of a sum of bf16 partials: each rank's partial is its fp64 sum rounded once to bf16 (at most
2^-8 relative off: half an ulp of 8 significant bits), so element by element |sum - reference| <=
2^-8 * sum over ranks |partial| (plus 1e-5 of the largest output: fp32 routing weights). fp32 partials
summed, rounded once: 2^-8 |reference| (plus the same 1e-5)."""
import pickle
import socket

import numpy as np
import pytest

import mxmoe
from conftest import bf16_to_f64, f64_to_bf16, make_config, random_layer, reference_moe, rel_error

# gpt-oss-shaped and small: I = 160 is 5 MX blocks (uneven over 2 and 3 ranks), E = 13 divides by neither
# (and leaves every expert-parallel rank of 3 at least k experts).
E, K, H, I = 13, 4, 64, 160
WORLDS = (2, 3)


def case(rng, tokens, bias=True):
    w = random_layer(rng, E, H, I, bias)
    hidden = f64_to_bf16(rng.normal(size=(tokens, H)))
    logits = rng.normal(0, 2, size=(tokens, E)).astype(np.float32)
    return w, hidden, logits


def partials(w, spec_of, world, hidden, logits=None, **kw):
    """Each rank's partial output (CPU reference), as fp64 values [world, T, H]."""
    out = []
    for r in range(world):
        layer = mxmoe.MoeLayer(make_config(E, K, H, I), w, backend="reference", max_tokens=64, shard=spec_of(r))
        p = layer(hidden, logits, **kw)
        assert p.shape == hidden.shape and p.dtype == np.uint16
        out.append(bf16_to_f64(p))
    return np.stack(out)


def check_sum(parts, ref):
    total = parts.sum(axis=0)
    bound = 2.0**-8 * np.abs(parts).sum(axis=0) + 1e-5 * max(np.abs(ref).max(initial=0), 1e-30)
    assert np.isfinite(total).all()
    worst = np.max(np.abs(total - ref) - bound, initial=-1)
    assert worst <= 0, f"the sum of the partials is off the reference by {worst:.3g} beyond the bf16 bound"


@pytest.mark.parametrize("tokens", [0, 1, 3, 50])
@pytest.mark.parametrize("world", WORLDS)
@pytest.mark.parametrize("mode", ["tp", "ep"])
def test_partials_sum_to_the_reference(rng, mode, world, tokens):
    w, hidden, logits = case(rng, tokens)
    parts = partials(w, lambda r: mxmoe.ShardSpec(mode, r, world), world, hidden, logits)
    if tokens:
        check_sum(parts, reference_moe(hidden, logits, w, K))
    if mode == "ep":
        # A rank's partial is its own experts' pairs (b2 included): exactly zero for a token without one.
        top = np.argsort(-logits, axis=1, kind="stable")[:, :K]
        for r in range(world):
            begin = r * (E // world) + min(r, E % world)
            mine = ((top >= begin) & (top < begin + E // world + (r < E % world))).any(axis=1)
            assert np.all(parts[r][~mine] == 0) and np.all(np.abs(parts[r][mine]).sum(axis=1) > 0)


def test_expert_map_and_routed_input(rng):
    """An explicit expert map (interleaved, not ranges) and the caller's routing: the partials still sum
    to the layer's output."""
    world, tokens = 3, 17
    w, hidden, logits = case(rng, tokens, bias=False)
    owner = rng.permutation(np.arange(E) % world)  # every rank at least k experts

    def spec(r):
        local = np.cumsum(owner == r) - 1
        return mxmoe.ShardSpec("ep", r, world, [int(l) if o == r else -1 for o, l in zip(owner, local)])

    ref = reference_moe(hidden, logits, w, K)
    check_sum(partials(w, spec, world, hidden, logits), ref)
    ids = np.ascontiguousarray(np.argsort(-logits, axis=1, kind="stable")[:, :K])
    sel = np.take_along_axis(logits, ids, axis=1).astype(np.float64)
    weights = np.exp(sel - sel.max(axis=1, keepdims=True))
    weights = (weights / weights.sum(axis=1, keepdims=True)).astype(np.float32)
    for ids_t in (ids.astype(np.int32), ids.astype(np.int64)):
        check_sum(partials(w, spec, world, hidden, topk_ids=ids_t, topk_weights=weights), ref)
    check_sum(partials(w, lambda r: mxmoe.ShardSpec("tp", r, world), world, hidden, topk_ids=ids,
                       topk_weights=weights), ref)


@pytest.mark.parametrize("mode", ["tp", "ep"])
def test_fp32_partials_sum_rounded_once(rng, mode):
    world, tokens = 3, 9
    w, hidden, logits = case(rng, tokens)
    sums = np.zeros((tokens, H))
    for r in range(world):
        layer = mxmoe.MoeLayer(make_config(E, K, H, I), w, backend="reference", max_tokens=16,
                               shard=mxmoe.ShardSpec(mode, r, world), fp32_partials=True)
        p = layer(hidden, logits)
        assert p.dtype == np.float32 and p.shape == (tokens, H)
        sums += p
    ref = reference_moe(hidden, logits, w, K)
    out = bf16_to_f64(f64_to_bf16(sums))
    assert np.all(np.abs(out - ref) <= 2.0**-8 * np.abs(ref) + 1e-5 * np.abs(ref).max())
    with pytest.raises(mxmoe.Error, match="fp32_partials"):
        layer(hidden, topk_ids=np.zeros((tokens, K), np.int32), topk_weights=np.ones((tokens, K), np.float32))


def slice_by_hand(w, mode, rank, world):
    """The rank's part in NumPy, independently of the library: TP, I's MX blocks split with the first
    I/32 % world ranks one more (gate/up rows 2i, 2i+1 of W1, K blocks of W2, b2 on rank 0); EP, a
    contiguous range of experts, the first E % world ranks one more."""
    def split(n):
        count = n // world + (rank < n % world)
        return rank * (n // world) + min(rank, n % world), count

    if mode == "ep":
        b, n = split(E)
        return {k: w[k][b:b + n] for k in ("w1_blocks", "w1_scales", "w1_bias", "w2_blocks", "w2_scales", "w2_bias")}
    b, n = split(I // 32)
    rows = slice(2 * 32 * b, 2 * 32 * (b + n))
    part = {"w1_blocks": w["w1_blocks"][:, rows], "w1_scales": w["w1_scales"][:, rows],
            "w1_bias": w["w1_bias"][:, rows], "w2_blocks": w["w2_blocks"][:, :, b:b + n],
            "w2_scales": w["w2_scales"][:, :, b:b + n]}
    if rank == 0:
        part["w2_bias"] = w["w2_bias"]
    return part


@pytest.mark.parametrize("world", WORLDS)
@pytest.mark.parametrize("mode", ["tp", "ep"])
def test_shard_from_checkpoint_is_the_slice(tmp_path, rng, mode, world):
    config = make_config(E, K, H, I)
    mxmoe.write_random_checkpoint(str(tmp_path), config, 2, seed=int(rng.integers(1 << 62)))
    _, whole = mxmoe.load_gpt_oss(str(tmp_path), 1)
    _, hidden, logits = case(rng, 11)
    for r in range(world):
        spec = mxmoe.ShardSpec(mode, r, world)
        c, part = mxmoe.load_gpt_oss(str(tmp_path), 1, shard=spec)
        assert (c.num_experts, c.intermediate) == (E, I)  # the whole layer's config
        want = slice_by_hand(whole, mode, r, world)
        assert set(k for k in part if not k.startswith("router")) == set(want)
        for k, v in want.items():
            assert np.array_equal(part[k], v), f"{k} of rank {r}"
        if "router_weight" in whole:
            assert np.array_equal(part["router_weight"], whole["router_weight"])
        from_part = mxmoe.MoeLayer(config, part, backend="reference", shard=spec, max_tokens=16)
        from_whole = mxmoe.MoeLayer(config, whole, backend="reference", shard=spec, max_tokens=16)
        assert not from_part._layer.sliced and from_whole._layer.sliced
        assert from_part.local_config.num_experts == len(want["w1_blocks"])
        assert np.array_equal(from_part(hidden, logits), from_whole(hidden, logits))


def test_bad_specs_and_weights_name_the_argument(rng, tmp_path):
    w, hidden, logits = case(rng, 3)
    config = make_config(E, K, H, I)

    def make(spec, weights=w, **kw):
        return mxmoe.MoeLayer(config, weights, backend="reference", shard=spec, **kw)

    bad = [mxmoe.ShardSpec("tp", 2, 2), mxmoe.ShardSpec("ep", -1, 2), mxmoe.ShardSpec("tp", 0, 0),
           mxmoe.ShardSpec("tp", 0, I // 32 + 1),  # a rank without an MX block
           mxmoe.ShardSpec("ep", 0, E + 1),  # a rank without an expert
           mxmoe.ShardSpec("ep", 0, 2, [0, 1, -1]),  # not E entries
           mxmoe.ShardSpec("ep", 0, 2, [0, 0] + [-1] * (E - 2)),  # local id 0 twice
           mxmoe.ShardSpec("ep", 0, 2, [-1] * E),  # nothing on this rank
           mxmoe.ShardSpec("ep", 0, 2, [0, 2] + [-1] * (E - 2)),  # local ids not 0 .. n-1
           mxmoe.ShardSpec("tp", 0, 2, list(range(E)))]  # a map for tensor-parallel
    mxmoe.write_random_checkpoint(str(tmp_path), config, 1)
    for spec in bad:
        with pytest.raises(mxmoe.Error, match="^shard: "):
            make(spec)
        with pytest.raises(mxmoe.Error, match="^shard: "):
            mxmoe.load_gpt_oss(str(tmp_path), 0, shard=spec)
    with pytest.raises(mxmoe.Error, match="shard mode"):
        mxmoe.ShardSpec("dp", 0, 2)
    spec = mxmoe.ShardSpec("EP", 1, 3, [0, -1, 1] + [-1] * (E - 3))
    assert (spec.mode, spec.rank, spec.world_size, spec.expert_map[:3]) == ("expert", 1, 3, [0, -1, 1])
    assert pickle.loads(pickle.dumps(spec)) == spec != mxmoe.ShardSpec("expert", 1, 3)
    with pytest.raises(mxmoe.Error, match="^shard: expected an mxmoe.ShardSpec"):
        make(("tp", 0, 2))
    # Weights that fit neither the whole layer nor this rank's part.
    tp_part = slice_by_hand(w, "tp", 1, 2)
    with pytest.raises(mxmoe.Error, match="^weights: .*neither the whole layer"):
        make(mxmoe.ShardSpec("ep", 1, 2), tp_part)
    with pytest.raises(mxmoe.Error, match="^weights: "):
        make(mxmoe.ShardSpec("tp", 0, 2), tp_part)  # rank 1's part given to rank 0: 3 blocks, not 2
    ep_part = slice_by_hand(w, "ep", 0, 2)
    with pytest.raises(mxmoe.Error, match="^weights: "):
        make(mxmoe.ShardSpec("ep", 1, 2), ep_part)  # 4 experts, rank 1 owns 3
    broken = dict(ep_part, w1_scales=ep_part["w1_scales"][:, :-2])
    with pytest.raises(mxmoe.Error, match="^w1_scales: "):
        make(mxmoe.ShardSpec("ep", 0, 2), broken)
    with pytest.raises(mxmoe.Error, match="^fp32_partials: "):
        mxmoe.MoeLayer(config, w, backend="reference", fp32_partials=True)
    with pytest.raises(mxmoe.Error, match="^group: "):
        mxmoe.MoeLayer(config, w, backend="reference", group=True)
    # A shard of a world of one is the whole layer.
    whole = make(mxmoe.ShardSpec("ep", 0, 1))
    assert np.array_equal(whole(hidden, logits), mxmoe.MoeLayer(config, w, backend="reference")(hidden, logits))


@pytest.fixture
def fake_group(monkeypatch):
    """torch.distributed made to report a group of `size` ranks in which this process is `rank`."""
    torch = pytest.importorskip("torch")
    dist = torch.distributed
    if not dist.is_available():
        pytest.skip("torch.distributed is not available in this PyTorch")
    state = {"size": 2, "rank": 0}
    monkeypatch.setattr(dist, "is_initialized", lambda: True)
    monkeypatch.setattr(dist, "get_world_size", lambda group=None: state["size"])
    monkeypatch.setattr(dist, "get_rank", lambda group=None: state["rank"])
    return state


def test_group_must_match_the_spec(rng, fake_group):
    import torch

    w, hidden, logits = case(rng, 3)
    config = make_config(E, K, H, I)
    group = object()  # a ProcessGroup stand-in: only its size and this process's rank are asked
    for size, rank, spec in [(3, 0, mxmoe.ShardSpec("tp", 0, 2)), (2, 1, mxmoe.ShardSpec("ep", 0, 2)),
                             (2, -1, mxmoe.ShardSpec("ep", 0, 2))]:
        fake_group.update(size=size, rank=rank)
        with pytest.raises(mxmoe.Error, match="^group: "):
            mxmoe.MoeLayer(config, w, backend="reference", shard=spec, group=group)
    fake_group.update(size=2, rank=1)
    layer = mxmoe.MoeLayer(config, w, backend="reference", shard=mxmoe.ShardSpec("tp", 1, 2), group=group)
    assert layer.group is group
    with pytest.raises(mxmoe.Error, match="^hidden: .*torch"):
        layer(hidden, logits)  # NumPy: nothing to sum over torch.distributed
    with pytest.raises(mxmoe.Error, match="^hidden: .*bfloat16"):
        layer(torch.from_numpy(hidden.view(np.int16)), torch.from_numpy(logits))
    alone = mxmoe.MoeLayer(config, w, backend="reference", shard=mxmoe.ShardSpec("ep", 1, 2))
    with pytest.raises(mxmoe.Error, match="^group: forward_dp"):
        alone.forward_dp(torch.from_numpy(hidden.view(np.int16)).view(torch.bfloat16), torch.from_numpy(logits))


def test_group_true_needs_an_initialized_default_group(rng):
    torch = pytest.importorskip("torch")
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        pytest.skip("a default group exists in this process")
    w, _, _ = case(rng, 1)
    with pytest.raises(mxmoe.Error, match="^group: .*init_process_group"):
        mxmoe.MoeLayer(make_config(E, K, H, I), w, backend="reference", shard=mxmoe.ShardSpec("tp", 0, 2), group=True)


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _gloo_rank(rank, world, port, w, cases, results):
    """One rank of a gloo group: for each case (T, hidden, logits, every rank's own hidden and logits),
    the layer's output summed over the group (bf16 and fp32 partials, TP and EP, logits and routed) and
    over data-parallel tokens (forward_dp); written to results/rank<r>.npz."""
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    try:
        config = make_config(E, K, H, I)
        bf16 = lambda a: torch.from_numpy(a.view(np.int16)).view(torch.bfloat16)  # noqa: E731
        bits = lambda y: y.view(torch.int16).numpy().view(np.uint16)  # noqa: E731
        out = {}
        for mode, fp32 in (("tp", False), ("tp", True), ("ep", False), ("ep", True)):
            layer = mxmoe.MoeLayer(config, w, backend="reference", max_tokens=64, fp32_partials=fp32,
                                   shard=mxmoe.ShardSpec(mode, rank, world), group=True if fp32 else dist.group.WORLD)
            for t, hidden, logits, local_hidden, local_logits in cases:
                h, lg = bf16(hidden), torch.from_numpy(logits)
                out[f"{mode}_{int(fp32)}_{t}"] = bits(layer(h, lg))
                out[f"dp{mode}_{int(fp32)}_{t}"] = bits(layer.forward_dp(bf16(local_hidden[rank]),
                                                                         torch.from_numpy(local_logits[rank])))
                if not fp32:
                    top = torch.topk(lg, K, dim=1)
                    y = torch.empty_like(h)
                    layer(h, out=y, topk_ids=top.indices, topk_weights=torch.softmax(top.values.double(), 1).float())
                    out[f"{mode}_routed_{t}"] = bits(y)
        np.savez(f"{results}/rank{rank}.npz", **out)
    finally:
        dist.destroy_process_group()


def test_sums_over_a_gloo_group(rng, tmp_path):
    """Three processes, each a rank: every rank gets the same bits, within 1e-2 of the reference (bf16
    partials, summed by gloo in bf16) or 2^-8 element by element (fp32 partials, rounded once)."""
    torch = pytest.importorskip("torch")
    if not torch.distributed.is_available() or not torch.distributed.is_gloo_available():
        pytest.skip("torch.distributed with gloo is not available")
    world = 3
    w = random_layer(rng, E, H, I)
    cases = [(t, f64_to_bf16(rng.normal(size=(t, H))), rng.normal(0, 2, size=(t, E)).astype(np.float32),
              f64_to_bf16(rng.normal(size=(world, t, H))), rng.normal(0, 2, size=(world, t, E)).astype(np.float32))
             for t in (0, 1, 5)]
    torch.multiprocessing.spawn(_gloo_rank, nprocs=world, args=(world, _free_port(), w, cases, str(tmp_path)))
    ranks = [np.load(tmp_path / f"rank{r}.npz") for r in range(world)]
    assert len(ranks[0].files) == 3 * 10
    for t, hidden, logits, local_hidden, local_logits in cases:
        ref = reference_moe(hidden, logits, w, K)
        ref_dp = reference_moe(local_hidden.reshape(-1, H), local_logits.reshape(-1, E), w, K).reshape(world, t, H)
        for key in [k for k in ranks[0].files if k.endswith(f"_{t}")]:
            for r in range(world):
                got = ranks[r][key]
                assert got.shape == (t, H), key
                if key.startswith("dp"):
                    want = ref_dp[r]
                else:
                    want = ref
                    assert np.array_equal(got, ranks[0][key]), f"{key}: rank {r}'s bits differ from rank 0's"
                if not t:
                    continue
                assert rel_error(got, want) <= 1e-2, f"{key}, rank {r}"
                if "_1_" in key:  # fp32 partials: the fp32 sum rounded once
                    err = np.abs(bf16_to_f64(got) - want) - 2.0**-8 * np.abs(want) - 1e-5 * np.abs(want).max()
                    assert err.max() <= 0, f"{key}, rank {r}"
