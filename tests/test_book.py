"""Every ```python block of the book (``docs/**/*.md``) and of README.md runs.

One test per page: its blocks run in order in one namespace (a page reads like a notebook:
a later block may use what an earlier one built), in a temporary working directory. A
block whose code needs something CI may lack says so in an HTML comment on the line just
above its fence (invisible on the rendered page):

- ``<!-- book: gpu -->``: a wgpu adapter (Mesa's software Vulkan driver is enough);
  skipped without one, a failure with ``EMBER_REQUIRE_GPU=1`` (as CI sets).
- ``<!-- book: cuda -->``: an NVIDIA GPU (``Device.cuda()``); skipped without one
  (``scripts/gpu_check.sh`` runs where one is).
- ``<!-- book: torch -->``, ``<!-- book: onnx -->``: PyTorch, or the onnx package;
  skipped without it, a failure where CI requires it (``EMBER_REQUIRE_TORCH=1``,
  ``EMBER_REQUIRE_ONNX=1``).
- ``<!-- book: mpi -->``: a whole program, run as one process (``python``) and on two
  ranks (``mpiexec -n 2``, as tests/distributed does); it shares nothing with the page's
  other blocks. Skipped without mpi4py and ``mpiexec``, a failure with ``EMBER_REQUIRE_MPI=1``.
- ``<!-- book: skip REASON -->``: not run, for the REASON given (files the reader
  supplies, a feature that is not merged yet).

Other blocks always run; a block that needs nothing special must not be marked. Blocks
are kept tiny (a few steps of small models). A page whose blocks take more than a few
seconds anyway (processes to launch, kernels to compile) carries ``<!-- book: slow -->``
on a line of its own, and its test the suite's ``slow`` marker.
"""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
import types
import warnings
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import REQUIRE_GPU, REQUIRE_MPI, REQUIRE_TORCH

