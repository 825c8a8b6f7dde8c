"""Any fsspec filesystem (gcs, sftp, memory, ...): the generic connector for every other protocol.

fsspec has no portable object metadata, so this connector keeps no checksum with the object;
the engine verifies by size and the transfer state. Multipart uploads stage each part as a hidden file
and concatenate them on completion, so a killed run resumes with the parts already staged.
"""

from __future__ import annotations

import contextlib
import secrets
from collections.abc import Iterator
from typing import TYPE_CHECKING
from urllib.parse import quote, unquote

import fsspec

from connectors.base import Capabilities, Connector, Location, ObjectInfo, Part, WriteSpec
from connectors.checksum import crc32c
from ferry.errors import NotFoundError, PermanentError, TransientError, UsageError

if TYPE_CHECKING:  # annotations only: pydantic and YAML load where a profile is read
    from ferry.profiles import Profile

_UPLOADS = ".ferry-uploads"


def translate(exc: Exception, what: str) -> Exception:
    if isinstance(exc, FileNotFoundError):
        return NotFoundError(f"{what}: not found", code="FileNotFound")
    if isinstance(exc, (TimeoutError, ConnectionError)):
        return TransientError(f"{what}: {type(exc).__name__}: {exc}", code=type(exc).__name__)
    if isinstance(exc, PermissionError):
        return PermanentError(f"{what}: permission denied", code="PermissionDenied")
    return PermanentError(f"{what}: {type(exc).__name__}: {exc}", code=type(exc).__name__)


