"""A directory on a local filesystem. Keys are relative paths joined with '/'."""

from __future__ import annotations

import errno
import json
import os
import secrets
import stat as stat_mod
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from connectors.base import Capabilities, Connector, Location, ObjectInfo, Part, WriteSpec
from connectors.checksum import crc32c, label
from ferry.errors import ChecksumMismatch, NotFoundError, PermanentError, RejectedKey, TransientError, UsageError

if TYPE_CHECKING:  # annotations only: pydantic and YAML load where a profile is read
    from ferry.profiles import Profile

_CHUNK = 1 << 20
_TMP = ".ferry-tmp-"
_UPLOAD = ".ferry-upload-"
_X_CHECKSUM = "user.ferry.checksum"
_X_TYPE = "user.ferry.content-type"
_X_META = "user.ferry.metadata"
_X_ALL = (_X_CHECKSUM, _X_TYPE, _X_META)


def _translate(exc: OSError, what: str) -> Exception:
    if exc.errno == errno.ENOENT:
        return NotFoundError(f"{what}: not found", code="ENOENT")
    if exc.errno in (errno.EAGAIN, errno.EINTR, errno.EBUSY):
        return TransientError(f"{what}: {exc.strerror}", code=errno.errorcode[exc.errno])
    code = errno.errorcode.get(exc.errno or 0, "OSError")
    return PermanentError(f"{what}: {exc.strerror or exc}", code=code)


def _signature(path: Path) -> str:
    st = os.stat(path)
    return f"{st.st_ino}-{st.st_mtime_ns}"


def _capabilities(xattrs: bool) -> Capabilities:
    return Capabilities(
        server_side_copy=True,
        exact_keys=False,
        stores_checksum=xattrs,
        max_part_size=1 << 62,
        max_parts=1 << 31,
        # Kernel copies and page-cache reads: more threads than this only add lock traffic.
        useful_threads=4 * (os.cpu_count() or 1),
    )


def _crc_of_fd(fd: int, size: int) -> int:
    """CRC32C of a file's first size bytes, read in chunks into one reused buffer."""
    buffer = bytearray(min(size, _CHUNK))
    view = memoryview(buffer)
    value = offset = 0
    while offset < size:
        got = os.preadv(fd, [view[: min(_CHUNK, size - offset)]], offset)
        if got == 0:
            break
        value = crc32c(view[:got], value)
        offset += got
    return value


def _xattrs_work(directory: Path) -> bool:
    probe = directory / f"{_TMP}xattr-{secrets.token_hex(4)}"
    try:
        probe.touch()
        os.setxattr(probe, _X_CHECKSUM, b"probe")
        return True
    except OSError:
        return False
    finally:
        probe.unlink(missing_ok=True)


