"""Records on disk: every malformed safetensors file is a RecordError naming the fault
(a table of forged files and a hypothesis fuzz of the header), checksums catch damaged
tensor bytes, and entries may share a ParamId only where the module ties them."""

from __future__ import annotations

import contextlib
import json
import struct

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ember import Device, Module, Param, Tensor
from ember.errors import RecordError
from ember.module.record import load_arrays, load_record, read_safetensors, save_record
from ember.module.safetensors_file import MAX_HEADER_BYTES
from ember.nn import Linear, LinearConfig
from tests.shared_models import Mlp


def forge(header, data=b"", header_len=None) -> bytes:
    raw = header if isinstance(header, bytes) else json.dumps(header).encode()
    return struct.pack("<Q", len(raw) if header_len is None else header_len) + raw + data


def tensor(dtype="F32", shape=(2,), begin=0, end=8):
    return {"dtype": dtype, "shape": list(shape), "data_offsets": [begin, end]}


@pytest.fixture
def saved(tmp_path):
    """A real module record: (path, header, data section)."""
    path = tmp_path / "m.safetensors"
    Mlp.new(Device.flex()).save_file(path)
    blob = path.read_bytes()
    n = struct.unpack("<Q", blob[:8])[0]
    return path, json.loads(blob[8 : 8 + n]), blob[8 + n :]


def with_metadata(header, **changes):
    header = json.loads(json.dumps(header))
    header["__metadata__"].update(changes)
    return header


