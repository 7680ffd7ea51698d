"""The Python surface on the CPU: the version, the public names, the bf16 forms accepted (ml_dtypes
bfloat16, uint16 bit patterns), read-only inputs, and mxmoe.Error (naming the argument and saying what
to pass) for every other dtype, a read-only or wrongly strided `out`, and things that are not tensors."""
from importlib import metadata

import numpy as np
import pytest

import mxmoe
from conftest import f64_to_bf16, make_config, random_layer, reference_moe, rel_error

E, K, H, I = 8, 2, 64, 64


def test_version():
    assert isinstance(mxmoe.__version__, str) and mxmoe.__version__[0].isdigit()
    try:
        installed = metadata.version("mxmoe")
    except metadata.PackageNotFoundError:
        installed = None  # a build tree: the C++ library's version
    # pyproject.toml's version (the package metadata) and CMake's project version (the probe's) agree.
    assert mxmoe.__version__ == (installed or mxmoe.probe()["version"])
    assert mxmoe.__version__ == mxmoe.probe()["version"]


def test_only_the_documented_names_are_public():
    public = {n for n in dir(mxmoe) if not n.startswith("_")} - {"integrations"}  # a subpackage, once imported
    assert public == set(mxmoe.__all__) - {"__version__"}
    for name in mxmoe.__all__:
        assert getattr(mxmoe, name) is not None
        if callable(getattr(mxmoe, name)) and name != "Error":
            assert getattr(mxmoe, name).__doc__, f"{name} has no docstring"


@pytest.fixture
def case(rng):
    w = random_layer(rng, E, H, I)
    layer = mxmoe.MoeLayer(make_config(E, K, H, I), w, backend="reference", max_tokens=8)
    hidden = f64_to_bf16(rng.normal(size=(3, H)))
    logits = rng.normal(0, 2, size=(3, E)).astype(np.float32)
    return w, layer, hidden, logits


def test_ml_dtypes_bfloat16_arrays_are_bf16(rng, case):
    ml_dtypes = pytest.importorskip("ml_dtypes")
    w, layer, hidden, logits = case
    want = layer(hidden, logits)
    bh = hidden.view(ml_dtypes.bfloat16)
    out = layer(bh, logits)
    assert out.dtype == ml_dtypes.bfloat16 and np.array_equal(out.view(np.uint16), want)
    into = np.full((3, H), np.nan, ml_dtypes.bfloat16)
    assert layer(bh, logits, into) is into and np.array_equal(into.view(np.uint16), want)
    # Weights too: the biases as ml_dtypes bfloat16.
    wb = dict(w, w1_bias=w["w1_bias"].view(ml_dtypes.bfloat16), w2_bias=w["w2_bias"].view(ml_dtypes.bfloat16))
    other = mxmoe.MoeLayer(make_config(E, K, H, I), wb, backend="reference", max_tokens=8)
    assert np.array_equal(other(hidden, logits), want)
    with pytest.raises(mxmoe.Error, match="hidden: expected bfloat16 .*, got float8_e4m3fn"):
        layer(hidden.astype(np.float32).astype(ml_dtypes.float8_e4m3fn), logits)


def test_read_only_inputs_are_read(case):
    w, layer, hidden, logits = case
    want = layer(hidden, logits)
    frozen = [a.copy() for a in (hidden, logits)]
    for a in frozen:
        a.flags.writeable = False
    assert np.array_equal(layer(*frozen), want)
    ro_w = {k: v.copy() for k, v in w.items()}
    for v in ro_w.values():
        v.flags.writeable = False
    assert np.array_equal(mxmoe.MoeLayer(make_config(E, K, H, I), ro_w, backend="reference")(hidden, logits), want)
    assert rel_error(want, reference_moe(hidden, logits, w, K)) <= 1e-2


def test_other_dtypes_and_bad_outs_name_the_argument_and_what_to_pass(case):
    w, layer, hidden, logits = case
    with pytest.raises(mxmoe.Error, match="hidden: expected bfloat16 .*ml_dtypes.*uint16.*, got float32"):
        layer(hidden.astype(np.float32), logits)
    with pytest.raises(mxmoe.Error, match="hidden: expected bfloat16 .*, got float16"):
        layer(hidden.view(np.float16), logits)
    with pytest.raises(mxmoe.Error, match="router_logits: expected float32, got float64"):
        layer(hidden, logits.astype(np.float64))
    with pytest.raises(mxmoe.Error, match="out: expected bfloat16 .*, got float32"):
        layer(hidden, logits, np.empty((3, H), np.float32))
    ro = np.empty((3, H), np.uint16)
    ro.flags.writeable = False
    with pytest.raises(mxmoe.Error, match="out: the array is read-only; pass a writable array"):
        layer(hidden, logits, ro)
    with pytest.raises(mxmoe.Error, match="out: must be C-contiguous .*pass a contiguous output tensor"):
        layer(hidden, logits, np.empty((H, 3), np.uint16).T)
    with pytest.raises(mxmoe.Error, match="hidden: expected a tensor .* got list"):
        layer(hidden.tolist(), logits)
    with pytest.raises(mxmoe.Error, match="router_logits: expected a tensor .* got str"):
        layer(hidden, "logits")
    with pytest.raises(mxmoe.Error, match="out: expected a tensor"):
        layer(hidden, logits, out=3)
    with pytest.raises(mxmoe.Error, match="router_logits: expected float32, got bool"):
        layer(hidden, logits > 0)
    with pytest.raises(mxmoe.Error, match="router_logits: expected float32, got complex64"):
        layer(hidden, logits.astype(np.complex64))
    with pytest.raises(mxmoe.Error, match="w1_blocks: expected uint8 .*, got int8"):
        mxmoe.MoeLayer(make_config(E, K, H, I), dict(w, w1_blocks=w["w1_blocks"].view(np.int8)), backend="reference")
    with pytest.raises(mxmoe.Error, match="w2_bias: expected bfloat16 .*, got float32"):
        mxmoe.MoeLayer(make_config(E, K, H, I), dict(w, w2_bias=w["w2_bias"].astype(np.float32)), backend="reference")


def test_a_jax_out_is_refused(case):
    jax = pytest.importorskip("jax")
    _, layer, hidden, logits = case
    with pytest.raises(mxmoe.Error, match="out: JAX arrays are immutable"):
        layer(hidden, logits, jax.device_put(np.empty((3, H), np.uint16), jax.devices("cpu")[0]))
