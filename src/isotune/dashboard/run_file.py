"""Read W&B's offline run files (``run-<id>.wandb``): the keys a run logged and the axes it
declared, without W&B's servers.

wandb 0.31 ships the records' definition (``wandb.proto.wandb_internal_pb2.Record``) but no
reader of the file. Its layout is LevelDB's log format: a 7-byte header (``:W&B``, the magic
0xBEE1 and a version byte), then records cut into chunks that never cross a 32 KiB block; each
chunk has a 7-byte header: checksum (uint32), length (uint16) and type (1 full, 2 first,
3 middle, 4 last), little-endian; a block's tail too short for a header is zero padding. The
checksum is CRC-32 (zlib's, not LevelDB's masked CRC32C) of the type byte and the data, checked
here for every chunk.
"""

from __future__ import annotations

import json
import struct
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from isotune.errors import IsotuneError

MAGIC = b":W&B\xe1\xbe"
FILE_HEADER, CHUNK_HEADER, BLOCK = 7, 7, 32 * 1024
FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4
TABLE_FILE = ".table.json"  # how W&B names the file of a logged table


def records(path: Path) -> Iterator[bytes]:
    """The records of a ``.wandb`` file, each as the bytes of a serialized ``Record``."""
    data = Path(path).read_bytes()
    if not data.startswith(MAGIC) or len(data) < FILE_HEADER:
        raise IsotuneError(f"{path} is not a W&B run file (no :W&B header); pass a run-*.wandb.")
    position, parts = FILE_HEADER, []
    while position + CHUNK_HEADER <= len(data):
        room = BLOCK - position % BLOCK
        if room < CHUNK_HEADER:  # the block's zero padding
            position += room
            continue
        checksum, length, kind = struct.unpack_from("<IHB", data, position)
        start = position + CHUNK_HEADER
        chunk = data[start : start + length]
        if kind == 0 and length == 0:  # zeros: the rest of a block that was never written
            position += room
            continue
        if len(chunk) < length or zlib.crc32(chunk, zlib.crc32(bytes([kind]))) != checksum:
            raise IsotuneError(
                f"{path}: chunk at byte {position} is damaged (checksum or length); the run "
                "file is truncated or corrupt, so its keys cannot be read."
            )
        parts.append(chunk)
        if kind in (FULL, LAST):
            yield b"".join(parts)
            parts = []
        position = start + length


@dataclass
class RunKeys:
    """What a run logged: history keys, summary keys, each ``define_metric`` step metric
    (name or glob: step metric) and the columns of each table in its summary (those a custom
    chart reads)."""

    history: set[str] = field(default_factory=set)
    summary: set[str] = field(default_factory=set)
    step_metrics: dict[str, str] = field(default_factory=dict)
    tables: dict[str, tuple[str, ...]] = field(default_factory=dict)


def run_keys(path: Path) -> RunKeys:
    """The keys of one ``run-*.wandb`` file; a summary table's columns are read from its file,
    which W&B writes under the run folder's ``files/``."""
    from wandb.proto.wandb_internal_pb2 import Record

    keys = RunKeys()
    for data in records(path):
        record = Record()
        record.ParseFromString(data)
        kind = record.WhichOneof("record_type")
        if kind == "history":
            keys.history |= {_key(item) for item in record.history.item}
        elif kind == "summary":
            keys.summary |= {_key(item) for item in record.summary.update}
            for item in record.summary.update:
                if list(item.nested_key[1:]) == ["path"]:  # a file's: media/table/<key>_*.json
                    stored = json.loads(item.value_json)
                    if stored.endswith(TABLE_FILE):
                        table = json.loads((Path(path).parent / "files" / stored).read_text())
                        keys.tables[item.nested_key[0]] = tuple(table["columns"])
        elif kind == "metric" and record.metric.step_metric:
            name = record.metric.name or record.metric.glob_name
            keys.step_metrics[name] = record.metric.step_metric
    return keys


def _key(item) -> str:
    """The logged key of a history or summary item; a value with fields (an image, a summary's
    ``max``) has them after the key in ``nested_key``."""
    return item.key or item.nested_key[0]