MALFORMED = {
    # the header itself
    "empty header": (lambda h, d: forge(b"", d), "its header is empty"),
    "over 100 MB": (lambda h, d: forge(b"{}", d, header_len=MAX_HEADER_BYTES + 1), "over the format's limit"),
    "header past the end": (lambda h, d: forge(b"{}", d, header_len=len(d) + 100), "header claims"),
    "not JSON": (lambda h, d: forge(b"{nope", d), "its header is not valid JSON"),
    "not UTF-8": (lambda h, d: forge(b'{"\xff": 1}', d), "its header is not valid JSON"),
    "not an object": (lambda h, d: forge(b"[1, 2]", d), r"does not start with '\{'"),
    "deep recursion": (lambda h, d: forge(b'{"a": ' + b"[" * 100_000 + b"]" * 100_000 + b"}", d), "nests too deeply"),
    "duplicate key": (lambda h, d: forge(b'{"a": {}, "a": {}}', d), "the key 'a' appears twice"),
    "NaN": (lambda h, d: forge(b'{"a": NaN}', d), "NaN is not valid JSON"),
    # entries
    "entry not an object": (lambda h, d: forge({"w": 5}), r"tensor 'w' is described by 5"),
    "missing field": (lambda h, d: forge({"w": {"dtype": "F32", "shape": [2]}}, b"\0" * 8), r"has fields"),
    "extra field": (lambda h, d: forge({"w": {**tensor(), "x": 1}}, b"\0" * 8), r"has fields"),
    "unknown dtype": (lambda h, d: forge({"w": tensor("F99")}, b"\0" * 8), 'unknown dtype "F99"'),
    "dtype not a string": (lambda h, d: forge({"w": tensor(["F32"])}, b"\0" * 8), "unknown dtype"),
    "negative dim": (lambda h, d: forge({"w": tensor(shape=(-2,))}, b"\0" * 8), r"shape \[-2\]"),
    "bool dim": (lambda h, d: forge({"w": {**tensor(), "shape": [True, 2]}}, b"\0" * 8), "has shape"),
    "nested shape": (lambda h, d: forge({"w": {**tensor(), "shape": [[2]]}}, b"\0" * 8), "has shape"),
    "offsets not a pair": (lambda h, d: forge({"w": {**tensor(), "data_offsets": [0]}}, b"\0" * 8), "data_offsets"),
    "offsets reversed": (lambda h, d: forge({"w": tensor(begin=8, end=0)}, b"\0" * 8), "data_offsets"),
    "offsets as text": (lambda h, d: forge({"w": {**tensor(), "data_offsets": "0:8"}}, b"\0" * 8), "data_offsets"),
    "shape/bytes mismatch": (
        lambda h, d: forge({"w": tensor(shape=(3,))}, b"\0" * 8),
        r"\(12 bytes\) but data_offsets",
    ),
    "overlap": (lambda h, d: forge({"a": tensor(), "b": tensor(begin=4, end=12)}, b"\0" * 12), "overlaps"),
    "gap": (lambda h, d: forge({"a": tensor(), "b": tensor(begin=12, end=20)}, b"\0" * 20), "gap of 4 bytes"),
    "out of range": (lambda h, d: forge({"a": tensor(begin=0, end=8)}, b"\0" * 4), "is truncated"),
    "trailing bytes": (lambda h, d: forge({"a": tensor()}, b"\0" * 12), "4 bytes follow the last tensor"),
    "metadata not an object": (lambda h, d: forge({"__metadata__": [1]}), "__metadata__ must map strings"),
    "metadata value not a string": (lambda h, d: forge({"__metadata__": {"a": 1}}), "__metadata__ must map strings"),
    # ember's metadata
    "entries missing": (
        lambda h, d: forge({**h, "__metadata__": {k: v for k, v in h["__metadata__"].items() if k != "entries"}}, d),
        "entry table is missing",
    ),
    "entries not JSON": (lambda h, d: forge(with_metadata(h, entries="{"), d), "entry table is not valid JSON"),
    "entries garbage": (lambda h, d: forge(with_metadata(h, entries="[[[]]]"), d), "entry table is not an object"),
    "entries deep": (lambda h, d: forge(with_metadata(h, entries="[" * 50_000 + "]" * 50_000), d), "nests too deeply"),
    "ember entry not an object": (
        lambda h, d: forge(
            with_metadata(h, entries=json.dumps(dict.fromkeys(json.loads(h["__metadata__"]["entries"]), 1))), d
        ),
        "is not an object",
    ),
    "entry kind": (lambda h, d: forge(with_metadata(h, entries=_edit(h, "l1.bias", kind="weight")), d), "has kind"),
    "entry id": (lambda h, d: forge(with_metadata(h, entries=_edit(h, "l1.bias", id="xyz")), d), "not 16 hex digits"),
    "entry shape": (lambda h, d: forge(with_metadata(h, entries=_edit(h, "l1.bias", shape=[3])), d), "in the table"),
    "entry for no tensor": (
        lambda h, d: forge(with_metadata(h, entries=_edit(h, "l9.x", kind="param")), d),
        "does not list exactly",
    ),
    "shared ParamId": (
        lambda h, d: forge(with_metadata(h, entries=_share(h, "l1.weight", "l2.weight")), d),
        "entries l1.weight, l2.weight share one ParamId",
    ),
    "checksum table garbage": (
        lambda h, d: forge(with_metadata(h, crc32='{"l1.weight": 5}'), d),
        "checksum table does not list exactly its tensors",
    ),
    "tensor bytes damaged": (lambda h, d: forge(h, d[:-1] + bytes([d[-1] ^ 1])), "does not match its checksum"),
    "version": (lambda h, d: forge(with_metadata(h, version="x"), d), "record format version 'x'"),
}


def _edit(header, key, **fields):
    entries = json.loads(header["__metadata__"]["entries"])
    entries[key] = {**entries.get(key, {}), **fields}
    return json.dumps(entries)


def _share(header, a, b):
    entries = json.loads(header["__metadata__"]["entries"])
    entries[b]["id"] = entries[a]["id"]
    return json.dumps(entries)


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_malformed_files_raise_a_record_error_naming_the_fault(saved, tmp_path, case):
    _, header, data = saved
    build, fault = MALFORMED[case]
    path = tmp_path / "bad.safetensors"
    path.write_bytes(build(header, data))
    with pytest.raises(RecordError, match=fault):
        Mlp.new(Device.flex()).load_file(path)


def test_a_huge_header_is_refused_before_it_is_read(tmp_path):
    """A sparse file whose header claims 150 MB: refused at the limit, nothing allocated."""
    path = tmp_path / "huge.safetensors"
    with path.open("wb") as handle:
        handle.write(struct.pack("<Q", 150_000_000) + b"{")
        handle.seek(8 + 150_000_000)
        handle.write(b"\0")
    with pytest.raises(RecordError, match="header claims 150000000 bytes, over the format's limit of 100000000"):
        read_safetensors(path)


