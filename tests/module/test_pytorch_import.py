"""PyTorch import: hostile and malformed archives raise RecordError (never read outside a
storage, never crash), real torch files load with PyTorch's names mapped per layer."""

from __future__ import annotations

import pickle
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import numpy as np
import pytest

from ember import Device, Module, Tensor
from ember.errors import RecordError
from ember.module.pytorch import read_pytorch, suggest_remap
from ember.nn import (
    BatchNorm,
    BatchNormConfig,
    GroupNorm,
    GroupNormConfig,
    LayerNorm,
    LayerNormConfig,
    Linear,
    LinearConfig,
    RmsNorm,
    RmsNormConfig,
)
from tests.module.torch_archive import Archive, Spec, op_global, op_ordered_dict, op_tensor, op_value, write_tensor_file

ROOT = Path(__file__).resolve().parents[2]


def read(path):
    return read_pytorch(path)["weight"]


# ---------------------------------------------------------------------- views against the storage
def test_a_negative_stride_is_refused(tmp_path):
    """Stride -1 from offset 0 used to return the bytes before the storage."""
    path = write_tensor_file(tmp_path / "neg.pt", offset=0, size=(4,), stride=(-1,))
    with pytest.raises(RecordError, match=r"negative stride \(-1\)"):
        read(path)


@pytest.mark.parametrize(
    ("archive", "fault"),
    [
        # a stride of -2**28 used to read 1 GB before the storage: SIGSEGV
        (Archive([Spec("weight", offset=0, size=(2,), stride=(-(2**28),))]), "negative stride (-268435456)"),
        # a dict key a million tuples deep: Python's tuple hash recurses without a limit
        (Archive([], pickle_bytes=b"\x80\x02}N" + b"\x85" * 1_000_000 + b"Ns."), "tuples nested more than 32 deep"),
    ],
    ids=["huge negative stride", "deep tuple key"],
)
def test_files_that_crashed_the_interpreter_are_refused(tmp_path, archive, fault):
    """Run in a child process, so that a regression fails this test instead of killing
    the test worker."""
    path = archive.write(tmp_path / "crash.pt")
    code = textwrap.dedent(f"""
        from ember.errors import RecordError
        from ember.module.pytorch import read_pytorch
        try:
            read_pytorch({str(path)!r})
        except RecordError as error:
            print("RecordError:", error)
    """)
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, f"the reader crashed (rc {done.returncode}): {done.stderr[-2000:]}"
    assert "RecordError:" in done.stdout and fault in done.stdout


def test_a_negative_offset_is_refused(tmp_path):
    """Offset -2 used to read the storage's last two elements as the tensor."""
    with pytest.raises(RecordError, match=r"negative storage offset \(-2\)"):
        read(write_tensor_file(tmp_path / "o.pt", offset=-2, size=(2,), stride=(1,)))


@pytest.mark.parametrize(
    ("offset", "size", "stride", "last"),
    [
        (4, (1,), (1,), 4),  # the first element is past the end
        (2, (2, 2), (2, 1), 5),  # the last row is
        (0, (3,), (2,), 4),  # the stride walks out
    ],
)
def test_a_view_past_the_end_is_refused_and_named(tmp_path, offset, size, stride, last):
    path = write_tensor_file(tmp_path / "o.pt", offset=offset, size=size, stride=stride)
    with pytest.raises(RecordError, match=rf"storage offset {offset} reaches element {last}, but storage 0 holds 4"):
        read(path)


def test_an_offset_past_the_end_of_an_empty_tensor_is_refused(tmp_path):
    with pytest.raises(RecordError, match="storage offset 9 lies past the end of storage 0"):
        read(write_tensor_file(tmp_path / "o.pt", offset=9, size=(0, 3), stride=(3, 1)))


