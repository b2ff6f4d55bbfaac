"""Code generation: a schedule's compiled steps as one LLVM module.

Each run of consecutive compiled steps (a *segment*) becomes one exported function
``void <prefix>_s<n>(i8* arena, i8** ext, double* scalars)``: it computes every
buffer's address (an arena offset, or read through ``ext``, where a run stores the
numpy arrays it passes: see :mod:`~ember.backend.kernel.llvm.arrays`) and calls
one internal function per step with the buffers as ``noalias`` arguments (a step
never writes a buffer it reads, so the vectoriser needs no overlap checks); LLVM
inlines them.

A kernel is a loop nest over its iteration space (:mod:`ember.backend.kernel.llvm.loops`).

Matmuls call BLAS (``cblas_?gemm`` through an address registered with the JIT)
above a size threshold (:data:`~ember.backend.fusion.llvm.support.BLAS_THRESHOLD`
multiply-adds by default) and
run generated loops below it. A product with one row or one column (a decode step's
projections at batch 1) calls ``cblas_?gemv`` instead, as numpy's matmul does:
OpenBLAS's gemm with ``M = 1`` packs the whole matrix on every call (about 4x
gemv's time for a ``[384, 16000]`` language-model head).
"""

from __future__ import annotations

import ctypes

import llvmlite.binding as llvm_binding
import numpy as np
from llvmlite import ir

from ember.backend.flex import blas as blas_mod
from ember.backend.fusion.llvm import sgemm as sgemm_mod
from ember.backend.fusion.llvm.chains import chain_scratch, emit_chain
from ember.backend.fusion.llvm.library import LIBRARY, Emitter
from ember.backend.fusion.llvm.sgemm import (
    direct_convolutions,
    emit_repacked,
    emit_transposed,
    host_blocking,
    inline_form,
    own_sgemm,
    repacks,
    transposes,
)
from ember.backend.fusion.llvm.support import blas_layout, folds, gemv_args
from ember.backend.fusion.steps import ConvChain, Library, Schedule
from ember.backend.kernel.llvm import small_gemm
from ember.backend.kernel.llvm.builder import KernelBuilder
from ember.backend.kernel.llvm.gemm import gemm_kernel
from ember.backend.kernel.llvm.loops import KernelEmitter, Loops, outer_extent, scalar_base
from ember.backend.kernel.llvm.mathlib import F32, F64, I8, I32, I64, REDUCE_FLAGS, MathLib, mem_type, reg_type
from ember.backend.kernel.llvm.ops import OpEmitter
from ember.backend.kernel.llvm.same_code import SameCode
from ember.backend.kernel.llvm.small_gemm import Operand
from ember.backend.kernel.steps import Kernel, Matmul
from ember.backend.kernel.views import View, size_of

PTR = ir.PointerType()
VOID = ir.VoidType()

#: The addresses a plan's code reads from its module's table global
#: (``<prefix>_tables``), in this order: the arena, the ext pointer table, the
#: run-time scalars and the status words. They are not constants of the IR, so the
#: same graph gives the same IR in every process and its machine code can be kept
#: on disk (:mod:`~ember.backend.kernel.llvm.object_cache`).
TABLES = ("arena", "ext", "scalars", "status")

#: A step writing at least this many elements stays a function of its own (``noinline``):
#: the segment calls it. Inlined into one segment, W4's step is one function that the O3
#: pipeline optimises in superlinear time; out of line, its first three compiled steps
#: took 2.7-3.0 s of CPU instead of 4.5-5.2 s (``benchmarks/train_step.py W4``'s
#: compile, two runs each, load 15), while a call costs nanoseconds against the
#: microseconds such a step runs. Smaller steps (W1's, optimizer updates of small
#: parameters) are still inlined.
OUTLINE_WORK = 8192


def write_tables(address: int, arena: int, ext: int, scalars: int, status: int) -> None:
    """Writes a loaded module's tables (see :data:`TABLES`) at ``address``, the address
    of its ``<prefix>_tables`` global."""
    values = {"arena": arena, "ext": ext, "scalars": scalars, "status": status}
    (ctypes.c_void_p * len(TABLES)).from_address(address)[:] = [values[name] for name in TABLES]


