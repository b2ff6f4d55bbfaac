"""``ember.autograd.Function`` against ``torch.autograd.Function`` (values and
gradients) on every autodiff device: the straight-through estimator, a clipped
gradient, gradient reversal, multiple outputs, non-tensor arguments, double backward,
and the errors of a wrong backward."""

from __future__ import annotations

import numpy as np
import pytest

from ember import Device, Tensor
from ember.autograd import Function
from ember.backend.autodiff import Checkpointing
from ember.errors import GraphError, ShapeError
from tests.conftest import DEVICE_NAMES, assert_close, make_device

AUTODIFF = [name for name in DEVICE_NAMES if name.endswith("autodiff")]


@pytest.fixture(params=AUTODIFF)
def ad(request):
    return make_device(request.param)


# ---------------------------------------------------------------------- the functions
class RoundSte(Function):
    """Rounds; the gradient passes straight through."""

    @staticmethod
    def forward(ctx, x):
        return x.round()

    @staticmethod
    def backward(ctx, g):
        return g


class ClipGrad(Function):
    """Identity; the gradient is clipped to [-bound, bound]."""

    @staticmethod
    def forward(ctx, x, bound):
        ctx.bound = bound
        return x

    @staticmethod
    def backward(ctx, g):
        return g.clamp(-ctx.bound, ctx.bound), None


class ReverseGrad(Function):
    """Gradient reversal (domain-adversarial training): identity, gradient times -scale."""

    @staticmethod
    def forward(ctx, x, scale):
        ctx.scale = scale
        return x

    @staticmethod
    def backward(ctx, g):
        return g.mul_scalar(-ctx.scale), None


class Cube(Function):
    """k x^3 with its derivative from the saved input (differentiable again)."""

    @staticmethod
    def forward(ctx, x, k):
        ctx.save_for_backward(x)
        ctx.k = k
        return x.powi_scalar(3).mul_scalar(k)

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return g.mul(x.mul(x)).mul_scalar(3.0 * ctx.k), None


class Exp(Function):
    """exp, whose backward reads its own saved output."""

    @staticmethod
    def forward(ctx, x):
        y = x.exp()
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx, g):
        (y,) = ctx.saved_tensors
        return g.mul(y)


class SinCos(Function):
    """Two outputs of two inputs: (sin(a) * b, cos(a))."""

    @staticmethod
    def forward(ctx, a, b):
        ctx.save_for_backward(a, b)
        return a.sin().mul(b), a.cos()

    @staticmethod
    def backward(ctx, g_prod, g_cos):
        a, b = ctx.saved_tensors
        ga = g_prod.mul(a.cos()).mul(b).sub(g_cos.mul(a.sin()))
        return ga, g_prod.mul(a.sin())