class FsspecConnector(Connector):
    """A path on any fsspec filesystem."""

    kind = "fsspec"
    capabilities = Capabilities(exact_keys=False, max_part_size=1 << 62, max_parts=1 << 31)

    def __init__(self, url: str, fs: fsspec.AbstractFileSystem, root: str):
        super().__init__(url)
        self.fs = fs
        self.root = root.rstrip("/")

    @classmethod
    def from_location(cls, location: Location, profile: Profile | None) -> FsspecConnector:
        protocol = profile.protocol if profile and profile.protocol else location.scheme
        options = dict(profile.options) if profile else {}
        try:
            fs = fsspec.filesystem(protocol, **options)
        except ImportError as exc:
            raise UsageError(
                f"{location.url}: the {protocol} filesystem needs a missing package ({exc.name})"
            ) from None
        except ValueError as exc:
            raise UsageError(f"{location.url}: {exc}") from None
        root = "/".join(p for p in (location.bucket, location.prefix) if p)
        return cls(location.url, fs, fs._strip_protocol(root))

    def _full(self, key: str) -> str:
        return f"{self.root}/{key}"

    def _call(self, what: str, fn, *args):
        try:
            return fn(*args)
        except Exception as exc:  # noqa: BLE001 - translated at the boundary
            raise translate(exc, what) from None

    def check(self) -> None:
        if not self.fs.exists(self.root):
            raise UsageError(f"{self.url}: does not exist")

    def prepare_target(self, dry_run: bool) -> None:
        if not dry_run:
            self._call(self.url, self.fs.makedirs, self.root, True)

    def list(self, prefix: str = "", start_after: str = "") -> Iterator[ObjectInfo]:
        if not self.fs.exists(self.root):
            return
        yield from (i for i in self._walk(self.root, "") if i.key.startswith(prefix) and i.key > start_after)

    def _walk(self, path: str, base: str) -> Iterator[ObjectInfo]:
        entries = self._call(path, self.fs.ls, path, True)
        named = []
        for entry in entries:
            name = entry["name"].rstrip("/").rsplit("/", 1)[-1]
            is_dir = entry["type"] == "directory"
            named.append((name + "/" if is_dir else name, entry))
        named.sort(key=lambda pair: pair[0])
        if not named and base:
            yield ObjectInfo(key=base, size=0, signature="dir")
            return
        for sort_name, entry in named:
            if sort_name == f"{_UPLOADS}/" and not base:
                continue
            if sort_name.endswith("/"):
                yield from self._walk(entry["name"].rstrip("/"), base + sort_name)
            else:
                yield ObjectInfo(key=base + sort_name, size=entry["size"], signature=_signature(entry))

    def stat(self, key: str) -> ObjectInfo:
        entry = self._call(f"{self.url}: {key}", self.fs.info, self._full(key))
        if key.endswith("/") != (entry["type"] == "directory"):
            raise NotFoundError(f"{self.url}: {key}: not found", code="FileNotFound")
        return ObjectInfo(key=key, size=entry.get("size") or 0, signature=_signature(entry), metadata={})

    def open_range(self, key: str, start: int, length: int, *, if_match: str | None = None) -> bytes:
        data = self._call(f"{self.url}: {key}", self.fs.cat_file, self._full(key), start, start + length)
        if len(data) != length:
            # Read again, as from S3 and Azure: over a network a body can come short (the route tells an object that
            # changed since its listing apart).
            raise TransientError(f"{self.url}: {key}: short read: {len(data)} of {length} bytes", code="ShortRead")
        return data

    def put(self, key: str, data: bytes, spec: WriteSpec) -> ObjectInfo:
        what = f"{self.url}: {key}"
        if key.endswith("/"):
            self._call(what, self.fs.makedirs, self._full(key).rstrip("/"), True)
            return ObjectInfo(key=key, size=0, signature="dir")
        self._call(what, self.fs.pipe_file, self._full(key), data)
        return self.stat(key)

    def delete(self, key: str) -> None:
        try:
            if key.endswith("/"):
                self.fs.rmdir(self._full(key).rstrip("/"))
            else:
                self.fs.rm_file(self._full(key))
        except FileNotFoundError:
            pass
        except Exception as exc:  # noqa: BLE001
            raise translate(exc, f"{self.url}: {key}") from None

    # -- multipart: staged part files under <root>/.ferry-uploads/<id>/<quoted key>/ -------------
    def _staging(self, key: str, upload_id: str) -> str:
        return f"{self.root}/{_UPLOADS}/{upload_id}/{quote(key, safe='')}"

    def begin(self, key: str, spec: WriteSpec, part_size: int) -> str:
        upload_id = secrets.token_hex(8)
        self._call(f"{self.url}: {key}", self.fs.makedirs, self._staging(key, upload_id), True)
        return upload_id

    def put_part(self, key: str, upload_id: str, number: int, data: bytes) -> Part:
        path = f"{self._staging(key, upload_id)}/{number:08d}"
        self._call(f"{self.url}: {key} part {number}", self.fs.pipe_file, path, data)
        return Part(number=number, size=len(data), etag="", crc32c=crc32c(data))

    def complete(self, key: str, upload_id: str, parts: list[Part], spec: WriteSpec) -> ObjectInfo:
        what = f"{self.url}: {key}"
        staging = self._staging(key, upload_id)
        try:
            with self.fs.open(self._full(key), "wb") as out:
                for part in parts:
                    out.write(self.fs.cat_file(f"{staging}/{part.number:08d}"))
            self.fs.rm(f"{self.root}/{_UPLOADS}/{upload_id}", recursive=True)
        except Exception as exc:  # noqa: BLE001
            raise translate(exc, what) from None
        return self.stat(key)

    def abort(self, key: str, upload_id: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            self.fs.rm(f"{self.root}/{_UPLOADS}/{upload_id}", recursive=True)

    def upload_alive(self, key: str, upload_id: str) -> bool:
        return bool(self.fs.exists(self._staging(key, upload_id)))

    def list_incomplete(self) -> Iterator[tuple[str, str]]:
        base = f"{self.root}/{_UPLOADS}"
        if not self.fs.exists(base):
            return
        for upload in self.fs.ls(base, detail=False):
            for staged in self.fs.ls(upload, detail=False):
                yield unquote(staged.rstrip("/").rsplit("/", 1)[-1]), upload.rstrip("/").rsplit("/", 1)[-1]


def _signature(entry: dict) -> str:
    for field in ("ETag", "etag", "md5Hash", "mtime", "created", "LastModified"):
        if entry.get(field) is not None:
            return str(entry[field])
    return ""