ROOT = Path(__file__).resolve().parents[1]
PAGES = [
    p
    for p in [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    if "```python" in p.read_text(encoding="utf-8")
]
FENCE = re.compile(r"^(?:<!-- book: (?P<mark>[^\n]*?) -->\n)?```python\n(?P<code>.*?)^```\s*$", re.M | re.S)
MARKS = ("gpu", "cuda", "torch", "onnx", "mpi", "skip")
SLOW_PAGE = "\n<!-- book: slow -->\n"
REQUIRE_ONNX = os.environ.get("EMBER_REQUIRE_ONNX") == "1"


@dataclass(frozen=True)
class Block:
    page: Path
    line: int  # the first line of code, 1-based
    mark: str | None
    code: str

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"


def blocks(page: Path) -> list[Block]:
    text = page.read_text(encoding="utf-8")
    out = []
    for match in FENCE.finditer(text):
        line = text.count("\n", 0, match.start("code")) + 1
        mark = match.group("mark")
        if mark is not None and mark.split()[0] not in MARKS:
            raise AssertionError(f"{page.name}:{line}: unknown book mark {mark!r}; use one of {MARKS}")
        out.append(Block(page, line, mark, match.group("code")))
    return out


def test_the_book_has_pages_and_blocks():
    names = {p.name for p in PAGES}
    assert {"README.md", "getting-started.md", "tensors.md", "from-pytorch.md"} <= names
    assert sum(len(blocks(p)) for p in PAGES) > 50


def _missing(mark: str) -> str | None:
    """Why a block with ``mark`` cannot run here (None: it can)."""
    kind = mark.split()[0]
    if kind == "gpu":
        try:
            from ember import Device

            Device.wgpu().backend.ensure_ready()
        except Exception as error:
            return f"no GPU adapter: {error}"
    elif kind == "cuda":
        try:
            from ember import Device

            Device.cuda()
        except Exception as error:
            return f"no CUDA device: {error}"
    elif kind == "torch" and importlib.util.find_spec("torch") is None:
        return "PyTorch is not installed"
    elif kind == "onnx" and importlib.util.find_spec("onnx") is None:
        return "onnx is not installed (pip install -e '.[onnx]')"
    return None


def _required(mark: str) -> bool:
    kind = mark.split()[0]
    return {"gpu": REQUIRE_GPU, "torch": REQUIRE_TORCH, "onnx": REQUIRE_ONNX, "mpi": REQUIRE_MPI}.get(kind, False)


def _run_mpi(block: Block, tmp_path: Path) -> str | None:
    """Runs the block as a program, alone and on two ranks; returns why it could not (or None)."""
    from tests.distributed.conftest import find_mpiexec, worker_env

    mpiexec = find_mpiexec()
    if importlib.util.find_spec("mpi4py") is None or mpiexec is None:
        return "MPI is not installed (pip install -e '.[dist]')"
    script = tmp_path / f"block_{block.line}.py"
    script.write_text(block.code, encoding="utf-8")
    for launcher in ([], [mpiexec, "-n", "2"]):
        result = subprocess.run(
            [*launcher, sys.executable, str(script)],
            cwd=tmp_path,
            env=worker_env(),
            capture_output=True,
            text=True,
            timeout=180,
        )
        how = "on 2 ranks" if launcher else "as one process"
        assert result.returncode == 0, f"{block.where} {how}:\n{result.stdout}\n{result.stderr}"
    return None


def _page_param(page: Path):
    """The page, with the suite's markers for what its blocks need (``-m "not mpi"`` works)."""
    kinds = {b.mark.split()[0] for b in blocks(page) if b.mark is not None}
    if SLOW_PAGE in page.read_text(encoding="utf-8"):
        kinds.add("slow")
    marks = [getattr(pytest.mark, kind) for kind in ("slow", "gpu", "torch", "mpi") if kind in kinds]
    return pytest.param(page, marks=marks, id=str(page.relative_to(ROOT)))


@pytest.mark.parametrize("page", [_page_param(p) for p in PAGES])
def test_page_blocks_run(page: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    page_blocks = blocks(page)
    monkeypatch.chdir(tmp_path)
    # A real module, so that classes defined on the page resolve their annotations.
    module = types.ModuleType("book_" + re.sub(r"\W", "_", page.stem))
    module.__file__ = str(tmp_path / "page.py")
    monkeypatch.setitem(sys.modules, module.__name__, module)
    skipped: list[str] = []
    for block in page_blocks:
        if block.mark is not None:
            kind = block.mark.split()[0]
            if kind == "skip":
                continue
            reason = _run_mpi(block, tmp_path) if kind == "mpi" else _missing(block.mark)
            if reason is not None:
                if _required(block.mark):
                    pytest.fail(f"{block.where} needs {kind} (required here): {reason}")
                skipped.append(f"{block.where} ({reason})")
                continue
            if kind == "mpi":
                continue
        code = compile("\n" * (block.line - 1) + block.code, str(block.page), "exec")
        exec(code, module.__dict__)
    if skipped:
        warnings.warn(f"book blocks not run here: {', '.join(skipped)}", stacklevel=1)


def test_readme_is_a_front_page_that_opens_with_the_setup_commands():
    """The README opens with the two set-up commands (CI runs the second, `.ci/run`'s last
    line) and stays a front page: the reference material lives in the book."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    first_block = readme.split("```bash\n", 1)[1].split("```", 1)[0]
    ci_command = (ROOT / ".ci" / "run").read_text(encoding="utf-8").strip().splitlines()[-1]
    assert first_block.splitlines()[0].startswith("bash scripts/setup.sh && .venv/bin/python examples/one_step.py")
    assert first_block.splitlines()[1].startswith(ci_command)
    assert len(readme.splitlines()) < 250


def test_the_api_reference_fences_docstring_examples():
    """scripts/mkdocs_doctests.py (the griffe extension of mkdocs.yml) fences each run of
    ``>>>`` lines with its output, and leaves prose alone."""
    pytest.importorskip("griffe", reason="the docs extra is not installed (pip install -e '.[docs]')")
    spec = importlib.util.spec_from_file_location("mkdocs_doctests", ROOT / "scripts" / "mkdocs_doctests.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    text = "Steps.\n\n>>> s.step()\n[1.0, 0.5]\n\nMore prose.\n    >>> x\n    1"
    assert module.fence_doctests(text) == (
        "Steps.\n\n```pycon\n>>> s.step()\n[1.0, 0.5]\n```\n\nMore prose.\n```pycon\n    >>> x\n    1\n```"
    )