def _torch_functions(torch):
    class TRoundSte(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x.round()

        @staticmethod
        def backward(ctx, g):
            return g

    class TClipGrad(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, bound):
            ctx.bound = bound
            return x.clone()

        @staticmethod
        def backward(ctx, g):
            return g.clamp(-ctx.bound, ctx.bound), None

    class TReverseGrad(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, scale):
            ctx.scale = scale
            return x.clone()

        @staticmethod
        def backward(ctx, g):
            return -ctx.scale * g, None

    class TSinCos(torch.autograd.Function):
        @staticmethod
        def forward(ctx, a, b):
            ctx.save_for_backward(a, b)
            return a.sin() * b, a.cos()

        @staticmethod
        def backward(ctx, g_prod, g_cos):
            a, b = ctx.saved_tensors
            return g_prod * a.cos() * b - g_cos * a.sin(), g_prod * a.sin()

    return TRoundSte, TClipGrad, TReverseGrad, TSinCos


def _pair(ad, torch, array):
    return Tensor.from_data(array, device=ad).require_grad(), torch.tensor(
        array, dtype=torch.float64, requires_grad=True
    )


# ---------------------------------------------------------------------- against torch
def test_straight_through_round_clip_and_reversal_match_torch(ad, torch, rng):
    t_round, t_clip, t_reverse, _ = _torch_functions(torch)
    data = rng.uniform(-2.0, 2.0, size=(3, 4)).astype(np.float32)
    weights = rng.uniform(-3.0, 3.0, size=(3, 4)).astype(np.float32)
    x, tx = _pair(ad, torch, data)
    w, tw = Tensor.from_data(weights, device=ad), torch.tensor(weights, dtype=torch.float64)
    # round -> scale -> clip the gradient at 2 -> reverse it with 0.5 -> weighted square
    y = ReverseGrad.apply(ClipGrad.apply(RoundSte.apply(x).mul_scalar(1.5), 2.0), 0.5)
    ty = t_reverse.apply(t_clip.apply(t_round.apply(tx) * 1.5, 2.0), 0.5)
    assert_close(y, ty.detach().numpy())
    grads = y.mul(y).mul(w).sum().backward()
    (ty * ty * tw).sum().backward()
    assert_close(x.grad(grads), tx.grad.numpy(), rtol=1e-5, atol=1e-5)


def test_multiple_outputs_match_torch_with_one_output_unused(ad, torch, rng):
    *_, t_sincos = _torch_functions(torch)
    a, ta = _pair(ad, torch, rng.uniform(-2.0, 2.0, size=(5,)).astype(np.float32))
    b, tb = _pair(ad, torch, rng.uniform(-2.0, 2.0, size=(5,)).astype(np.float32))
    prod, cos = SinCos.apply(a, b)
    tprod, tcos = t_sincos.apply(ta, tb)
    assert_close(prod, tprod.detach().numpy(), rtol=1e-5, atol=1e-6)
    assert_close(cos, tcos.detach().numpy(), rtol=1e-5, atol=1e-6)
    grads = prod.mul_scalar(2.0).add(cos.mul(cos)).sum().backward()
    (tprod * 2.0 + tcos * tcos).sum().backward()
    assert_close(a.grad(grads), ta.grad.numpy(), rtol=1e-5, atol=1e-5)
    assert_close(b.grad(grads), tb.grad.numpy(), rtol=1e-5, atol=1e-5)
    # Only the second output reaches the loss: the first one's gradient is zeros.
    ta.grad = tb.grad = None
    _, cos = SinCos.apply(a, b)
    grads = cos.sum().backward()
    t_sincos.apply(ta, tb)[1].sum().backward()
    assert_close(a.grad(grads), ta.grad.numpy(), rtol=1e-5, atol=1e-6)
    assert_close(b.grad(grads), np.zeros(5), atol=0)  # torch leaves it None: zeros


def test_double_backward_through_saved_inputs_and_outputs_matches_torch(ad, torch, rng):
    data = rng.uniform(-1.5, 1.5, size=(4,)).astype(np.float32)
    x, tx = _pair(ad, torch, data)
    y = Cube.apply(x, 2.0).add(Exp.apply(x))
    ty = 2.0 * tx**3 + tx.exp()
    (g,) = torch.autograd.grad(ty.sum(), tx, create_graph=True)
    (h,) = torch.autograd.grad((g * g).sum(), tx)
    first = x.grad(y.sum().backward(create_graph=True))
    assert first.is_require_grad() and first.device == ad
    assert_close(first, g.detach().numpy(), rtol=1e-5, atol=1e-5)
    second = x.grad(first.mul(first).sum().backward())
    assert_close(second, h.numpy(), rtol=1e-4, atol=1e-4)


def test_non_tensor_arguments_and_needs_input_grad(ad):
    seen = {}

    class Scale(Function):
        @staticmethod
        def forward(ctx, x, factor, c, name):
            seen["needs"] = ctx.needs_input_grad
            ctx.factor = factor
            assert not x.is_require_grad()  # forward's ops are not recorded
            return x.mul_scalar(factor).add(c)

        @staticmethod
        def backward(ctx, g):
            return g.mul_scalar(ctx.factor), None, g, None

    x = Tensor.from_floats([1.0, -2.0], device=ad).require_grad()
    c = Tensor.from_floats([0.5, 0.5], device=ad)  # a tensor that needs no gradient
    y = Scale.apply(x, 3.0, c, "scale")
    assert seen["needs"] == (True, False, False, False)
    grads = y.sum().backward()
    assert_close(x.grad(grads), [3.0, 3.0])
    assert c.grad(grads) is None


def test_mark_non_differentiable_and_materialize_grads(ad):
    received = []

    class MaxWithIndex(Function):
        @staticmethod
        def forward(ctx, x):
            values = x.max_dim(1)
            index = x.argmax(1)
            ctx.mark_non_differentiable(index)
            ctx.save_for_backward(x, index)
            return values, index

        @staticmethod
        def backward(ctx, g_values, g_index):
            received.append(g_index)
            x, index = ctx.saved_tensors
            return x.zeros_like().scatter(1, index, g_values)

    class Pair(Function):
        @staticmethod
        def forward(ctx, x):
            ctx.set_materialize_grads(False)
            return x.mul_scalar(2.0), x.mul_scalar(3.0)

        @staticmethod
        def backward(ctx, ga, gb):
            received.append(gb)
            return ga.mul_scalar(2.0)

    x = Tensor.from_floats([[1.0, 5.0, 2.0], [7.0, 0.0, 3.0]], device=ad).require_grad()
    values, index = MaxWithIndex.apply(x)
    assert not index.is_require_grad() and values.is_require_grad()
    assert index.tolist() == [[1], [0]]
    assert_close(x.grad(values.sum().backward()), [[0.0, 1.0, 0.0], [1.0, 0.0, 0.0]])
    assert received[0].dims() == [2, 1] and received[0].to_numpy().sum() == 0
    a, _ = Pair.apply(x)
    assert_close(x.grad(a.sum().backward()), np.full((2, 3), 2.0))
    assert received[1] is None


def test_retained_graph_runs_the_backward_twice(ad):
    x = Tensor.from_floats([1.0, 2.0], device=ad).require_grad()
    a, b = SinCos.apply(x, x)
    loss = a.add(b).sum()
    first = x.grad(loss.backward(retain_graph=True)).to_numpy()
    second = x.grad(loss.backward()).to_numpy()
    v = np.array([1.0, 2.0])
    expected = np.cos(v) * v + np.sin(v) - np.sin(v)
    np.testing.assert_allclose(first, expected, rtol=1e-5)
    np.testing.assert_allclose(second, first, rtol=0)


def test_balanced_checkpointing_and_plain_devices():
    x = Tensor.from_floats([0.5, -1.0], device=Device.flex().autodiff(Checkpointing.BALANCED)).require_grad()
    y = Cube.apply(x.mul_scalar(2.0), 1.0)  # the saved input is the output of a memory-bound op
    assert_close(x.grad(y.sum().backward()), 24.0 * np.array([0.5, -1.0]) ** 2, rtol=1e-6)
    plain = Tensor.from_floats([0.4, 1.6], device=Device.flex())
    assert RoundSte.apply(plain).tolist() == [0.0, 2.0]  # no autodiff: a plain call


def test_a_function_in_a_model_gives_parameter_gradients():
    from ember.nn import LinearConfig
    from ember.optim import GradientsParams

    ad = Device.flex().autodiff()
    linear = LinearConfig(3, 2).init(ad)
    x = Tensor.from_floats([[1.0, 2.0, 3.0]], device=ad)
    loss = ReverseGrad.apply(linear(x), 1.0).sum()
    grads = GradientsParams.from_grads(loss.backward(), linear)
    assert_close(grads.get(linear.weight.id), -np.repeat([[1.0], [2.0], [3.0]], 2, axis=1))


# ---------------------------------------------------------------------- errors
def test_a_wrong_backward_names_the_function_and_the_input(ad):
    class TooFew(Function):
        @staticmethod
        def forward(ctx, x, k):
            return x.mul_scalar(k)

        @staticmethod
        def backward(ctx, g):
            return g

    class WrongShape(Function):
        @staticmethod
        def forward(ctx, x, y):
            return x.add(y)

        @staticmethod
        def backward(ctx, g):
            return g, g.sum()

    class GradForConstant(Function):
        @staticmethod
        def forward(ctx, x, k):
            return x.mul_scalar(k)

        @staticmethod
        def backward(ctx, g):
            return g, g

    x = Tensor.from_floats([1.0, 2.0], device=ad).require_grad()
    y = Tensor.from_floats([3.0, 4.0], device=ad).require_grad()
    with pytest.raises(GraphError, match=r"TooFew: backward returned 1 gradient\(s\), but forward took 2"):
        TooFew.apply(x, 2.0).sum().backward()
    with pytest.raises(ShapeError, match=r"WrongShape: backward returned a gradient of shape \[1\] for input 1"):
        WrongShape.apply(x, y).sum().backward()
    with pytest.raises(
        GraphError, match=r"GradForConstant: backward returned a gradient for input 1, which is a float"
    ):
        GradForConstant.apply(x, 2.0).sum().backward()


def test_calling_forward_or_the_class_directly_points_to_apply():
    x = Tensor.from_floats([1.0], device=Device.flex().autodiff()).require_grad()
    with pytest.raises(GraphError, match=r"RoundSte.forward was called directly .* call RoundSte.apply"):
        RoundSte.forward(x)
    with pytest.raises(GraphError, match=r"call RoundSte.apply"):
        RoundSte(x)
    with pytest.raises(GraphError, match="must be a @staticmethod"):

        class NotStatic(Function):
            def forward(self, ctx, x):
                return x

    class NoBackward(Function):
        @staticmethod
        def forward(ctx, x):
            return x

    with pytest.raises(GraphError, match="NoBackward defines no backward"):
        NoBackward.apply(x)


def test_the_node_keeps_only_the_saved_values():
    import gc
    import weakref

    ad = Device.flex().autodiff()
    x = Tensor.from_data(np.ones((64, 64), np.float32), device=ad).require_grad()
    h = x.mul_scalar(2.0)  # its value is needed by nobody but RoundSte's input
    value = weakref.ref(h._primitive.inner)
    y = RoundSte.apply(h)
    del h
    gc.collect()
    assert value() is None
    assert_close(x.grad(y.sum().backward()), np.full((64, 64), 2.0))


def test_functions_under_the_func_transforms():
    from ember.func import grad, hessian_vector_product

    ad = Device.flex().autodiff()
    v = np.array([0.5, -1.0, 2.0])
    x = Tensor.from_data(v, device=ad)

    def f(x):
        return Cube.apply(x, 1.0).add(Exp.apply(x)).sum()

    assert_close(grad(f)(x), 3.0 * v**2 + np.exp(v), rtol=1e-12)
    assert_close(grad(lambda x: grad(f)(x).sum())(x), 6.0 * v + np.exp(v), rtol=1e-12)
    direction = Tensor.from_floats([1.0, 0.0, -1.0], device=ad, dtype="float64")
    hv = hessian_vector_product(f, x, direction)
    assert_close(hv, (6.0 * v + np.exp(v)) * [1.0, 0.0, -1.0], rtol=1e-12)
    leaf = x.require_grad()
    y = Cube.apply(leaf, 1.0)  # a hook on a Function's output
    y.register_hook(lambda g: g.mul_scalar(-1.0))
    assert_close(leaf.grad(y.sum().backward()), -3.0 * v**2, rtol=1e-12)


def test_setup_context_form_and_keyword_arguments(torch):
    class Mul(Function):  # PyTorch 2's form: forward without ctx, then setup_context
        @staticmethod
        def forward(a, b, *, scale=1.0):
            return a.mul(b).mul_scalar(scale)

        @staticmethod
        def setup_context(ctx, inputs, output):
            ctx.save_for_backward(*inputs)

        @staticmethod
        def backward(ctx, g):
            a, b = ctx.saved_tensors
            return g.mul(b), g.mul(a)

    class TMul(torch.autograd.Function):
        @staticmethod
        def forward(a, b, scale):
            return a * b * scale

        @staticmethod
        def setup_context(ctx, inputs, output):
            ctx.save_for_backward(*inputs[:2])

        @staticmethod
        def backward(ctx, g):
            a, b = ctx.saved_tensors
            return g * b, g * a, None

    ad = Device.flex().autodiff()
    a = Tensor.from_floats([1.0, 2.0], device=ad, dtype="float64").require_grad()
    b = Tensor.from_floats([3.0, -1.0], device=ad, dtype="float64").require_grad()
    ta = torch.tensor([1.0, 2.0], dtype=torch.float64, requires_grad=True)
    tb = torch.tensor([3.0, -1.0], dtype=torch.float64, requires_grad=True)
    grads = Mul.apply(a, b, scale=2.0).mul(a).sum().backward()  # the scale is not differentiated
    (TMul.apply(ta, tb, 2.0) * ta).sum().backward()  # the same (hand-written) backward
    assert_close(a.grad(grads), ta.grad.numpy())
    assert_close(b.grad(grads), tb.grad.numpy())
    assert_close(Mul.apply(a, b, scale=2.0), [6.0, -4.0])


def test_tracked_inputs_on_two_devices_are_refused():
    from ember.errors import DeviceError

    a = Tensor.from_floats([1.0], device=Device.flex().autodiff()).require_grad()
    b = Tensor.from_floats([1.0], device=Device.flex().fusion().autodiff()).require_grad()
    with pytest.raises(DeviceError, match=r"SinCos.apply: input 1 lives on .*move the inputs to one autodiff device"):
        SinCos.apply(a, b)


def test_once_differentiable_runs_once_and_refuses_a_double_backward():
    from ember.autograd import once_differentiable

    class NumpyCube(Function):  # a backward through numpy: not differentiable again
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x.powi_scalar(3)

        @staticmethod
        @once_differentiable
        def backward(ctx, g):
            (x,) = ctx.saved_tensors
            local = Tensor.from_data(3.0 * x.to_numpy() ** 2, device=g.device)
            return g.mul(local)

    ad = Device.flex().autodiff()
    x = Tensor.from_floats([1.0, 2.0], device=ad).require_grad()
    assert_close(x.grad(NumpyCube.apply(x).sum().backward()), [3.0, 12.0])
    g = x.grad(NumpyCube.apply(x).sum().backward(create_graph=True))
    assert_close(g, [3.0, 12.0])
    with pytest.raises(GraphError, match="NumpyCube.backward is once_differentiable"):
        g.sum().backward()


def test_a_ctx_attribute_never_set_is_named():
    class Forgets(Function):
        @staticmethod
        def forward(ctx, x):
            return x

        @staticmethod
        def backward(ctx, g):
            return g.mul_scalar(ctx.scale)

    x = Tensor.from_floats([1.0], device=Device.flex().autodiff()).require_grad()
    with pytest.raises(AttributeError, match=r"Forgets: ctx has no attribute 'scale'; set it in forward"):
        Forgets.apply(x).sum().backward()
