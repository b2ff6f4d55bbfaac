"""Arrows only point down: the package layers of docs/design.md, checked on every import
statement of the ``ember`` package (module level and inside functions)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent / "ember"

# Top to bottom. A package may import itself and any package below it.
LAYERS = [
    "models",  # published architectures over ember.nn, Hugging Face checkpoints, generation
    "train",
    "distributed",
    "data",
    # Above optim: a Module's gradients are GradientsParams (func) and the GradScaler
    # steps a ModuleOptimizer (amp); autocast's per-op casting lives in ember.tensor.
    "amp",
    "func",
    "optim",
    "onnx",  # imports ONNX graphs as modules over ember.nn's functional ops
    "quantization",  # gathers QuantScheme (tensor), the kernels (backend), Module.quantize and the layers (nn)
    "nn",
    "special",  # torch.special's functions, composites over ember.tensor
    "fft",  # torch.fft's names over ember.tensor.fft
    "capture",
    "module",
    "autograd",  # Function (hand-written backward) over ember.tensor; custom_vjp lives in func
    "linalg",  # torch.linalg's functions over ember.tensor and the backend's linalg op
    "tensor",
    "device",
    "backend",
    "errors",
]

# Inside ember.backend: the protocol at the bottom, the kernel IR over it (expressions,
# views, loop steps, the LLVM JIT and math library: docs/design.md, "kernel IR"), the
# backends over both, decorators on top. A decorator never depends on a concrete backend,
# except fusion's lowerings (a lowering is written for the backend it targets); flex,
# cube and cuda never import fusion, and share compiled code through ``kernel`` instead.
BACKEND_PROTOCOL = {"base", "ops", "dtype", "distribution", "module_ops", "philox", "linalg_host", "composites"}
BACKEND_ALLOWED = {
    "kernel": BACKEND_PROTOCOL | {"kernel"},
    "flex": BACKEND_PROTOCOL | {"kernel", "flex"},
    "cube": BACKEND_PROTOCOL | {"kernel", "cube"},
    "cuda": BACKEND_PROTOCOL | {"kernel", "cuda"},
    "autodiff": BACKEND_PROTOCOL | {"autodiff"},
    "fusion": BACKEND_PROTOCOL | {"kernel", "fusion", "flex", "cube", "cuda"},
}


def _backend_violation(own: str, module: str) -> str | None:
    """Why ``ember.backend.<own>`` may not import ``module`` (an ``ember.backend``
    module), or ``None`` where it may."""
    target = module.split(".")[2]
    allowed = BACKEND_ALLOWED.get(own)
    if allowed is not None and target not in allowed:
        return f"ember.backend.{own} imports {module}"
    if own in BACKEND_PROTOCOL and target not in BACKEND_PROTOCOL:
        return f"the backend protocol imports {module}"
    return None


def _imports(path: Path) -> list[tuple[str, int]]:
    tree = ast.parse(path.read_text(), str(path))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append((node.module, node.lineno))
        elif isinstance(node, ast.Import):
            found.extend((alias.name, node.lineno) for alias in node.names)
    return [(m, line) for m, line in found if m.split(".")[0] == "ember"]


def _violations() -> list[str]:
    rank = {name: i for i, name in enumerate(LAYERS)}
    bad = []
    for path in sorted(ROOT.rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        if parts == ("__init__",):
            continue  # the package's public namespace re-exports every layer
        layer = parts[0]
        assert layer in rank, (
            f"{path}: package ember.{layer} has no place in LAYERS; add it where docs/design.md puts it"
        )
        for module, line in _imports(path):
            target = module.split(".")
            if len(target) < 2:
                bad.append(f"{path}:{line} imports the whole ember package")
                continue
            if target[1] not in rank:
                continue
            if rank[target[1]] < rank[layer]:
                bad.append(f"{path}:{line}: ember.{layer} imports {module} (a higher layer)")
            if layer == "backend" and target[1] == "backend" and len(parts) > 1 and len(target) > 2:
                own = parts[1]
                why = _backend_violation(own, module)
                if why is not None:
                    bad.append(f"{path}:{line}: {why}")
                if parts[1:3] == ("cube", "kernels") and module == "ember.backend.cube.backend":
                    bad.append(f"{path}:{line}: a cube kernel imports the whole backend; take a KernelContext")
    return bad


def test_imports_point_down():
    assert _violations() == []


def test_kernel_is_below_the_backends():
    # flex, cube and fusion share the kernel IR and its LLVM layer; the kernel package
    # imports only the protocol; flex and cube still never import fusion.
    for own in ("flex", "cube", "fusion"):
        assert _backend_violation(own, "ember.backend.kernel.llvm.jit") is None
    assert _backend_violation("kernel", "ember.backend.ops") is None
    assert _backend_violation("kernel", "ember.backend.fusion.graph") is not None
    assert _backend_violation("kernel", "ember.backend.flex.blas") is not None
    assert _backend_violation("flex", "ember.backend.fusion.graph") is not None
    assert _backend_violation("cube", "ember.backend.fusion.exprs") is not None
    assert _backend_violation("ops", "ember.backend.kernel.exprs") is not None
