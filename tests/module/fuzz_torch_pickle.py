"""Hypothesis fuzz of the PyTorch reader: forged view arguments, mutated and random
pickle opcode streams, mutated zip archives. Loading must either succeed (and then
read exactly the storage's elements) or raise RecordError; any other exception, or a
crash, is a failure.

Run as ``python -X faulthandler -m tests.module.fuzz_torch_pickle`` (the test suite
does, in a child process, so that a crash cannot take a test worker down). The
examples are derandomized (the same on every run) unless ``EMBER_FUZZ_RANDOM=1``;
``EMBER_FUZZ_EXAMPLES`` sets how many each strategy draws (default 150).
"""

from __future__ import annotations

import contextlib
import io
import os
import pickletools
import tempfile
import zipfile
from pathlib import Path

import ml_dtypes
import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ember import Device, Module
from ember.errors import RecordError
from ember.module.pytorch import read_pytorch
from ember.nn import LayerNorm, LayerNormConfig, Linear, LinearConfig
from tests.module.torch_archive import ITEMSIZE, Archive, Spec, op_global, op_tensor, op_value

EXAMPLES = int(os.environ.get("EMBER_FUZZ_EXAMPLES", "150"))
SETTINGS = settings(
    max_examples=EXAMPLES,
    derandomize=os.environ.get("EMBER_FUZZ_RANDOM") != "1",
    database=None,
    deadline=None,
    suppress_health_check=list(HealthCheck),
)
TMP = Path(tempfile.mkdtemp(prefix="ember-fuzz-"))
DTYPES = {
    "FloatStorage": np.float32,
    "DoubleStorage": np.float64,
    "HalfStorage": np.float16,
    "BFloat16Storage": ml_dtypes.bfloat16,
    "LongStorage": np.int64,
    "IntStorage": np.int32,
    "ShortStorage": np.int16,
    "CharStorage": np.int8,
    "ByteStorage": np.uint8,
    "BoolStorage": np.bool_,
}


class Small(Module):
    weight: Linear
    ln: LayerNorm


MODULE = Small(LinearConfig(2, 2).init(Device.flex()), LayerNormConfig(4).init(Device.flex()))


OUTCOMES = {"loaded": 0, "refused": 0}


def load(path: Path) -> dict[str, np.ndarray] | None:
    """The arrays, or None on a RecordError. Touches the first and last element of every
    array (the lowest and highest address: strides are non-negative), and loads the file
    into a small module too."""
    try:
        arrays = read_pytorch(path)
    except RecordError:
        OUTCOMES["refused"] += 1
        return None
    OUTCOMES["loaded"] += 1
    for array in arrays.values():
        assert isinstance(array, np.ndarray) and not array.flags.writeable
        if array.size:
            _ = array[(0,) * array.ndim], array[tuple(n - 1 for n in array.shape)]
            if array.size <= 4096:
                np.ascontiguousarray(array)
    with contextlib.suppress(RecordError):
        MODULE.load_pytorch(path, strict=False)
    return arrays


def write(archive: Archive | dict[str, bytes], name: str = "f.pt") -> Path:
    path = TMP / name
    if isinstance(archive, Archive):
        return archive.write(path)
    with zipfile.ZipFile(path, "w") as handle:
        for member, data in archive.items():
            handle.writestr(member, data)
    return path


# ---------------------------------------------------------------------- forged views
big = st.sampled_from([-1, -(2**28), -(2**62), 2**31, 2**40, 2**62, 2**64 + 3])
dims = st.one_of(st.integers(0, 5), st.integers(1, 5), big)
strides = st.one_of(st.integers(0, 9), st.integers(0, 9), st.integers(-2, -1), big)
hostile = {
    "name": st.sampled_from(["", "0", "a.b", "weight.bias"]),
    "storage_type": st.sampled_from([*ITEMSIZE, "ComplexFloatStorage", "Nope"]),
    "key": st.sampled_from(["../0", "", "x y", "1"]),
    "numel": st.one_of(st.integers(0, 30), big),
    "offset": st.one_of(st.integers(-2, 40), big),
    "size": st.one_of(st.lists(dims, max_size=4).map(tuple), st.lists(dims, max_size=3), st.integers(-1, 3)),
    "stride": st.one_of(st.lists(strides, max_size=4).map(tuple), st.lists(strides, max_size=2)),
    "data": st.binary(max_size=80),
}


