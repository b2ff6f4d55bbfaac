"""Vision transforms against numpy oracles, and (seed, epoch, index) augmentation."""

from __future__ import annotations

import numpy as np
import pytest

from ember import Device
from ember.data import DataLoaderBuilder, FnBatcher, InMemDataset, TransformDataset
from ember.data.vision.transforms import (
    CenterCrop,
    ColorJitter,
    Compose,
    Normalize,
    RandAugment,
    RandomCrop,
    RandomHorizontalFlip,
    RandomResizedCrop,
    Resize,
    ToCHW,
)
from ember.data.vision.transforms.augment import translate
from ember.data.vision.transforms.geometry import pad
from ember.errors import ConfigError


def image(h=6, w=7, c=3, seed=0):
    return np.random.default_rng(seed).integers(0, 256, (h, w, c)).astype(np.uint8)


def rng(seed=0):
    return np.random.default_rng(seed)


def test_center_crop_geometry():
    x = image(6, 7)
    # torchvision's centre: int(round((size - crop) / 2)), Python's rounding
    np.testing.assert_array_equal(CenterCrop(3)(x), x[2:5, 2:5])
    np.testing.assert_array_equal(CenterCrop((4, 2))(x), x[1:5, 2:4])
    big = CenterCrop(8)(x)  # padded with zeros around
    assert big.shape == (8, 8, 3) and big[0].sum() == 0
    np.testing.assert_array_equal(big[1:7, 0:7], x)


@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.uint8, np.int16])
def test_constant_padding_is_numpys(dtype):
    # pad writes a constant border itself (np.pad is slow on small images): np.pad is the oracle.
    x = (np.random.default_rng(0).random((5, 7, 3)) * 200).astype(dtype)
    for image_ in (x, x[:, :, 0], x[:1, :1, 0]):
        for fill in (0, 3, 2.7, -1.5, 300, np.float32(1.25)):
            for left, top, right, bottom in ((1, 1, 1, 1), (0, 2, 3, 0), (0, 0, 0, 0)):
                widths = [(top, bottom), (left, right)] + [(0, 0)] * (image_.ndim - 2)
                with np.errstate(invalid="ignore", over="ignore"):
                    want = np.pad(image_, widths, constant_values=fill)
                    got = pad(image_, left, top, right, bottom, fill=fill)
                assert got.dtype == want.dtype and got.shape == want.shape
                assert got.tobytes() == want.tobytes(), (fill, left, top, right, bottom)


def test_random_crop_is_a_window_of_the_padded_image():
    x = image(5, 5)
    padded = np.pad(x, [(2, 2), (2, 2), (0, 0)])
    seen = set()
    for s in range(40):
        out = RandomCrop(5, padding=2)(x, rng(s))
        windows = [
            (t, left) for t in range(5) for left in range(5) if np.array_equal(padded[t : t + 5, left : left + 5], out)
        ]
        assert windows, s
        seen.add(windows[0])
    assert len(seen) > 10  # positions vary
    reflect = RandomCrop(5, padding=(1, 2), padding_mode="reflect")(x, rng(0))
    assert reflect.shape == (5, 5, 3)
    assert RandomCrop(8, pad_if_needed=True)(x, rng(0)).shape == (8, 8, 3)
    with pytest.raises(ConfigError):
        RandomCrop(8)(x, rng(0))


def test_flip():
    x = image()
    np.testing.assert_array_equal(RandomHorizontalFlip(p=1.0)(x), x[:, ::-1])
    np.testing.assert_array_equal(RandomHorizontalFlip(p=0.0)(x), x)
    flips = [np.array_equal(RandomHorizontalFlip()(x, rng(s)), x[:, ::-1]) for s in range(200)]
    assert 60 < sum(flips) < 140


def bilinear_oracle(x, out_h, out_w):
    """Half-pixel bilinear, source clamped at the borders, one loop per pixel (float64)."""
    h, w = x.shape[:2]
    out = np.zeros((out_h, out_w) + x.shape[2:])
    for i in range(out_h):
        sy = min(max((i + 0.5) * h / out_h - 0.5, 0), h - 1)
        y0 = int(np.floor(sy))
        y1, fy = min(y0 + 1, h - 1), sy - y0
        for j in range(out_w):
            sx = min(max((j + 0.5) * w / out_w - 0.5, 0), w - 1)
            x0 = int(np.floor(sx))
            x1, fx = min(x0 + 1, w - 1), sx - x0
            top = (1 - fx) * x[y0, x0] + fx * x[y0, x1]
            bottom = (1 - fx) * x[y1, x0] + fx * x[y1, x1]
            out[i, j] = (1 - fy) * top + fy * bottom
    return out


