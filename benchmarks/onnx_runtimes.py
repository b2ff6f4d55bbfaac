"""Imported ONNX models run by ember (eager and ``compile=True``), onnxruntime and torch.

    OPENBLAS_NUM_THREADS=1 python benchmarks/onnx_runtimes.py [--quick]

Forward passes, one thread each (onnxruntime's CPUExecutionProvider with
``intra_op_num_threads=1``, torch with ``set_num_threads(1)``, ember on flex): a small
CNN, a transformer encoder layer, a ResNet-50 (transformers' ``ResNetModel``, default
config, random weights) at batch 1 and 8 and a BERT-base encoder (``BertModel``, default
config, random weights) at sequence 128. Alternating rounds, medians; ratios vs
onnxruntime and vs torch; ember's load time, the compiled forward's first call (the
trace) and second call (the LLVM compile, where the plan is built) per model.
``--quick`` keeps the small CNN and the encoder layer; ``--cpu`` times CPU time
(``time.process_time``, every thread of the process) instead of wall-clock time, for
the forward passes and the setup alike: the fairer measure on a machine other
processes load.

Needs torch, onnx and onnxruntime (and transformers for the large models).
"""

from __future__ import annotations

import argparse
import io
import os
import sys
import time
import warnings
from typing import Any

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import ember.onnx
from benchmarks.common import alternating_us, blas_line, fmt, print_table, try_import_torch
from ember import Device, Tensor


def export(torch: Any, net: Any, args: tuple, names: list[str]) -> bytes:
    buffer = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            net.eval(), args, buffer, dynamo=False, input_names=names, output_names=["y"], opset_version=17
        )
    return buffer.getvalue()


def small_cnn(torch: Any) -> Any:
    nn = torch.nn
    return nn.Sequential(
        nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(1568, 10),
    )  # fmt: skip


def encoder_layer(torch: Any) -> Any:
    class Encoder(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.layer = torch.nn.TransformerEncoderLayer(64, 4, 128, dropout=0.0, batch_first=True)

        def forward(self, x):
            return self.layer(x)

    return Encoder()


def resnet50(torch: Any) -> Any:
    import transformers

    model = transformers.ResNetModel(transformers.ResNetConfig())  # resnet-50's config

    class Pooled(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.m = model

        def forward(self, x):
            return self.m(pixel_values=x).pooler_output

    return Pooled()


def bert_base(torch: Any) -> Any:
    import transformers

    model = transformers.BertModel(transformers.BertConfig(attn_implementation="eager"), add_pooling_layer=False)

    class Hidden(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.m = model

        def forward(self, ids):
            return self.m(input_ids=ids, attention_mask=torch.ones_like(ids)).last_hidden_state

    return Hidden()


def cases(torch: Any, rng: np.random.Generator, quick: bool) -> list[tuple[str, Any, np.ndarray, int]]:
    """(name, torch net, input, rounds)."""
    out = [
        ("small CNN, 64x1x28x28", small_cnn(torch), rng.standard_normal((64, 1, 28, 28)).astype(np.float32), 9),
        ("encoder layer, 8x32x64", encoder_layer(torch), rng.standard_normal((8, 32, 64)).astype(np.float32), 9),
    ]
    if quick:
        return out
    net = resnet50(torch)
    for batch in (1, 8):
        x = rng.standard_normal((batch, 3, 224, 224)).astype(np.float32)
        out.append((f"ResNet-50, {batch}x3x224x224", net, x, 5 if batch == 1 else 3))
    out.append(("BERT-base, 1x128 tokens", bert_base(torch), rng.integers(0, 30522, (1, 128)), 5))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="only the small CNN and the encoder layer")
    parser.add_argument("--cpu", action="store_true", help="time CPU time, not wall-clock time")
    cli = parser.parse_args()
    quick = cli.quick
    clock = time.process_time if cli.cpu else time.perf_counter
    torch = try_import_torch()
    try:
        import onnxruntime as ort
    except ImportError:
        ort = None
    if torch is None or ort is None:
        sys.exit("benchmarks/onnx_runtimes.py needs torch, onnx and onnxruntime: pip install torch onnx onnxruntime")
    ort.set_default_logger_severity(3)
    torch.set_num_threads(1)
    torch.manual_seed(0)
    torch.backends.mha.set_fastpath_enabled(False)  # the same math as the export
    rng = np.random.default_rng(0)
    device = Device.flex()
    rows, setup = [], []
    for name, net, x_np, rounds in cases(torch, rng, quick):
        xt = torch.from_numpy(x_np)
        input_name = "ids" if x_np.dtype == np.int64 else "x"
        data = export(torch, net, (xt,), [input_name])
        start = clock()
        eager = ember.onnx.load(data, device)
        load_s = clock() - start
        compiled = ember.onnx.load(data, device, compile=True)
        x = Tensor.from_data(x_np, device=device)
        start = clock()
        compiled(x).to_numpy()
        trace_s = clock() - start
        start = clock()
        compiled(x).to_numpy()  # a compiling executor plans from the second run on
        compile_s = clock() - start
        options = ort.SessionOptions()
        options.intra_op_num_threads = options.inter_op_num_threads = 1
        session = ort.InferenceSession(data, options, providers=["CPUExecutionProvider"])
        feed = {input_name: x_np}
        want = session.run(None, feed)[0]
        got = compiled(x).to_numpy()
        err = float(np.abs(got - want).max() / max(float(np.abs(want).max()), 1e-12))
        with torch.no_grad():
            medians, ratios = alternating_us(
                {
                    "eager": lambda: eager(x).to_numpy(),
                    "compiled": lambda: compiled(x).to_numpy(),
                    "ort": lambda: session.run(None, feed),
                    "torch": lambda: net(xt),
                },
                repeats=rounds,
                min_time=0.0 if rounds < 9 else 0.05,
                clock=clock,
            )
        rows.append(
            [name]
            + [fmt(medians[k] / 1000) for k in ("eager", "compiled", "ort", "torch")]
            + [f"{ratios[(k, 'ort')]:.2f}x" for k in ("eager", "compiled")]
            + [f"{ratios[(k, 'torch')]:.2f}x" for k in ("eager", "compiled")]
        )
        setup.append(
            [
                name,
                f"{load_s:.2f}",
                f"{trace_s:.2f}",
                f"{compile_s:.2f}",
                f"{compiled.stats['traces']} / {compiled.stats['replays']}",
                f"{err:.1e}",
            ]
        )
        print(f"done: {name}", file=sys.stderr, flush=True)
    print("load average (1, 5, 15 min): " + " ".join(f"{v:.2f}" for v in os.getloadavg()))
    print(blas_line())
    print_table(
        f"ONNX forward, ms {'of CPU time ' if cli.cpu else ''}per call (medians of alternating rounds, 1 thread each)",
        ["model", "ember eager", "ember compile", "onnxruntime", "torch",
         "eager/ort", "compile/ort", "eager/torch", "compile/torch"],
        rows,
    )  # fmt: skip
    print_table(
        f"ember setup, seconds{' of CPU time' if cli.cpu else ''} "
        "(load: ember.onnx.load; first call: the trace; second call: the compile)",
        ["model", "load", "first call", "second call", "traces / replays", "max err vs ort (rel)"],
        setup,
    )


if __name__ == "__main__":
    main()
