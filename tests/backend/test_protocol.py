"""The op registry (``ember.backend.ops``) against every backend's tables.

Runs on the CPU only: cube's WGSL tables are plain data, imported without wgpu.
"""

from __future__ import annotations

import inspect

import pytest

from ember.backend import linalg_host, ops
from ember.backend.autodiff.rules import elementwise
from ember.backend.cube import wgsl
from ember.backend.cube.kernels import reduce as cube_reduce
from ember.backend.cube.kernels import scan as cube_scan
from ember.backend.flex import backend as flex
from ember.backend.ops import ArgReduceOp, BinaryOp, CumulativeOp, LinalgOp, ReduceOp, UnaryOp

# (table, the enum it must cover exactly)
COVERING_TABLES = {
    "flex unary": (flex._UNARY, UnaryOp),
    "flex binary": (flex._BINARY, BinaryOp),
    "flex reduce": (flex._REDUCE_UFUNC, ReduceOp),
    "flex cumulative": (flex._CUMULATIVE, CumulativeOp),
    "cube reduce combine": (cube_reduce._COMBINE, ReduceOp),
    "cube reduce identity": (cube_reduce._INIT, ReduceOp),
    "cube scan combine": (cube_scan._COMBINE, CumulativeOp),
    "cube scan identity": (cube_scan._IDENTITY, CumulativeOp),
    "linalg host kernels": (linalg_host.HOST, LinalgOp),
}


@pytest.mark.parametrize("name", sorted(COVERING_TABLES))
def test_table_covers_its_enum(name):
    table, enum = COVERING_TABLES[name]
    missing = set(enum) - set(table)
    unknown = {key for key in table if not isinstance(key, enum)}
    assert not missing, f"{name} lacks {sorted(missing)}"
    assert not unknown, f"{name} has keys that are not {enum.__name__} members: {sorted(map(str, unknown))}"


def test_cube_elementwise_tables_cover_the_protocol():
    # cube's tables also hold its fused ops (relu, sigmoid) and the kernels of ComplexOp and
    # Backend.complex (complex64's parts), which are plain strings, and the op table's
    # kernel-only functions (KernelFn).
    from ember.backend.kernel.op_table import KernelFn

    parts = {"real", "imag", "conj", "cabs", "angle"}
    assert set(UnaryOp) <= set(wgsl.UNARY)
    assert set(BinaryOp) <= set(wgsl.BINARY)
    assert {k for k in wgsl.UNARY if not isinstance(k, UnaryOp)} == {"relu", "sigmoid"} | parts | set(KernelFn)
    assert {k for k in wgsl.BINARY if not isinstance(k, BinaryOp)} == {"complex"}
    assert wgsl.BOOL_RESULT == ops.BOOL_RESULT_BINARY | ops.BOOL_RESULT_UNARY


def test_autodiff_tables_name_only_protocol_ops():
    assert all(isinstance(k, UnaryOp) for k in elementwise.UNARY)
    assert all(isinstance(k, BinaryOp) for k in elementwise.BINARY)
    assert not set(elementwise.BINARY) & ops.COMPARISON_OPS  # comparisons have no gradient
    # Every float op with a derivative has a rule; the others give untracked results.
    no_gradient = ops.BOOL_RESULT_UNARY | {UnaryOp.BITWISE_NOT}
    assert set(UnaryOp) - set(elementwise.UNARY) == no_gradient


def test_enums_are_strings_equal_to_their_values():
    for enum in (UnaryOp, BinaryOp, ReduceOp, ArgReduceOp, CumulativeOp):
        for member in enum:
            assert member == member.value and str(member) == member.value and f"{member}" == member.value
            assert hash(member) == hash(member.value)
    assert ops.COMPARISON_OPS <= ops.BOOL_RESULT_BINARY <= set(BinaryOp)
    assert set(UnaryOp) >= ops.BOOL_RESULT_UNARY


def test_every_abstract_primitive_is_implemented_by_flex_and_autodiff():
    from ember.backend.autodiff import AutodiffBackend
    from ember.backend.base import Backend
    from ember.backend.flex import FlexBackend

    abstract = {name for name, member in inspect.getmembers(Backend) if getattr(member, "__isabstractmethod__", False)}
    assert abstract, "the protocol declares its primitives as abstract methods"
    assert not FlexBackend.__abstractmethods__
    assert not AutodiffBackend.__abstractmethods__


def test_cube_implements_every_abstract_primitive():
    from ember.backend.cube.backend import CubeBackend

    assert not CubeBackend.__abstractmethods__


def test_op_enums_behave_like_enums():
    import copy
    import pickle

    assert UnaryOp("exp") is UnaryOp.EXP and UnaryOp["EXP"] is UnaryOp.EXP
    assert UnaryOp.EXP.name == "EXP" and UnaryOp.EXP.value == "exp" and repr(UnaryOp.EXP) == "<UnaryOp.EXP: 'exp'>"
    assert pickle.loads(pickle.dumps(BinaryOp.ADD)) is BinaryOp.ADD and copy.deepcopy(ReduceOp.SUM) is ReduceOp.SUM
    assert len(ArgReduceOp) == 2 and "cumsum" in CumulativeOp and "sum" not in CumulativeOp
    with pytest.raises(ValueError, match="not a valid UnaryOp"):
        UnaryOp("nope")
    with pytest.raises(KeyError):
        UnaryOp["NOPE"]
    assert not isinstance(BinaryOp.ADD, UnaryOp)


def _fused_methods(cls) -> set[str]:
    """The optional methods of ``cls`` whose default returns NotImplemented."""
    import dis

    names = set()
    for name, member in vars(cls).items():
        if callable(member) and not getattr(member, "__isabstractmethod__", False):
            loads = {i.argval for i in dis.get_instructions(member) if i.opname in ("LOAD_GLOBAL", "LOAD_NAME")}
            if "NotImplemented" in loads and name != "__init_subclass__":
                names.add(name)
    return names


def test_fused_ops_are_the_optional_backend_methods():
    """Every FusedOp names an optional Backend method (default NotImplemented) and each
    such method is a FusedOp, but for the backward kernels (FUSED_BACKWARD_KERNELS, called
    by the ops' autodiff rules)."""
    from ember.backend.base import Backend

    assert _fused_methods(Backend) == {str(op) for op in ops.FusedOp} | set(ops.FUSED_BACKWARD_KERNELS)
    for op in ops.FusedOp:
        assert isinstance(op, str) and op.value == str(op)
        assert inspect.getdoc(getattr(Backend, op)), f"Backend.{op} needs a docstring"


def test_every_fused_op_has_one_composite_and_a_flex_kernel():
    from ember.backend.base import Backend
    from ember.backend.flex import FlexBackend
    from ember.tensor.fused import composite_of

    for op in ops.FusedOp:
        assert callable(composite_of(op)), op
        assert getattr(FlexBackend, op) is not getattr(Backend, op), f"flex has no kernel for {op}"


def test_a_composite_is_registered_once():
    from ember.backend.composites import COMPOSITES, composite
    from ember.errors import EmberError

    with pytest.raises(EmberError, match="'relu' already has a composite"):
        composite("relu")(lambda ops, x: x)
    assert COMPOSITES["relu"].__module__ == "ember.backend.composites.activation"
