"""ONNX's backend node test suite run against ``ember.onnx.load`` on flex.

``onnx.backend.test.loader.load_model_tests(kind="node")`` builds every case of the
suite in memory (a one-node model, or a function's expansion, with its inputs and the
reference outputs). Building them takes ~20 s (the pooling references loop in Python),
so the cases are pickled once per onnx version under the temp dir.

Each case ends as one :class:`Outcome`: ``pass`` (every output matches the reference
with the runner's tolerances), ``refused`` (``ember.onnx`` raised an ``OnnxError``:
a clean refusal), ``fail`` (a wrong value, shape or dtype) or ``raise`` (any other
exception). ``python -m tests.onnx_import.conformance`` prints the counts.
"""

from __future__ import annotations

import os
import pickle
import tempfile
import warnings
from collections import Counter
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np

from tests.onnx_import.conformance_refusals import RANDOM_CASES, REFUSED_CASES, REFUSED_OPS, REFUSED_TYPES

#: ONNX element types ember holds (narrow and unsigned ints, 8-bit and 4-bit floats, 4-bit
#: and 2-bit ints widened): the cases whose values all have one of these types are the ones
#: the pass rate is counted over.
HELD_TYPES = {1, 2, 3, 4, 5, 6, 7, 9, 10, 11, 12, 13, 16, 17, 18, 19, 20, 21, 22, 23, 25, 26}


#: Cases whose reference holds float32 rounding noise where the exact value is 0 (an inverse
#: DFT's zero imaginary parts come out as 1.9e-7): the absolute tolerance of float32 at the
#: signal's magnitude (eps * 45), not the runner's 1e-7.
TOLERANCES = {"test_dft_inverse": (1e-3, 1e-5), "test_dft_inverse_opset19": (1e-3, 1e-5)}


@dataclass(frozen=True)
class Case:
    name: str
    model: bytes
    data_sets: list[tuple[list[Any], list[Any]]]
    rtol: float
    atol: float


@dataclass(frozen=True)
class Outcome:
    kind: str  # "pass", "refused", "fail", "raise"
    message: str = ""


@lru_cache(maxsize=1)
def cases() -> dict[str, Case]:
    """The suite's cases by name (an empty dict without the onnx package)."""
    try:
        import onnx
    except ImportError:
        return {}
    user = os.getuid() if hasattr(os, "getuid") else 0  # a cache per user: no one else's pickle is read
    path = os.path.join(tempfile.gettempdir(), f"ember-onnx-node-cases-{onnx.__version__}-{user}.pickle")
    try:
        with open(path, "rb") as f:
            stored: dict[str, Case] = pickle.load(f)
        return {n: Case(c.name, c.model, c.data_sets, *TOLERANCES.get(n, (c.rtol, c.atol))) for n, c in stored.items()}
    except (OSError, pickle.PickleError, EOFError, AttributeError):
        pass
    from onnx import numpy_helper
    from onnx.backend.test.loader import load_model_tests

    def array(value: Any) -> Any:
        return numpy_helper.to_array(value) if isinstance(value, onnx.TensorProto) else value

    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        loaded = load_model_tests(kind="node")
    out = {}
    for case in loaded:
        data = [([array(v) for v in ins], [array(v) for v in outs]) for ins, outs in case.data_sets]
        rtol, atol = TOLERANCES.get(case.name, (case.rtol, case.atol))
        out[case.name] = Case(case.name, case.model.SerializeToString(), data, rtol, atol)
    tmp = f"{path}.{os.getpid()}"
    try:
        with open(tmp, "wb") as f:
            pickle.dump(out, f, protocol=pickle.HIGHEST_PROTOCOL)
        os.replace(tmp, path)  # atomic: xdist workers may write at once
    except OSError:
        pass
    return out


def model_facts(case: Case) -> tuple[set[str], set[int]]:
    """The operator types (graph and subgraphs, domain-qualified outside ONNX's own) and
    the element types of the case's model."""
    import onnx

    model = onnx.load_from_string(case.model)
    ops: set[str] = set()
    types: set[int] = set()

    def walk(graph: Any) -> None:
        for info in [*graph.input, *graph.output, *graph.value_info]:
            types.update(_elem_types(info.type))
        for tensor in graph.initializer:
            types.add(tensor.data_type)
        for node in graph.node:
            domain = "" if node.domain in ("", "ai.onnx") else node.domain
            ops.add(node.op_type if not domain else f"{domain}.{node.op_type}")
            for attr in node.attribute:
                if attr.type == onnx.AttributeProto.GRAPH:
                    walk(attr.g)
                elif attr.type == onnx.AttributeProto.GRAPHS:
                    for g in attr.graphs:
                        walk(g)
                elif attr.type == onnx.AttributeProto.TENSOR:
                    types.add(attr.t.data_type)
                elif attr.name == "to" and attr.type == onnx.AttributeProto.INT:
                    types.add(attr.i)

    walk(model.graph)
    return ops, types


