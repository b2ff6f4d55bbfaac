"""The functional module ops (ember.tensor.layer_ops) on every device: values and
gradients against PyTorch, gradients by finite differences (float64), and the
errors for bad calls."""

from __future__ import annotations

import numpy as np
import pytest

from ember import Device, Tensor
from ember.errors import DeviceError, DTypeError, ShapeError, ValueRangeError
from ember.tensor import layer_ops as F
from tests.autodiff.gradcheck import check_grad
from tests.conftest import assert_close, import_torch
from tests.nn.parity import autodiff_of, leaf, rand, to_torch, weighted_backward


def _torch_padded(torch, x, padding):
    """A torch leaf for ``x`` and the tensor to convolve: explicit pairs are applied
    with F.pad, other paddings are left to the op."""
    leaf_t = to_torch(x, True)
    if isinstance(padding, tuple) and padding and isinstance(padding[0], tuple):
        flat = [p for pair in reversed(padding) for p in pair]
        return leaf_t, torch.nn.functional.pad(leaf_t, flat), 0
    return leaf_t, leaf_t, padding


CONV2D = [
    dict(stride=1, padding=0, dilation=1, groups=1),
    dict(stride=(2, 1), padding=(1, 2), dilation=(1, 2), groups=2),
    dict(stride=2, padding=((1, 0), (2, 1)), dilation=2, groups=1),
    dict(stride=1, padding="same", dilation=(2, 1), groups=2),
]


