"""The backend protocol's op-name tables match what the backends implement."""

from __future__ import annotations

import inspect

from ember.backend import base
from ember.backend.autodiff.rules import elementwise
from ember.backend.flex import backend as flex


def test_flex_implements_every_op_name():
    assert set(flex._UNARY) == base.UNARY_OPS
    assert set(flex._BINARY) == base.BINARY_OPS
    assert set(flex._REDUCE_UFUNC) == base.REDUCE_OPS
    assert set(flex._CUMULATIVE) == base.CUMULATIVE_OPS
    assert base.COMPARISON_OPS <= base.BINARY_OPS
    assert base.BOOL_RESULT_UNARY <= base.UNARY_OPS


def test_autodiff_tables_name_only_protocol_ops():
    assert set(elementwise.UNARY) <= base.UNARY_OPS
    assert set(elementwise.BINARY) <= base.BINARY_OPS
    assert not set(elementwise.BINARY) & base.COMPARISON_OPS  # comparisons have no gradient


def test_every_abstract_primitive_is_implemented_by_flex_and_autodiff():
    from ember.backend.autodiff import AutodiffBackend
    from ember.backend.flex import FlexBackend

    abstract = {name for name, member in inspect.getmembers(base.Backend) if getattr(member, "__isabstractmethod__", False)}
    assert abstract, "the protocol declares its primitives as abstract methods"
    assert not FlexBackend.__abstractmethods__
    assert not AutodiffBackend.__abstractmethods__