def test_resize_bilinear_upsampling_against_numpy():
    x = np.random.default_rng(1).random((5, 4, 2))
    np.testing.assert_allclose(Resize((9, 11))(x), bilinear_oracle(x, 9, 11), atol=1e-12)
    # shrinking without antialias is plain bilinear too
    np.testing.assert_allclose(Resize((3, 2), antialias=False)(x), bilinear_oracle(x, 3, 2), atol=1e-12)


def test_resize_antialias_matches_pillow_float_images():
    Image = pytest.importorskip("PIL.Image")
    x = np.random.default_rng(2).random((17, 13)).astype(np.float32)
    for size in [(5, 4), (8, 6), (17, 26)]:
        expected = np.asarray(Image.fromarray(x, mode="F").resize((size[1], size[0]), Image.BILINEAR))
        np.testing.assert_allclose(Resize(size)(x), expected, atol=2e-5)


def test_resize_size_rules_and_dtypes():
    x = image(6, 9)
    assert Resize(4)(x).shape == (4, 6, 3)  # shorter edge, aspect kept
    assert Resize(4, max_size=5)(x).shape == (3, 5, 3)
    assert Resize(4)(x).dtype == np.uint8
    np.testing.assert_array_equal(Resize((12, 18), interpolation="nearest")(x), x.repeat(2, 0).repeat(2, 1))
    const = np.full((7, 5, 3), 0.3)
    np.testing.assert_allclose(Resize((3, 11))(const), 0.3)


def test_random_resized_crop_is_a_resized_window():
    x = np.random.default_rng(3).random((20, 30, 3))
    t = RandomResizedCrop(8, scale=(0.2, 0.6))
    for s in range(10):
        top, left, h, w = t.params(20, 30, rng(s))
        assert 0.2 * 600 * 0.8 <= h * w <= 0.6 * 600 * 1.2 and 0 <= top <= 20 - h and 0 <= left <= 30 - w
        out = t(x, rng(s))
        np.testing.assert_allclose(out, Resize((8, 8))(x[top : top + h, left : left + w]))
    # no crop fits the ratio: the central crop with the ratio clamped
    assert RandomResizedCrop(4, scale=(2.0, 3.0), ratio=(1.0, 1.0)).params(10, 20, rng(0)) == (0, 5, 10, 10)


def test_to_chw_and_normalize_against_float64():
    x = image(4, 5)
    chw = ToCHW()(x)
    assert chw.dtype == np.float32 and chw.shape == (3, 4, 5)
    np.testing.assert_allclose(chw, x.transpose(2, 0, 1) / 255.0, rtol=1e-6)
    mean, std = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]
    out = Normalize(mean, std)(chw)
    expected = (chw.astype(np.float64) - np.array(mean)[:, None, None]) / np.array(std)[:, None, None]
    assert out.dtype == np.float32
    np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-6)
    with pytest.raises(ConfigError):
        Normalize(mean, std)(x.astype(np.float32))  # HWC with 5 "channels"


def test_color_jitter():
    x = image(4, 4)
    f = 1.3
    np.testing.assert_array_equal(
        ColorJitter(brightness=(f, f))(x, rng(0)), np.clip(np.rint(x * np.float32(f)), 0, 255).astype(np.uint8)
    )
    xf = x / 255.0
    gray_mean = (0.2989 * xf[..., 0] + 0.587 * xf[..., 1] + 0.114 * xf[..., 2]).mean()
    np.testing.assert_allclose(
        ColorJitter(contrast=(0.5, 0.5))(xf, rng(0)), np.clip(0.5 * xf + 0.5 * gray_mean, 0, 1), atol=1e-6
    )
    gray = (0.2989 * xf[..., 0] + 0.587 * xf[..., 1] + 0.114 * xf[..., 2])[..., None]
    np.testing.assert_allclose(ColorJitter(saturation=(0.0, 0.0))(xf, rng(0)), np.repeat(gray, 3, -1), atol=1e-6)
    np.testing.assert_allclose(ColorJitter(hue=(0.0, 0.0))(xf, rng(0)), xf, atol=1e-6)  # HSV round trip
    # a hue turn of 1/3 maps pure red to pure green
    red = np.zeros((1, 1, 3))
    red[..., 0] = 1.0
    np.testing.assert_allclose(ColorJitter(hue=(1 / 3, 1 / 3))(red, rng(0)), [[[0.0, 1.0, 0.0]]], atol=1e-6)
    out = ColorJitter(0.4, 0.4, 0.4, 0.1)(x, rng(1))
    assert out.shape == x.shape and out.dtype == np.uint8