@st.composite
def specs(draw: st.DrawFn) -> Spec:
    """A view that fits its storage, then (often) one field forged."""
    size = tuple(draw(st.lists(st.integers(0, 5), max_size=4)))
    stride = tuple(draw(st.lists(st.integers(0, 6), min_size=len(size), max_size=len(size))))
    extent = sum((n - 1) * s for n, s in zip(size, stride)) if all(size) else 0
    offset = draw(st.integers(0, 8))
    numel = offset + extent + draw(st.integers(0, 3)) + (1 if all(size) else 0)
    fields = {
        "name": draw(st.sampled_from(["weight", "ln.gamma", "ln.beta", "other"])),
        "storage_type": draw(st.sampled_from(["FloatStorage", *ITEMSIZE])),
        "key": draw(st.sampled_from(["0", "1", "2"])),
        "numel": numel,
        "offset": offset,
        "size": size,
        "stride": stride,
    }
    for name in draw(st.lists(st.sampled_from(sorted(hostile)), max_size=2, unique=True)):
        fields[name] = draw(hostile[name])
    return Spec(**fields)


def expected(spec: Spec, storages: dict[str, bytes]) -> np.ndarray | None:
    """The index oracle: storage[offset + sum(i_k * stride_k)] (None when it does not apply)."""
    if spec.storage_type not in DTYPES or not isinstance(spec.size, tuple) or not isinstance(spec.stride, tuple):
        return None
    numel = int(np.prod([min(n, 10**6) for n in spec.size])) if spec.size else 1
    if numel > 4096 or any(n > 10**6 for n in spec.size):
        return None
    flat = np.frombuffer(storages[spec.key], dtype=np.dtype(DTYPES[spec.storage_type]).newbyteorder("<"))
    index = (
        spec.offset + sum(i * s for i, s in zip(np.indices(spec.size, dtype=np.int64), spec.stride))
        if spec.size
        else np.array(spec.offset)
    )
    out = flat.take(index, mode="raise")
    return out.view(np.uint8) != 0 if out.dtype == np.bool_ else out


@SETTINGS
@given(st.lists(specs(), max_size=3))
def fuzz_forged_views(tensors: list[Spec]) -> None:
    archive = Archive(tensors)
    arrays = load(write(archive))
    if arrays is None:
        return
    storages = archive.storages()
    names = [s.name for s in tensors]
    for spec in tensors:
        if names.count(spec.name) != 1 or spec.name not in arrays:
            continue
        first = next(s for s in tensors if s.key == spec.key)
        oracle = expected(spec, storages) if first.storage_type == spec.storage_type else None
        if oracle is not None:
            assert arrays[spec.name].tobytes() == oracle.tobytes(), spec


# ---------------------------------------------------------------------- mutated and random pickles
OPCODES = [op.code.encode("latin-1") for op in pickletools.opcodes]
SEEDS = [
    Archive([Spec("weight", numel=4, size=(2, 2), stride=(2, 1)), Spec("ln.gamma", key="1", numel=4)]),
    Archive(
        [
            Spec("weight", numel=6, offset=1, size=(2, 2), stride=(1, 3)),
            Spec("bias", key="0", numel=6, size=(3,), stride=(2,)),
        ]
    ),
]


@st.composite
def mutated(draw: st.DrawFn, blob: bytes) -> bytes:
    data = bytearray(blob)
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(["flip", "insert", "delete", "opcode", "duplicate", "int"]))
        at = draw(st.integers(0, len(data)))
        if kind == "flip" and data:
            data[min(at, len(data) - 1)] ^= draw(st.integers(1, 255))
        elif kind == "insert":
            data[at:at] = draw(st.binary(min_size=1, max_size=9))
        elif kind == "delete":
            del data[at : at + draw(st.integers(1, 8))]
        elif kind == "opcode":
            data[at:at] = draw(st.sampled_from(OPCODES)) + draw(st.binary(max_size=9))
        elif kind == "duplicate":
            end = draw(st.integers(at, len(data)))
            data[end:end] = data[at:end]
        elif kind == "int":
            data[at:at] = op_value(draw(st.one_of(st.integers(-(2**70), 2**70), big)))
    return bytes(data)


