"""``report_to="wandb"`` with ``WANDB_MODE=offline`` (no network, no account) logs every metric
the trainer logs, ``pair/*`` included, into the run on disk: the offline run is read back and
compared with the trainer's own ``log_history``, value for value."""

from __future__ import annotations

import json
import math
import os
import struct
import subprocess
import sys
import zlib
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# Trains two PAIR steps of the toy task's tiny model, reporting to wandb, and writes the
# trainer's log_history next to it. The run is finished by wandb's own exit hook, as in a
# user's script that never calls wandb.finish().
SCRIPT = """
import json, sys
from pairht.demo import toy
from pairht.trl import PairGRPOConfig, PairGRPOTrainer

out = sys.argv[1]
config = PairGRPOConfig(
    output_dir=out, max_steps=2, logging_steps=1, save_strategy="no", num_generations=4,
    per_device_train_batch_size=8, max_completion_length=toy.response_length(6) + 8,
    width="prefixes", tau=4, snap_window=4, budget_ratio=0.5, use_cpu=True, report_to="wandb",
)
trainer = PairGRPOTrainer(model=toy.make_model(0), reward_funcs=toy.toy_reward, args=config,
                          train_dataset=toy.make_dataset(16, rng=0),
                          processing_class=toy.make_tokenizer())
trainer.train()
with open(out + "/log_history.json", "w") as f:
    json.dump(trainer.state.log_history, f)
"""

# The .wandb file is LevelDB's log format (32 KiB blocks of records, each with a 7-byte header:
# CRC-32 of type byte and payload, payload length, type FULL/FIRST/MIDDLE/LAST) after a 7-byte
# file header, and each record is a wandb_internal.proto `Record`. wandb's Python reader of it
# was removed when its Go core took over writing, and no maintained package reads the log format
# alone, so these dozen lines read it; the CRC check makes a misread fail instead of passing.
WANDB_FILE_HEADER = b":W&B\xe1\xbe\x00"  # ident, magic 0xBEE1 (little-endian), version 0
BLOCK, RECORD_HEADER = 32768, 7
FULL, FIRST, LAST = 1, 2, 4


def wandb_records(path: Path) -> Iterator:
    """Every protobuf ``Record`` of an offline run's ``.wandb`` file, in order."""
    from wandb.proto import wandb_internal_pb2

    data = path.read_bytes()
    assert data[:len(WANDB_FILE_HEADER)] == WANDB_FILE_HEADER, data[:16]
    pos, payload = len(WANDB_FILE_HEADER), b""
    while len(data) - pos >= RECORD_HEADER:
        left = BLOCK - pos % BLOCK
        crc, length, kind = struct.unpack_from("<IHB", data, pos)
        if left < RECORD_HEADER or (kind == 0 and length == 0):  # zero padding to the block end
            pos += left
            continue
        chunk = data[pos + RECORD_HEADER:pos + RECORD_HEADER + length]
        assert zlib.crc32(chunk, zlib.crc32(bytes([kind]))) == crc, f"bad CRC at byte {pos}"
        pos += RECORD_HEADER + length
        payload = chunk if kind in (FULL, FIRST) else payload + chunk
        if kind in (FULL, LAST):
            yield wandb_internal_pb2.Record.FromString(payload)


def wandb_history(path: Path) -> list[dict]:
    """The run's history rows as ``{key: value}`` (values decoded from their JSON)."""
    rows = []
    for record in wandb_records(path):
        if record.WhichOneof("record_type") == "history":
            rows.append({item.key or "/".join(item.nested_key): json.loads(item.value_json)
                         for item in record.history.item})
    return rows


@pytest.mark.slow
def test_report_to_wandb_offline_logs_every_pair_metric(tmp_path):
    pytest.importorskip("wandb", reason="the dev extra installs wandb")
    out = tmp_path / "out"
    out.mkdir()
    env = {**os.environ,
           "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")]),
           "WANDB_MODE": "offline", "WANDB_SILENT": "true", "WANDB_DIR": str(tmp_path),
           "WANDB_CONFIG_DIR": str(tmp_path / "config"), "WANDB_CACHE_DIR": str(tmp_path / "cache"),
           "WANDB_DATA_DIR": str(tmp_path / "data")}
    proc = subprocess.run([sys.executable, "-c", SCRIPT, str(out)], capture_output=True,
                          text=True, env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (run_file,) = (tmp_path / "wandb").glob("offline-run-*/run-*.wandb")
    history = json.loads((out / "log_history.json").read_text())
    logged = [e for e in history if "pair/completed" in e]
    assert [e["step"] for e in logged] == [1, 2]  # logging_steps=1, two steps

    # TRL's wandb callback logs each entry as one row, its keys prefixed "train/".
    rows = {row["train/global_step"]: row for row in wandb_history(run_file)
            if "train/pair/completed" in row}
    assert sorted(rows) == [1, 2]
    for entry in logged:
        row = rows[entry["step"]]
        expected = {f"train/{k}": v for k, v in entry.items() if k not in ("step", "epoch")}
        assert {k for k in row if k.startswith("train/pair/")} == \
            {k for k in expected if k.startswith("train/pair/")}
        for key, value in expected.items():
            assert row[key] == value, (key, row[key], value)
        for key in ("train/pair/suffix_tokens", "train/pair/prefix_tokens",
                    "train/pair/completed", "train/pair/ess", "train/pair/pi_mean",
                    "train/pair/min_joint", "train/reward", "train/completions/mean_length"):
            assert math.isfinite(row[key]), (key, row[key])
        assert row["train/pair/suffix_tokens"] > 0 and row["train/pair/completed"] >= 2