def _elem_types(tp: Any) -> set[int]:
    which = tp.WhichOneof("value")
    if which == "tensor_type":
        return {tp.tensor_type.elem_type}
    if which == "sequence_type":
        return _elem_types(tp.sequence_type.elem_type)
    if which == "optional_type":
        return _elem_types(tp.optional_type.elem_type)
    if which == "sparse_tensor_type":
        return {tp.sparse_tensor_type.elem_type}
    if which == "map_type":
        return {tp.map_type.key_type} | _elem_types(tp.map_type.value_type)
    return set()


def refusal_reason(case: Case) -> str | None:
    """Why the case is listed as refused (by case name, operator or element type), else ``None``."""
    if case.name in REFUSED_CASES:
        return REFUSED_CASES[case.name]
    ops, types = model_facts(case)
    for op in sorted(ops):
        if op in REFUSED_OPS:
            return f"{op}: {REFUSED_OPS[op]}"
    from ember.onnx.dtypes import onnx_name

    for t in sorted(types):
        name = onnx_name(t)
        if name in REFUSED_TYPES:
            return f"{name}: {REFUSED_TYPES[name]}"
    return None


def held(case: Case) -> bool:
    """Whether every value of the case has an element type ember holds."""
    return model_facts(case)[1] <= HELD_TYPES


def _expected_dtype(ref: np.ndarray) -> np.dtype:
    """The numpy dtype of the ember tensor that holds ONNX values of ``ref``'s dtype."""
    from ember.onnx.dtypes import dtype_of_array

    return np.dtype(dtype_of_array(ref, "a reference output").np)


def run_case(case: Case) -> Outcome:
    """Import and run one case on flex and compare with its reference outputs."""
    from ember import Device
    from ember.errors import OnnxError

    device = Device.flex()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            model = __import__("ember.onnx", fromlist=["load"]).load(case.model, device)
        for inputs, refs in case.data_sets:
            args = [_to_ember(a, device) for a in inputs]
            got = model(*args)
            outs = list(got) if isinstance(got, tuple) else [got]
            if len(outs) != len(refs):
                return Outcome("fail", f"{len(outs)} outputs, the reference has {len(refs)}")
            if any(r is None for r in refs) or any(o is None for o in outs):  # empty optional outputs
                if [r is None for r in refs] != [o is None for o in outs]:
                    return Outcome("fail", "an optional output is empty in one and not the other")
                outs, refs = [o for o in outs if o is not None], [r for r in refs if r is not None]
            if any(isinstance(r, list) for r in refs):  # sequence outputs: compare tensor by tensor
                outs, refs = _flatten(outs, refs)
            if case.name in RANDOM_CASES:
                draws, wants = [o.to_numpy() for o in outs], [np.asarray(r) for r in refs]
                if "bernoulli" in case.name:
                    problem = _bernoulli_draw(draws, wants)
                else:
                    problem = _dropout_draw(draws, wants, inputs)
                if problem:
                    return Outcome("fail", problem)
                continue
            for i, (out, ref) in enumerate(zip(outs, refs)):
                problem = _compare(out.to_numpy(), np.asarray(ref), case.rtol, case.atol)
                if problem:
                    return Outcome("fail", f"output {i}: {problem}")
    except OnnxError as error:
        return Outcome("refused", str(error))
    except Exception as error:  # any other exception is a defect of the import
        return Outcome("raise", f"{type(error).__name__}: {error}")
    return Outcome("pass")


def _bernoulli_draw(outs: list[np.ndarray], refs: list[np.ndarray]) -> str:
    """Whether Bernoulli's output is a possible draw: the reference's shape and dtype, 0s and 1s."""
    out, ref = outs[0], refs[0]
    if out.shape != ref.shape or out.dtype != _expected_dtype(ref):
        return f"shape/dtype {list(out.shape)} {out.dtype}, the reference {list(ref.shape)} {ref.dtype}"
    if not np.isin(out, (0, 1)).all():
        return "a value is neither 0 nor 1"
    return ""


