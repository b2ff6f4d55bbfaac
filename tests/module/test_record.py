"""Records: safetensors round trips, strictness, dtype policy, corrupt files, PyTorch import."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

from ember import Device, Tensor
from ember.errors import RecordError
from ember.module import RunningState
from ember.module.record import load_record, save_record
from ember.nn import Linear, LinearConfig, Relu
from tests.conftest import import_torch
from tests.module.test_module import Stack
from tests.shared_models import Mlp


@pytest.fixture
def ad():
    return Device.flex().autodiff()


def test_round_trip_is_bit_exact_and_keeps_ids(ad, tmp_path):
    model = Mlp.new(ad)
    x = Tensor.ones([3, 4], device=ad)
    expected = model(x).to_numpy()
    path = tmp_path / "mlp.safetensors"
    model.save_file(path)
    fresh = Mlp.new(ad)
    loaded = fresh.load_file(path)
    for a, b in zip(model.params(), loaded.params()):
        assert a.id == b.id
        assert a.val().to_numpy().tobytes() == b.val().to_numpy().tobytes()
        assert b.val().is_require_grad()
    assert loaded(x).to_numpy().tobytes() == expected.tobytes()
    assert not fresh.l1.weight.is_initialized()  # the target module itself is untouched


def test_file_metadata_maps_paths_to_ids(ad, tmp_path):
    from safetensors import safe_open

    model = Mlp.new(ad)
    model.save_file(tmp_path / "m.safetensors")
    with safe_open(str(tmp_path / "m.safetensors"), framework="np") as handle:
        meta = handle.metadata()
        keys = sorted(handle.keys())
    entries = json.loads(meta["entries"])
    assert meta["format"] == "ember-record" and meta["version"] == "1"
    assert keys == ["l1.bias", "l1.weight", "l2.bias", "l2.weight"]
    assert entries["l1.weight"]["id"] == model.l1.weight.id.serialize()
    assert entries["l1.weight"]["dtype"] == "float32" and entries["l1.weight"]["shape"] == [4, 16]


def test_states_are_saved_and_loaded(flex, tmp_path):
    def make(value):
        return Stack(
            layers=[LinearConfig(2, 2).init(flex)], named={}, stats=RunningState(Tensor.full([2], value, device=flex))
        )

    make(3.0).save_file(tmp_path / "s.safetensors")
    loaded = make(0.0).load_file(tmp_path / "s.safetensors")
    assert loaded.stats.value().tolist() == [3.0, 3.0]


def test_strict_reports_missing_and_unexpected_by_path(ad, tmp_path):
    Mlp.new(ad).save_file(tmp_path / "m.safetensors")
    other = Stack(layers=[LinearConfig(4, 16).init(ad)], named={}, stats=None)
    with pytest.raises(RecordError) as info:
        other.load_file(tmp_path / "m.safetensors")
    message = str(info.value)
    assert "missing from the record: layers.0.weight, layers.0.bias" in message
    assert "unexpected in the record:" in message and "strict=False" in message
    assert all(path in message.split("unexpected in the record:")[1] for path in ("l1.weight", "l2.bias"))


def test_partial_loading(ad, tmp_path):
    source = Mlp.new(ad)
    source.save_file(tmp_path / "m.safetensors")

    class Bigger(Mlp):
        l3: Linear

    target = Bigger(
        l1=LinearConfig(4, 16).init(ad), act=Relu(), l2=LinearConfig(16, 1).init(ad), l3=LinearConfig(1, 1).init(ad)
    )
    l3_before = target.l3.weight.val().to_numpy()
    loaded = target.load_file(tmp_path / "m.safetensors", strict=False)
    assert loaded.l1.weight.val().to_numpy().tobytes() == source.l1.weight.val().to_numpy().tobytes()
    assert loaded.l3.weight.val().to_numpy().tobytes() == l3_before.tobytes()


def test_shape_mismatch_is_clear(ad, tmp_path):
    LinearConfig(4, 16).init(ad).save_file(tmp_path / "l.safetensors")
    with pytest.raises(RecordError, match=r"'weight' has shape \[4, 16\] in the record but \[4, 8\]"):
        LinearConfig(4, 8).init(ad).load_file(tmp_path / "l.safetensors")


def test_dtype_policy(flex, tmp_path):
    layer = LinearConfig(2, 2).init(flex)
    layer.map_params(lambda p, path: p.map(lambda t: t.cast("float64"))).save_file(tmp_path / "d.safetensors")
    assert layer.load_file(tmp_path / "d.safetensors").weight.val().dtype.value == "float32"
    assert layer.load_file(tmp_path / "d.safetensors", dtype_policy="record").weight.val().dtype.value == "float64"
    with pytest.raises(RecordError):
        layer.load_file(tmp_path / "d.safetensors", dtype_policy="nope")


def test_corrupt_and_truncated_files(ad, tmp_path):
    model = Mlp.new(ad)
    path = tmp_path / "m.safetensors"
    model.save_file(path)
    data = path.read_bytes()
    cases = {
        "missing": None,
        "empty": b"",
        "short": data[:5],
        "truncated": data[: len(data) - 10],
        "bad_header": data[:8] + b"{" * (len(data) - 8),
        "huge_header": (10**12).to_bytes(8, "little") + data[8:],
    }
    for name, content in cases.items():
        target = tmp_path / f"{name}.safetensors"
        if content is not None:
            target.write_bytes(content)
        with pytest.raises(RecordError, match=r"^ember: "):
            Mlp.new(ad).load_file(target)
    foreign = tmp_path / "foreign.safetensors"
    import safetensors.numpy

    safetensors.numpy.save_file({"l1.weight": np.zeros((4, 16), np.float32)}, str(foreign))
    with pytest.raises(RecordError, match="not an ember"):
        Mlp.new(ad).load_file(foreign)


def test_save_is_atomic_when_writing_fails(ad, tmp_path, monkeypatch):
    model = Mlp.new(ad)
    path = tmp_path / "m.safetensors"
    model.save_file(path)
    before = path.read_bytes()
    import safetensors.numpy

    def broken(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(safetensors.numpy, "save_file", broken)
    with pytest.raises(OSError):
        Mlp.new(ad).save_file(path)
    assert path.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["m.safetensors"]


def test_tree_records(tmp_path):
    tree = {
        "step": 7,
        "lr": 0.5,
        "name": "x",
        "none": None,
        "t": Tensor.from_floats([1.0, 2.0]),
        "l": [1, (2, 3)],
        "arr": np.arange(3),
        "nested": {"i": Tensor.from_ints([4])},
    }
    save_record(tmp_path / "r.safetensors", tree)
    back = load_record(tmp_path / "r.safetensors", device=Device.flex())
    assert back["step"] == 7 and back["lr"] == 0.5 and back["name"] == "x" and back["none"] is None
    assert back["t"].tolist() == [1.0, 2.0] and back["nested"]["i"].tolist() == [4]
    assert back["l"] == [1, (2, 3)] and back["arr"].tolist() == [0, 1, 2]
    with pytest.raises(RecordError, match="cannot store"):
        save_record(tmp_path / "bad.safetensors", {"f": object()})


@pytest.mark.torch
def test_pytorch_state_dict_import_matches_torch_forward(tmp_path, ad):
    torch = import_torch()
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(4, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
    path = tmp_path / "mlp.pt"
    torch.save({"model": net.state_dict(), "epoch": 3}, path)
    rules = [(r"^0\.", "l1."), (r"^2\.", "l2.")]
    model = Mlp.new(ad).load_pytorch(path, top_level_key="model", key_remap=rules)
    x = np.random.default_rng(0).standard_normal((5, 4)).astype(np.float32)
    ours = model(Tensor.from_data(x, device=ad)).to_numpy()
    theirs = net(torch.from_numpy(x)).detach().numpy()
    np.testing.assert_allclose(ours, theirs, rtol=1e-6, atol=1e-6)
    with pytest.raises(RecordError, match=r"in Mlp, not in the file: l1.weight") as info:
        Mlp.new(ad).load_pytorch(path, top_level_key="model")
    assert "key_remap=[(r\"^0\\.\", 'l1.'), (r\"^2\\.\", 'l2.')]" in str(info.value)


@pytest.mark.torch
def test_pytorch_import_executes_nothing(tmp_path, ad):
    torch = import_torch()
    import pickle
    import zipfile

    class Evil:
        def __reduce__(self):
            return (os.system, ("echo pwned > " + str(tmp_path / "pwned"),))

    path = tmp_path / "evil.pt"
    torch.save({"weight": torch.zeros(2)}, path)
    # Rewrite data.pkl with a payload that would run a command if unpickled naively.
    with zipfile.ZipFile(path) as archive:
        names = archive.namelist()
        files = {n: archive.read(n) for n in names}
    pkl = next(n for n in names if n.endswith("data.pkl"))
    files[pkl] = pickle.dumps({"weight": Evil()})
    with zipfile.ZipFile(path, "w") as archive:
        for name, content in files.items():
            archive.writestr(name, content)
    with pytest.raises(RecordError, match="executes nothing"):
        LinearConfig(1, 2).init(ad).load_pytorch(path)
    assert not (tmp_path / "pwned").exists()


def test_pytorch_import_errors(tmp_path, ad):
    bad = tmp_path / "bad.pt"
    bad.write_bytes(b"not a zip")
    with pytest.raises(RecordError, match="not a zip-format"):
        LinearConfig(1, 2).init(ad).load_pytorch(bad)
    with pytest.raises(RecordError, match="no such file"):
        LinearConfig(1, 2).init(ad).load_pytorch(tmp_path / "absent.pt")