class ModuleBuilder:
    """Builds the module of one plan (see the module docstring)."""

    def __init__(
        self,
        schedule: Schedule,
        prefix: str,
        arena: dict[int, int],
        ext: dict[int, int],
        scratch: dict[int, int],
        blas: blas_mod.Blas | None,
        data_offset: int | None = None,
        blas_threshold: int = 0,
        aliases: dict[int, int] | None = None,
        stop_on_failure: bool = False,
    ):
        from ember.backend.kernel.llvm import jit

        self.schedule = schedule
        self.prefix = prefix
        self.arena = arena  # buffer -> byte offset in the arena
        self.ext = ext  # buffer -> slot in the ext pointer table
        self.data_offset = data_offset  # ext holds array objects: their data pointer is at this offset
        self.scratch = scratch  # step index -> scratch buffer id
        self.aliases = aliases or {}  # buffer -> the buffer whose storage it shares (a donated input)
        self.stop_on_failure = stop_on_failure  # a failed check ends the segment (else it runs on, clamped)
        self.blas = blas
        self.blas_threshold = blas_threshold
        self.module = ir.Module(name=prefix)
        self.module.triple = jit.triple()
        self.module.data_layout = jit.data_layout()
        self.vector_width = jit.vector_width()
        self.math = MathLib(self.module)
        self.ops = OpEmitter(self.math)
        self.same_code = SameCode(self.module)  # kernels with the same code: one function
        self._gemm: dict[str, ir.Function] = {}
        self._gemv: dict[str, ir.Function] = {}
        self._products: dict[tuple, ir.Function] = {}
        self._packs: dict[str, ir.GlobalVariable] = {}
        #: Whether float32 products run ember's own (:mod:`.sgemm`): decided once per plan.
        self.own_products = own_sgemm(schedule.graph) is not None
        #: Whether small-window stride-1 convolutions run the direct kernel (:mod:`.direct`).
        self.direct_convs = direct_convolutions()  # true wherever own_products is
        #: The plan's tables (see :data:`TABLES`), written by the plan once the module is loaded.
        self.tables_name = f"{prefix}_tables"
        self.tables = ir.GlobalVariable(self.module, ir.ArrayType(PTR, len(TABLES)), name=self.tables_name)
        self.tables.initializer = ir.Constant(ir.ArrayType(PTR, len(TABLES)), None)

    def _table(self, b: ir.IRBuilder, name: str) -> ir.Value:
        """The address the plan wrote in its table ``name`` (one of :data:`TABLES`)."""
        slot = b.gep(self.tables, [ir.Constant(I32, 0), ir.Constant(I32, TABLES.index(name))])
        return b.load(slot, typ=PTR, align=8)

    # ------------------------------------------------------------------ segments
    def _tune(self, fn: ir.Function) -> None:
        """Target attributes of a function (llvmlite lists only LLVM's keyword
        attributes, so the string attribute is added to the set directly)."""
        fn.attributes.add("nounwind")
        if self.vector_width:
            set.add(fn.attributes, f'"prefer-vector-width"="{self.vector_width}"')

    def _outline(self, fn: ir.Function, work: int) -> None:
        """Keeps a step of at least :data:`OUTLINE_WORK` elements out of line (see there)."""
        if work >= OUTLINE_WORK:
            fn.attributes.add("noinline")

    def _written(self, step: Library | ConvChain) -> int:
        """The elements a step writes (its work, roughly)."""
        return sum(size_of(self.schedule.buffers[buf].shape) for buf in step.writes())

    def segment(self, name: str, steps: list[int]) -> None:
        fn = ir.Function(self.module, ir.FunctionType(VOID, [PTR, PTR, PTR]), name=name)
        self._tune(fn)
        arena, ext, scalars = fn.args
        b = ir.IRBuilder(fn.append_basic_block("entry"))
        pointers: dict[int, ir.Value] = {}

        def pointer(buf: int) -> ir.Value:
            buf = self.aliases.get(buf, buf)
            if buf not in pointers:
                if buf in self.arena:
                    pointers[buf] = b.gep(arena, [ir.Constant(I64, self.arena[buf])], source_etype=I8)
                else:
                    slot = b.gep(ext, [ir.Constant(I64, self.ext[buf])], source_etype=PTR)
                    pointer = b.load(slot, typ=PTR, align=8)
                    if self.data_offset is not None:  # a numpy array object: read its data pointer
                        field = b.gep(pointer, [ir.Constant(I64, self.data_offset)], source_etype=I8)
                        pointer = b.load(field, typ=PTR, align=8)
                    pointers[buf] = pointer
            return pointers[buf]

        for index in steps:
            step = self.schedule.steps[index]
            if isinstance(step, Kernel):
                if size_of(step.space) == 0:
                    continue
                buffers = sorted(step.reads() | step.writes())
                storage = sorted({self.aliases.get(buf, buf) for buf in buffers})
                scratch = self.scratch.get(index)
                args = [pointer(buf) for buf in storage]
                if scratch is not None:
                    args.append(pointer(scratch))
                base, extent = scalar_base(step), outer_extent(step)
                kernel = self.kernel(f"{name}_k{index}", step, buffers, storage, scratch is not None, base, extent)
                self._outline(kernel, size_of(step.space))
                args.append(b.gep(scalars, [ir.Constant(I64, base)], source_etype=F64) if base else scalars)
                b.call(kernel, args + ([] if extent is None else [ir.Constant(I64, extent)]))
            elif isinstance(step, Library):
                buffers = sorted(step.reads() | step.writes())
                regions = self._regions(step)
                args = [pointer(buf) for buf in buffers]
                if regions:
                    base = pointer(self.scratch[index])
                    args += [b.gep(base, [ir.Constant(I64, regions[r])], source_etype=I8) for r in sorted(regions)]
                library = self.library(f"{name}_l{index}", step, index, buffers, sorted(regions))
                self._outline(library, self._written(step))
                b.call(library, args + [scalars])
                if LIBRARY[step.node.op].checks and self.stop_on_failure:
                    # A failed index check stops the segment (see library.py).
                    status = self._table(b, "status")
                    with b.if_then(b.icmp_signed("!=", b.load(status, typ=I64), ir.Constant(I64, 0)), likely=False):
                        b.ret_void()
            elif isinstance(step, ConvChain):
                buffers = sorted(step.reads() | step.writes())
                regions = self._chain_regions(step)
                args = [pointer(buf) for buf in buffers]
                if regions:  # none: a pointwise convolution whose values later steps read
                    base = pointer(self.scratch[index])
                    args += [b.gep(base, [ir.Constant(I64, regions[r])], source_etype=I8) for r in sorted(regions)]
                chain = self.chain(f"{name}_c{index}", step, buffers, sorted(regions))
                self._outline(chain, self._written(step))
                b.call(chain, args + [scalars])
            else:
                assert isinstance(step, Matmul), f"an unknown step {type(step).__name__}"
                kernel = self.matmul(f"{name}_m{index}", step)
                if kernel is not None:
                    b.call(kernel, [pointer(step.a[0]), pointer(step.b[0]), pointer(step.out)])
        b.ret_void()

    def entry(self, name: str, segment: str, incref: int = 0) -> None:
        """The segment ``segment`` called with the plan's arena, ext and scalar tables
        read from the module's table global: ``void
        name(void)`` (a ctypes call without arguments costs about half as much), or,
        given the address of CPython's ``Py_IncRef``, a C function of Python's
        ``METH_NOARGS`` convention, ``PyObject *name(PyObject *self, PyObject *)``,
        which returns ``self`` (a new reference)."""
        native = bool(incref)
        fn = ir.Function(
            self.module, ir.FunctionType(PTR, [PTR, PTR]) if native else ir.FunctionType(VOID, []), name=name
        )
        self._tune(fn)
        b = ir.IRBuilder(fn.append_basic_block("entry"))
        target = self.module.get_global(segment)
        b.call(target, [self._table(b, table) for table in ("arena", "ext", "scalars")])
        if not native:
            b.ret_void()
            return
        symbol = "ember_py_incref"
        inc = self.module.globals.get(symbol)
        if inc is None:
            llvm_binding.add_symbol(symbol, incref)
            inc = ir.Function(self.module, ir.FunctionType(VOID, [PTR]), name=symbol)
        b.call(inc, [fn.args[0]])
        b.ret(fn.args[0])

    def _function(self, name: str, n_pointers: int, extra: list[ir.Type]) -> ir.Function:
        fn = ir.Function(self.module, ir.FunctionType(VOID, [PTR] * n_pointers + extra), name=name)
        fn.linkage = "internal"
        self._tune(fn)
        for arg in fn.args[:n_pointers]:
            arg.add_attribute("noalias")
        return fn

    # ------------------------------------------------------------------ kernels
    def kernel(
        self,
        name: str,
        kernel: Kernel,
        buffers: list[int],
        storage: list[int],
        has_scratch: bool,
        first_scalar: int,
        extent: int | None,
    ) -> ir.Function:
        """A kernel's function: one ``noalias`` pointer per distinct storage (a donated
        output and the input it is written into share one), the scalars from slot
        ``first_scalar`` on, and the outer extent where it is an argument; or an earlier
        kernel's function with the same code (see :mod:`~ember.backend.kernel.llvm.same_code`)."""
        n = len(storage) + int(has_scratch)
        fn = self._function(name, n, [PTR] + ([] if extent is None else [I64]))
        by_storage = dict(zip(storage, fn.args))
        base = {buf: by_storage[self.aliases.get(buf, buf)] for buf in buffers}
        scratch = fn.args[len(storage)] if has_scratch else None
        b = ir.IRBuilder(fn.append_basic_block("entry"))
        count = None if extent is None else fn.args[n + 1]
        KernelEmitter(self.math, self.ops, b, kernel, base, scratch, fn.args[n], first_scalar, count).emit()
        b.ret_void()
        return self.same_code.share(fn)

    # ------------------------------------------------------------------ library steps
    def _regions(self, step: Library) -> dict[str, int]:
        """A library step's scratch regions: name -> byte offset."""
        regions = dict(LIBRARY[step.node.op].scratch(self.schedule.graph, step.node))
        regions.pop("size", None)
        return regions

    def library(self, name: str, step: Library, index: int, buffers: list[int], regions: list[str]) -> ir.Function:
        """A hand-written lowering's function (see :mod:`.library`): one ``noalias``
        pointer per buffer and per scratch region, and the run-time scalars."""
        fn = self._function(name, len(buffers) + len(regions), [PTR])
        base = dict(zip(buffers, fn.args))
        b = ir.IRBuilder(fn.append_basic_block("entry"))
        args = {}
        for ref, (buf, view) in step.args.items():
            dtype = self.schedule.graph.avals[ref].dtype
            pointer = base[buf]
            if view.offset:
                pointer = b.gep(pointer, [ir.Constant(I64, view.offset)], source_etype=mem_type(dtype))
            args[ref] = pointer
        outs = [base[buf] for buf in step.outs]
        scratch = dict(zip(regions, fn.args[len(buffers) :]))
        op = LIBRARY[step.node.op]
        status = self._table(b, "status") if op.checks else None
        scalars = (fn.args[-1], step.scalars)
        views = {ref: view for ref, (_, view) in step.args.items()}
        emitter = Emitter(
            self, b, self.schedule.graph, step.node, args, outs, scratch, status, index + 1, scalars, views
        )
        op.emit(emitter)
        b.ret_void()
        return fn

    # ------------------------------------------------------------------ convolution chains
    def _chain_regions(self, step: ConvChain) -> dict[str, int]:
        regions = chain_scratch(self.schedule.graph, step, self.schedule.buffers)
        regions.pop("size", None)
        return regions

    def chain(self, name: str, step: ConvChain, buffers: list[int], regions: list[str]) -> ir.Function:
        """A convolution chain's function (see :mod:`.chains`): one ``noalias`` pointer
        per buffer and per scratch region, and the run-time scalars."""
        fn = self._function(name, len(buffers) + len(regions), [PTR])
        b = ir.IRBuilder(fn.append_basic_block("entry"))
        pointers = dict(zip(buffers, fn.args))
        scratch = dict(zip(regions, fn.args[len(buffers) :]))
        emit_chain(self, b, self.schedule.graph, step, self.schedule.buffers, pointers, scratch, fn.args[-1])
        b.ret_void()
        return fn

    # ------------------------------------------------------------------ matmul
    def gemm(self, dtype: np.dtype) -> ir.Function:
        """The BLAS routine for ``dtype`` (declared; its address is registered)."""
        kind = "s" if dtype == np.float32 else "d"
        if kind not in self._gemm:
            blas = self.blas
            assert blas is not None, "a matmul calls BLAS only where it is loaded"
            t = F32 if kind == "s" else F64
            n = I64 if blas.int_bits == 64 else I32
            symbol = f"ember_cblas_{kind}gemm"
            llvm_binding.add_symbol(symbol, blas.sgemm if kind == "s" else blas.dgemm)
            fnty = ir.FunctionType(VOID, [I32, I32, I32, n, n, n, t, PTR, n, PTR, n, t, PTR, n])
            fn = ir.Function(self.module, fnty, name=symbol)
            self._gemm[kind] = fn
        return self._gemm[kind]

    def own_sgemm(
        self, b: ir.IRBuilder, m: int, n: int, k: int, a, lda: int, bm, ldb: int, c, ldc: int, add: bool
    ) -> None:
        """Calls ember's float32 product (:mod:`ember.backend.kernel.llvm.gemm`;
        ``C = A @ B``, or ``C += A @ B`` with ``add``), declared once per module with the
        host's blocking and two packing buffers, module globals: the plan's steps run
        one at a time, as they share its arena."""
        if "own" not in self._gemm:
            block = host_blocking()
            self._gemm["own"] = gemm_kernel(block, self.vector_width).declare(self.module)
            for name, floats in (("a", block.mc * block.kc), ("b", block.kc * block.nc)):
                pack = ir.GlobalVariable(self.module, ir.ArrayType(F32, floats), name=f"{self.prefix}_pack_{name}")
                pack.linkage = "internal"
                pack.align = 64
                pack.initializer = ir.Constant(ir.ArrayType(F32, floats), None)
                self._packs[name] = pack
        b.call(
            self._gemm["own"],
            [ir.Constant(I64, m), ir.Constant(I64, n), ir.Constant(I64, k), a, ir.Constant(I64, lda), bm,
             ir.Constant(I64, ldb), c, ir.Constant(I64, ldc), ir.Constant(ir.IntType(1), int(add)),
             self._packs["a"], self._packs["b"]],
        )  # fmt: skip

    def gemv(self, dtype: np.dtype) -> ir.Function | None:
        """The BLAS matrix-vector routine for ``dtype`` (``None`` where the library
        has none)."""
        kind = "s" if dtype == np.float32 else "d"
        blas = self.blas
        address = 0 if blas is None else (blas.sgemv if kind == "s" else blas.dgemv)
        if blas is None or not address:
            return None
        if kind not in self._gemv:
            t = F32 if kind == "s" else F64
            n = I64 if blas.int_bits == 64 else I32
            symbol = f"ember_cblas_{kind}gemv"
            llvm_binding.add_symbol(symbol, address)
            fnty = ir.FunctionType(VOID, [I32, I32, n, n, t, PTR, n, PTR, n, t, PTR, n])
            self._gemv[kind] = ir.Function(self.module, fnty, name=symbol)
        return self._gemv[kind]

    def matmul(self, name: str, step: Matmul) -> ir.Function | None:
        out_shape = self.schedule.buffers[step.out].shape
        batch, (m, n) = out_shape[:-2], out_shape[-2:]
        k = step.a[1].shape[-1]
        if size_of(out_shape) == 0:
            return None
        a_view = step.a[1].expand(batch + (m, k))
        b_view = step.b[1].expand(batch + (k, n))
        # Products of the same views (a model's blocks repeat their shapes) share one
        # function: its body depends on nothing else, and LLVM compiles it once.
        key = (step.dtype, a_view, b_view, out_shape)
        if key in self._products:
            return self._products[key]
        fn = self._products[key] = self._function(name, 3, [])
        pa, pb, pc = fn.args
        b = ir.IRBuilder(fn.append_basic_block("entry"))
        loops = Loops(b)
        t = reg_type(step.dtype)
        work = m * n * k
        la, lb = blas_layout(a_view), blas_layout(b_view)
        use_blas = self.blas is not None and work >= self.blas_threshold and k > 0 and la is not None and lb is not None
        if use_blas and batch and folds(a_view, b_view, la, m):
            # A shared B and batches of A rows one after another: one product with all
            # the rows (OpenBLAS packs B once instead of once per batch; a decode step
            # at batch 8, [8, 1, d] @ [d, n], reads B once instead of in 8 gemvs).
            assert la is not None  # _folds says so
            m *= size_of(batch)
            batch = ()
            a_view = View((m, k), (la[1], a_view.strides[-1]), a_view.offset)
            b_view = View((k, n), (b_view.strides[-2], b_view.strides[-1]), b_view.offset)
            out_shape = (m, n)
            la = blas_layout(a_view)
        gemv = self.gemv(step.dtype) if use_blas and k > 1 and (m == 1) != (n == 1) else None
        vector = None if gemv is None else gemv_args(a_view, b_view, la, lb, m, n, k)
        own = (
            self.own_products
            and step.dtype == np.dtype(np.float32)
            and la is not None
            and lb is not None
            and not la[0]
            and not lb[0]
            and not sgemm_mod.own_product_skips(m, n, k, small_gemm.lanes(self.vector_width))
        )
        lanes = small_gemm.lanes(self.vector_width)
        single = self.blas is not None and self.blas.threads <= 1
        form = inline_form(use_blas and single and vector is None and not own, step.dtype, la, lb, m, n, k, lanes)
        inline, dots = form == "inline", form == "dots"

        def one(indices: list[ir.Value]) -> None:
            a_off = _offset(b, a_view, indices)
            b_off = _offset(b, b_view, indices)
            c_off = _offset(b, View.contiguous(out_shape), indices)
            a_ptr = b.gep(pa, [a_off], source_etype=t)
            b_ptr = b.gep(pb, [b_off], source_etype=t)
            c_ptr = b.gep(pc, [c_off], source_etype=t)
            if inline:
                assert lb is not None  # inline says so
                a_rows = Operand(a_ptr, a_view.strides[-2], a_view.strides[-1])
                small_gemm.emit_shared_gemm(
                    KernelBuilder(b), m, n, k, a_rows, Operand(b_ptr, lb[1]), Operand(c_ptr, n), lanes
                )
            elif dots:
                assert la is not None and lb is not None  # dots says so
                rows_a, rows_b, kb = Operand(a_ptr, la[1]), Operand(b_ptr, lb[1]), KernelBuilder(b)
                if repacks(m, n, bool(batch), lanes):
                    emit_repacked(kb, self.prefix, m, n, k, rows_a, rows_b, Operand(c_ptr, n), lanes)
                elif transposes(m, n, k, bool(batch), lanes):
                    emit_transposed(kb, self.prefix, m, n, k, rows_a, rows_b, Operand(c_ptr, n), lanes)
                else:
                    small_gemm.emit_gemm_nt(kb, m, n, k, rows_a, rows_b, Operand(c_ptr, n), lanes)
            elif use_blas and vector is not None:
                assert self.blas is not None and gemv is not None  # vector says so
                nt = I64 if self.blas.int_bits == 64 else I32
                flipped, rows, cols, ld, x_inc, y_inc, matrix_is_a = vector
                b.call(
                    gemv,
                    [
                        ir.Constant(I32, blas_mod.ROW_MAJOR),
                        ir.Constant(I32, blas_mod.TRANS if flipped else blas_mod.NO_TRANS),
                        ir.Constant(nt, rows),
                        ir.Constant(nt, cols),
                        ir.Constant(t, 1.0),
                        a_ptr if matrix_is_a else b_ptr,
                        ir.Constant(nt, ld),
                        b_ptr if matrix_is_a else a_ptr,
                        ir.Constant(nt, x_inc),
                        ir.Constant(t, 0.0),
                        c_ptr,
                        ir.Constant(nt, y_inc),
                    ],
                )
            elif use_blas and own and la is not None and lb is not None:
                self.own_sgemm(b, m, n, k, a_ptr, la[1], b_ptr, lb[1], c_ptr, n, False)
            elif use_blas:
                assert self.blas is not None and la is not None and lb is not None  # use_blas says so
                nt = I64 if self.blas.int_bits == 64 else I32
                trans = lambda flag: ir.Constant(I32, blas_mod.TRANS if flag else blas_mod.NO_TRANS)  # noqa: E731
                b.call(
                    self.gemm(step.dtype),
                    [
                        ir.Constant(I32, blas_mod.ROW_MAJOR),
                        trans(la[0]),
                        trans(lb[0]),
                        ir.Constant(nt, m),
                        ir.Constant(nt, n),
                        ir.Constant(nt, k),
                        ir.Constant(t, 1.0),
                        a_ptr,
                        ir.Constant(nt, la[1]),
                        b_ptr,
                        ir.Constant(nt, lb[1]),
                        ir.Constant(t, 0.0),
                        c_ptr,
                        ir.Constant(nt, n),
                    ],
                )
            else:
                self._matmul_loops(b, loops, t, a_ptr, b_ptr, c_ptr, a_view, b_view, m, n, k)

        loops.nest(list(batch), one)
        b.ret_void()
        return fn

    @staticmethod
    def _matmul_loops(
        b: ir.IRBuilder, loops: Loops, t: ir.Type, pa, pb, pc, a_view: View, b_view: View, m: int, n: int, k: int
    ) -> None:
        sam, sak = a_view.strides[-2:]
        sbk, sbn = b_view.strides[-2:]
        zero = ir.Constant(t, 0.0)
        flags = ("contract",)

        def at(ptr, i, si, j, sj):
            index = b.add(b.mul(i, ir.Constant(I64, si)), b.mul(j, ir.Constant(I64, sj)))
            return b.gep(ptr, [index], source_etype=t)

        if sbn == 1 and n >= 8:
            # i, k, j: rows of C accumulate rows of B (vectorises over j).
            def row(i, _):
                def clear(j, _):
                    b.store(zero, at(pc, i, n, j, 1))
                    return []

                loops.run(n, clear)
                if k:

                    def over_k(kk, _):
                        a = b.load(at(pa, i, sam, kk, sak), typ=t)

                        def over_j(j, _):
                            c_ptr = at(pc, i, n, j, 1)
                            c = b.load(c_ptr, typ=t)
                            b.store(
                                b.fadd(c, b.fmul(a, b.load(at(pb, kk, sbk, j, sbn), typ=t), flags=flags), flags=flags),
                                c_ptr,
                            )
                            return []

                        loops.run(n, over_j)
                        return []

                    loops.run(k, over_k)
                return []

            loops.run(m, row)
            return

        def cell(i, _):
            def col(j, _):
                if k:

                    def dot(kk, acc):
                        prod = b.fmul(
                            b.load(at(pa, i, sam, kk, sak), typ=t),
                            b.load(at(pb, kk, sbk, j, sbn), typ=t),
                            flags=REDUCE_FLAGS,
                        )
                        return [b.fadd(acc[0], prod, flags=REDUCE_FLAGS)]

                    (total,) = loops.run(k, dot, [zero])
                else:
                    total = zero
                b.store(total, at(pc, i, n, j, 1))
                return []

            loops.run(n, col)
            return []

        loops.run(m, cell)

    def build(self) -> str:
        return str(self.module)


def _offset(b: ir.IRBuilder, view: View, indices: list[ir.Value]) -> ir.Value:
    """``view``'s element offset at the batch ``indices`` (its leading dims)."""
    total: ir.Value = ir.Constant(I64, view.offset)
    for index, stride in zip(indices, view.strides):
        if stride:
            total = b.add(total, b.mul(index, ir.Constant(I64, stride)))
    return total


__all__ = ["ModuleBuilder"]
