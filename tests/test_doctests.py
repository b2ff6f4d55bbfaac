"""The docstring examples (``>>>``) of every ember module run as doctests.

One test per module that has examples; a module whose import needs an optional
package that is not installed (wgpu, cupy, mpi4py, onnx, ...) is skipped. Examples
that need files, a GPU or MPI carry ``# doctest: +SKIP``.
"""

from __future__ import annotations

import doctest
import importlib
from pathlib import Path

import pytest

import ember

ROOT = Path(ember.__file__).parent
OPTIONAL = {"wgpu", "cupy", "cuda", "mpi4py", "onnx", "onnxruntime", "safetensors", "rich", "PIL", "matplotlib"}


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = sorted(_module_name(p) for p in ROOT.rglob("*.py") if ">>>" in p.read_text(encoding="utf-8"))


def test_modules_with_examples_are_found():
    assert "ember.tensor.tensor" in MODULES and len(MODULES) > 50


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name: str):
    try:
        module = importlib.import_module(name)
    except ModuleNotFoundError as error:
        if (error.name or "").split(".")[0] in OPTIONAL:
            pytest.skip(f"{name} needs {error.name}")
        raise
    tests = [t for t in doctest.DocTestFinder().find(module, name) if t.examples]
    if not tests:
        pytest.skip(f"{name}: its examples are in text doctest does not collect")
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    report: list[str] = []
    for test in tests:
        runner.run(test, out=report.append)
    results = runner.summarize(verbose=False)
    assert results.failed == 0, "".join(report)
