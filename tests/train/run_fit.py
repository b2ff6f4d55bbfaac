"""A tiny fit run as a script, for the Ctrl-C test:
``python tests/train/run_fit.py ARTIFACT_DIR [DELAY]``. Prints READY after the first
training step and, at the end, a digest of the trained parameters."""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from ember import Device
from ember.optim import AdamConfig
from ember.train import AccuracyMetric, Learner, LossMetric, SupervisedTraining
from tests.train.models import Classifier, loaders, params


def main() -> None:
    artifact_dir = sys.argv[1]
    delay = float(sys.argv[2]) if len(sys.argv) > 2 else 0.0
    device = Device.flex().autodiff()
    device.seed(11)
    train, valid = loaders(batch_size=4)
    state = {"steps": 0}

    def train_step(model, batch):
        if delay:
            import time

            time.sleep(delay)
        state["steps"] += 1
        if state["steps"] == 1:
            print("READY", flush=True)
        return model.forward_classification(batch)

    training = (
        SupervisedTraining(artifact_dir)
        .renderer("plain")
        .metric_train_numeric(LossMetric())
        .metric_valid_numeric(LossMetric())
        .metric_valid_numeric(AccuracyMetric())
        .num_epochs(3)
    )
    learner = Learner(
        Classifier.new(device),
        AdamConfig().init(),
        1e-2,
        train_step=train_step,
        valid_step=lambda m, b: m.forward_classification(b),
        compile=False,  # the step sleeps (a slow step to interrupt): a side effect compile="auto" runs eagerly
    )
    result = training.launch(learner, train, valid)
    digest = hashlib.sha256()
    for key, value in sorted(params(result.model).items()):
        digest.update(key.encode() + value.tobytes())
    print(f"RESULT interrupted={result.interrupted} epochs={result.epochs} digest={digest.hexdigest()}", flush=True)


if __name__ == "__main__":
    main()
