"""One definition per fused op: the composite that ``fused`` falls back to on a backend
without kernels and the expansion a fusion lowering makes of a recorded call are the
same function (``ember.backend.composites``), so they agree bit for bit; and the
formulas chosen are the stable ones (float64 numpy as the oracle)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from ember.backend.composites import run
from ember.backend.flex import FlexBackend
from ember.backend.fusion.graph import Aval, Graph, flatten
from ember.backend.fusion.primitive_graph import GraphBuilder, Value, expand
from ember.backend.fusion.replay import Replay
from ember.backend.ops import FUSED_BACKWARD_KERNELS, FusedOp
from ember.device import Device
from ember.tensor.fused import fused


def _decline(self, *args, **options):
    return NotImplemented


class NoKernels(FlexBackend):
    """flex without a single fused kernel (every fused call falls back to its composite)."""

    name = "no-kernels"
    fusion_target = None


for _name in [str(op) for op in FusedOp] + list(FUSED_BACKWARD_KERNELS):
    setattr(NoKernels, _name, _decline)

DEVICE = Device(NoKernels(), ("test-no-kernels",), "NoKernels")


def _f32(rng, *shape, scale=1.0):
    return (rng.standard_normal(shape) * scale).astype(np.float32)


def _cases(rng):
    """(op, array arguments, static arguments, keywords): one call of each recordable fused op."""
    x = _f32(rng, 5, 7, scale=30.0)  # large enough that exp(x) overflows float32
    w, b = _f32(rng, 7, 3), _f32(rng, 3)
    params = [_f32(rng, 4, 3), _f32(rng, 6)]
    grads = [_f32(rng, 4, 3), _f32(rng, 6)]
    moments = [[np.abs(_f32(rng, 4, 3)), np.abs(_f32(rng, 6))] for _ in range(3)]
    adam = dict(lr=1e-2, beta_1=0.9, beta_2=0.999, epsilon=1e-5, weight_decay=0.1, decoupled=False, amsgrad=True)
    return [
        ("relu", [x], (), {}),
        ("relu_backward", [np.maximum(x, 0.0), _f32(rng, 5, 7)], (), {}),
        ("sigmoid", [x], (), {}),
        ("softmax", [x], (1,), {}),
        ("log_softmax", [x], (0,), {}),
        ("linear", [_f32(rng, 2, 5, 7), w, b], (), {}),
        ("linear_backward", [_f32(rng, 2, 5, 7), w, _f32(rng, 2, 5, 3)], (True, True, True), {}),
        ("mse_loss", [x, _f32(rng, 5, 7)], (True,), {}),
        ("adam_step_many", [params, grads, None, None, None], (), {**adam, "time": 1}),
        ("adam_step_many", [params, grads, *moments], (), {**adam, "decoupled": True, "time": 4}),
        ("layer_norm", [x, _f32(rng, 7), _f32(rng, 7)], (1e-5,), {}),
        ("layer_norm", [x, None, None], (1e-3,), {}),
        ("layer_norm_backward", [x, _f32(rng, 7), *_stats(x), _f32(rng, 5, 7)], (True, True, True), {}),
        ("layer_norm_backward", [x, None, *_stats(x), _f32(rng, 5, 7)], (True, False, True), {}),
        ("rms_norm", [x, _f32(rng, 7)], (1e-5,), {}),
        ("rms_norm", [x, None], (1e-3,), {}),
        ("rms_norm_backward", [x, _f32(rng, 7), _stats(x)[1], _f32(rng, 5, 7)], (True, True), {}),
        ("rms_norm_backward", [x, _f32(rng, 7), _stats(x)[1], _f32(rng, 5, 7)], (False, True), {}),
    ]


def _stats(x):
    """The row statistics ``(mean, rstd)`` of ``x`` (float32, ``[..., 1]``)."""
    x64 = x.astype(np.float64)
    mean = x64.mean(-1, keepdims=True)
    return mean.astype(np.float32), (1.0 / np.sqrt(((x64 - mean) ** 2).mean(-1, keepdims=True) + 1e-5)).astype(
        np.float32
    )


def _expanded(op, arrays, static, options):
    """``op`` recorded in a graph, expanded by the fusion layer (as a lowering asks),
    and the expanded graph replayed on flex."""
    graph = Graph()
    builder = GraphBuilder(graph)
    inputs = []

    def value(a):
        if a is None:
            return None
        if isinstance(a, list):
            return [value(v) for v in a]
        inputs.append(a)
        ref = graph.add_input(Aval(tuple(a.shape), a.dtype))
        return Value(ref, graph.avals[ref])

    args = [value(a) for a in arrays]
    leaves, _ = flatten(builder.record(op, (*args, *static), options))
    graph.outputs = [leaf.ref for leaf in leaves]
    lowered = expand(graph, [], lambda g, node: True)
    assert lowered.expanded == [0] and op not in {n.op for n in lowered.graph.nodes}, "the call was not expanded"
    return Replay(lowered.graph).run(FlexBackend(), inputs)


def _leaves(result):
    if result is None:
        return []
    if isinstance(result, (list, tuple)):
        return [leaf for r in result for leaf in _leaves(r)]
    return [np.asarray(result)]


@pytest.mark.parametrize("index", range(18))
def test_the_fallback_and_the_lowerings_expansion_agree_bit_for_bit(index, rng):
    op, arrays, static, options = _cases(rng)[index]
    if op in FUSED_BACKWARD_KERNELS:
        backend = DEVICE._backend
        eager = getattr(backend, op)(*arrays, *static, **options)
        assert eager is NotImplemented
        eager = run(backend, op, *arrays, *static, **options)
    else:
        eager = fused(FusedOp(op), DEVICE, *arrays, *static, **options)
    expected = _leaves(eager)
    got = _expanded(op, arrays, static, options)
    assert len(got) == len(expected)
    for e, g in zip(expected, got):
        assert e.dtype == g.dtype and e.shape == g.shape
        np.testing.assert_array_equal(g, e)  # bit for bit (NaN where NaN)


def test_the_composites_are_the_stable_formulas(rng):
    x = np.array([[-1000.0, -90.0, -1.0, 0.0, 2.0, 90.0, 1000.0]], np.float32)
    x64 = x.astype(np.float64)
    sigmoid = fused(FusedOp.SIGMOID, DEVICE, x)
    with np.errstate(over="ignore"):
        expected = 1.0 / (1.0 + np.exp(-x64))
    assert np.isfinite(sigmoid).all()
    np.testing.assert_allclose(sigmoid, expected, rtol=1e-6, atol=1e-30)
    log_probs = fused(FusedOp.LOG_SOFTMAX, DEVICE, x, 1)
    shifted = x64 - x64.max()
    np.testing.assert_allclose(log_probs, shifted - np.log(np.exp(shifted).sum()), rtol=1e-6)
    probs = fused(FusedOp.SOFTMAX, DEVICE, x, 1)
    np.testing.assert_allclose(probs, np.exp(shifted) / np.exp(shifted).sum(), rtol=1e-6, atol=1e-30)
    g = _f32(rng, 3, 5)
    gelu = fused(FusedOp.GELU, DEVICE, g)
    exact = [0.5 * v * (1.0 + math.erf(v / math.sqrt(2.0))) for v in g.astype(np.float64).ravel()]
    np.testing.assert_allclose(gelu.ravel(), exact, rtol=1e-6, atol=1e-7)
    assert fused(FusedOp.RELU, DEVICE, np.array([np.nan, -0.0, 2.0], np.float32)).tolist()[1:] == [0.0, 2.0]
    assert np.isnan(fused(FusedOp.RELU, DEVICE, np.array([np.nan], np.float32))[0])


def _calls(name):
    """A function of Tensors (and the Tensors to differentiate) calling one fused op."""
    from ember.tensor import activation
    from ember.tensor.attention import attention
    from ember.tensor.grid_sample import grid_sample
    from ember.tensor.loss import cross_entropy_indices
    from ember.tensor.norm import layer_norm, rms_norm

    if name == "gelu":
        return lambda x: activation.gelu(x)
    if name == "layer_norm":
        return lambda x, gamma, beta: layer_norm(x, gamma, beta)
    if name == "rms_norm":
        return lambda x, gamma: rms_norm(x, gamma).mul(x)
    if name == "cross_entropy":
        return lambda logits, targets: cross_entropy_indices(logits, targets)
    if name == "attention":
        return lambda q, k, v, mask, bias: attention(q, k, v, mask=mask, bias=bias, causal=True)[0]
    mode, padding = name.split("-")[1:]
    return lambda x, grid: grid_sample(x, grid, mode, padding, align_corners=padding == "border")


def _inputs(name, rng):
    """(arrays to differentiate, other arrays) for :func:`_calls`."""
    if name == "gelu":
        return [_f32(rng, 4, 6, scale=3.0)], []
    if name == "layer_norm":
        return [_f32(rng, 3, 5), _f32(rng, 5), _f32(rng, 5)], []
    if name == "rms_norm":
        return [_f32(rng, 3, 5), _f32(rng, 5)], []
    if name == "cross_entropy":
        return [_f32(rng, 6, 4, scale=5.0)], [rng.integers(0, 4, 6)]
    if name == "attention":
        mask = rng.random((5, 5)) < 0.3
        return [_f32(rng, 2, 5, 3), _f32(rng, 2, 5, 3), _f32(rng, 2, 5, 4)], [mask, _f32(rng, 2, 5, 5)]
    return [_f32(rng, 2, 3, 4, 5), (rng.random((2, 3, 4, 2)) * 2.6 - 1.3).astype(np.float32)], []


NON_RECORDED = [
    "gelu",
    "layer_norm",
    "rms_norm",
    "cross_entropy",
    "attention",
    "grid_sample-bilinear-zeros",
    "grid_sample-bilinear-reflection",
    "grid_sample-nearest-border",
]


@pytest.mark.parametrize("name", NON_RECORDED)
def test_the_composites_match_flexs_kernels_with_gradients(name, rng):
    """The composites (the forward's differentiated by autodiff where a backend has no
    kernel, the backward's called by the rules), against flex's kernels and their
    backward kernels."""
    from ember import Tensor

    tracked, other = _inputs(name, rng)
    results = []
    for device in (DEVICE.autodiff(), Device.flex().autodiff()):
        xs = [Tensor.from_data(a, device=device).require_grad() for a in tracked]
        rest = [Tensor.from_data(a, device=device) for a in other]
        out = _calls(name)(*xs, *rest)
        grads = out.sum().backward()
        # (nearest sampling passes the grid no gradient: none, or zeros from flex's kernel)
        results.append([out.to_numpy()] + [_grad_or_zeros(x, grads) for x in xs])
    for got, expected in zip(*results):
        np.testing.assert_allclose(got, expected, rtol=2e-5, atol=2e-5)


def _grad_or_zeros(x, grads):
    g = x.grad(grads)
    return np.zeros(x.dims(), np.float32) if g is None else g.to_numpy()


def test_every_fused_op_has_one_composite_over_the_protocol():
    """Issue 25 item 1: each FusedOp's math is written once, in ember.backend.composites
    (no tensor-level composites remain)."""
    from ember.backend.composites import COMPOSITES
    from ember.tensor.fused import composite_of

    missing = [op.name for op in FusedOp if str(op) not in COMPOSITES]
    assert not missing, f"fused ops without a composite in ember.backend.composites: {missing}"
    for op in FusedOp:
        assert composite_of(op) is COMPOSITES[str(op)]
