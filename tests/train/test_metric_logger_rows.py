"""``FileMetricLogger``'s CSV rows against ``csv.DictWriter`` (what it wrote before it
kept one writer per file) and its JSON Lines rows against ``json.dumps``."""

from __future__ import annotations

import csv
import io
import json
import math

from ember.train.logger import FileMetricLogger

ROWS = [
    {"epoch": 1, "iteration": 1, "items": 32, "Loss": 2.302585, "Accuracy": 12.5},
    {"epoch": 1, "iteration": 2, "items": 32, "Loss": math.nan, "Accuracy": math.inf},  # no value: empty
    {"epoch": 1, "iteration": 3, "items": 7, "Loss": None},  # a missing column: empty
    {"epoch": 2, "iteration": 1, "items": 32, "Loss": 1e-9, "Accuracy": 100.0, "extra": "ignored"},
    {"epoch": 2, "iteration": 2, "items": 32, "Loss": 'say "hi", twice', "Accuracy": -0.0},  # quoting
]


def expected_csv(columns):
    out = io.StringIO(newline="")
    writer = csv.DictWriter(out, fieldnames=columns, extrasaction="ignore")
    writer.writeheader()
    for row in ROWS:
        clean = {k: None if isinstance(v, float) and not math.isfinite(v) else v for k, v in row.items()}
        writer.writerow({k: "" if v is None else v for k, v in clean.items()})
    return out.getvalue()


def test_csv_rows_are_dictwriters(tmp_path):
    logger = FileMetricLogger(tmp_path)
    logger.start({"train": ["Loss", "Accuracy"], "valid": ["Loss"], "epochs": ["Loss"]})
    for row in ROWS:
        logger.log("train", row)
    logger.close()
    text = (tmp_path / "train.csv").read_bytes().decode()
    assert text == expected_csv(["epoch", "iteration", "items", "Loss", "Accuracy"])
    assert text.splitlines()[2] == "1,2,32,,"


def test_resumed_csv_appends_through_a_new_writer(tmp_path):
    logger = FileMetricLogger(tmp_path)
    logger.start({"train": ["Loss", "Accuracy"], "valid": ["Loss"], "epochs": ["Loss"]})
    for row in ROWS[:3]:
        logger.log("train", row)
    logger.close()
    resumed = FileMetricLogger(tmp_path)
    resumed.start(
        {"train": ["Loss", "Accuracy"], "valid": ["Loss"], "epochs": ["Loss"]},
        keep={"epoch": 2, "train_batches": 0, "valid_done": False},
    )
    for row in ROWS[3:]:
        resumed.log("train", row)
    resumed.close()
    assert (tmp_path / "train.csv").read_bytes().decode() == expected_csv(
        ["epoch", "iteration", "items", "Loss", "Accuracy"]
    )


def test_jsonl_rows_are_json_dumps(tmp_path):
    logger = FileMetricLogger(tmp_path, "jsonl")
    logger.start({"train": ["Loss", "Accuracy"], "valid": ["Loss"], "epochs": ["Loss"]})
    for row in ROWS:
        logger.log("train", row)
    logger.close()
    lines = (tmp_path / "train.jsonl").read_text().splitlines()
    for line, row in zip(lines, ROWS, strict=True):
        clean = {k: None if isinstance(v, float) and not math.isfinite(v) else v for k, v in row.items()}
        assert line == json.dumps(clean)
