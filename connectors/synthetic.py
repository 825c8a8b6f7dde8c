"""Two stores with no server and no disk: a synthetic source of generated objects and a null target.

They let the engine be measured alone (``ferry sync synthetic://20000x64K null://sink``) and tested at scale:

- ``synthetic://COUNTxSIZE[+COUNTxSIZE...][?seed=N][&page_ms=MS]``: a read-only source of COUNT objects of SIZE
  bytes per group (sizes as ``ferry sync`` takes them: 64K, 256M), keyed ``<size>/<index>`` (``64K/0001999``), index
  zero-padded so keys sort by number. The bytes are a function of the seed and the key alone (so one key holds
  the same bytes in every shape that names it, and the signature is the seed's): slices of one seeded 1 MiB
  random block at an offset that varies per object and per MiB, each MiB stamped with its (size, object, MiB)
  numbers, so no two MiB are equal and nothing compresses. Listing and reading cost no
  I/O (``page_ms``: each page of 1,000 keys waits that long first, as a store's LIST request does, to measure
  listings that a real endpoint's latency bounds); any byte range is made on demand. The source keeps no
  checksum, as a plain file does: the engine
  computes its own while it reads. Every write is refused with one line.
- ``null://NAME[/prefix]``: a target that keeps, per object, only what the engine verifies and the gate
  compares: its size, a signature that changes with every write, ferry's checksum, its content type and
  metadata; the bytes are dropped. It lives in the connector, so one ``ferry sync`` process sees what it wrote
  (the engine's read-back stat, the gate's listing) and the next process starts empty. Reading bytes back is
  refused (``--deep-verify`` and adopting by reading cannot work against it).
"""

from __future__ import annotations

import bisect
import itertools
import random
import re
import struct
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING
from urllib.parse import parse_qsl, urlsplit

from connectors.base import Capabilities, Connector, Location, ObjectInfo, Part, WriteSpec
from connectors.checksum import crc32c
from ferry.errors import NotFoundError, PermanentError, UsageError
from ferry.units import format_size, parse_size

if TYPE_CHECKING:  # annotations only: pydantic and YAML load where a profile is read
    from ferry.profiles import Profile

MIB = 1 << 20
_STAMP = struct.Struct("<QQQ")  # (size, object, MiB) at the start of every MiB
_GROUP = re.compile(r"(\d+)x(\S+)")
_SYNTAX = "synthetic://COUNTxSIZE[+COUNTxSIZE...][?seed=N][&page_ms=MS], e.g. synthetic://2000x64K+4x256M"
_PAGE = 1000  # keys per listing page, as S3's


# -- the synthetic source -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Group:
    """`count` objects of `size` bytes, keyed `<label>/<index>`."""

    count: int
    size: int
    label: str = field(init=False)
    width: int = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "label", format_size(self.size))
        object.__setattr__(self, "width", len(str(self.count - 1)))

    def key(self, index: int) -> str:
        return f"{self.label}/{index:0{self.width}d}"


class _Keys(Sequence[str]):
    """A group's keys in order, made on demand (for bisect: no list of a million strings)."""

    def __init__(self, group: Group):
        self.group = group

    def __len__(self) -> int:
        return self.group.count

    def __getitem__(self, index):  # type: ignore[override] - ints only, as bisect asks
        return self.group.key(index)


def parse_shape(url: str) -> tuple[list[Group], dict[str, int]]:
    """The groups and options (seed, page_ms) a synthetic URL names; UsageError (naming the URL and the syntax) if it
    names none."""
    parts = urlsplit(url)
    if parts.path not in ("", "/"):
        raise UsageError(f"{url}: a synthetic source takes no path (its keys are <size>/<index>): {_SYNTAX}")
    groups: list[Group] = []
    for text in parts.netloc.split("+") if parts.netloc else []:
        match = _GROUP.fullmatch(text)
        if not match:
            raise UsageError(f"{url}: {text!r} is not COUNTxSIZE: {_SYNTAX}")
        try:
            size = parse_size(match.group(2))
        except ValueError as exc:
            raise UsageError(f"{url}: {exc}: {_SYNTAX}") from None
        count = int(match.group(1))
        if count <= 0:
            raise UsageError(f"{url}: {text!r}: the count must be positive")
        groups.append(Group(count, size))
    if not groups:
        raise UsageError(f"{url}: no objects named (missing COUNTxSIZE): {_SYNTAX}")
    labels = [g.label for g in groups]
    if len(set(labels)) != len(labels):
        raise UsageError(f"{url}: two groups of one size: name each size once")
    options = {"seed": 0, "page_ms": 0}
    for name, value in parse_qsl(parts.query, keep_blank_values=True):
        if name not in options or not value.isdigit():
            raise UsageError(f"{url}: {name}={value!r}: the options are seed=N and page_ms=MS (whole numbers)")
        options[name] = int(value)
    # Keys sort as "<label>/...", and '/' sorts before every digit and unit letter.
    return sorted(groups, key=lambda g: g.label + "/"), options