def _dropout_draw(outs: list[np.ndarray], refs: list[np.ndarray], inputs: list[Any]) -> str:
    """Whether Dropout's outputs are a possible draw: shapes and dtypes as the reference's,
    each value 0 or ``x / (1 - ratio)``, and the mask (when asked for) true where kept."""
    x = np.asarray(inputs[0], np.float64)
    ratio = float(np.asarray(inputs[1])) if len(inputs) > 1 else 0.5
    for out, ref in zip(outs, refs):
        if out.shape != ref.shape or out.dtype != _expected_dtype(ref):
            return f"shape/dtype {list(out.shape)} {out.dtype}, the reference {list(ref.shape)} {ref.dtype}"
    kept = np.isclose(outs[0], x / (1 - ratio), rtol=1e-5)
    if not np.all(kept | (outs[0] == 0)):
        return "a value is neither 0 nor x / (1 - ratio)"
    if len(outs) > 1 and not np.array_equal(outs[1], kept | ((x == 0) & outs[1])):
        return "the mask does not say which values were kept"
    return ""


def _to_ember(value: Any, device: Any) -> Any:
    """An input as ember takes it: a Tensor (narrow ints widened), or a list of them."""
    from ember import Tensor
    from ember.onnx.dtypes import dtype_of_array

    if value is None:  # an empty optional
        return None
    if isinstance(value, list):
        return [_to_ember(v, device) for v in value]
    array = np.asarray(value)
    return Tensor.from_data(array, device=device, dtype=dtype_of_array(array, "input"))


def _flatten(outs: list[Any], refs: list[Any]) -> tuple[list[Any], list[Any]]:
    """Sequence outputs (lists) unrolled into their tensors, with a length check."""
    flat_outs, flat_refs = [], []
    for out, ref in zip(outs, refs):
        if isinstance(ref, list):
            if not isinstance(out, list) or len(out) != len(ref):
                raise AssertionError(f"a sequence of {len(ref)} tensors expected, got {type(out).__name__}")
            flat_outs.extend(out)
            flat_refs.extend(ref)
        else:
            flat_outs.append(out)
            flat_refs.append(ref)
    return flat_outs, flat_refs


def _compare(out: np.ndarray, ref: np.ndarray, rtol: float, atol: float) -> str:
    if out.shape != ref.shape:
        return f"shape {list(out.shape)}, the reference {list(ref.shape)}"
    want = _expected_dtype(ref)
    if out.dtype != want:
        return f"dtype {out.dtype}, expected {want} (holding {ref.dtype})"
    if ref.dtype.name == "bfloat16":  # as onnx's runner: two bfloat16 ulps
        rtol = max(rtol, 2**-6)
    elif ref.dtype == np.float16:  # the same rule for float16 (a chain of float16 ops rounds differently)
        rtol = max(rtol, 2**-9)
    try:
        np.testing.assert_allclose(out.astype(np.float64), ref.astype(np.float64), rtol=rtol, atol=atol)
    except AssertionError as error:
        return str(error).strip()
    return ""


def report() -> Counter[str]:
    """Every case's outcome, counted; printed with the failures."""
    counts: Counter[str] = Counter()
    for case in cases().values():
        outcome = run_case(case)
        counts[outcome.kind] += 1
        if held(case):
            counts[f"held {outcome.kind}"] += 1
        if outcome.kind in ("fail", "raise"):
            print(f"{case.name}: {outcome.kind}: {outcome.message.splitlines()[0] if outcome.message else ''}")
    return counts


if __name__ == "__main__":
    counts = report()
    total = sum(counts[k] for k in ("pass", "refused", "fail", "raise"))
    held_total = sum(counts[f"held {k}"] for k in ("pass", "refused", "fail", "raise"))
    print(
        f"{total} cases: {counts['pass']} pass, {counts['refused']} refused, {counts['fail']} fail, "
        f"{counts['raise']} raise"
    )
    print(
        f"{held_total} cases whose element types ember holds: {counts['held pass']} pass "
        f"({100 * counts['held pass'] / max(held_total, 1):.1f}%), {counts['held refused']} refused, "
        f"{counts['held fail']} fail, {counts['held raise']} raise"
    )