class LocalConnector(Connector):
    """Objects as files; checksum, content type and metadata kept in user xattrs where supported."""

    kind = "local"

    def __init__(self, root: Path, url: str):
        super().__init__(url)
        self.root = root
        self.capabilities = _capabilities(xattrs=False)
        self._xattrs = False
        # Directories under the root found to be plain directories, not links (checked once each).
        self._plain_dirs: set[Path] = set()

    @classmethod
    def from_location(cls, location: Location, profile: Profile | None) -> LocalConnector:
        return cls(Path(location.prefix or ".").expanduser().absolute(), location.url)

    def check(self) -> None:
        if not self.root.exists():
            raise UsageError(f"{self.url}: no such directory")
        if not self.root.is_dir():
            raise UsageError(f"{self.url}: not a directory")

    def prepare_target(self, dry_run: bool) -> None:
        """Create the root directory (a target may not exist yet) and probe xattr support."""
        if self.root.exists() and not self.root.is_dir():
            raise UsageError(f"{self.url}: not a directory")
        if dry_run:
            return
        try:
            self.root.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise UsageError(f"{self.url}: cannot create directory: {exc.strerror}") from None
        self._xattrs = _xattrs_work(self.root)
        self.capabilities = _capabilities(self._xattrs)

    # -- keys and paths ------------------------------------------------------------------------
    def _path(self, key: str) -> Path:
        """The file for key, refusing any key that is not a plain relative path under the root, or that passes
        through a symbolic link to a directory (writing there would change files outside the root)."""
        body = key[:-1] if key.endswith("/") else key
        segments = body.split("/")
        if not body or "\0" in key or any(s in ("", ".", "..") for s in segments):
            raise RejectedKey(
                f"key {key!r} cannot be written under {self.root}: it is absolute, has '.', '..' or empty segments",
                code="UnsafeKey",
            )
        folder = self.root
        for segment in segments[:-1]:
            folder = folder / segment
            if folder in self._plain_dirs:
                continue
            if folder.is_symlink():
                raise RejectedKey(
                    f"key {key!r} passes through {folder}, a symbolic link (to {os.readlink(folder)}): ferry "
                    "neither writes nor deletes through a link",
                    code="LinkedDirectory",
                )
            if folder.is_dir():
                self._plain_dirs.add(folder)
        return self.root.joinpath(*segments)

    # -- listing -------------------------------------------------------------------------------
    def list(self, prefix: str = "", start_after: str = "") -> Iterator[ObjectInfo]:
        if not self.root.is_dir():
            return
        yield from (i for i in self._walk(self.root, "") if i.key.startswith(prefix) and i.key > start_after)

    def _walk(self, directory: Path, base: str) -> Iterator[ObjectInfo]:
        try:
            with os.scandir(directory) as it:
                # A directory sorts as 'name/' so the walk yields keys in code point order.
                entries = sorted(((e.name + "/" if e.is_dir(follow_symlinks=False) else e.name), e.name) for e in it)
        except OSError as exc:
            raise _translate(exc, str(directory)) from None
        if not entries and base:
            yield ObjectInfo(key=base, size=0, signature="dir")
            return
        for sort_name, name in entries:
            if _TMP in name or _UPLOAD in name:
                continue
            path = directory / name
            if sort_name.endswith("/"):
                yield from self._walk(path, base + sort_name)
                continue
            try:
                st = os.stat(path)
            except OSError:
                continue  # vanished, or a dangling link
            if stat_mod.S_ISREG(st.st_mode):
                yield ObjectInfo(key=base + name, size=st.st_size, signature=f"{st.st_ino}-{st.st_mtime_ns}")

    def stat(self, key: str) -> ObjectInfo:
        path = self._path(key)
        try:
            st = os.stat(path)
        except OSError as exc:
            raise _translate(exc, f"{self.url}: {key}") from None
        if key.endswith("/"):
            if not stat_mod.S_ISDIR(st.st_mode):
                raise NotFoundError(f"{self.url}: {key}: not found", code="ENOENT")
            return ObjectInfo(key=key, size=0, signature="dir", metadata={})
        return self._info(key, st, path)

    def _info(self, key: str, st: os.stat_result, file: Path | int) -> ObjectInfo:
        """What stat() says of a file (a path or an open descriptor): its size and signature, and ferry's xattrs,
        read only where the file has them (one listxattr: a file ferry did not write has none)."""
        names = self._listxattr(file)
        checksum, content_type, raw = (self._getxattr(file, n) if n in names else None for n in _X_ALL)
        return ObjectInfo(
            key=key,
            size=st.st_size,
            signature=f"{st.st_ino}-{st.st_mtime_ns}",
            checksum=checksum,
            content_type=content_type,
            metadata=json.loads(raw) if raw else {},
        )

    def get(self, key: str, *, if_match: str | None = None) -> tuple[bytes, ObjectInfo]:
        """The whole file and what stat() says of it, from one open."""
        if key.endswith("/"):
            return super().get(key, if_match=if_match)
        fd, st = self._open_file(key)
        try:
            return self._read_fd(fd, key, 0, st.st_size), self._info(key, st, fd)
        except OSError as exc:  # a read error
            raise _translate(exc, f"{self.url}: {key}") from None
        finally:
            os.close(fd)

    def _open_file(self, key: str) -> tuple[int, os.stat_result]:
        """The file at key, open for reading, and its fstat. Opened without blocking: a FIFO (or a device) that took
        the place of a listed file is not waited on but said, as a file that is gone."""
        what = f"{self.url}: {key}"
        try:
            fd = os.open(self._path(key), os.O_RDONLY | os.O_NONBLOCK)
        except OSError as exc:
            raise _translate(exc, what) from None
        try:
            st = os.fstat(fd)
        except OSError as exc:
            os.close(fd)
            raise _translate(exc, what) from None
        if not stat_mod.S_ISREG(st.st_mode):
            os.close(fd)
            kind = "a directory" if stat_mod.S_ISDIR(st.st_mode) else "a FIFO, socket or device"
            raise NotFoundError(f"{what}: not a regular file any more ({kind} took its place)", code="ENOENT")
        return fd, st

    @staticmethod
    def _listxattr(file: Path | int) -> list[str]:
        try:
            return os.listxattr(file)
        except OSError:
            return []

    @staticmethod
    def _getxattr(path: Path | int, name: str) -> str | None:
        try:
            return os.getxattr(path, name).decode()
        except OSError:
            return None

    def _setxattrs(self, fd: int, spec: WriteSpec) -> None:
        if not self._xattrs:
            return
        if spec.checksum:
            os.setxattr(fd, _X_CHECKSUM, spec.checksum.encode())
        if spec.content_type:
            os.setxattr(fd, _X_TYPE, spec.content_type.encode())
        if spec.metadata:
            os.setxattr(fd, _X_META, json.dumps(dict(spec.metadata), sort_keys=True).encode())

    # -- reading -------------------------------------------------------------------------------
    def open_range(self, key: str, start: int, length: int, *, if_match: str | None = None) -> bytes:
        if length == 0:
            return b""
        fd, _ = self._open_file(key)
        try:
            return self._read_fd(fd, key, start, length)
        except OSError as exc:
            raise _translate(exc, f"{self.url}: {key}") from None
        finally:
            os.close(fd)

    def _read_fd(self, fd: int, key: str, start: int, length: int) -> bytes:
        chunks = []
        while length > 0:
            chunk = os.pread(fd, length, start)
            if not chunk:
                raise PermanentError(f"{self.url}: {key}: shorter than expected (changed while copying?)")
            chunks.append(chunk)
            start += len(chunk)
            length -= len(chunk)
        return chunks[0] if len(chunks) == 1 else b"".join(chunks)

    # -- writing -------------------------------------------------------------------------------
    def put(self, key: str, data: bytes, spec: WriteSpec) -> ObjectInfo:
        path = self._path(key)
        if key.endswith("/"):
            if data:
                raise RejectedKey(f"key {key!r} ends in '/' but is not empty: a file cannot hold it", code="UnsafeKey")
            try:
                path.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise _translate(exc, f"{self.url}: {key}") from None
            return ObjectInfo(key=key, size=0, signature="dir")
        tmp = path.with_name(f".{path.name}{_TMP}{secrets.token_hex(6)}")
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view) :]
                self._setxattrs(fd, spec)
                size = os.fstat(fd).st_size
            finally:
                os.close(fd)
            if size != len(data):
                raise TransientError(f"{self.url}: {key}: wrote {size} of {len(data)} bytes", code="ShortWrite")
            os.replace(tmp, path)
            return ObjectInfo(key=key, size=size, signature=_signature(path), checksum=spec.checksum)
        except OSError as exc:
            raise _translate(exc, f"{self.url}: {key}") from None
        finally:
            tmp.unlink(missing_ok=True)

    def delete(self, key: str) -> None:
        path = self._path(key)
        try:
            if key.endswith("/"):
                path.rmdir()
            else:
                path.unlink()
        except FileNotFoundError:
            pass
        except OSError as exc:
            if exc.errno != errno.ENOTEMPTY:
                raise _translate(exc, f"{self.url}: {key}") from None

    # -- server-side copy: the kernel copies, ferry reads both files back to verify -----------
    def can_copy_from(self, source: Connector) -> bool:
        return isinstance(source, LocalConnector)

    def copy_from(self, source: Connector, info: ObjectInfo, key: str) -> ObjectInfo:
        assert isinstance(source, LocalConnector)
        if key.endswith("/"):
            return self.put(key, b"", WriteSpec())
        src_path, path = source._path(info.key), self._path(key)
        tmp = path.with_name(f".{path.name}{_TMP}{secrets.token_hex(6)}")
        what = f"{self.url}: {key}"
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            with open(src_path, "rb") as src, open(tmp, "xb+") as dst:
                size = os.fstat(src.fileno()).st_size
                copied = 0
                while copied < size:
                    step = os.copy_file_range(src.fileno(), dst.fileno(), size - copied)
                    if step == 0:
                        raise PermanentError(f"{source.url}: {info.key}: shorter than expected (changed meanwhile?)")
                    copied += step
                value = _crc_of_fd(src.fileno(), size)
                stored = self._getxattr(src.fileno(), _X_CHECKSUM)
                if stored is not None and stored != label(value):
                    raise ChecksumMismatch(f"{source.url}: {info.key}: bytes read do not match the stored {stored}")
                if os.fstat(dst.fileno()).st_size != size or _crc_of_fd(dst.fileno(), size) != value:
                    raise ChecksumMismatch(f"{what}: the copy reads back different from the source")
                raw = self._getxattr(src.fileno(), _X_META)
                spec = WriteSpec(
                    content_type=self._getxattr(src.fileno(), _X_TYPE),
                    metadata=json.loads(raw) if raw else {},
                    checksum=label(value),
                )
                self._setxattrs(dst.fileno(), spec)
            os.replace(tmp, path)
            return ObjectInfo(key=key, size=size, signature=_signature(path), checksum=spec.checksum)
        except OSError as exc:
            raise _translate(exc, what) from None
        finally:
            tmp.unlink(missing_ok=True)

    # -- multipart: parts are written in place into a hidden staging file ----------------------
    # The upload id is "<token>-<part size>": the staging file's name carries it, so a resumed
    # run and --abort-incomplete recover it from the directory alone.
    def _staging(self, key: str, upload_id: str) -> Path:
        path = self._path(key)
        return path.with_name(f".{path.name}{_UPLOAD}{upload_id}")

    def begin(self, key: str, spec: WriteSpec, part_size: int) -> str:
        upload_id = f"{secrets.token_hex(8)}-{part_size}"
        staging = self._staging(key, upload_id)
        try:
            staging.parent.mkdir(parents=True, exist_ok=True)
            staging.touch(exist_ok=False)
        except OSError as exc:
            raise _translate(exc, f"{self.url}: {key}") from None
        return upload_id

    def put_part(self, key: str, upload_id: str, number: int, data: bytes) -> Part:
        part_size = int(upload_id.rpartition("-")[2])
        staging = self._staging(key, upload_id)
        try:
            fd = os.open(staging, os.O_WRONLY)
        except OSError as exc:
            raise _translate(exc, f"{self.url}: {key} (upload {upload_id})") from None
        try:
            view, offset = memoryview(data), (number - 1) * part_size
            while view:
                written = os.pwrite(fd, view, offset)
                view, offset = view[written:], offset + written
        except OSError as exc:
            raise _translate(exc, f"{self.url}: {key}") from None
        finally:
            os.close(fd)
        return Part(number=number, size=len(data), etag="", crc32c=crc32c(data))

    def complete(self, key: str, upload_id: str, parts: list[Part], spec: WriteSpec) -> ObjectInfo:
        staging, path = self._staging(key, upload_id), self._path(key)
        expected = sum(p.size for p in parts)
        try:
            fd = os.open(staging, os.O_WRONLY)
            try:
                size = os.fstat(fd).st_size
                if size != expected:
                    raise PermanentError(f"{self.url}: {key}: staged {size} bytes, parts say {expected}")
                self._setxattrs(fd, spec)
            finally:
                os.close(fd)
            os.replace(staging, path)
            return ObjectInfo(key=key, size=size, signature=_signature(path), checksum=spec.checksum)
        except OSError as exc:
            raise _translate(exc, f"{self.url}: {key}") from None

    def abort(self, key: str, upload_id: str) -> None:
        self._staging(key, upload_id).unlink(missing_ok=True)

    def upload_alive(self, key: str, upload_id: str) -> bool:
        return self._staging(key, upload_id).exists()

    def list_incomplete(self) -> Iterator[tuple[str, str]]:
        for dirpath, _dirs, files in os.walk(self.root):
            for name in files:
                if _UPLOAD in name and name.startswith("."):
                    real, _, upload_id = name[1:].partition(_UPLOAD)
                    yield Path(dirpath, real).relative_to(self.root).as_posix(), upload_id
