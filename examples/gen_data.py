"""A sample training-data tree: shards, checkpoints, awkward keys. Deterministic and incompressible."""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path

MiB = 1 << 20


def _bytes(seed: str, size: int) -> bytes:
    """size pseudo-random bytes from seed (SHAKE-256: fast, deterministic, incompressible)."""
    return hashlib.shake_256(seed.encode()).digest(size)


def generate(
    root: Path, shards: int = 400, shard_size: int = 64 * 1024, checkpoints: int = 3, checkpoint_size: int = 40 * MiB
) -> Path:
    """Write the tree under root (idempotent: existing files of the right size are kept)."""
    files = {f"datasets/train/shard-{i:05d}.tar": shard_size for i in range(shards)}
    files |= {f"checkpoints/step-{1000 * (i + 1)}/model.pt": checkpoint_size for i in range(checkpoints)}
    files |= {"datasets/README.md": 200, "datasets/empty.txt": 0, "datasets/naïve café/notes.txt": 300}
    for name, size in files.items():
        path = root / name
        if path.exists() and path.stat().st_size == size:
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(_bytes(name, size))
    (root / "datasets" / "val").mkdir(parents=True, exist_ok=True)  # an empty directory travels as a marker
    return root


if __name__ == "__main__":
    print(generate(Path(sys.argv[1] if len(sys.argv) > 1 else "sample-data")))