@pytest.mark.parametrize(("size", "stride"), [((2**32, 2**32), (0, 0)), ((2**62, 4), (0, 0)), ((2**70,), (0,))])
def test_size_overflow_is_refused(tmp_path, size, stride):
    with pytest.raises(RecordError, match="size overflow"):
        read(write_tensor_file(tmp_path / "s.pt", size=size, stride=stride))


def test_a_huge_broadcast_tensor_costs_no_memory_and_loads_as_a_record_error(tmp_path):
    """A 4 TiB stride-0 tensor used to be copied (a raw MemoryError). It is a view now,
    and the module's shape check refuses it before anything is materialised."""
    path = write_tensor_file(tmp_path / "h.pt", size=(2**40,), stride=(0,))
    assert read(path).shape == (2**40,)
    with pytest.raises(RecordError, match=r"shape \[1099511627776\] in the record"):
        LinearConfig(1, 2).init(Device.flex()).load_pytorch(path, strict=False)


@pytest.mark.parametrize(
    ("field", "value", "fault"),
    [
        ("size", (4.0,), "size has type float, not int"),
        ("size", 4, "size has type int, not tuple"),
        ("stride", (True,), "stride has type bool, not int"),
        ("offset", "0", "storage offset has type str, not int"),
        ("stride", (1, 1), r"size \[4\] but 2 strides"),
    ],
)
def test_malformed_view_arguments(tmp_path, field, value, fault):
    with pytest.raises(RecordError, match=fault):
        read(write_tensor_file(tmp_path / "m.pt", **{field: value}))


def test_strided_views_equal_an_index_oracle(tmp_path, rng):
    """Every accepted view reads exactly storage[offset + sum(i_k * stride_k)]."""
    storage = rng.standard_normal(40).astype(np.float32)
    for offset, size, stride in [
        (0, (4, 10), (10, 1)),
        (3, (5, 3), (1, 5)),
        (7, (2, 3, 2), (0, 4, 11)),
        (39, (), ()),
        (0, (6,), (7,)),
        (5, (3, 1, 2), (2, 100, 1)),
    ]:
        path = write_tensor_file(
            tmp_path / "v.pt", numel=40, offset=offset, size=size, stride=stride, data=storage.tobytes()
        )
        got = read(path)
        index = offset + sum(i * s for i, s in zip(np.indices(size), stride)) if size else np.array(offset)
        np.testing.assert_array_equal(got, storage.take(index, mode="raise"))
        assert not got.flags.writeable


# ---------------------------------------------------------------------- storages, persistent ids, zip
def test_storage_bytes_must_match_the_declared_count(tmp_path):
    path = Archive([Spec("weight", numel=4, data=b"\0" * 12)]).write(tmp_path / "t.pt")
    with pytest.raises(RecordError, match=r"storage 0 holds 12 bytes, but the pickle declares 4 elements"):
        read(path)


def test_one_storage_declared_with_two_types_is_refused(tmp_path):
    path = Archive([Spec("a"), Spec("b", storage_type="IntStorage")]).write(tmp_path / "t.pt")
    with pytest.raises(RecordError, match="storage 0 is declared twice, as FloatStorage and as IntStorage"):
        read_pytorch(path)


def test_shared_storages_are_read_once(tmp_path):
    """Tied weights: two tensors on one storage."""
    path = Archive(
        [Spec("a", numel=6, size=(2, 3), stride=(3, 1)), Spec("b", numel=6, size=(3, 2), stride=(1, 3))]
    ).write(tmp_path / "t.pt")
    arrays = read_pytorch(path)
    np.testing.assert_array_equal(arrays["b"], arrays["a"].T)


@pytest.mark.parametrize(
    ("key", "fault"),
    [
        ("../data.pkl", "invalid storage key"),
        ("", "invalid storage key"),
        (3, "invalid storage key"),
        ("9", "storage 9 is missing"),
    ],
)
def test_storage_keys(tmp_path, key, fault):
    pickled = b"\x80\x02" + op_ordered_dict([("weight", op_tensor("FloatStorage", key, 4, 0, (4,), (1,)))]) + b"."
    path = Archive([Spec("weight")], pickle_bytes=pickled).write(tmp_path / "k.pt")
    with pytest.raises(RecordError, match=fault):
        read(path)


