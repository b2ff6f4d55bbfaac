"""Every kernel the cuda backend can emit compiles with NVRTC, with no GPU.

The catalogue (:mod:`ember.backend.cuda.catalog`) runs every op of the backend
over every dtype it is defined for and each layout class the generator tells apart,
on a recording runtime. Its kernels are compiled in batches (one compilation unit per
batch, each kernel in its own namespace) to cubin for sm_80 and sm_90, with ptxas's
resource report checked against a budget; the same compile gives each batch's PTX.
"""

from __future__ import annotations

import functools

import pytest

from tests.cuda_backend.conftest import require_nvrtc

pytestmark = pytest.mark.nvrtc

BATCH = 100
#: Batches of the catalogue (about 1250 kernels with int8 and uint64).
BATCHES = 13
#: ptxas budget per kernel: registers (a 256-thread block may use at most 255; 96 keeps
#: two blocks per SM with room), no spills, and at most the 40-byte frame that CUDA's
#: float64 sin/cos/tan keep for their large-argument reduction (every other kernel has none).
MAX_REGISTERS = 96
MAX_SPILL_BYTES = 0
MAX_STACK_BYTES = 40


@functools.lru_cache(maxsize=1)
def _batches() -> tuple[list[str], list[list[str]]]:
    from ember.backend.cuda.catalog import batches, kernels

    found = sorted(kernels().values())
    names = [[name for name, _ in found[i : i + BATCH]] for i in range(0, len(found), BATCH)]
    return batches(found, BATCH), names


def test_catalogue_covers_every_op_and_dtype():
    from ember.backend.cuda.catalog import kernels
    from ember.backend.ops import ArgReduceOp, CumulativeOp

    found = kernels()
    assert len(found) <= BATCH * BATCHES, "raise BATCHES: the catalogue outgrew the compile tests"
    keys = [k for k in found]
    names = [name for name, _ in found.values()]
    for op in ArgReduceOp:
        assert any(n.startswith(f"{op}_") for n in names)
    for op in CumulativeOp:
        assert any(n.startswith(f"{op}_") for n in names)
    for prefix in (
        "philox_f32",
        "philox_f64",
        "philox_bf16",
        "argsort_f16",
        "gather_i64",
        "scatter_add_f64",
        "select_add_i32",
        "argwhere_r3",
        "matmul_i64",
        "arange_u8",
    ):
        assert prefix in names
    ir = [k for k in keys if k[0] == "ir"]
    assert len(ir) > 600  # unary, binary, where, clamp, cast, full, copies and reductions
    # 64-bit indexing and every reduction schedule are emitted.
    assert any(k[1][0] == "long long" for k in ir)
    assert {k[1][3] for k in ir} >= {0, 32, 256}


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
@pytest.mark.parametrize("batch", range(BATCHES))
def test_ptx_cubin_and_resources(arch, batch):
    """One NVRTC compile per batch and architecture gives the PTX (``.target sm_XX``, what
    the driver JIT-compiles on a later GPU) and the cubin (what runs on sm_XX), and
    ptxas's resource report for each kernel."""
    require_nvrtc()
    from ember.backend.cuda.nvrtc import compile_ptx_and_cubin, resources

    sources, names = _batches()
    if batch >= len(sources):
        return
    ptx, cubin, log = compile_ptx_and_cubin(sources[batch], arch, extra=("-Xptxas=-v",))
    assert cubin[:4] == b"\x7fELF"
    text = ptx.decode(errors="replace")
    assert f".target {arch}" in text
    for name in names[batch]:
        assert f".entry {name}(" in text
    report = resources(log)
    assert set(report) == set(names[batch])
    for name, r in report.items():
        assert r.registers <= MAX_REGISTERS, f"{name} uses {r.registers} registers on {arch}"
        assert r.spill_stores + r.spill_loads <= MAX_SPILL_BYTES, f"{name} spills on {arch}: {r}"
        assert r.stack <= MAX_STACK_BYTES, f"{name} uses a stack frame on {arch}: {r}"


def test_every_protocol_op_has_a_cuda_lowering():
    from ember.backend.base import Backend
    from ember.backend.cuda.backend import CudaBackend
    from ember.backend.cuda.lowering import LOWERED_BINARY, LOWERED_UNARY
    from ember.backend.ops import BinaryOp, UnaryOp

    assert set().union(*LOWERED_UNARY.values()) == set(UnaryOp)
    assert set().union(*LOWERED_BINARY.values()) == set(BinaryOp)
    abstract = {name for name in dir(Backend) if getattr(getattr(Backend, name), "__isabstractmethod__", False)}
    # Defined by the CUDA backend itself (its classes: the backend and its op mixins), not inherited defaults.
    own = set().union(*(vars(c) for c in CudaBackend.__mro__ if c.__module__.startswith("ember.backend.cuda.")))
    assert not CudaBackend.__abstractmethods__ and abstract <= own
