"""Dataset protocol, in-memory sources and the transforms."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from ember.data import (
    ArrayDataset,
    ComposedDataset,
    Dataset,
    InMemDataset,
    MapperDataset,
    PartialDataset,
    SamplerDataset,
    ShuffledDataset,
    WindowsDataset,
)
from ember.errors import ConfigError, IndexOutOfBoundsError, RecordError, ShapeError


class Plain:
    """A dataset by protocol only: no base class."""

    def __len__(self):
        return 5

    def get(self, index):
        return index * 10 if 0 <= index < 5 else None


def test_protocol_is_structural():
    assert isinstance(Plain(), Dataset)
    assert not isinstance([1, 2], Dataset)
    assert list(ShuffledDataset(Plain(), 0)) != [] and sorted(ShuffledDataset(Plain(), 0)) == [0, 10, 20, 30, 40]


def test_in_memory_get_and_getitem():
    ds = InMemDataset(["a", "b", "c"])
    assert len(ds) == ds.len() == 3 and not ds.is_empty()
    assert ds.get(0) == "a" and ds.get(3) is None and ds.get(-1) is None
    assert ds[-1] == "c" and list(ds) == ["a", "b", "c"]
    with pytest.raises(IndexOutOfBoundsError, match=r"ember: InMemDataset\[3\].*3 items"):
        ds[3]
    with pytest.raises(IndexOutOfBoundsError, match="must be an int"):
        ds["x"]


def test_shuffled_is_seeded_permutation():
    ds = InMemDataset(list(range(100)))
    a, b, c = ShuffledDataset(ds, 7), ShuffledDataset(ds, 7), ShuffledDataset(ds, 8)
    assert list(a) == list(b) and list(a) != list(c)
    assert sorted(a) == list(range(100)) and list(a) != list(range(100))
    with pytest.raises(ConfigError, match="seed must be an int >= 0"):
        ShuffledDataset(ds, -1)


def test_partial_and_split():
    ds = InMemDataset(list(range(10)))
    assert list(PartialDataset(ds, 2, 5)) == [2, 3, 4]
    assert list(PartialDataset(ds, 8, 20)) == [8, 9]
    assert PartialDataset(ds, 2, 5).get(3) is None
    parts = PartialDataset.split(ds, 3)
    assert [list(p) for p in parts] == [[0, 1, 2, 3], [4, 5, 6], [7, 8, 9]]
    first, rest = PartialDataset.split_fraction(ds, 0.8)
    assert len(first) == 8 and list(rest) == [8, 9]
    with pytest.raises(ConfigError, match=r"end .* must not be below start"):
        PartialDataset(ds, 5, 2)
    with pytest.raises(ConfigError, match="num must be an int >= 1"):
        PartialDataset.split(ds, 0)


def test_mapper_function_and_object():
    class Double:
        def map(self, item):
            return item * 2

    ds = InMemDataset([1, 2, 3])
    assert list(MapperDataset(ds, Double())) == [2, 4, 6]
    assert list(MapperDataset(ds, str)) == ["1", "2", "3"]
    assert MapperDataset(ds, str).get(5) is None
    with pytest.raises(ConfigError, match="mapper must be a function"):
        MapperDataset(ds, 3)


@pytest.mark.parametrize("replacement", [True, False])
def test_sampler_sizes_and_determinism(replacement):
    ds = InMemDataset(list(range(10)))
    sampled = SamplerDataset(ds, 25, replacement=replacement, seed=3)
    assert len(sampled) == 25
    assert list(sampled) == list(SamplerDataset(ds, 25, replacement=replacement, seed=3))
    assert list(sampled) == list(sampled)  # reads are stable
    if not replacement:
        # every item once before any repeats
        assert sorted(list(sampled)[:10]) == list(range(10)) and sorted(list(sampled)[10:20]) == list(range(10))
    assert sampled.get(25) is None
    with pytest.raises(ConfigError, match="empty dataset"):
        SamplerDataset(InMemDataset([]), 3)


def test_windows():
    ds = InMemDataset([1, 2, 3, 4, 5])
    assert list(WindowsDataset(ds, 2)) == [[1, 2], [2, 3], [3, 4], [4, 5]]
    assert len(WindowsDataset(ds, 5)) == 1 and len(WindowsDataset(ds, 6)) == 0
    assert WindowsDataset(ds, 2).get(4) is None
    with pytest.raises(ConfigError, match="window size"):
        WindowsDataset(ds, 0)


def test_composed():
    ds = ComposedDataset([InMemDataset([1, 2]), InMemDataset([]), InMemDataset([3, 4, 5])])
    assert len(ds) == 5 and list(ds) == [1, 2, 3, 4, 5] and ds.get(5) is None
    assert len(ComposedDataset([])) == 0


def test_transforms_accept_lists():
    assert list(PartialDataset([5, 6, 7], 1, 3)) == [6, 7]
    with pytest.raises(ConfigError, match="expected a dataset"):
        ShuffledDataset(42, 0)


def test_array_dataset():
    x, y = np.arange(12.0).reshape(4, 3), np.array([0, 1, 0, 1])
    ds = ArrayDataset(x, y)
    xi, yi = ds.get(2)
    np.testing.assert_array_equal(xi, x[2]) and yi == 0
    np.testing.assert_array_equal(ArrayDataset(x).get(1), x[1])
    with pytest.raises(ShapeError, match=r"different numbers of items.*\[4, 3\], \[3\]"):
        ArrayDataset(x, y[:3])
    with pytest.raises(ConfigError, match="at least one array"):
        ArrayDataset()


def test_array_dataset_from_csv(tmp_path):
    path = tmp_path / "data.csv"
    path.write_text("a,b,label\n1.5,2,0\n3,4.25,1\n5,6,2\n")
    ds = ArrayDataset.from_csv(path, "label")
    x, y = ds.arrays
    assert x.dtype == np.float32 and x.shape == (3, 2) and y.dtype == np.int64
    np.testing.assert_array_equal(y, [0, 1, 2])
    np.testing.assert_allclose(x[1], [3.0, 4.25])
    assert ArrayDataset.from_csv(path, -1).arrays[1].tolist() == [0, 1, 2]
    with pytest.raises(ConfigError, match=r"no column 'target'.*a, b, label"):
        ArrayDataset.from_csv(path, "target")
    (tmp_path / "bad.csv").write_text("a,b\n1,x\n")
    with pytest.raises(RecordError, match=r"cannot read .*bad.csv as numbers"):
        ArrayDataset.from_csv(tmp_path / "bad.csv")


def test_in_memory_from_csv_and_json_rows(tmp_path):
    @dataclasses.dataclass
    class Row:
        text: str
        score: float
        label: int

    path = tmp_path / "rows.csv"
    path.write_text("text,score,label\nhello,0.5,1\nworld,2,0\n")
    rows = InMemDataset.from_csv(path)
    assert rows.get(0) == {"text": "hello", "score": 0.5, "label": 1}
    typed = InMemDataset.from_csv(path, Row)
    assert typed.get(1) == Row("world", 2, 0)
    (tmp_path / "ragged.csv").write_text("a,b\n1\n")
    with pytest.raises(RecordError, match="line 2 has 1 fields, the header has 2"):
        InMemDataset.from_csv(tmp_path / "ragged.csv")

    jsonl = tmp_path / "rows.jsonl"
    jsonl.write_text('{"text": "a", "score": 1.0, "label": 3}\n\n{"text": "b", "score": 2.0, "label": 4}\n')
    assert list(InMemDataset.from_json_rows(jsonl, Row)) == [Row("a", 1.0, 3), Row("b", 2.0, 4)]
    jsonl.write_text('{"text": "a"\n')
    with pytest.raises(RecordError, match="line 1 is not valid JSON"):
        InMemDataset.from_json_rows(jsonl)
    with pytest.raises(RecordError, match="cannot read"):
        InMemDataset.from_csv(tmp_path / "missing.csv")
