"""Backward rules, one module per op family."""