class SyntheticConnector(Connector):
    """A read-only source of generated objects (see the module's docstring for the URL)."""

    kind = "synthetic"
    capabilities = Capabilities(exact_keys=True, listing_seeks=True)

    def __init__(self, url: str, groups: list[Group], seed: int, page_ms: int = 0):
        super().__init__(url)
        self.groups = groups
        self.seed = seed
        self.page_s = page_ms / 1000
        self._by_label = {g.label: g for g in groups}
        self._signature = f"synthetic-{seed}"  # the bytes follow from seed, size and key alone
        block = random.Random(seed).randbytes(MIB)
        self._block = memoryview(block + block)  # doubled: any 1 MiB window starting in the first half exists

    @classmethod
    def from_location(cls, location: Location, profile: Profile | None) -> SyntheticConnector:
        groups, options = parse_shape(location.url)
        return cls(location.url, groups, **options)

    @property
    def objects(self) -> int:
        return sum(g.count for g in self.groups)

    @property
    def total_bytes(self) -> int:
        return sum(g.count * g.size for g in self.groups)

    def check(self) -> None:
        """Always reachable: there is nothing to reach."""

    def prepare_target(self, dry_run: bool) -> None:
        raise UsageError(f"{self.url}: a synthetic source is read-only: it cannot be a target")

    def list(self, prefix: str = "", start_after: str = "") -> Iterator[ObjectInfo]:
        listed = 0
        for group in self.groups:
            keys = _Keys(group)
            index = max(bisect.bisect_left(keys, prefix), bisect.bisect_right(keys, start_after))
            for i in range(index, group.count):
                key = group.key(i)
                if not key.startswith(prefix):
                    break
                if self.page_s and listed % _PAGE == 0:
                    time.sleep(self.page_s)
                listed += 1
                yield ObjectInfo(key=key, size=group.size, signature=self._signature)

    def _find(self, key: str) -> tuple[Group, int]:
        label, _, index = key.partition("/")
        group = self._by_label.get(label)
        if group is None or not index.isdigit() or len(index) != group.width or int(index) >= group.count:
            raise NotFoundError(f"{self.url}: {key}: not found", code="NoSuchKey")
        return group, int(index)

    def stat(self, key: str) -> ObjectInfo:
        group, _ = self._find(key)
        return ObjectInfo(key=key, size=group.size, signature=self._signature, metadata={})

    def open_range(self, key: str, start: int, length: int, *, if_match: str | None = None) -> bytes:
        group, index = self._find(key)
        end = min(group.size, start + length)
        pieces = []
        for chunk in range(start // MIB, -(-end // MIB)):
            base = chunk * MIB
            n = min(MIB, group.size - base)
            offset = (index * 1_000_003 + chunk * 7_919 + group.size * 104_729) % MIB
            stamp = _STAMP.pack(group.size, index, chunk)[:n]
            lo, hi = max(start, base) - base, min(end, base + n) - base
            if lo < len(stamp):
                pieces.append(stamp[lo : min(hi, len(stamp))])
            if hi > len(stamp):
                pieces.append(self._block[offset + max(lo, len(stamp)) : offset + hi])
        return b"".join(pieces)

    def get(self, key: str, *, if_match: str | None = None) -> tuple[bytes, ObjectInfo]:
        info = self.stat(key)
        return self.open_range(key, 0, info.size), info

    def _read_only(self, key: str) -> PermanentError:
        return PermanentError(f"{self.url}: {key}: a synthetic source is read-only", code="ReadOnly")

    def put(self, key: str, data: bytes, spec: WriteSpec) -> ObjectInfo:
        raise self._read_only(key)

    def delete(self, key: str) -> None:
        raise self._read_only(key)

    def begin(self, key: str, spec: WriteSpec, part_size: int) -> str:
        raise self._read_only(key)

    def put_part(self, key: str, upload_id: str, number: int, data: bytes) -> Part:
        raise self._read_only(key)

    def complete(self, key: str, upload_id: str, parts: list[Part], spec: WriteSpec) -> ObjectInfo:
        raise self._read_only(key)

    def abort(self, key: str, upload_id: str) -> None:
        raise self._read_only(key)

    def upload_alive(self, key: str, upload_id: str) -> bool:
        return False

    def list_incomplete(self) -> Iterator[tuple[str, str]]:
        return iter(())


# -- the null target ------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Held:
    size: int
    signature: str
    checksum: str | None
    content_type: str | None
    metadata: dict[str, str] | None


@dataclass
class _Upload:
    key: str
    parts: dict[int, Part] = field(default_factory=dict)


class NullConnector(Connector):
    """A target that keeps each object's size, signature and checksum, never its bytes."""

    kind = "null"
    capabilities = Capabilities(stores_checksum=True, exact_keys=True)

    def __init__(self, url: str):
        super().__init__(url)
        self._objects: dict[str, _Held] = {}
        self._uploads: dict[str, _Upload] = {}
        self._lock = threading.Lock()
        self._serial = itertools.count(1)

    @classmethod
    def from_location(cls, location: Location, profile: Profile | None) -> NullConnector:
        if urlsplit(location.url).query:
            raise UsageError(f"{location.url}: a null target takes no options: null://NAME[/prefix]")
        return cls(location.url)

    def check(self) -> None:
        """Always reachable: there is nothing to reach."""

    def _info(self, key: str, held: _Held, metadata: bool) -> ObjectInfo:
        return ObjectInfo(key=key, size=held.size, signature=held.signature, checksum=held.checksum,
                          content_type=held.content_type, metadata=dict(held.metadata or {}) if metadata else None)

    def _keep(self, key: str, size: int, spec: WriteSpec) -> ObjectInfo:
        held = _Held(size, f"null-{next(self._serial)}", spec.checksum, spec.content_type,
                     dict(spec.metadata) if spec.metadata else None)
        with self._lock:
            self._objects[key] = held
        return self._info(key, held, metadata=True)

    def list(self, prefix: str = "", start_after: str = "") -> Iterator[ObjectInfo]:
        with self._lock:
            held = sorted((k, v) for k, v in self._objects.items() if k.startswith(prefix) and k > start_after)
        for key, value in held:
            yield self._info(key, value, metadata=False)

    def stat(self, key: str) -> ObjectInfo:
        held = self._objects.get(key)
        if held is None:
            raise NotFoundError(f"{self.url}: {key}: not found", code="NoSuchKey")
        return self._info(key, held, metadata=True)

    def open_range(self, key: str, start: int, length: int, *, if_match: str | None = None) -> bytes:
        self.stat(key)
        raise PermanentError(f"{self.url}: {key}: a null target keeps no bytes to read back", code="NoBytes")

    def put(self, key: str, data: bytes, spec: WriteSpec) -> ObjectInfo:
        return self._keep(key, len(data), spec)

    def delete(self, key: str) -> None:
        with self._lock:
            self._objects.pop(key, None)

    def begin(self, key: str, spec: WriteSpec, part_size: int) -> str:
        upload_id = f"upload-{next(self._serial)}"
        with self._lock:
            self._uploads[upload_id] = _Upload(key)
        return upload_id

    def _upload(self, key: str, upload_id: str) -> _Upload:
        upload = self._uploads.get(upload_id)
        if upload is None or upload.key != key:
            raise NotFoundError(f"{self.url}: {key}: no upload {upload_id}", code="NoSuchUpload")
        return upload

    def put_part(self, key: str, upload_id: str, number: int, data: bytes) -> Part:
        upload = self._upload(key, upload_id)
        # What a store echoes for a part: ferry combines these into the object's checksum.
        part = Part(number, len(data), f"part-{next(self._serial)}", crc32c(data))
        with self._lock:
            upload.parts[number] = part
        return part

    def complete(self, key: str, upload_id: str, parts: list[Part], spec: WriteSpec) -> ObjectInfo:
        upload = self._upload(key, upload_id)
        for part in parts:
            if upload.parts.get(part.number) != part:
                raise PermanentError(f"{self.url}: {key}: part {part.number} was not uploaded", code="InvalidPart")
        with self._lock:
            self._uploads.pop(upload_id, None)
        return self._keep(key, sum(p.size for p in parts), spec)

    def abort(self, key: str, upload_id: str) -> None:
        with self._lock:
            self._uploads.pop(upload_id, None)

    def upload_alive(self, key: str, upload_id: str) -> bool:
        return upload_id in self._uploads

    def list_incomplete(self) -> Iterator[tuple[str, str]]:
        with self._lock:
            pending = sorted((u.key, upload_id) for upload_id, u in self._uploads.items())
        return iter(pending)
