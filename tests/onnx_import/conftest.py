"""Fixtures of the ONNX import tests: the onnx package (which ember.onnx reads with),
onnxruntime (the oracle) and PyTorch (which exports the models).

Without them a test skips; ``EMBER_REQUIRE_ONNX=1`` (or ``EMBER_REQUIRE_TORCH=1`` for
PyTorch) turns the skip into a failure, as CI sets them."""

from __future__ import annotations

import pytest

from tests.conftest import import_torch
from tests.onnx_import.helpers import import_onnx


@pytest.fixture
def onnx():
    return import_onnx("onnx")


@pytest.fixture
def ort():
    module = import_onnx("onnxruntime")
    module.set_default_logger_severity(3)
    return module


@pytest.fixture
def torch():
    import_onnx("onnx")  # the exporter writes with it
    return import_torch()
