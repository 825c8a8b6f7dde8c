"""Benchmark datasets, generated deterministically into a directory and reused once complete.

Object data is incompressible: slices of one seeded 1 MiB random block, at an offset that varies per file and
per MiB, each MiB stamped with (file, chunk) numbers so no two chunks are equal. The many-file sets used for
listing and memory measurements hold zero to a few dozen bytes per file.

The engine-only rows read no dataset from disk: their source is ferry's synthetic connector (`synthetic://`),
whose objects are made as they are read, so a dataset there is only its URL and its totals.
"""

from __future__ import annotations

import json
import random
import shutil
import struct
from dataclasses import asdict, dataclass
from pathlib import Path

from ferry.units import format_size

KIB, MIB = 1 << 10, 1 << 20


@dataclass(frozen=True)
class Group:
    """`count` files of `size` bytes under `subdir`, `per_dir` files to a subdirectory (0: all in one)."""

    subdir: str
    count: int
    size: int
    per_dir: int
    tiny: bool = False  # zero-to-tiny text files instead of random bytes (size is then ignored)


@dataclass(frozen=True)
class Dataset:
    name: str
    path: Path
    files: int
    bytes: int
    url: str | None = None  # a synthetic source's URL (then path is unused)


def specs(quick: bool) -> dict[str, tuple[Group, ...]]:
    small = Group("", 200, 64 * KIB, 50) if quick else Group("", 2000, 64 * KIB, 100)
    large = Group("", 2, 32 * MIB, 0) if quick else Group("", 4, 256 * MIB, 0)
    return {
        "small": (small,),
        "large": (large,),
        "mixed": (Group("small", small.count, small.size, small.per_dir), Group("large", large.count, large.size, 0)),
        "tiny-20k": (Group("", 2000 if quick else 20_000, 1 * KIB, 1000),),
        "files-20k": (Group("", 2000 if quick else 20_000, 0, 1000, tiny=True),),
        "files-200k": (Group("", 20_000 if quick else 200_000, 0, 1000, tiny=True),),
        "one-gib": (Group("", 1, (64 if quick else 1024) * MIB, 0),),
    }


def _dir_name(name: str, groups: tuple[Group, ...]) -> str:
    return name + "".join(f"-{g.count}x{g.size}" for g in groups)


def _block() -> memoryview:
    block = random.Random(20240601).randbytes(MIB)
    return memoryview(block + block)  # doubled, so any 1 MiB window starting in the first half exists


def _write_random(path: Path, file_no: int, size: int, block: memoryview) -> None:
    with open(path, "wb") as f:
        for chunk_no, start in enumerate(range(0, size, MIB)):
            n = min(MIB, size - start)
            offset = (file_no * 1_000_003 + chunk_no * 7_919) % MIB
            stamp = struct.pack("<QQ", file_no, chunk_no)[:n]
            f.write(stamp)
            f.write(block[offset + len(stamp) : offset + n])


def _write_tiny(path: Path, file_no: int) -> None:
    path.write_bytes(f"{file_no}\n".encode() * (file_no % 4))  # 0 to ~24 bytes


def _generate(groups: tuple[Group, ...], into: Path) -> None:
    block = _block()
    file_no = 0
    for group in groups:
        for i in range(group.count):
            folder = into / group.subdir
            if group.per_dir:
                folder = folder / f"d{i // group.per_dir:04d}"
            if i == 0 or (group.per_dir and i % group.per_dir == 0):
                folder.mkdir(parents=True, exist_ok=True)
            path = folder / f"f{i:06d}.bin"
            if group.tiny:
                _write_tiny(path, file_no)
            else:
                _write_random(path, file_no, group.size, block)
            file_no += 1


def _measure(path: Path) -> tuple[int, int]:
    files = total = 0
    for entry in path.rglob("*"):
        if entry.is_file():
            files += 1
            total += entry.stat().st_size
    return files, total


# The engine-only shapes: COUNT x SIZE, as a synthetic:// URL names them (quick: the second).
SYNTHETIC = {
    "synthetic-small": ((50_000, 64 * KIB), (2_000, 64 * KIB)),
    "synthetic-large": ((64, 256 * MIB), (2, 32 * MIB)),
}


def _synthetic(name: str, root: Path, quick: bool) -> Dataset:
    count, size = SYNTHETIC[name][1 if quick else 0]
    url = f"synthetic://{count}x{format_size(size)}?seed=20240601"
    return Dataset(name, root, count, count * size, url)


def ensure(name: str, root: Path, quick: bool = False) -> Dataset:
    """The dataset `name` under root, generated unless a complete copy is already there (a synthetic one never is)."""
    if name in SYNTHETIC:
        return _synthetic(name, root, quick)
    groups = specs(quick)[name]
    path = root / _dir_name(name, groups)
    marker = path.with_name(path.name + ".json")
    if marker.exists() and path.is_dir():
        meta = json.loads(marker.read_text())
        if meta.get("groups") == [asdict(g) for g in groups]:
            return Dataset(name, path, meta["files"], meta["bytes"])
    partial = path.with_name(path.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    shutil.rmtree(path, ignore_errors=True)
    partial.mkdir(parents=True)
    _generate(groups, partial)
    partial.rename(path)
    files, total = _measure(path)
    marker.write_text(json.dumps({"groups": [asdict(g) for g in groups], "files": files, "bytes": total}, indent=1))
    return Dataset(name, path, files, total)