@pytest.mark.parametrize(
    "pid",
    [
        b"X\x03\x00\x00\x00abcQ",
        b"(X\x07\x00\x00\x00storagetQ",
        b"(tQ",
        b"(X\x07\x00\x00\x00storageJ\x01\x00\x00\x00X\x01\x00\x00\x000X\x03\x00\x00\x00cpuJ\x04\x00\x00\x00tQ",
    ],
)
def test_persistent_ids_of_other_shapes_are_refused(tmp_path, pid):
    pickled = b"\x80\x02" + op_ordered_dict([("weight", pid)]) + b"."
    with pytest.raises(RecordError, match="persistent id|not a storage type"):
        read(Archive([Spec("weight")], pickle_bytes=pickled).write(tmp_path / "p.pt"))


def test_unknown_storage_types_name_the_supported_ones(tmp_path):
    path = write_tensor_file(tmp_path / "c.pt", storage_type="ComplexFloatStorage")
    with pytest.raises(RecordError, match="tensors of type torch.ComplexFloatStorage, which ember cannot read"):
        read(path)


@pytest.mark.parametrize(
    ("global_", "fault"),
    [
        (("os", "system"), "references os.system, which a state dict of tensors does not use"),
        (("__main__", "Net"), "pickled Python object of class __main__.Net"),
        (("torch.nn.modules.linear", "Linear"), r"torch.save\(model.state_dict\(\), path\)"),
        (("builtins", "eval"), "references builtins.eval, which a state dict of tensors does not use"),
        (("torch._utils", "_rebuild_qtensor"), "references torch._utils._rebuild_qtensor"),
    ],
)
def test_globals_outside_a_state_dict_are_refused(tmp_path, global_, fault):
    pickled = b"\x80\x02" + op_global(*global_) + op_value(("echo pwned",)) + b"R."
    with pytest.raises(RecordError, match=fault):
        read_pytorch(Archive([], pickle_bytes=pickled).write(tmp_path / "g.pt"))


@pytest.mark.parametrize("opcode", [b"\x81", b"\x92", b"\x82\x01", b"\x97", b"\x98"])
def test_opcodes_that_build_arbitrary_objects_are_refused(tmp_path, opcode):
    pickled = b"\x80\x05" + op_global("collections", "OrderedDict") + b")" + opcode + b"."
    with pytest.raises(RecordError, match="opcode"):
        read_pytorch(Archive([], pickle_bytes=pickled).write(tmp_path / "o.pt"))


@pytest.mark.parametrize(
    ("state", "fault"),
    [
        (b"(N}X\x05\x00\x00\x00arrayJ\x05\x00\x00\x00st", "tries to set attribute 'array' of a Tensor"),
        (b"(N}X\t\x00\x00\x00__class__N\x85st", "tries to set attribute '__class__'"),
        (b"}X\x01\x00\x00\x00aNs", "pickle is malformed"),  # no __dict__ to update
        (b"(N}t", None),  # an empty state changes nothing
    ],
)
def test_build_cannot_change_the_readers_objects(tmp_path, state, fault):
    """BUILD would set attributes on a rebuilt tensor (e.g. swap its array)."""
    tensor = op_tensor("FloatStorage", "0", 4, 0, (4,), (1,))
    pickled = b"\x80\x02" + op_ordered_dict([("weight", tensor + state + b"b")]) + b"."
    path = Archive([Spec("weight")], pickle_bytes=pickled).write(tmp_path / "b.pt")
    if fault is None:
        assert read(path).tolist() == [0.0, 1.0, 2.0, 3.0]
    else:
        with pytest.raises(RecordError, match=fault):
            read(path)


