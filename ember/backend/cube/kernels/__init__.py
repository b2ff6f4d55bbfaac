"""Kernel generators of the cube backend, one file per family."""
