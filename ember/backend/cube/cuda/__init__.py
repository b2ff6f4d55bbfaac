"""``cube.cuda``: the NVIDIA runtime of the cube backend (placeholder docstring, see below)."""