def test_rand_augment_ops():
    x = image(6, 6)
    np.testing.assert_array_equal(translate(x, 1, -2)[1:, :4], x[:5, 2:])
    assert translate(x, 1, -2)[0].sum() == 0
    np.testing.assert_array_equal(RandAugment(ops=["Identity"])(x, rng(0)), x)
    np.testing.assert_array_equal(RandAugment(num_ops=1, ops=["HorizontalFlip"])(x, rng(0)), x[:, ::-1])
    rot = RandAugment(num_ops=1, ops=["Rotate90"])(x, rng(0))
    assert any(np.array_equal(rot, np.rot90(x, k)) for k in (1, 2, 3))
    out = RandAugment()(x, rng(5))
    assert out.shape == x.shape and out.dtype == np.uint8
    with pytest.raises(ConfigError):
        RandAugment(ops=["Solarize"])


def test_pil_input():
    Image = pytest.importorskip("PIL.Image")
    x = image(6, 8)
    pil = Image.fromarray(x)
    np.testing.assert_array_equal(CenterCrop(4)(pil), CenterCrop(4)(x))
    np.testing.assert_array_equal(
        Compose([RandomCrop(4, padding=1), ToCHW()])(pil, rng(3)),
        Compose([RandomCrop(4, padding=1), ToCHW()])(x, rng(3)),
    )
    assert CenterCrop(2)(Image.fromarray(x[..., 0])).shape == (2, 2)  # mode L stays HW


AUGMENT = Compose([RandomCrop(6, padding=2), RandomHorizontalFlip(), ColorJitter(brightness=0.5)])


def augmented_epochs(workers, epochs=2):
    items = InMemDataset([(image(6, 6, seed=i), i) for i in range(10)])
    data = TransformDataset(items, AUGMENT, seed=3)
    loader = (
        DataLoaderBuilder(FnBatcher(lambda batch, device: [x for x, _ in batch]))
        .batch_size(3)
        .shuffle(1)
        .num_workers(workers)
        .set_device(Device.flex())
        .build(data)
    )
    out = []
    for epoch in range(epochs):
        order = loader.order(epoch)
        batches = [x for batch in loader.iter(epoch) for x in batch]
        out.append({int(i): x for i, x in zip(order, batches)})
    return out, data


def test_draws_depend_on_seed_epoch_index_only():
    serial, data = augmented_epochs(0)
    threaded, _ = augmented_epochs(2)
    for a, b in zip(serial, threaded):
        for index in a:
            np.testing.assert_array_equal(a[index], b[index])
    # and equal reading outside a loader with set_epoch
    for epoch in (0, 1):
        data.set_epoch(epoch)
        for index in range(10):
            np.testing.assert_array_equal(data[index][0], serial[epoch][index])
    # different epochs draw differently
    assert sum(not np.array_equal(serial[0][i], serial[1][i]) for i in range(10)) >= 8


def test_transform_dataset_item_kinds():
    from ember.data import MnistItem

    add = lambda x, r: x + 1  # noqa: E731
    assert TransformDataset(InMemDataset([(1, "a")]), add)[0] == (2, "a")
    assert TransformDataset(InMemDataset([[1, "a"]]), add)[0] == [2, "a"]
    assert TransformDataset(InMemDataset([MnistItem(np.zeros(2), 3)]), add)[0].image.tolist() == [1, 1]
    assert TransformDataset(InMemDataset([(1, 2)]), lambda item, r: item[::-1], whole_item=True)[0] == (2, 1)
    assert TransformDataset(InMemDataset([1]), add).get(5) is None
    with pytest.raises(ConfigError):
        TransformDataset(InMemDataset([1]), 3)