@pytest.mark.parametrize("order", [b"little", b"big"])
def test_byte_order(tmp_path, order):
    values = np.array([1.5, -2.0, 3.25], dtype=np.float32)
    data = values.astype(">f4" if order == b"big" else "<f4").tobytes()
    path = Archive([Spec("weight", numel=3, size=(3,), data=data)], byteorder=order).write(tmp_path / "b.pt")
    np.testing.assert_array_equal(read(path), values)
    halves = Archive(
        [Spec("weight", storage_type="BFloat16Storage", numel=2, size=(2,), data=b"\x3f\x80\x40\x00")], byteorder=b"big"
    ).write(tmp_path / "h.pt")
    assert read(halves).astype(np.float32).tolist() == [1.0, 2.0]


def test_an_unknown_byte_order_is_refused(tmp_path):
    with pytest.raises(RecordError, match="byteorder record says b'middle'"):
        read(Archive([Spec("weight")], byteorder=b"middle").write(tmp_path / "b.pt"))


def test_zip_level_faults(tmp_path):
    good = Archive([Spec("weight")])
    twice = tmp_path / "twice.pt"
    good.write(twice)
    with zipfile.ZipFile(twice, "a") as archive, pytest.warns(UserWarning, match="Duplicate name"):
        archive.writestr("archive/data/0", b"\0" * 16)
    with pytest.raises(RecordError, match="appears twice"):
        read(twice)
    squeezed = tmp_path / "bz2.pt"
    with zipfile.ZipFile(squeezed, "w", zipfile.ZIP_BZIP2) as archive:
        for name, data in good.members().items():
            archive.writestr(name, data)
    with pytest.raises(RecordError, match="compression method 12"):
        read(squeezed)
    deflated = tmp_path / "deflated.pt"
    with zipfile.ZipFile(deflated, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in good.members().items():
            archive.writestr(name, data)
    assert read(deflated).tolist() == [0.0, 1.0, 2.0, 3.0]
    two = Archive([Spec("weight")], extra={"other/data.pkl": good.pickle()}).write(tmp_path / "two.pt")
    with pytest.raises(RecordError, match="2 data.pkl members"):
        read(two)
    data = bytearray(good.write(tmp_path / "flip.pt").read_bytes())
    data[data.index(b"archive/data/0") + len(b"archive/data/0") + 5] ^= 0xFF  # a storage byte: its CRC fails
    (tmp_path / "flip.pt").write_bytes(bytes(data))
    with pytest.raises(RecordError, match="corrupt"):
        read(tmp_path / "flip.pt")


def test_structure_faults(tmp_path):
    tensor = op_tensor("FloatStorage", "0", 4, 0, (4,), (1,))
    cases = {
        "cycle": (b"\x80\x02}q\x00X\x01\x00\x00\x00ah\x00s.", "shared or cyclic"),
        "deep": (b"\x80\x02" + b"}X\x01\x00\x00\x00a" * 100 + tensor + b"s" * 100 + b".", "more than 64 deep"),
        "key": (b"\x80\x02}" + op_value((1, 2)) + tensor + b"s.", "key of type tuple"),
        "clash": (
            b"\x80\x02}X\x03\x00\x00\x00a.b" + tensor + b"sX\x01\x00\x00\x00a}X\x01\x00\x00\x00b" + tensor + b"ss.",
            "two entries of the file flatten to the key 'a.b'",
        ),
        "single": (b"\x80\x02" + tensor + b".", "a single tensor"),
        "empty": (b"\x80\x02}.", "holds no tensors"),
        "truncated": (b"\x80\x02}X\x05\x00\x00\x00ab", "pickle is malformed"),
    }
    for name, (pickled, fault) in cases.items():
        path = Archive([Spec("weight")], pickle_bytes=pickled).write(tmp_path / f"{name}.pt")
        with pytest.raises(RecordError, match=fault):
            read_pytorch(path)


def test_the_legacy_pickle_shape_is_refused_as_not_a_zip(tmp_path):
    path = tmp_path / "legacy.pt"
    path.write_bytes(pickle.dumps({"weight": [1.0, 2.0]}))
    with pytest.raises(RecordError, match="not a zip-format PyTorch file"):
        read_pytorch(path)


def test_the_fuzzer_finds_only_record_errors():
    """Hypothesis fuzz of the pickle opcodes, view arguments and zip bytes, in a child
    process so that a crash fails the test instead of killing the worker."""
    done = subprocess.run(
        [sys.executable, "-X", "faulthandler", "-m", "tests.module.fuzz_torch_pickle"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, f"rc {done.returncode}\n{done.stdout[-3000:]}\n{done.stderr[-5000:]}"
    assert "fuzzed" in done.stdout


# ---------------------------------------------------------------------- real torch files
class Net(Module):
    fc: Linear
    ln: LayerNorm
    bn: BatchNorm
    gn: GroupNorm
    rms: RmsNorm

    @classmethod
    def new(cls, device):
        return cls(
            fc=LinearConfig(4, 6).init(device),
            ln=LayerNormConfig(6).init(device),
            bn=BatchNormConfig(6).init(device),
            gn=GroupNormConfig(2, 6).init(device),
            rms=RmsNormConfig(6, epsilon=1e-6).init(device),
        )

    def forward(self, x):
        return self.rms(self.gn(self.bn(self.ln(self.fc(x)))))


def torch_net(torch):
    class TorchNet(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = torch.nn.Linear(4, 6)
            self.ln = torch.nn.LayerNorm(6)
            self.bn = torch.nn.BatchNorm1d(6)
            self.gn = torch.nn.GroupNorm(2, 6)
            self.rms = torch.nn.RMSNorm(6, eps=1e-6)

        def forward(self, x):
            return self.rms(self.gn(self.bn(self.ln(self.fc(x)))))

    torch.manual_seed(0)
    net = TorchNet()
    with torch.no_grad():
        for p in net.parameters():
            p.copy_(torch.randn_like(p))
        net.train()
        for _ in range(3):
            net(torch.randn(8, 4) * 3 + 1)  # moves the running statistics
    return net.eval()


@pytest.mark.torch
def test_norm_layers_load_with_pytorch_names_by_default(torch, tmp_path):
    net = torch_net(torch)
    path = tmp_path / "net.pt"
    torch.save(net.state_dict(), path)
    model = Net.new(Device.flex()).load_pytorch(path)
    x = np.random.default_rng(3).standard_normal((5, 4)).astype(np.float32)
    ours = model(Tensor.from_data(x, device=Device.flex())).to_numpy()
    theirs = net(torch.from_numpy(x)).detach().numpy()
    np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(model.bn.running_var.value().to_numpy(), net.bn.running_var.numpy())
    np.testing.assert_array_equal(model.ln.gamma.val().to_numpy(), net.ln.weight.detach().numpy())
    with pytest.raises(RecordError, match=r"in Net, not in the file: ln.gamma, ln.beta"):
        Net.new(Device.flex()).load_pytorch(path, adapt_names=False)


@pytest.mark.torch
def test_skip_adds_to_the_default_skips(torch, tmp_path):
    net = torch_net(torch)
    path = tmp_path / "net.pt"
    torch.save({**net.state_dict(), "extra.scale": torch.ones(1)}, path)
    model = Net.new(Device.flex()).load_pytorch(path, skip=[r"^extra\."])  # num_batches_tracked still skipped
    np.testing.assert_array_equal(model.fc.weight.val().to_numpy(), net.fc.weight.detach().numpy().T)
    with pytest.raises(RecordError, match=r"in the file, not in Net: extra.scale\n.*skip=") as info:
        Net.new(Device.flex()).load_pytorch(path)
    assert "num_batches_tracked" not in str(info.value)


@pytest.mark.torch
def test_a_name_mismatch_suggests_the_remap(torch, tmp_path):
    net = torch.nn.Sequential(
        torch.nn.Linear(4, 6),
        torch.nn.LayerNorm(6),
        torch.nn.BatchNorm1d(6),
        torch.nn.GroupNorm(2, 6),
        torch.nn.RMSNorm(6, eps=1e-6),
    )
    path = tmp_path / "seq.pt"
    torch.save({"model": net.state_dict()}, path)
    with pytest.raises(RecordError) as info:
        Net.new(Device.flex()).load_pytorch(path, top_level_key="model")
    message = str(info.value)
    assert "in Net, not in the file: fc.weight, fc.bias, ln.gamma" in message
    assert "in the file, not in Net: 0.weight, 0.bias, 1.weight" in message
    assert "strict=False loads only the keys that match" in message
    rules = [(r"^0\.", "fc."), (r"^1\.", "ln."), (r"^2\.", "bn."), (r"^3\.", "gn."), (r"^4\.", "rms.")]
    assert "key_remap=[" + ", ".join(f'(r"{p}", {r!r})' for p, r in rules) + "]" in message
    model = Net.new(Device.flex()).load_pytorch(path, top_level_key="model", key_remap=rules)  # the hint works
    np.testing.assert_array_equal(model.gn.beta.val().to_numpy(), net[3].bias.detach().numpy())


def test_suggest_remap_collapses_a_common_prefix():
    model = Net.new(Device.flex())
    missing = [path for path, _ in model.named_params()]
    theirs = ["model." + k.replace("gamma", "weight").replace("beta", "bias") for k in missing]
    assert suggest_remap(model, missing, theirs) == [(r"^model\.", "")]
    assert suggest_remap(model, missing, ["something.else"]) == []


@pytest.mark.torch
def test_a_pickled_whole_module_is_refused_with_the_fix(torch, tmp_path):
    net = torch.nn.Sequential(torch.nn.Linear(4, 6))
    path = tmp_path / "whole.pt"
    torch.save(net, path)
    with pytest.raises(RecordError) as info:
        Net.new(Device.flex()).load_pytorch(path)
    message = str(info.value)
    assert "torch.nn.modules.container.Sequential" in message and "not a state dict" in message
    assert "torch.save(model.state_dict(), path)" in message and "corrupt" not in message


@pytest.mark.torch
def test_torch_views_and_dtypes_round_trip(torch, tmp_path):
    base = torch.arange(24, dtype=torch.float32)
    tensors = {
        "transposed": base.reshape(4, 6).t(),
        "sliced": base[5:17:3],
        "expanded": torch.arange(3.0).expand(4, 3),
        "scalar": torch.tensor(2.5, dtype=torch.float64),
        "empty": torch.zeros(0, 3),
        "half": base.half(),
        "bf16": base.bfloat16().reshape(2, 12),
        "long": torch.arange(5),
        "bool": base > 10,
        "int8": base.to(torch.int8),
    }
    path = tmp_path / "views.pt"
    torch.save(tensors, path)
    arrays = read_pytorch(path)
    for key, tensor in tensors.items():
        expected = tensor.float().numpy() if tensor.dtype == torch.bfloat16 else tensor.numpy()
        np.testing.assert_array_equal(np.asarray(arrays[key], dtype=expected.dtype), expected, err_msg=key)
        assert arrays[key].shape == tuple(tensor.shape)


def test_ember_module_imports_no_layer_above_it():
    """Layers declare their PyTorch adaptation, so the loader never imports ember.nn."""
    import ast

    above = ("ember.nn", "ember.optim", "ember.data", "ember.train")
    for path in sorted((ROOT / "ember" / "module").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = (
                [node.module or ""]
                if isinstance(node, ast.ImportFrom)
                else [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else []
            )
            assert not [n for n in names if n.startswith(above)], f"{path.name} imports {names}"