@pytest.mark.torch
@pytest.mark.filterwarnings("ignore:Using padding='same'")
@pytest.mark.parametrize("kwargs", CONV2D, ids=["plain", "stride-pad-dilation-groups", "asymmetric", "same"])
def test_conv2d_matches_torch_with_gradients(device, kwargs, rng):
    torch = import_torch()
    x, w, b = rand(rng, 2, 4, 7, 9), rand(rng, 6, 4 // kwargs["groups"], 3, 2), rand(rng, 6)
    tx, tin, tpad = _torch_padded(torch, x, kwargs["padding"])
    tw, tb = to_torch(w, True), to_torch(b, True)
    ref = torch.nn.functional.conv2d(tin, tw, tb, kwargs["stride"], tpad, kwargs["dilation"], kwargs["groups"])
    tensors = [Tensor.from_data(a, device=device) for a in (x, w, b)]
    assert_close(F.conv2d(*tensors, **kwargs), ref.detach().numpy(), rtol=1e-4, atol=1e-4)
    ad = autodiff_of(device)
    ex, ew, eb = leaf(x, ad), leaf(w, ad), leaf(b, ad)
    grads = weighted_backward(F.conv2d(ex, ew, eb, **kwargs), ref)
    for ours, theirs in ((ex, tx), (ew, tw), (eb, tb)):
        assert_close(ours.grad(grads), theirs.grad.numpy(), rtol=1e-4, atol=1e-4)


@pytest.mark.torch
@pytest.mark.parametrize(
    "kwargs",
    [
        dict(stride=1, padding=0, dilation=1, groups=1),
        dict(stride=3, padding=2, dilation=2, groups=3),
        dict(stride=2, padding=((2, 1),), dilation=1, groups=1),
    ],
    ids=["plain", "stride-pad-dilation-groups", "asymmetric"],
)
def test_conv1d_matches_torch_with_gradients(device, kwargs, rng):
    torch = import_torch()
    x, w, b = rand(rng, 2, 3, 11), rand(rng, 6, 3 // kwargs["groups"], 4), rand(rng, 6)
    tx, tin, tpad = _torch_padded(torch, x, kwargs["padding"])
    tw, tb = to_torch(w, True), to_torch(b, True)
    ref = torch.nn.functional.conv1d(tin, tw, tb, kwargs["stride"], tpad, kwargs["dilation"], kwargs["groups"])
    tensors = [Tensor.from_data(a, device=device) for a in (x, w, b)]
    assert_close(F.conv1d(*tensors, **kwargs), ref.detach().numpy(), rtol=1e-4, atol=1e-4)
    ad = autodiff_of(device)
    ex, ew, eb = leaf(x, ad), leaf(w, ad), leaf(b, ad)
    grads = weighted_backward(F.conv1d(ex, ew, eb, **kwargs), ref)
    for ours, theirs in ((ex, tx), (ew, tw), (eb, tb)):
        assert_close(ours.grad(grads), theirs.grad.numpy(), rtol=1e-4, atol=1e-4)


CONV_T = [
    (2, dict(stride=(2, 3), padding=(1, 0), output_padding=(1, 2), dilation=1, groups=2)),
    (2, dict(stride=1, padding=1, output_padding=0, dilation=2, groups=1)),
    (2, dict(stride=(3, 2), padding=(0, 1), output_padding=(2, 1), dilation=(2, 1), groups=1)),
    (1, dict(stride=2, padding=2, output_padding=1, dilation=3, groups=2)),
]


@pytest.mark.torch
@pytest.mark.parametrize("rank,kwargs", CONV_T, ids=["2d-groups", "2d-dilation", "2d-mixed", "1d"])
def test_conv_transpose_matches_torch_with_gradients(device, rank, kwargs, rng):
    torch = import_torch()
    groups = kwargs["groups"]
    spatial = (5, 6) if rank == 2 else (7,)
    kernel = (3, 2) if rank == 2 else (3,)
    x, w, b = rand(rng, 2, 4, *spatial), rand(rng, 4, 6 // groups, *kernel), rand(rng, 6)
    tx, tw, tb = to_torch(x, True), to_torch(w, True), to_torch(b, True)
    t_fn = torch.nn.functional.conv_transpose2d if rank == 2 else torch.nn.functional.conv_transpose1d
    ref = t_fn(tx, tw, tb, kwargs["stride"], kwargs["padding"], kwargs["output_padding"], groups, kwargs["dilation"])
    fn = F.conv_transpose2d if rank == 2 else F.conv_transpose1d
    tensors = [Tensor.from_data(a, device=device) for a in (x, w, b)]
    assert_close(fn(*tensors, **kwargs), ref.detach().numpy(), rtol=1e-4, atol=1e-4)
    ad = autodiff_of(device)
    ex, ew, eb = leaf(x, ad), leaf(w, ad), leaf(b, ad)
    grads = weighted_backward(fn(ex, ew, eb, **kwargs), ref)
    for ours, theirs in ((ex, tx), (ew, tw), (eb, tb)):
        assert_close(ours.grad(grads), theirs.grad.numpy(), rtol=1e-4, atol=1e-4)


@pytest.mark.torch
@pytest.mark.parametrize(
    "kwargs",
    [
        dict(kernel_size=2),
        dict(kernel_size=(3, 2), stride=(2, 1), padding=1, dilation=(1, 2), ceil_mode=True),
        dict(kernel_size=3, stride=2, padding=(1, 0), ceil_mode=False),
    ],
    ids=["2x2", "mixed-ceil", "padded"],
)
def test_max_pool2d_matches_torch_with_gradients(device, kwargs, rng):
    torch = import_torch()
    x = rand(rng, 2, 3, 7, 8)
    tx = to_torch(x, True)
    ref, ref_idx = torch.nn.functional.max_pool2d(tx, return_indices=True, **kwargs)
    out, idx = F.max_pool2d_with_indices(Tensor.from_data(x, device=device), **kwargs)
    assert_close(out, ref.detach().numpy(), rtol=0, atol=0)
    np.testing.assert_array_equal(idx.to_numpy(), ref_idx.numpy())
    assert_close(F.max_pool2d(Tensor.from_data(x, device=device), **kwargs), ref.detach().numpy(), rtol=0, atol=0)
    ex = leaf(x, autodiff_of(device))
    grads = weighted_backward(F.max_pool2d(ex, **kwargs), ref)
    assert_close(ex.grad(grads), tx.grad.numpy(), rtol=1e-5, atol=1e-6)


@pytest.mark.torch
@pytest.mark.parametrize(
    "kwargs",
    [
        dict(kernel_size=3, stride=2, padding=1, count_include_pad=False, ceil_mode=True),
        dict(kernel_size=(2, 3), stride=1, padding=(1, 1), count_include_pad=True),
    ],
    ids=["exclude-pad-ceil", "include-pad"],
)
def test_avg_pool2d_matches_torch_with_gradients(device, kwargs, rng):
    torch = import_torch()
    x = rand(rng, 2, 3, 7, 6)
    tx = to_torch(x, True)
    ref = torch.nn.functional.avg_pool2d(tx, **kwargs)
    assert_close(F.avg_pool2d(Tensor.from_data(x, device=device), **kwargs), ref.detach().numpy(), rtol=1e-5, atol=1e-6)
    ex = leaf(x, autodiff_of(device))
    grads = weighted_backward(F.avg_pool2d(ex, **kwargs), ref)
    assert_close(ex.grad(grads), tx.grad.numpy(), rtol=1e-5, atol=1e-6)


@pytest.mark.torch
def test_pool1d_and_adaptive_pools_match_torch(device, rng):
    torch = import_torch()
    x1, x2 = rand(rng, 2, 3, 11), rand(rng, 2, 3, 7, 9)
    nnf = torch.nn.functional
    cases = [
        (
            F.max_pool1d(Tensor.from_data(x1, device=device), 3, 2, 1, 2, True),
            nnf.max_pool1d(to_torch(x1), 3, 2, 1, 2, True),
        ),
        (
            F.avg_pool1d(Tensor.from_data(x1, device=device), 4, 3, 2, False, True),
            nnf.avg_pool1d(to_torch(x1), 4, 3, 2, True, False),
        ),
        (F.adaptive_avg_pool1d(Tensor.from_data(x1, device=device), 4), nnf.adaptive_avg_pool1d(to_torch(x1), 4)),
        (
            F.adaptive_avg_pool2d(Tensor.from_data(x2, device=device), (3, 4)),
            nnf.adaptive_avg_pool2d(to_torch(x2), (3, 4)),
        ),
        (F.adaptive_avg_pool2d(Tensor.from_data(x2[0], device=device), 1), nnf.adaptive_avg_pool2d(to_torch(x2[0]), 1)),
    ]
    for ours, theirs in cases:
        assert_close(ours, theirs.numpy(), rtol=1e-5, atol=1e-6)


def test_unbatched_input_and_same_padding_keep_the_size(device, rng):
    x = Tensor.from_data(rand(rng, 3, 9, 10), device=device)
    w = Tensor.from_data(rand(rng, 5, 3, 4, 3), device=device)
    assert F.conv2d(x, w, padding="same").dims() == [5, 9, 10]
    assert F.conv2d(x, w, stride=2, padding="same").dims() == [5, 5, 5]  # ceil(size / stride)
    assert F.max_pool2d(x, 2, 1, padding="same").dims() == [3, 9, 10]
    assert F.conv2d(x, w, padding="valid").dims() == [5, 6, 8]


@pytest.mark.torch
@pytest.mark.filterwarnings("ignore:Using padding='same'")
def test_same_padding_matches_torch_even_kernel(rng):
    torch = import_torch()
    x, w = rand(rng, 1, 2, 6, 7), rand(rng, 3, 2, 4, 2)
    ref = torch.nn.functional.conv2d(to_torch(x), to_torch(w), padding="same", dilation=(1, 2))
    assert_close(
        F.conv2d(Tensor.from_data(x), Tensor.from_data(w), padding="same", dilation=(1, 2)),
        ref.numpy(),
        rtol=1e-4,
        atol=1e-5,
    )


# ---------------------------------------------------------------------- finite differences
AD = Device.flex().autodiff()


def _f64(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape)


@pytest.mark.parametrize(
    "kwargs", [dict(stride=(2, 1), padding=((1, 0), (0, 1)), dilation=(1, 2), groups=2), dict(padding="same")]
)
def test_conv2d_gradcheck(kwargs):
    check_grad(
        lambda x, w, b: F.conv2d(x, w, b, **kwargs),
        [_f64(2, 4, 5, 5), _f64(4, 4 // kwargs.get("groups", 1), 3, 2, seed=1), _f64(4, seed=2)],
    )


def test_conv_transpose_gradcheck():
    check_grad(
        lambda x, w, b: F.conv_transpose2d(
            x, w, b, stride=(2, 1), padding=(1, 0), output_padding=(1, 0), dilation=(1, 2), groups=2
        ),
        [_f64(1, 4, 3, 3), _f64(4, 1, 2, 3, seed=1), _f64(2, seed=2)],
    )
    check_grad(lambda x, w: F.conv_transpose1d(x, w, stride=3, padding=1), [_f64(2, 2, 4), _f64(2, 3, 3, seed=1)])


def test_pool_gradchecks():
    x = _f64(2, 2, 5, 6)
    check_grad(lambda t: F.max_pool2d(t, 3, (2, 1), padding=1, ceil_mode=True), [x])
    check_grad(lambda t: F.avg_pool2d(t, (2, 3), 2, padding=1, count_include_pad=False, ceil_mode=True), [x])
    check_grad(lambda t: F.adaptive_avg_pool2d(t, (3, 4)), [x])
    check_grad(lambda t: F.avg_pool1d(t, 3, 2, 1), [_f64(2, 3, 7)])


def test_embedding_gradcheck_accumulates_repeated_rows():
    indices = Tensor.from_ints([[0, 2, 2], [4, 0, 1]], device=AD)
    check_grad(lambda w: F.embedding(w, indices), [_f64(5, 3)])


# ---------------------------------------------------------------------- dropout
def test_dropout_scales_kept_values_and_is_seeded():
    device = Device.flex()
    x = Tensor.ones([200, 50], device=device)
    device.seed(3)
    a = F.dropout(x, 0.3).to_numpy()
    device.seed(3)
    b = F.dropout(x, 0.3).to_numpy()
    np.testing.assert_array_equal(a, b)
    np.testing.assert_allclose(np.unique(a), [0.0, 1 / 0.7], rtol=1e-6)
    assert abs((a == 0).mean() - 0.3) < 0.02
    assert F.dropout(x, 0.3, training=False) is x
    assert F.dropout(x, 1.0).to_numpy().sum() == 0.0


def test_dropout_gradient_is_the_mask(rng):
    device = AD
    device.seed(0)
    x = Tensor.from_data(rand(rng, 30, 20), device=device).require_grad()
    out = F.dropout(x, 0.5)
    grads = out.sum().backward()
    kept = out.to_numpy() != 0
    np.testing.assert_allclose(x.grad(grads).to_numpy(), np.where(kept, 2.0, 0.0))


# ---------------------------------------------------------------------- errors
def test_conv_errors_name_the_op_and_the_fix():
    x = Tensor.zeros([1, 4, 5, 5])
    with pytest.raises(ShapeError, match=r"ember: conv2d: .*kernel \[7, 7\].* larger than the padded input"):
        F.conv2d(x, Tensor.zeros([2, 4, 7, 7]), padding=(1, 0))
    with pytest.raises(ShapeError, match="divisible by groups=3"):
        F.conv2d(x, Tensor.zeros([6, 2, 3, 3]), groups=3)
    with pytest.raises(ShapeError, match="the input has 4 channels but the weight"):
        F.conv2d(x, Tensor.zeros([2, 3, 3, 3]))
    with pytest.raises(ShapeError, match="rank 4"):
        F.conv2d(Tensor.zeros([5, 5]), Tensor.zeros([2, 4, 3, 3]))
    with pytest.raises(ValueRangeError, match="padding must be 'valid', 'same'"):
        F.conv2d(x, Tensor.zeros([2, 4, 3, 3]), padding="full")
    with pytest.raises(ValueRangeError, match="padding must be >= 0"):
        F.conv2d(x, Tensor.zeros([2, 4, 3, 3]), padding=-1)
    with pytest.raises(ValueRangeError, match="stride must be an int or 2 ints"):
        F.conv2d(x, Tensor.zeros([2, 4, 3, 3]), stride=(1, 1, 1))
    with pytest.raises(ValueRangeError, match="stride must be >= 1"):
        F.conv2d(x, Tensor.zeros([2, 4, 3, 3]), stride=0)
    with pytest.raises(ShapeError, match=r"bias must have shape \[2\]"):
        F.conv2d(x, Tensor.zeros([2, 4, 3, 3]), Tensor.zeros([3]))
    with pytest.raises(DTypeError, match="float tensor"):
        F.conv2d(Tensor.zeros([1, 4, 5, 5], dtype="int64"), Tensor.zeros([2, 4, 3, 3]))
    with pytest.raises(DeviceError, match="different devices"):
        F.conv2d(x, Tensor.zeros([2, 4, 3, 3], device=Device.flex().autodiff()))


def test_conv_transpose_and_pool_errors():
    x = Tensor.zeros([1, 2, 4, 4])
    with pytest.raises(ValueRangeError, match="output_padding .* must be smaller than the stride"):
        F.conv_transpose2d(x, Tensor.zeros([2, 1, 3, 3]), stride=2, output_padding=2)
    with pytest.raises(ShapeError, match="the input has 2 channels but the weight"):
        F.conv_transpose2d(x, Tensor.zeros([3, 1, 3, 3]))
    with pytest.raises(ValueRangeError, match="padding must be an int"):
        F.conv_transpose2d(x, Tensor.zeros([2, 1, 3, 3]), padding="same")
    with pytest.raises(ShapeError, match="removes the whole output"):
        F.conv_transpose2d(x, Tensor.zeros([2, 1, 1, 1]), padding=3)
    with pytest.raises(ShapeError, match=r"max_pool2d: the kernel \[5, 5\].* larger than the padded input"):
        F.max_pool2d(x, 5)
    with pytest.raises(ValueRangeError, match="at most half the kernel"):
        F.max_pool2d(x, 2, padding=2)
    with pytest.raises(ValueRangeError, match="output_size must be >= 1"):
        F.adaptive_avg_pool2d(x, 0)
    with pytest.raises(DTypeError, match="indices must be an int tensor"):
        F.embedding(Tensor.zeros([3, 2]), Tensor.zeros([2]))
    with pytest.raises(ShapeError, match="rank 2"):
        F.embedding(Tensor.zeros([3]), Tensor.from_ints([0]))
    with pytest.raises(ValueRangeError, match=r"prob must lie in \[0, 1\]"):
        F.dropout(x, 1.5)


def test_embedding_out_of_range_raises():
    from ember.errors import IndexOutOfBoundsError

    with pytest.raises(IndexOutOfBoundsError, match="index 3 is out of bounds"):
        F.embedding(Tensor.zeros([3, 2]), Tensor.from_ints([0, 3]))


def test_gradients_are_the_same_under_balanced_checkpointing():
    from ember.backend.autodiff import Checkpointing

    x, w1, w2 = _f64(2, 2, 9, 9), _f64(4, 2, 3, 3, seed=1), _f64(3, 4, 2, 2, seed=2)

    def grads_on(device):
        tensors = [Tensor.from_data(a, device=device).require_grad() for a in (x, w1, w2)]
        h = F.conv2d(tensors[0].mul_scalar(2.0), tensors[1], padding=1).clamp_min(0.0)
        h = F.max_pool2d(h.add_scalar(1.0), 2, 1)
        out = F.avg_pool2d(F.conv_transpose2d(h.tanh(), tensors[2].swap_dims(0, 1), stride=2), 2)
        grads = out.sum().backward()
        return [t.grad(grads).to_numpy() for t in tensors]

    plain = grads_on(Device.flex().autodiff())
    balanced = grads_on(Device.flex().autodiff(Checkpointing.BALANCED))
    for a, b in zip(plain, balanced):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12)
