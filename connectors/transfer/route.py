"""How bytes go from source to target: copied by the stores, pulled by the target from a URL, or
streamed through ferry (rate-limited, checksummed on the way).

The engine decides what to copy and keeps the books; a Route moves one whole object, or one part
of a multipart upload, the cheapest way the two connectors allow, and counts where the bytes went.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import structlog

from connectors.base import MD5_OF_PARTS, Connector, ObjectInfo, Part, WriteSpec
from connectors.checksum import CRC32C, crc32c, label, md5_hex
from connectors.transfer import source_checksum
from connectors.transfer.retry import Recopy
from connectors.transfer.scheduler import RateLimiter
from connectors.transfer.settings import TransferSettings, part_size_for
from connectors.transfer.source_checksum import READ_IN_PARTS, RESUMED_PARTS
from connectors.transfer.stats import Stats
from ferry.errors import PermanentError, TransientError

log = structlog.get_logger("ferry.transfer")
# What a target answers when it cannot copy a part from a URL: it never can (501), or not from this source.
_NO_URL_PULL = {"NotImplemented", "CannotVerifyCopySource"}


@dataclass(eq=False)
class Upload:
    """One multipart upload: the source object, its part size, how its parts travel, and its id."""

    key: str
    info: ObjectInfo
    part_size: int
    mode: str  # "server", "url" or "stream"
    upload_id: str = ""
    url: str | None = None  # the source's presigned URL, made for the first part that needs it
    # What the source holds of the object's bytes that its parts, streamed, are held to (source_checksum.PARTS),
    # and what each streamed part gave towards it, by number (parts of an earlier run's attempt give none).
    check: str | None = None
    sums: dict[int, int | bytes] = field(default_factory=dict)
    # Copies of a streamed part's bytes in memory while it is sent (Connector.body_copies).
    copies: int = 1

    @property
    def total(self) -> int:
        return max(1, math.ceil(self.info.size / self.part_size))

    @property
    def part_cost(self) -> int:
        """Bytes of the budget one part holds while it runs: only streamed parts pass through ferry."""
        return self.part_size * self.copies if self.mode == "stream" else 0

    def span(self, number: int) -> tuple[int, int]:
        start = (number - 1) * self.part_size
        return start, min(self.part_size, self.info.size - start)


class Route:
    """The ways bytes may go between one source and one target, and which one each copy takes."""

    def __init__(
        self,
        source: Connector,
        target: Connector,
        settings: TransferSettings,
        stats: Stats,
        call: Callable[..., Any],
        recopy: Recopy,
    ):
        self.source = source
        self.target = target
        self.settings = settings
        self.stats = stats
        self._call = call
        self._recopy = recopy
        self._server_side = target.capabilities.server_side_copy and target.can_copy_from(source)
        self._url_ok = target.capabilities.url_source and source.capabilities.presign
        self._limiter = RateLimiter(settings.bwlimit) if settings.bwlimit else None

    def whole(self, size: int) -> bool:
        """True if an object of size goes in one request (or one server-side copy), not in parts."""
        caps = self.target.capabilities
        if self._server_side:
            if not caps.server_side_part_copy:
                return True
            return size <= self.settings.copy_threshold and size <= caps.max_single_put
        return size <= self.settings.multipart_threshold and size <= caps.max_single_put

    def whole_cost(self, size: int) -> int:
        """Bytes of the budget a whole copy of size holds while it runs."""
        return 0 if self._server_side else size * self.target.body_copies()

    def upload_mode(self) -> str:
        """How the parts of an upload begun now will travel."""
        return "server" if self._server_side else ("url" if self._url_ok else "stream")

    def upload(self, key: str, info: ObjectInfo) -> Upload:
        """A new upload of the object info describes (from a stat): its part size, its mode, and what the source holds
        that its streamed parts are held to; an S3 multipart ETag only where the upload can take the source's part
        size (one HEAD of part 1 tells it), else nothing."""
        part_size = part_size_for(info.size, self.settings, self.target)
        mode = self.upload_mode()
        # A server-side copy's parts are held to a CRC32C alone: the store's of what it copied.
        check = source_checksum.held(info, source_checksum.PARTS if mode != "server" else (CRC32C.name,))
        if check == MD5_OF_PARTS:
            theirs = self._call(self.source.part_size, key)
            if source_checksum.read_in_parts(info, theirs, self.target.capabilities, self.settings.memory_budget):
                part_size = theirs
            else:
                check = None
        return Upload(key, info, part_size, mode, check=check, copies=self.target.body_copies())

    def held_upload(self, upload: Upload, parts: list[Part], crc: int | None) -> tuple[str | None, str | None]:
        """Hold a finished upload's parts (crc: their combined CRC32C, where every part has one) to what the source
        holds: (the kind the bytes ferry read were held to, None when none were; why not, where the source holds a
        checksum the bytes read could not be held to: source_checksum.NOT_HELD). ChecksumMismatch when they differ."""
        if upload.mode == "server":  # no byte passed through ferry: the store's CRC32C of its copy is checked
            if upload.check is not None and crc is not None:
                source_checksum.parts(self.source.url, upload.info, upload.check, [(crc, upload.info.size)])
            return None, None
        if upload.check is None:
            holds = source_checksum.held(upload.info, source_checksum.KINDS) is not None
            return None, READ_IN_PARTS if holds else None
        if upload.check == CRC32C.name:
            if crc is None:
                return None, RESUMED_PARTS
            values: list[tuple[int | bytes, int]] = [(crc, upload.info.size)]
        elif len(upload.sums) == len(parts):
            values = [(upload.sums[p.number], p.size) for p in parts]
        else:
            return None, RESUMED_PARTS
        source_checksum.parts(self.source.url, upload.info, upload.check, values)
        return upload.check, None

    def copy_object(self, key: str, src: ObjectInfo) -> tuple[ObjectInfo, str | None, str | None, dict[str, int]]:
        """Copy one object in one request: (what the target now holds, its checksum, what the source holds that the
        bytes read were held to, bytes moved by way)."""
        if self._server_side:
            written = self._call(self.target.copy_from, self.source, src, key)
            return written, written.checksum, None, {"bytes_server_side": src.size}
        data, info = self._call(self._read_whole, key, src)
        value = crc32c(data)
        held = source_checksum.whole(self.source.url, info, data, value)
        checksum = label(value)
        spec = WriteSpec(content_type=info.content_type, metadata=info.metadata or {}, checksum=checksum)
        if self._limiter:
            self._limiter.take(len(data))
        written = self._call(self.target.put, key, data, spec)
        return written, checksum, held, {"bytes_read": len(data), "bytes_written": len(data)}

    def _read_whole(self, key: str, src: ObjectInfo) -> tuple[bytes, ObjectInfo]:
        """The object the listing saw, whole: a body cut short (with a Content-Length that agrees with the cut) is
        transient, read again; an object changed since the listing fails (the next run copies its new version), and
        so does, on a live source, another version of the same size (asked of the store itself where it can)."""
        data, info = self.source.get(key, if_match=self._listed(src))
        if self.settings.live and info.signature != src.signature:
            raise PermanentError(f"{self.source.url}: {key}: changed since it was listed", code="Changed")
        if len(data) != src.size:
            if info.signature != src.signature:
                raise PermanentError(f"{self.source.url}: {key}: changed since it was listed", code="Changed")
            said = f"{self.source.url}: {key}: read {len(data)} of its {src.size} bytes"
            raise TransientError(said, code="ShortRead")
        return data, info

    def _listed(self, info: ObjectInfo) -> str | None:
        """The version a read of a live source must find (its If-Match): the one the listing (or the upload's stat)
        saw, so that a part never mixes two versions; None off a cut-over."""
        return info.signature if self.settings.live else None

    def adopt_part(self, upload: Upload, listed: Part) -> Part | None:
        """A part the store holds of a resumed upload that its state did not record (it was sent after the state's
        last commit or checkpoint), kept where the store proves it: its CRC32C where the store lists one, else
        (parts streamed through ferry) an ETag equal to the MD5 of the source's bytes at its span, read again but
        not sent again. None: it is sent again."""
        start, length = upload.span(listed.number)
        if listed.size != length:
            return None
        if listed.crc32c is not None:
            return listed
        if upload.mode != "stream":
            return None
        data = self._call(self.source.open_range, upload.key, start, length, if_match=self._listed(upload.info))
        self.stats.add(bytes_read=len(data))
        if len(data) != length or md5_hex(data) != listed.etag:
            return None
        if (value := source_checksum.part(upload.check, data)) is not None:
            upload.sums[listed.number] = value
        return Part(number=listed.number, size=length, etag=listed.etag, crc32c=crc32c(data))

    def copy_part(self, upload: Upload, number: int) -> Part:
        """Copy one part of an upload the way its mode says; a streamed part's receipt mismatch is re-sent once."""
        start, length = upload.span(number)
        key, upload_id = upload.key, upload.upload_id
        if upload.mode == "server":
            part = self._call(
                self.target.copy_part_from, self.source, upload.info, key, upload_id, number, start, length
            )
            self.stats.add(bytes_server_side=length)
            return part
        if upload.mode == "url" and self._url_ok:
            if upload.url is None:
                upload.url = self.source.presign(key, self.settings.url_expiry_s)
            try:
                part = self._call(self.target.put_part_from_url, key, upload_id, number, upload.url, start, length)
                self.stats.url_copy = "used"
                self.stats.add(bytes_url_pulled=length)
                return part
            except PermanentError as exc:
                if exc.code not in _NO_URL_PULL:
                    raise
                # The target cannot pull (Azurite and some gateways answer 501 to Put Block From URL) or cannot read
                # this source's URLs (Azure refused by the source, or not reaching it): stream instead.
                if self._url_ok:
                    self._url_ok = False
                    self.stats.url_copy = f"unsupported by the target ({exc.code}): streamed instead"
                    log.warning("target cannot pull from a URL; streaming through ferry instead", code=exc.code)
        data = self._call(self.source.open_range, key, start, length, if_match=self._listed(upload.info))
        self.stats.add(bytes_read=len(data))
        if (value := source_checksum.part(upload.check, data)) is not None:
            upload.sums[number] = value
        if self._limiter:
            self._limiter.take(len(data))
        part = self._recopy.run(key, lambda: self._call(self.target.put_part, key, upload_id, number, data))
        self.stats.add(bytes_written=len(data))
        return part
