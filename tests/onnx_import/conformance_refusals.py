"""Every case of ONNX's backend node suite that ``ember.onnx`` refuses, and why.

``tests/onnx_import/test_conformance.py`` runs each case: one that raises an
``OnnxError`` must be listed here (by an element type it uses, an operator of its model,
or its case name); one that runs must match the reference outputs. A case listed by
name that passes fails the test, so that this file stays current.
"""

from __future__ import annotations


def _each(reason: str, *names: str) -> dict[str, str]:
    return dict.fromkeys(names, reason)


#: ONNX element types ember has no dtype for (by TensorProto's name).
REFUSED_TYPES: dict[str, str] = {
    "FLOAT8E8M0": "FLOAT8E8M0 (an exponent-only scale type, with its own rounding modes) is not supported",
    **_each("6-bit floats: not supported (ember holds the 8-bit and 4-bit floats widened)", "FLOAT6E2M3", "FLOAT6E3M2"),
    **_each("ember has no string or complex tensors", "STRING", "COMPLEX64", "COMPLEX128"),
}

#: Operators ember does not implement (domain-qualified outside ONNX's own).
REFUSED_OPS: dict[str, str] = {
    **_each(
        "string ops: ember has no string tensors",
        "RegexFullMatch",
        "StringConcat",
        "StringNormalizer",
        "StringSplit",
        "TfIdfVectorizer",
    ),
    "MelWeightMatrix": "signal processing: not implemented",
    "ImageDecoder": "image decoding is not a tensor op",
    **_each(
        "ONNX-ML operators: not implemented",
        "ai.onnx.ml.ArrayFeatureExtractor",
        "ai.onnx.ml.Binarizer",
        "ai.onnx.ml.LabelEncoder",
        "ai.onnx.ml.TreeEnsemble",
    ),
}

#: Single cases refused for an attribute or input ember does not support.
REFUSED_CASES: dict[str, str] = {
    **_each(
        "GridSample: cubic (bicubic) sampling is not supported (ember.nn.functional.grid_sample: bilinear, nearest)",
        "test_gridsample_bicubic",
        "test_gridsample_bicubic_align_corners_0_additional_1",
        "test_gridsample_bicubic_align_corners_1_additional_1",
    ),
    "test_scan_sum": "Scan at opset 8 (a batch axis and sequence_lens) is not supported; opset 9's is",
    "test_col2im_5d": "Col2Im: ember folds 2-d images only",
    "test_maxpool_with_argmax_2d_precomputed_strides": "MaxPool: storage_order=1 (column-major indices) is not supported",
    **_each(
        "Resize: antialias=1 is not supported",
        "test_resize_downsample_scales_linear_antialias",
        "test_resize_downsample_sizes_linear_antialias",
        "test_resize_downsample_scales_cubic_antialias",
        "test_resize_downsample_sizes_cubic_antialias",
    ),
}

#: Cases whose outputs are random draws (a reference's own generator): each output is
#: checked for its shape, dtype and the values a draw may take, not for the reference's values.
RANDOM_CASES: dict[str, str] = _each(
    "Dropout in training mode: a random mask (each value is 0 or x / (1 - ratio), as the mask says)",
    "test_training_dropout",
    "test_training_dropout_default",
    "test_training_dropout_default_mask",
    "test_training_dropout_mask",
) | _each(
    "Bernoulli: random draws (each value 0 or 1, of the reference's shape and type)",
    "test_bernoulli",
    "test_bernoulli_expanded",
    "test_bernoulli_double",
    "test_bernoulli_double_expanded",
    "test_bernoulli_seed",
    "test_bernoulli_seed_expanded",
)
