"""Each ONNX operator ember implements, on one-node models built with onnx.helper,
against onnxruntime: once with graph inputs (ember's tensor ops) and, for operators
with a host form, once with Constant inputs (folded at load in numpy)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest

import ember.onnx
from ember import Device, Tensor
from tests.onnx_import.helpers import onnx_model, run_ort

F32 = np.float32


def ints(*values: int) -> np.ndarray:
    return np.array(values, dtype=np.int64)


@dataclass
class Case:
    """``op(*inputs)``: graph inputs are arrays; ``consts`` maps input positions to
    values given as initializers (host arguments: shapes, axes, pads...)."""

    id: str
    op: str
    inputs: list[Any]
    attrs: dict[str, Any] = field(default_factory=dict)
    consts: dict[int, np.ndarray] = field(default_factory=dict)
    outputs: int = 1
    opset: int = 17
    out_types: list[int] | None = None
    fold: bool = True  # also run with every input a Constant node (the host form)
    out_shapes: list[list[int]] | None = None  # where ONNX's shape inference gives none
    rtol: float = 1e-5


def c(id: str, op: str, *inputs: Any, **kw: Any) -> Case:
    return Case(id, op, list(inputs), **kw)


def _cases() -> list[Case]:
    rng = np.random.default_rng(7)

    def rand(*shape: int, low: float = -2.0, high: float = 2.0) -> np.ndarray:
        return rng.uniform(low, high, shape).astype(F32)

    return [
        # ------------------------------------------------------------------ unary math and activations
        *[
            c(op, op, rand(3, 4))
            for op in [
                "Abs",
                "Neg",
                "Exp",
                "Sin",
                "Cos",
                "Tan",
                "Sinh",
                "Cosh",
                "Tanh",
                "Asinh",
                "Erf",
                "Floor",
                "Ceil",
                "Sign",
                "Relu",
                "Sigmoid",
                "Softsign",
                "Softplus",
                "HardSwish",
                "Reciprocal",
                "Identity",
            ]
        ],
        c("Mish", "Mish", rand(3, 4), opset=18),
        c("Round", "Round", np.array([-2.5, -1.5, -0.5, 0.5, 1.5, 2.4, 2.6], F32)),
        *[c(op, op, rand(3, 4, low=0.1, high=3.0)) for op in ["Log", "Sqrt"]],
        *[c(op, op, rand(3, 4, low=-0.9, high=0.9)) for op in ["Asin", "Acos", "Atan", "Atanh"]],
        c("Acosh", "Acosh", rand(3, 4, low=1.1, high=3.0)),
        c("IsNaN", "IsNaN", np.array([1.0, np.nan, np.inf], F32), out_types=[9]),
        c("IsInf", "IsInf", np.array([1.0, np.nan, np.inf, -np.inf], F32), out_types=[9]),
        c("IsInf-pos", "IsInf", np.array([1.0, -np.inf, np.inf], F32), attrs={"detect_negative": 0}, out_types=[9]),
        c("Not", "Not", np.array([True, False]), out_types=[9]),
        c("Elu", "Elu", rand(3, 4), attrs={"alpha": 0.7}),
        c("Selu", "Selu", rand(3, 4)),
        c("Selu-attrs", "Selu", rand(3, 4), attrs={"alpha": 1.5, "gamma": 2.0}),
        c("Celu", "Celu", rand(3, 4), attrs={"alpha": 0.5}),
        c("LeakyRelu", "LeakyRelu", rand(3, 4), attrs={"alpha": 0.2}),
        c("ThresholdedRelu", "ThresholdedRelu", rand(3, 4), attrs={"alpha": 0.5}),
        c("HardSigmoid", "HardSigmoid", rand(3, 4), attrs={"alpha": 0.3, "beta": 0.4}),
        c("Shrink", "Shrink", rand(3, 4), attrs={"bias": 0.2, "lambd": 0.6}),
        c("Gelu", "Gelu", rand(3, 4), opset=20),
        c("Gelu-tanh", "Gelu", rand(3, 4), attrs={"approximate": "tanh"}, opset=20),
        c("PRelu", "PRelu", rand(2, 3, 4, 4), rand(3, 1, 1)),
        c("Softmax", "Softmax", rand(2, 3, 4), attrs={"axis": 1}),
        c("Softmax-last", "Softmax", rand(2, 3, 4)),
        c("Softmax-opset11", "Softmax", rand(2, 3, 4), attrs={"axis": 1}, opset=11),
        c("LogSoftmax", "LogSoftmax", rand(2, 3, 4), attrs={"axis": -1}),
        c("Hardmax", "Hardmax", rand(2, 3, 4), attrs={"axis": 1}),
        # ------------------------------------------------------------------ binary, broadcasting
        *[c(op, op, rand(2, 3, 4), rand(3, 1)) for op in ["Add", "Sub", "Mul", "Div"]],
        c("Div-int", "Div", ints(7, -7, 9, -9), ints(2, 2, -4, -4), out_types=[7]),
        c("Mod", "Mod", ints(7, -7, 9, -9), ints(3, 3, -4, -4), out_types=[7]),
        c("Mod-fmod", "Mod", rand(5), np.array([1.5, -1.5, 0.7, 2.0, -0.4], F32), attrs={"fmod": 1}),
        c("Pow", "Pow", rand(3, 4, low=0.5, high=2.0), rand(3, 4)),
        c("Pow-int-exponent", "Pow", rand(3, 4), ints(2)),
        c("Mul-scalar", "Mul", rand(3, 4), consts={1: np.array(2.5, F32)}),
        c("Sub-scalar-left", "Sub", np.array(1.5, F32), rand(3, 4), consts={0: np.array(1.5, F32)}),
        c("Div-scalar", "Div", rand(3, 4), consts={1: np.array(4.0, F32)}),
        c("Pow-scalar", "Pow", rand(3, 4), consts={1: np.array(2.0, F32)}),
        *[
            c(op, op, rand(2, 3), rand(3), out_types=[9])
            for op in ["Equal", "Less", "LessOrEqual", "Greater", "GreaterOrEqual"]
        ],
        c("Less-scalar-left", "Less", np.array(0.5, F32), rand(2, 3), consts={0: np.array(0.5, F32)}, out_types=[9]),
        c("Equal-int", "Equal", ints(1, 2, 3), ints(1, 0, 3), out_types=[9]),
        *[
            c(op, op, np.array([True, False, True]), np.array([True, True, False]), out_types=[9])
            for op in ["And", "Or", "Xor"]
        ],
        c(
            "BitShift",
            "BitShift",
            np.array([1, 4, 16], np.uint8),
            np.array([1, 2, 3], np.uint8),
            attrs={"direction": "LEFT"},
            out_types=[2],
        ),
        *[c(op, op, rand(2, 3), rand(3), rand(1, 1)) for op in ["Sum", "Max", "Min", "Mean"]],
        c("Where", "Where", rng.uniform(size=(2, 3)) > 0.5, rand(2, 3), rand(3)),
        c("Clip", "Clip", rand(3, 4), consts={1: np.array(-0.5, F32), 2: np.array(0.7, F32)}, fold=False),
        c("Clip-min", "Clip", rand(3, 4), consts={1: np.array(-0.5, F32)}, fold=False),
        c("Cast-to-int", "Cast", np.array([-2.7, -0.5, 0.5, 2.7], F32), attrs={"to": 7}, out_types=[7]),
        c("Cast-to-bool", "Cast", np.array([0.0, 2.0, -1.0], F32), attrs={"to": 9}, out_types=[9]),
        c("Cast-to-float", "Cast", ints(1, -3), attrs={"to": 1}),
        c("CastLike", "CastLike", ints(1, -3), np.array([0.0], F32)),
        # ------------------------------------------------------------------ layout
        c("Reshape", "Reshape", rand(2, 3, 4), consts={1: ints(0, -1)}),
        c("Reshape-allowzero", "Reshape", rand(2, 0, 4), consts={1: ints(0, 4)}, attrs={"allowzero": 1}, opset=14),
        c("Flatten", "Flatten", rand(2, 3, 4)),
        c("Flatten-0", "Flatten", rand(2, 3, 4), attrs={"axis": 0}),
        c("Flatten-neg", "Flatten", rand(2, 3, 4), attrs={"axis": -1}),
        c("Transpose", "Transpose", rand(2, 3, 4), attrs={"perm": [2, 0, 1]}),
        c("Transpose-default", "Transpose", rand(2, 3, 4)),
        c("Squeeze", "Squeeze", rand(2, 1, 4, 1), consts={1: ints(-1)}),
        c("Squeeze-all", "Squeeze", rand(2, 1, 4, 1)),
        c("Squeeze-opset11", "Squeeze", rand(2, 1, 4), attrs={"axes": [1]}, opset=11),
        c("Unsqueeze", "Unsqueeze", rand(2, 3), consts={1: ints(0, -1)}),
        c("Concat", "Concat", rand(2, 3), rand(2, 1), attrs={"axis": -1}),
        c("Split", "Split", rand(6, 2), consts={1: ints(2, 4)}, outputs=2),
        c("Split-equal", "Split", rand(6, 2), outputs=3),
        c("Split-num-outputs", "Split", rand(7, 2), attrs={"num_outputs": 3}, outputs=3, opset=18),
        c("Slice", "Slice", rand(5, 6), consts={1: ints(1, -1), 2: ints(4, -5), 3: ints(0, 1), 4: ints(2, -1)}),
        c("Slice-clamp", "Slice", rand(5, 6), consts={1: ints(-100), 2: ints(100), 3: ints(1)}),
        c(
            "Slice-reverse",
            "Slice",
            rand(5, 6),
            consts={1: ints(-1), 2: ints(np.iinfo(np.int64).min), 3: ints(0), 4: ints(-1)},
        ),
        c("Expand", "Expand", rand(3, 1), consts={1: ints(2, 1, 4)}),
        c("Tile", "Tile", rand(2, 3), consts={1: ints(2, 1)}),
        c("Pad", "Pad", rand(2, 3), consts={1: ints(1, 0, 0, 2), 2: np.array(0.5, F32)}),
        c("Pad-reflect", "Pad", rand(1, 2, 4, 4), consts={1: ints(0, 0, 1, 2, 0, 0, 2, 1)}, attrs={"mode": "reflect"}),
        c("Pad-edge", "Pad", rand(2, 4), consts={1: ints(0, 2, 0, 1)}, attrs={"mode": "edge"}),
        c("Pad-wrap", "Pad", rand(2, 4), consts={1: ints(0, 2, 0, 1)}, attrs={"mode": "wrap"}, opset=19, fold=False),
        c("Pad-axes", "Pad", rand(2, 3, 4), consts={1: ints(1, 2), 3: ints(-1)}, opset=18),
        c("DepthToSpace-DCR", "DepthToSpace", rand(1, 8, 2, 3), attrs={"blocksize": 2}),
        c("DepthToSpace-CRD", "DepthToSpace", rand(1, 8, 2, 3), attrs={"blocksize": 2, "mode": "CRD"}),
        c("SpaceToDepth", "SpaceToDepth", rand(1, 2, 4, 6), attrs={"blocksize": 2}),
        c("Trilu", "Trilu", rand(2, 4, 5), consts={1: ints(1)}),
        c("Trilu-lower", "Trilu", rand(4, 5), attrs={"upper": 0}),
        c("Shape", "Shape", rand(2, 3, 4), out_types=[7]),
        c("Shape-slice", "Shape", rand(2, 3, 4), attrs={"start": 1, "end": -1}, out_types=[7], opset=15),
        c("Size", "Size", rand(2, 3, 4), out_types=[7]),
        # ------------------------------------------------------------------ indexing and creation
        c("Gather", "Gather", rand(3, 5), np.array([[0, -1], [4, 2]], np.int64), attrs={"axis": 1}),
        c("Gather-scalar", "Gather", rand(3, 5), consts={1: np.array(-1, np.int64)}),
        c(
            "GatherElements",
            "GatherElements",
            rand(3, 4),
            np.array([[0, 3], [1, -1], [2, 0]], np.int64),
            attrs={"axis": 1},
        ),
        c("GatherND", "GatherND", rand(3, 4, 2), np.array([[0, 1], [2, -1]], np.int64), fold=False),
        c(
            "ScatterElements",
            "ScatterElements",
            rand(3, 4),
            np.array([[0, 3], [1, 1], [2, 0]], np.int64),
            rand(3, 2),
            attrs={"axis": 1, "reduction": "add"},
            opset=18,
            fold=False,
        ),
        c("ScatterND", "ScatterND", rand(4, 3), np.array([[1], [3]], np.int64), rand(2, 3), fold=False),
        c("ConstantOfShape", "ConstantOfShape", ints(2, 3), attrs={"value": np.array([1.5], F32)}),
        c("Range", "Range", np.array(1.0, F32), np.array(4.0, F32), np.array(0.75, F32)),
        c("Range-int", "Range", np.array(10, np.int64), np.array(2, np.int64), np.array(-3, np.int64), out_types=[7]),
        c("EyeLike", "EyeLike", rand(3, 4), attrs={"k": 1}),
        c(
            "OneHot",
            "OneHot",
            np.array([0, 2, -1], np.int64),
            consts={1: np.array(3, np.int64), 2: np.array([0.5, 2.0], F32)},
            attrs={"axis": 0},
        ),
        c("TopK", "TopK", rand(3, 5), consts={1: ints(2)}, outputs=2, out_types=[1, 7]),
        c(
            "TopK-smallest",
            "TopK",
            rand(3, 5),
            consts={1: ints(3)},
            attrs={"axis": 0, "largest": 0},
            outputs=2,
            out_types=[1, 7],
        ),
        c("ArgMax", "ArgMax", rand(3, 5), attrs={"axis": 1, "keepdims": 0}, out_types=[7]),
        c(
            "ArgMin-last",
            "ArgMin",
            np.array([[1.0, 0.0, 0.0], [2.0, 2.0, 3.0]], F32),
            attrs={"select_last_index": 1},
            out_types=[7],
        ),
        c("CumSum", "CumSum", rand(3, 4), consts={1: np.array(1, np.int64)}),
        c(
            "CumSum-exclusive-reverse",
            "CumSum",
            rand(3, 4),
            consts={1: np.array(0, np.int64)},
            attrs={"exclusive": 1, "reverse": 1},
        ),
        c("NonZero", "NonZero", np.array([[1.0, 0.0], [0.0, 3.0]], F32), out_types=[7]),
        c("Einsum", "Einsum", rand(2, 3, 4), rand(2, 4, 5), attrs={"equation": "bij,bjk->bik"}),
        # ------------------------------------------------------------------ reductions
        *[
            c(op, op, rand(2, 3, 4, low=0.1), consts={1: ints(1, -1)}, opset=18)
            for op in [
                "ReduceSum",
                "ReduceMean",
                "ReduceMax",
                "ReduceMin",
                "ReduceProd",
                "ReduceL1",
                "ReduceL2",
                "ReduceLogSum",
                "ReduceLogSumExp",
                "ReduceSumSquare",
            ]
        ],
        c("ReduceMean-attr", "ReduceMean", rand(2, 3, 4), attrs={"axes": [1], "keepdims": 0}, opset=13),
        c("ReduceSum-all", "ReduceSum", rand(2, 3, 4), attrs={"keepdims": 0}),
        c("ReduceSum-noop", "ReduceSum", rand(2, 3), attrs={"noop_with_empty_axes": 1}),
        c("ReduceMax-keep0", "ReduceMax", rand(2, 3, 4), consts={1: ints(0)}, attrs={"keepdims": 0}, opset=18),
        # ------------------------------------------------------------------ layers
        c("MatMul", "MatMul", rand(2, 1, 3, 4), rand(5, 4, 2)),
        c("MatMul-vector", "MatMul", rand(4), rand(3, 4, 2)),
        c("Gemm", "Gemm", rand(3, 4), rand(5, 4), rand(5), attrs={"transB": 1}),
        c("Gemm-general", "Gemm", rand(4, 3), rand(4, 5), rand(3, 1), attrs={"transA": 1, "alpha": 0.5, "beta": 2.0}),
        c("Gemm-no-bias", "Gemm", rand(3, 4), rand(4, 5)),
        c(
            "Conv",
            "Conv",
            rand(2, 4, 7, 6),
            rand(6, 2, 3, 2),
            rand(6),
            attrs={"group": 2, "dilations": [2, 1], "pads": [1, 0, 2, 1], "strides": [1, 2]},
            fold=False,
        ),
        c(
            "Conv-same-upper",
            "Conv",
            rand(1, 2, 5, 5),
            rand(3, 2, 2, 2),
            attrs={"auto_pad": "SAME_UPPER", "strides": [2, 2]},
            fold=False,
        ),
        c("Conv-same-lower", "Conv", rand(1, 2, 5, 5), rand(3, 2, 2, 2), attrs={"auto_pad": "SAME_LOWER"}, fold=False),
        c("Conv1d", "Conv", rand(2, 3, 9), rand(4, 3, 3), attrs={"pads": [2, 1], "strides": [2]}, fold=False),
        c("Conv3d", "Conv", rand(1, 2, 4, 4, 4), rand(2, 2, 2, 2, 2), attrs={"pads": [1, 0, 1, 0, 1, 0]}, fold=False),
        c(
            "Conv-depthwise",
            "Conv",
            rand(1, 4, 6, 6),
            rand(4, 1, 3, 3),
            rand(4),
            attrs={"group": 4, "pads": [1, 1, 1, 1]},
            fold=False,
        ),
        c(
            "ConvTranspose",
            "ConvTranspose",
            rand(1, 4, 3, 4),
            rand(4, 3, 3, 2),
            rand(6),
            attrs={"group": 2, "strides": [2, 2], "pads": [1, 0, 0, 1], "output_padding": [1, 0], "dilations": [1, 2]},
            fold=False,
        ),
        c(
            "ConvTranspose-output-shape",
            "ConvTranspose",
            rand(1, 2, 3, 3),
            rand(2, 2, 3, 3),
            attrs={"strides": [2, 2], "output_shape": [7, 8]},
            fold=False,
        ),
        c(
            "ConvTranspose-same",
            "ConvTranspose",
            rand(1, 2, 3, 3),
            rand(2, 1, 3, 3),
            attrs={"strides": [2, 2], "auto_pad": "SAME_UPPER"},
            fold=False,
        ),
        c(
            "MaxPool",
            "MaxPool",
            rand(2, 3, 7, 7),
            attrs={"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]},
            fold=False,
        ),
        c(
            "MaxPool-ceil-dilated",
            "MaxPool",
            rand(1, 2, 8, 9),
            attrs={"kernel_shape": [2, 3], "strides": [2, 2], "ceil_mode": 1, "dilations": [2, 1]},
            fold=False,
        ),
        c(
            "MaxPool-indices",
            "MaxPool",
            rand(2, 3, 4, 4),
            attrs={"kernel_shape": [2, 2], "strides": [2, 2]},
            outputs=2,
            out_types=[1, 7],
            fold=False,
        ),
        c("MaxPool1d", "MaxPool", rand(2, 3, 9), attrs={"kernel_shape": [3], "strides": [2]}, fold=False),
        c(
            "AveragePool",
            "AveragePool",
            rand(2, 3, 7, 7),
            attrs={"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]},
            fold=False,
        ),
        c(
            "AveragePool-include-pad",
            "AveragePool",
            rand(2, 3, 7, 7),
            attrs={"kernel_shape": [3, 3], "pads": [1, 1, 1, 1], "count_include_pad": 1},
            fold=False,
        ),
        c(
            "AveragePool-ceil",
            "AveragePool",
            rand(1, 2, 7, 7),
            attrs={"kernel_shape": [2, 2], "strides": [2, 2], "ceil_mode": 1},
            fold=False,
        ),
        c("GlobalAveragePool", "GlobalAveragePool", rand(2, 3, 4, 5)),
        c("GlobalMaxPool", "GlobalMaxPool", rand(2, 3, 4, 5)),
        c("LRN", "LRN", rand(2, 5, 3, 3), attrs={"size": 3, "alpha": 0.01, "beta": 0.75, "bias": 1.5}),
        # ------------------------------------------------------------------ normalisation
        c(
            "BatchNormalization",
            "BatchNormalization",
            rand(2, 3, 4, 4),
            rand(3),
            rand(3),
            rand(3),
            rand(3, low=0.5, high=2.0),
            attrs={"epsilon": 1e-3},
            fold=False,
        ),
        c("InstanceNormalization", "InstanceNormalization", rand(2, 3, 4, 4), rand(3), rand(3)),
        c("LayerNormalization", "LayerNormalization", rand(2, 3, 4), rand(4), rand(4)),
        c("LayerNormalization-axis", "LayerNormalization", rand(2, 3, 4), rand(3, 4), rand(3, 4), attrs={"axis": 1}),
        c("LayerNormalization-stats", "LayerNormalization", rand(2, 3, 4), rand(4), rand(4), outputs=3, fold=False),
        c(
            "GroupNormalization",
            "GroupNormalization",
            rand(2, 6, 3, 3),
            rand(6),
            rand(6),
            attrs={"num_groups": 3},
            opset=21,
            out_shapes=[[2, 6, 3, 3]],
        ),
        c("LpNormalization", "LpNormalization", rand(2, 3), attrs={"axis": 1, "p": 2}),
        c("Dropout", "Dropout", rand(2, 3), consts={1: np.array(0.3, F32)}, fold=False),
        # ------------------------------------------------------------------ resize
        c(
            "Resize-nearest",
            "Resize",
            rand(1, 2, 3, 4),
            consts={2: np.array([1, 1, 2, 1.5], F32)},
            attrs={"mode": "nearest", "coordinate_transformation_mode": "asymmetric", "nearest_mode": "floor"},
        ),
        c(
            "Resize-nearest-half-pixel",
            "Resize",
            rand(1, 2, 4, 5),
            consts={3: ints(1, 2, 7, 3)},
            attrs={"mode": "nearest"},
        ),
        c(
            "Resize-linear",
            "Resize",
            rand(1, 2, 3, 4),
            consts={2: np.array([1, 1, 2, 2], F32)},
            attrs={"mode": "linear"},
        ),
        c(
            "Resize-linear-align-corners",
            "Resize",
            rand(1, 2, 3, 4),
            consts={3: ints(1, 2, 5, 7)},
            attrs={"mode": "linear", "coordinate_transformation_mode": "align_corners"},
        ),
        c(
            "Resize-linear-pytorch-down",
            "Resize",
            rand(1, 2, 8, 6),
            consts={2: np.array([1, 1, 0.5, 0.5], F32)},
            attrs={"mode": "linear", "coordinate_transformation_mode": "pytorch_half_pixel"},
        ),
        c(
            "Resize-cubic",
            "Resize",
            rand(1, 1, 4, 4),
            consts={2: np.array([1, 1, 2, 2], F32)},
            attrs={"mode": "cubic", "cubic_coeff_a": -0.75},
        ),
        c(
            "Resize-cubic-exclude",
            "Resize",
            rand(1, 1, 4, 5),
            consts={3: ints(1, 1, 6, 3)},
            attrs={"mode": "cubic", "exclude_outside": 1},
        ),
        c(
            "Resize-axes",
            "Resize",
            rand(1, 2, 3, 4),
            consts={2: np.array([2.0, 0.5], F32)},
            attrs={"mode": "linear", "axes": [2, 3]},
            opset=18,
        ),
    ]


CASES = _cases()

ELEM = {np.dtype(np.float32): 1, np.dtype(np.int64): 7, np.dtype(np.bool_): 9, np.dtype(np.uint8): 2}


def build(onnx: Any, case: Case, as_constants: bool) -> tuple[bytes, list[np.ndarray]]:
    """The model and its feeds; ``consts`` (and with ``as_constants`` every input) are
    Constant nodes, the other inputs graph inputs; missing positions are omitted inputs."""
    helper, numpy_helper = onnx.helper, onnx.numpy_helper
    nodes, inputs, feeds = [], [], []
    count = max([len(case.inputs), *[i + 1 for i in case.consts]])
    names = []
    for i in range(count):
        name = f"in{i}"
        if i in case.consts or (as_constants and i < len(case.inputs)):
            value = np.asarray(case.consts[i] if i in case.consts else case.inputs[i])
            nodes.append(helper.make_node("Constant", [], [name], value=numpy_helper.from_array(value, name)))
        elif i < len(case.inputs):
            value = np.asarray(case.inputs[i])
            inputs.append((name, ELEM[value.dtype], list(value.shape)))
            feeds.append(value)
        else:
            name = ""
        names.append(name)
    outputs = [f"out{i}" for i in range(case.outputs)]
    attrs = {k: numpy_helper.from_array(v) if isinstance(v, np.ndarray) else v for k, v in case.attrs.items()}
    nodes.append(helper.make_node(case.op, names, outputs, **attrs))
    types = case.out_types or [1] * case.outputs
    shapes = case.out_shapes or [None] * case.outputs
    data = onnx_model(onnx, nodes, inputs, list(zip(outputs, types, shapes)), opset=case.opset)
    return data, feeds


EXPECTED: dict[str, list[np.ndarray]] = {}  # onnxruntime's outputs, the same for both forms of a case


def check(onnx: Any, ort: Any, case: Case, as_constants: bool) -> None:
    data, feeds = build(onnx, case, as_constants)
    expected = EXPECTED.get(case.id)
    if expected is None:
        plain, plain_feeds = build(onnx, case, False) if as_constants else (data, feeds)
        expected = EXPECTED[case.id] = run_ort(ort, plain, *plain_feeds)
    model = ember.onnx.load(data, Device.flex())
    out = model(*[Tensor.from_data(f, device=Device.flex()) for f in feeds])
    out = out if isinstance(out, tuple) else (out,)
    assert len(out) == len(expected)
    for got, want in zip(out, expected):
        got = got.to_numpy()
        assert got.shape == want.shape, f"{case.id}: shape {got.shape} != {want.shape}"
        if want.dtype.kind in "biu":
            np.testing.assert_array_equal(got, want, err_msg=case.id)
        else:
            np.testing.assert_allclose(got, want, rtol=case.rtol, atol=1e-6, err_msg=case.id)


@pytest.mark.parametrize("case", CASES, ids=[case.id for case in CASES])
def test_operator_matches_onnxruntime(onnx, ort, case):
    check(onnx, ort, case, as_constants=False)


FOLDED = [case for case in CASES if case.fold]


@pytest.mark.parametrize("case", FOLDED, ids=[case.id for case in FOLDED])
def test_operator_folded_at_load_matches_onnxruntime(onnx, ort, case):
    """Every input a Constant: the value is computed once at load (numpy, or ember on flex)."""
    check(onnx, ort, case, as_constants=True)
