"""The examples run end to end: digits reaches 97% validation accuracy; MNIST reads
IDX files (small ones written here) and explains what is missing."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

from ember.data import write_idx

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def load(name):
    spec = importlib.util.spec_from_file_location(f"example_{name}", EXAMPLES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
def test_classify_digits_reaches_97_percent(tmp_path, capsys):
    pytest.importorskip("sklearn")
    accuracy = load("classify_digits").main(["--artifact-dir", str(tmp_path), "--renderer", "plain"])
    assert accuracy >= 97.0
    out = capsys.readouterr().out
    assert "Learner Summary" in out and f"validation accuracy {accuracy:.2f}%" in out
    assert (tmp_path / "plots" / "Accuracy.png").is_file() and (tmp_path / "checkpoint").is_dir()


def write_fake_mnist(root: Path) -> None:
    """Random images with a bright bar whose row encodes the label: learnable."""
    rng = np.random.default_rng(0)
    for split, n in (("train", 256), ("t10k", 64)):
        labels = rng.integers(0, 10, n).astype(np.uint8)
        images = rng.integers(0, 50, (n, 28, 28)).astype(np.uint8)
        for i, label in enumerate(labels):
            images[i, 2 * label : 2 * label + 6, 4:24] = 255
        write_idx(root / f"{split}-images-idx3-ubyte.gz", images)
        write_idx(root / f"{split}-labels-idx1-ubyte", labels)


def test_mnist_example_trains_on_idx_files(tmp_path, capsys):
    write_fake_mnist(tmp_path)
    load("mnist").main([str(tmp_path), "--epochs", "1", "--artifact-dir", str(tmp_path / "run"), "--workers", "1"])
    out = capsys.readouterr().out
    assert "test accuracy" in out and "Top-2 Accuracy" in out
    assert (tmp_path / "run" / "checkpoint" / "epoch-0001" / "manifest.json").is_file()


def test_mnist_example_says_what_is_missing(tmp_path):
    with pytest.raises(SystemExit) as exit_info:
        load("mnist").main([str(tmp_path / "nowhere")])
    message = str(exit_info.value.code)
    assert "cannot find train-images-idx3-ubyte" in message and "Put the MNIST IDX files in" in message


@pytest.mark.slow
def test_onnx_finetune_imports_checks_and_fine_tunes(tmp_path, capsys):
    """A torch CNN trained on the digits 0-4, exported, imported, checked against
    onnxruntime, then fine-tuned on all ten digits with the Learner."""
    from tests.conftest import import_torch
    from tests.onnx_import.helpers import import_onnx

    pytest.importorskip("sklearn")
    import_torch()
    import_onnx("onnx")
    import_onnx("onnxruntime")
    accuracy = load("onnx_finetune").main(["--epochs", "3", "--artifact-dir", str(tmp_path), "--renderer", "none"])
    out = capsys.readouterr().out
    assert "ember implements every operator of this model" in out
    assert "ember against onnxruntime: largest relative difference" in out
    before = float(out.split("imported model: validation accuracy ")[1].split("%")[0])
    assert before < 55.0 and accuracy > 90.0
    assert (tmp_path / "finetuned.safetensors").is_file()
