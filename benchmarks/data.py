"""One epoch of an augmented DataLoader on the training thread (``num_workers(0)``):
ember's ``TransformDataset`` with the vision transforms' batch path (``apply_many``),
the same transforms called item by item (wrapped in a plain function), and PyTorch's
``DataLoader`` over a ``Dataset`` that pads and crops each item (what torchvision's
``RandomCrop`` does), in alternating rounds.

    python benchmarks/data.py               # wall-clock time
    python benchmarks/data.py --clock cpu   # CPU time (a loaded machine)

Two datasets: 1437 digits 8x8 float64 with ``RandomCrop(8, padding=1)`` (the training
split of ``examples/classify_digits.py``, batch 32) and 2048 CIFAR-sized 32x32x3 uint8
images with ``RandomCrop(32, padding=4)`` and ``RandomHorizontalFlip()`` (batch 64).
Random images: the pixel values do not change the time.

Measured on this project's machine (2 cores, ``--clock cpu``, load about 1): digits
9.6 ms against 11.9 ms item by item (0.81x) and torch's 22 ms (0.44x); CIFAR-sized
22-24 ms against 26-28 ms (0.80-0.83x) and torch's 43-48 ms (0.49-0.52x). Before the
batch path and the per-epoch seed words, the digits epoch took 13.6 ms of CPU.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.common import alternating_us, print_table, try_import_torch, use_clock  # noqa: E402
from ember import Device, Tensor  # noqa: E402
from ember.data import ArrayDataset, DataLoaderBuilder, FnBatcher, TransformDataset  # noqa: E402
from ember.data.vision.transforms import Compose, RandomCrop, RandomHorizontalFlip  # noqa: E402


def ember_epoch(dataset, batch_size: int):
    device = Device.flex()

    def batch(items, device):
        images = np.stack([image for image, _ in items]).astype(np.float32)
        labels = np.array([label for _, label in items], dtype=np.int64)
        return Tensor.from_data(images, device=device), Tensor.from_data(labels, device=device)

    loader = DataLoaderBuilder(FnBatcher(batch)).batch_size(batch_size).shuffle(1).set_device(device).build(dataset)

    def run() -> None:
        for _ in loader:
            pass

    return run


def torch_epoch(torch, images: np.ndarray, labels: np.ndarray, size: int, padding: int, flip: bool, batch_size: int):
    class Crops(torch.utils.data.Dataset):
        def __len__(self) -> int:
            return len(images)

        def __getitem__(self, index: int):
            image = torch.from_numpy(images[index])
            image = image if image.ndim == 3 else image[:, :, None]
            padded = torch.nn.functional.pad(image.permute(2, 0, 1), (padding,) * 4)
            top = int(torch.randint(0, padded.shape[1] - size + 1, (1,)))
            left = int(torch.randint(0, padded.shape[2] - size + 1, (1,)))
            out = padded[:, top : top + size, left : left + size]
            if flip and torch.rand(1) < 0.5:
                out = out.flip(-1)
            return out.float(), int(labels[index])

    loader = torch.utils.data.DataLoader(Crops(), batch_size=batch_size, shuffle=True, num_workers=0)

    def run() -> None:
        for _ in loader:
            pass

    return run


def main() -> None:
    argv = sys.argv[1:]
    if "--clock" in argv:
        use_clock(argv[argv.index("--clock") + 1])
    torch = try_import_torch()
    if torch is not None:
        torch.set_num_threads(1)
    rng = np.random.default_rng(0)
    cases: list[tuple[str, np.ndarray, int, int, bool, int]] = [
        ("digits 8x8, crop 8 pad 1, batch 32", rng.integers(0, 17, (1437, 8, 8)).astype(np.float64), 8, 1, False, 32),
        (
            "CIFAR-sized 32x32x3, crop 32 pad 4 + flip, batch 64",
            rng.integers(0, 256, (2048, 32, 32, 3)).astype(np.uint8),
            32,
            4,
            True,
            64,
        ),
    ]
    rows = []
    for name, images, size, padding, flip, batch_size in cases:
        labels = rng.integers(0, 10, len(images))
        crop = RandomCrop(size, padding=padding)
        augment = Compose([crop, RandomHorizontalFlip()]) if flip else crop
        data = ArrayDataset(images, labels)
        batched: TransformDataset[Any] = TransformDataset(data, augment, seed=42)
        # The same transforms behind a plain function (no apply_many): called item by item.
        one_by_one: TransformDataset[Any] = TransformDataset(data, augment.__call__, seed=42)
        fns = {"batched": ember_epoch(batched, batch_size), "item by item": ember_epoch(one_by_one, batch_size)}
        if torch is not None:
            fns["torch"] = torch_epoch(torch, images, labels, size, padding, flip, batch_size)
        medians, ratios = alternating_us(fns, repeats=9, min_time=0.2)
        rows.append(
            [
                name,
                f"{medians['batched'] / 1e3:.1f}",
                f"{medians['item by item'] / 1e3:.1f}",
                f"{ratios[('batched', 'item by item')]:.2f}x",
                f"{medians['torch'] / 1e3:.1f}" if torch is not None else "-",
                f"{ratios[('batched', 'torch')]:.2f}x" if torch is not None else "-",
            ]
        )
    header = ["dataset", "ember ms", "item by item ms", "x item by item", "torch ms", "x torch"]
    print_table("one augmented epoch on the training thread (medians of alternating rounds)", header, rows)


if __name__ == "__main__":
    main()