def test_checksums_are_written_and_verified(saved, tmp_path):
    path, header, data = saved
    table = json.loads(header["__metadata__"]["crc32"])
    assert sorted(table) == ["l1.bias", "l1.weight", "l2.bias", "l2.weight"]
    assert all(len(v) == 8 for v in table.values())
    flipped = bytearray(data)
    begin = header["l2.weight"]["data_offsets"][0]
    flipped[begin + 1] ^= 0x10  # one bit of one weight
    bad = tmp_path / "bad.safetensors"
    bad.write_bytes(forge(header, bytes(flipped)))
    with pytest.raises(RecordError, match="tensor 'l2.weight' does not match its checksum"):
        Mlp.new(Device.flex()).load_file(bad)


def test_files_without_checksums_still_load(saved, tmp_path):
    """Records of earlier ember versions, and safetensors files of other tools."""
    path, header, data = saved
    old = dict(header)
    old["__metadata__"] = {k: v for k, v in header["__metadata__"].items() if k != "crc32"}
    older = tmp_path / "older.safetensors"
    older.write_bytes(forge(old, data))
    expected = Mlp.new(Device.flex()).load_file(path)
    loaded = Mlp.new(Device.flex()).load_file(older)
    assert loaded.l2.weight.val().to_numpy().tobytes() == expected.l2.weight.val().to_numpy().tobytes()
    import safetensors.numpy

    foreign = tmp_path / "foreign.safetensors"
    weights = {"weight": np.arange(8, dtype=np.float32).reshape(2, 4), "bias": np.ones(4, np.float32)}
    safetensors.numpy.save_file(weights, str(foreign))
    arrays, metadata = read_safetensors(foreign)
    assert metadata == {}
    layer = load_arrays(LinearConfig(2, 4).init(Device.flex()), arrays)
    assert layer.weight.val().tolist() == weights["weight"].tolist()


def test_every_dtype_round_trips_through_the_safetensors_package(tmp_path):
    """Files ember writes read back in the safetensors package, and the package's files in ember."""
    import ml_dtypes
    import safetensors.numpy

    rng = np.random.default_rng(5)
    arrays = {
        "f64": rng.standard_normal((2, 3)),
        "f32": rng.standard_normal(4).astype(np.float32),
        "f16": rng.standard_normal(3).astype(np.float16),
        "bf16": rng.standard_normal(3).astype(ml_dtypes.bfloat16),
        "i64": rng.integers(-9, 9, 5),
        "i32": rng.integers(-9, 9, 2).astype(np.int32),
        "i16": np.array([-3, 4], np.int16),
        "i8": np.array([-1], np.int8),
        "u8": np.array([200], np.uint8),
        "bool": np.array([True, False, True]),
        "empty": np.zeros((0, 3), np.float32),
        "scalar": np.array(2.5),
    }
    theirs = tmp_path / "theirs.safetensors"
    safetensors.numpy.save_file(arrays, str(theirs))
    got, _ = read_safetensors(theirs)
    for key, value in arrays.items():
        assert got[key].dtype == value.dtype and got[key].shape == value.shape, key
        assert got[key].tobytes() == value.tobytes(), key
        assert not got[key].flags.writeable
    save_record(tmp_path / "ours.safetensors", {k: v for k, v in arrays.items()})
    back = safetensors.numpy.load_file(str(tmp_path / "ours.safetensors"))
    assert {k: v.tobytes() for k, v in back.items()} == {f"t{i}": v.tobytes() for i, v in enumerate(arrays.values())}
    assert {k: v.shape for k, v in back.items()} == {f"t{i}": v.shape for i, v in enumerate(arrays.values())}


class Tied(Module):
    a: Linear
    b: Linear


def test_tied_parameters_may_share_an_id(tmp_path):
    device = Device.flex()
    shared = Param.from_tensor(Tensor.ones([2, 2], device=device))
    tied = Tied(Linear(weight=shared), Linear(weight=shared))
    tied.save_file(tmp_path / "tied.safetensors")
    loaded = Tied(Linear(weight=shared), Linear(weight=shared)).load_file(tmp_path / "tied.safetensors")
    assert loaded.a.weight.id == loaded.b.weight.id == shared.id
    untied = Tied(LinearConfig(2, 2, bias=False).init(device), LinearConfig(2, 2, bias=False).init(device))
    with pytest.raises(RecordError, match="share one ParamId .* different parameters of Tied"):
        untied.load_file(tmp_path / "tied.safetensors")


