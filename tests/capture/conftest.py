"""Every plan a test here runs must be lowered, not replayed (see tests/lowering.py)."""

from tests.lowering import assert_plans_lowered

__all__ = ["assert_plans_lowered"]
