"""MNIST from IDX files the tests write, IDX errors, and image folders."""

from __future__ import annotations

import gzip

import numpy as np
import pytest

from ember.data import ImageFolderDataset, MnistDataset, read_idx, write_idx
from ember.errors import ConfigError, RecordError


@pytest.mark.parametrize("dtype", [np.uint8, np.int8, np.int16, np.int32, np.float32, np.float64])
@pytest.mark.parametrize("suffix", ["", ".gz"])
def test_idx_round_trip(tmp_path, dtype, suffix):
    array = (np.arange(24).reshape(2, 3, 4) - 5).astype(dtype)
    path = tmp_path / f"a.idx{suffix}"
    write_idx(path, array)
    back = read_idx(path)
    assert back.dtype == np.dtype(dtype) and back.shape == (2, 3, 4)
    np.testing.assert_array_equal(back, array)


def test_idx_header_layout(tmp_path):
    """The bytes MNIST's page specifies: 0x00000803 then the dims, big-endian."""
    path = tmp_path / "x-idx3-ubyte"
    write_idx(path, np.zeros((2, 28, 28), np.uint8))
    raw = path.read_bytes()
    assert raw[:4] == bytes([0, 0, 8, 3]) and raw[4:16] == bytes([0, 0, 0, 2, 0, 0, 0, 28, 0, 0, 0, 28])
    assert len(raw) == 16 + 2 * 28 * 28


def test_idx_errors(tmp_path):
    bad = tmp_path / "bad"
    bad.write_bytes(b"\x12\x34\x08\x01")
    with pytest.raises(RecordError, match="not an IDX file"):
        read_idx(bad)
    short = tmp_path / "short"
    write_idx(short, np.zeros((10, 4), np.uint8))
    short.write_bytes(short.read_bytes()[:-5])
    with pytest.raises(RecordError, match="truncated or corrupt"):
        read_idx(short)
    with pytest.raises(RecordError, match="cannot read"):
        read_idx(tmp_path / "missing")


def write_mnist(root, n_train=12, n_test=5, gz=False):
    rng = np.random.default_rng(0)
    suffix = ".gz" if gz else ""
    data = {}
    for split, n in (("train", n_train), ("t10k", n_test)):
        images = rng.integers(0, 256, size=(n, 28, 28), dtype=np.uint8)
        labels = rng.integers(0, 10, size=n, dtype=np.uint8)
        write_idx(root / f"{split}-images-idx3-ubyte{suffix}", images)
        write_idx(root / f"{split}-labels-idx1-ubyte{suffix}", labels)
        data[split] = (images, labels)
    return data


@pytest.mark.parametrize("gz", [False, True])
def test_mnist_reads_idx_files(tmp_path, gz):
    data = write_mnist(tmp_path, gz=gz)
    train, test = MnistDataset.train(tmp_path), MnistDataset.test(tmp_path)
    assert len(train) == 12 and len(test) == 5
    item = train.get(3)
    assert item.image.dtype == np.float32 and item.image.shape == (28, 28)
    np.testing.assert_array_equal(item.image, data["train"][0][3])
    assert item.label == int(data["train"][1][3]) and isinstance(item.label, int)
    assert test.get(5) is None


def test_mnist_missing_files_say_what_to_do(tmp_path):
    with pytest.raises(RecordError, match=r"cannot find train-images-idx3-ubyte.*download the MNIST IDX files"):
        MnistDataset.train(tmp_path)
    with pytest.raises(ConfigError, match="split must be 'train' or 'test'"):
        MnistDataset(tmp_path, "valid")


def test_mnist_mismatched_files(tmp_path):
    write_mnist(tmp_path)
    write_idx(tmp_path / "train-labels-idx1-ubyte", np.zeros(3, np.uint8))
    with pytest.raises(RecordError, match="do not belong together"):
        MnistDataset.train(tmp_path)


def test_mnist_corrupt_gzip(tmp_path):
    write_mnist(tmp_path)
    (tmp_path / "t10k-images-idx3-ubyte").unlink()
    (tmp_path / "t10k-images-idx3-ubyte.gz").write_bytes(gzip.compress(b"\x00\x00\x08\x03garbage"))
    with pytest.raises(RecordError, match="truncated"):
        MnistDataset.test(tmp_path)


def test_image_folder(tmp_path):
    pil = pytest.importorskip("PIL.Image")
    for name, color in (("cat", (255, 0, 0)), ("dog", (0, 0, 255))):
        (tmp_path / name).mkdir()
        for i in range(2):
            pil.new("RGB", (5, 4), color).save(tmp_path / name / f"{i}.png")
    (tmp_path / "dog" / "notes.txt").write_text("not an image")
    ds = ImageFolderDataset(tmp_path)
    assert ds.classes == ["cat", "dog"] and len(ds) == 4
    item = ds.get(2)
    assert item.label == 1 and item.image.shape == (4, 5, 3) and item.image.dtype == np.uint8
    assert item.image[0, 0].tolist() == [0, 0, 255]
    gray = ImageFolderDataset(tmp_path, mode="L", size=(8, 6)).get(0)
    assert gray.image.shape == (8, 6, 1)
    (tmp_path / "cat" / "broken.png").write_bytes(b"not a png")
    broken = ImageFolderDataset(tmp_path)
    index = [p.name for p, _ in broken.samples].index("broken.png")
    with pytest.raises(RecordError, match=r"cannot read the image .*broken.png"):
        broken.get(index)


def test_image_folder_errors(tmp_path):
    pytest.importorskip("PIL.Image")
    with pytest.raises(RecordError, match="is not a folder"):
        ImageFolderDataset(tmp_path / "missing")
    (tmp_path / "empty_class").mkdir()
    with pytest.raises(RecordError, match="no images"):
        ImageFolderDataset(tmp_path)
