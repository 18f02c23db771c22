"""Reading W&B's offline run files (`wandb/offline-run-*/run-<id>.wandb`) in tests: which steps each run segment
holds, and where a resumed segment rewinds the run to. The file is W&B's transaction log: a 7-byte header, then
LevelDB-log records (32 KiB blocks; each chunk a 7-byte header: crc32, length, type full/first/middle/last)
holding `wandb_internal_pb2.Record` protobufs."""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from pathlib import Path

BLOCK = 32768
FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4


@dataclass
class Segment:
    """One process's part of a W&B run."""

    path: Path
    run_id: str = ""
    rewind_to: int | None = None  # the step a `resume_from` rewinds the run to (history after it is replaced)
    steps: list[int] = field(default_factory=list)  # history rows, in order


def _payloads(data: bytes):
    if data[:4] != b":W&B":
        raise ValueError("not a W&B transaction log")
    pos, pending = 7, b""
    while pos + 7 <= len(data):
        if BLOCK - pos % BLOCK < 7:  # a block's tail too short for a header is padding
            pos += BLOCK - pos % BLOCK
            continue
        _, length, kind = struct.unpack("<IHB", data[pos:pos + 7])
        if kind == 0 and length == 0:
            break
        chunk, pos = data[pos + 7:pos + 7 + length], pos + 7 + length
        if kind == FULL:
            yield chunk
        elif kind == FIRST:
            pending = chunk
        elif kind == MIDDLE:
            pending += chunk
        elif kind == LAST:
            yield pending + chunk


def read_segment(path: Path) -> Segment:
    from wandb.proto import wandb_internal_pb2 as pb

    segment = Segment(path)
    for payload in _payloads(path.read_bytes()):
        record = pb.Record()
        record.ParseFromString(payload)
        kind = record.WhichOneof("record_type")
        if kind == "run":
            segment.run_id = record.run.run_id
            if record.run.branch_point.run:
                segment.rewind_to = int(record.run.branch_point.value)
        elif kind == "history":
            segment.steps.append(int(record.history.step.num))
    return segment


def read_run(run_dir: Path) -> list[Segment]:
    """Every segment of the run's W&B files, oldest first."""
    return [read_segment(p) for p in sorted(run_dir.glob("wandb/offline-run-*/run-*.wandb"))]


def merged_steps(segments: list[Segment]) -> list[int]:
    """The history W&B shows once the segments are synced in order: each rewind drops the rows after its step."""
    steps: list[int] = []
    for segment in segments:
        if segment.rewind_to is not None:
            steps = [s for s in steps if s <= segment.rewind_to]
        steps.extend(segment.steps)
    return steps