@SETTINGS
@given(st.data())
def fuzz_mutated_pickles(data: st.DataObject) -> None:
    seed = data.draw(st.sampled_from(SEEDS))
    pickled = data.draw(mutated(seed.pickle()))
    load(write(Archive(seed.specs, pickle_bytes=pickled)))


pieces = st.one_of(
    st.sampled_from(OPCODES).flatmap(lambda code: st.binary(max_size=9).map(lambda arg: code + arg)),
    st.sampled_from(
        [
            op_global("collections", "OrderedDict"),
            op_global("torch._utils", "_rebuild_tensor_v2"),
            op_global("torch._utils", "_rebuild_parameter"),
            op_global("torch", "FloatStorage"),
            op_value("storage"),
            op_value("0"),
            op_value("cpu"),
            b"(",
            b"t",
            b"R",
            b"Q",
            b"b",
            b"s",
            b"u",
            b"}",
            b")",
            b"]",
            b"e",
            b"a",
            b"\x85",
            b"\x86",
            b"q\x00",
            b"h\x00",
            b"2",
            b"1",
            b"0",
        ]
    ),
    st.integers(-(2**40), 2**40).map(op_value),
    st.just(op_tensor("FloatStorage", "0", 4, 0, (4,), (1,))),
    st.integers(1, 40).map(lambda n: b"N" + b"\x85" * n),  # nested tuples
)


@SETTINGS
@given(st.lists(pieces, max_size=30), st.booleans())
def fuzz_random_opcode_streams(parts: list[bytes], framed: bool) -> None:
    body = b"".join(parts)
    if framed:  # inside a state dict: OrderedDict() then SETITEMS over the random part
        body = op_global("collections", "OrderedDict") + b")R(" + op_value("weight") + body + b"u"
    pickled = b"\x80\x02" + body + b"."
    load(write(Archive([Spec("weight")], pickle_bytes=pickled)))


# ---------------------------------------------------------------------- mutated archives
@SETTINGS
@given(st.data())
def fuzz_mutated_zips(data: st.DataObject) -> None:
    seed = data.draw(st.sampled_from(SEEDS))
    members = seed.members()
    action = data.draw(st.sampled_from(["bytes", "rename", "drop", "byteorder", "resize", "deflate"]))
    names = sorted(members)
    name = data.draw(st.sampled_from(names))
    if action == "rename":
        members[
            data.draw(
                st.sampled_from(
                    ["data.pkl", "x/data.pkl", "archive/data/9", "archive/data/0", "archive/byteorder", name + "/"]
                )
            )
        ] = members.pop(name)
    elif action == "drop":
        del members[name]
    elif action == "byteorder":
        members["archive/byteorder"] = data.draw(st.sampled_from([b"big", b"little\n", b"", b"\xff" * 40]))
    elif action == "resize":
        members[name] = data.draw(mutated(members[name]))
    if action == "deflate":
        buffer = io.BytesIO()
        with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as handle:
            for member, content in members.items():
                handle.writestr(member, content)
        blob = buffer.getvalue()
    else:
        buffer = io.BytesIO()
        with zipfile.ZipFile(buffer, "w") as handle:
            for member, content in members.items():
                handle.writestr(member, content)
        blob = buffer.getvalue()
    if action in ("bytes", "deflate"):
        blob = data.draw(mutated(blob))
    path = TMP / "z.pt"
    path.write_bytes(blob)
    load(path)


def main() -> None:
    for fuzz in (fuzz_forged_views, fuzz_mutated_pickles, fuzz_random_opcode_streams, fuzz_mutated_zips):
        OUTCOMES.update(loaded=0, refused=0)
        fuzz()
        print(f"fuzzed {fuzz.__name__}: {OUTCOMES['loaded']} files loaded, {OUTCOMES['refused']} refused", flush=True)


if __name__ == "__main__":
    main()