@pytest.mark.parametrize(
    ("tree", "fault"),
    [
        ('{"__tensor__": "t9"}', "names no tensor"),
        ('{"__tensor__": "t0", "dtype": "float99"}', "invalid dtype"),
        ('{"__array__": 3}', "names no tensor"),
        ('{"x": 1}', "corrupt tree node"),
        ('{"__dict__": [1]}', "corrupt tree node"),
        ("[1, 2]", "a bare list"),
        ("[" * 50_000 + "]" * 50_000, "nests too deeply"),
    ],
)
def test_malformed_trees(tmp_path, tree, fault):
    path = tmp_path / "r.safetensors"
    save_record(path, {"t": Tensor.from_floats([1.0])})
    blob = path.read_bytes()
    n = struct.unpack("<Q", blob[:8])[0]
    header = json.loads(blob[8 : 8 + n])
    header["__metadata__"]["tree"] = tree
    path.write_bytes(forge(header, blob[8 + n :]))
    with pytest.raises(RecordError, match=fault):
        load_record(path, device=Device.flex())


# ---------------------------------------------------------------------- fuzz
json_values = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.floats(allow_nan=False), st.text(max_size=6)),
    lambda children: st.one_of(
        st.lists(children, max_size=4), st.dictionaries(st.text(max_size=6), children, max_size=4)
    ),
    max_leaves=12,
)
entries = st.fixed_dictionaries(
    {
        "dtype": st.one_of(st.sampled_from(["F32", "F64", "I8", "BOOL", "BF16", "U16", "X"]), json_values),
        "shape": st.one_of(st.lists(st.integers(0, 3), max_size=3), json_values),
        "data_offsets": st.one_of(st.lists(st.integers(0, 40), min_size=2, max_size=2).map(sorted), json_values),
    },
    optional={"extra": json_values},
)
headers = st.dictionaries(st.sampled_from(["a", "b", "c", "__metadata__"]), st.one_of(entries, json_values), max_size=4)
FUZZ = settings(
    max_examples=300, derandomize=True, database=None, deadline=None, suppress_health_check=list(HealthCheck)
)


@FUZZ
@given(headers, st.binary(max_size=48))
def test_fuzzed_headers_load_or_raise_record_error(tmp_path_factory, header, data):
    """Either a RecordError, or arrays that the safetensors package reads alike."""
    import safetensors.numpy

    blob = forge(header, data)
    path = tmp_path_factory.getbasetemp() / "fuzz.safetensors"
    path.write_bytes(blob)
    try:
        arrays, _ = read_safetensors(path)
    except RecordError:
        return
    theirs = safetensors.numpy.load(blob)
    assert sorted(arrays) == sorted(theirs)
    for key, value in arrays.items():
        assert value.shape == theirs[key].shape
        assert value.astype(np.float64).tobytes() == theirs[key].astype(np.float64).tobytes() or value.dtype == bool


@FUZZ
@given(st.data())
def test_fuzzed_bytes_of_a_record_load_or_raise_record_error(tmp_path_factory, data):
    """Byte-level damage to a real module record: a RecordError, never another error."""
    base = tmp_path_factory.getbasetemp() / "base.safetensors"
    if not base.exists():
        Mlp.new(Device.flex()).save_file(base)
    blob = bytearray(base.read_bytes())
    for _ in range(data.draw(st.integers(1, 3))):
        at = data.draw(st.integers(0, len(blob) - 1))
        kind = data.draw(st.sampled_from(["flip", "cut", "insert"]))
        if kind == "flip":
            blob[at] ^= data.draw(st.integers(1, 255))
        elif kind == "cut":
            del blob[at : at + data.draw(st.integers(1, 16))]
        else:
            blob[at:at] = data.draw(st.binary(min_size=1, max_size=8))
    path = tmp_path_factory.getbasetemp() / "damaged.safetensors"
    path.write_bytes(bytes(blob))
    with contextlib.suppress(RecordError):
        Mlp.new(Device.flex()).load_file(path)
