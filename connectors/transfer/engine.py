"""The transfer engine: list -> diff -> schedule parts -> N workers -> verify.

Both listings are streamed and merge-joined in key order with the ledger, so memory stays flat
whatever the object count. One pool of worker threads takes work from two lanes: whole small
objects, and the parts of the large objects in flight. A byte budget caps what is held in
memory; large parts go first when the budget allows, small objects fill the rest, so the two
overlap. Every object is verified before the ledger records it.
"""

from __future__ import annotations

import contextvars
import math
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from typing import Any

import structlog

from connectors.base import Connector, ObjectInfo, Part, WriteSpec
from connectors.checksum import combine_parts, crc32c, label, parse
from connectors.transfer.diff import COMPARE, COPY, DELETE, SKIP, Action, diff
from connectors.transfer.retry import hash_object, listing, retrying
from connectors.transfer.scheduler import Parts, RateLimiter, Scheduler, Slot
from connectors.transfer.settings import TransferSettings, part_size_for
from connectors.transfer.stats import FAILURES_KEPT, Stats
from ferry.errors import ChecksumMismatch, FerryError, NotFoundError, PermanentError, RejectedKey, TransientError
from ferry.ledger import Ledger, ObjectRecord, UploadRecord

log = structlog.get_logger("ferry.transfer")


def effective_threads(threads: int, source: Connector, target: Connector) -> int:
    """The pool size: as asked, unless neither end is a network store that could use that many."""
    limits = [limit for c in (source, target) if (limit := c.capabilities.useful_threads) is not None]
    return min(threads, max(limits)) if len(limits) == 2 else threads


class LargeJob:
    """A multipart object in flight, across its attempts; it holds a large-object slot until finish().

    An attempt is one multipart upload: a re-copy after a checksum mismatch starts another.
    """

    def __init__(self, action: Action, slot: Slot):
        self.action = action
        self.key = action.key
        self.lock = threading.Lock()
        self.attempt = 0
        self.started = 0.0  # when a worker starts it, as for a small object
        self._slot = slot
        # The current attempt, set by new_attempt().
        self.info = ObjectInfo(self.key, 0)
        self.size = 0
        self.part_size = 1
        self.mode = "stream"  # "stream", "server" or "url"
        self.total = 0
        self.upload_id = ""
        self.done: dict[int, Part] = {}
        self.parts: Parts | None = None
        self.url: str | None = None

    def new_attempt(self, info: ObjectInfo, part_size: int, mode: str) -> None:
        """Start an attempt at copying info: no upload yet, no part done."""
        self.attempt += 1
        self.info, self.size, self.part_size, self.mode = info, info.size, part_size, mode
        self.total = max(1, math.ceil(info.size / part_size))
        self.upload_id, self.done, self.parts, self.url = "", {}, None, None

    def span(self, number: int) -> tuple[int, int]:
        start = (number - 1) * self.part_size
        return start, min(self.part_size, self.size - start)

    @property
    def over(self) -> bool:
        """True once the job is done or failed."""
        return not self._slot.held

    def finish(self) -> bool:
        """End the job, done or failed, and release its slot; True only for the first call."""
        return self._slot.release()


def job_name(source: Connector, target: Connector) -> str:
    """The ledger's name for a source/target pair."""
    return f"{source.url} -> {target.url}"


class Transfer:
    """One sync of source into target. `run()` returns the stats; failures are in them, not raised."""

    def __init__(
        self,
        source: Connector,
        target: Connector,
        ledger: Ledger,
        settings: TransferSettings,
        on_action: Callable[[Action], None] | None = None,
    ):
        self.source = source
        self.target = target
        self.ledger = ledger
        self.settings = settings
        self.job = job_name(source, target)
        self.stats = Stats()
        self.on_action = on_action
        self._server_side = target.capabilities.server_side_copy and target.can_copy_from(source)
        self._url_ok = target.capabilities.url_source and source.capabilities.presign
        self._limiter = RateLimiter(settings.bwlimit) if settings.bwlimit else None
        self.threads = effective_threads(settings.threads, source, target)
        self._sched = Scheduler(settings.memory_budget, 2 * self.threads)
        self._max_open_large = max(4, 2 * settings.memory_budget // settings.part_size)
        self._retrying = retrying(settings, on_retry=self._note_retry)

    def _note_retry(self) -> None:
        self.stats.add(retries=1)

    def _call(self, fn: Callable, *args: Any) -> Any:
        # A copy per call: retry state must not be shared between worker threads.
        return self._retrying.copy()(fn, *args)

    # -- the run ---------------------------------------------------------------------------------
    def run(self) -> Stats:
        self.source.check()
        self.target.prepare_target(self.settings.dry_run)
        # Each worker runs in a copy of this context: bound log fields (run, phase) and an
        # orchestrator's run context reach the workers' log lines.
        workers = [
            threading.Thread(target=contextvars.copy_context().run, args=(self._worker,), daemon=True)
            for _ in range(self.threads)
        ]
        for worker in workers:
            worker.start()
        try:
            self._produce()
        finally:
            self._sched.close()
            for worker in workers:
                worker.join()
            self.ledger.flush()
        return self.stats

    def _produce(self) -> None:
        counted = self._count_listed(listing(self.source, self.settings, self._note_retry))
        target = listing(self.target, self.settings, self._note_retry)
        records = self.ledger.objects(self.job, self.settings.prefix)
        for action in diff(counted, target, records, self.settings):
            if self.on_action is not None:
                self.on_action(action)
            if action.kind == SKIP:
                if action.src is not None:
                    self.stats.add(skipped=1, bytes_skipped=action.src.size)
            elif action.kind == DELETE:
                self._submit_delete(action)
            elif action.kind == COMPARE:
                assert action.src is not None
                self._sched.submit(min(action.src.size, self.settings.part_size), lambda a=action: self._compare(a))
            else:
                self._submit_copy(action)

    def _count_listed(self, items: Iterator[ObjectInfo]) -> Iterator[ObjectInfo]:
        for info in items:
            if self.settings.selects(info.key):
                self.stats.add(objects_listed=1, bytes_listed=info.size)
            yield info

    def _worker(self) -> None:
        while (task := self._sched.take()) is not None:
            cost, fn = task
            try:
                fn()
            except Exception as exc:  # noqa: BLE001 - a worker must never die; tasks record their own failures
                log.error("internal error in a worker", error=repr(exc))
                self.stats.add(failed=1)
            finally:
                self._sched.release(cost)

    def _fail(self, key: str, exc: BaseException) -> None:
        rejected = isinstance(exc, RejectedKey)
        message = str(exc) if isinstance(exc, FerryError) else f"{key}: {type(exc).__name__}: {exc}"
        with self.stats.lock:
            self.stats.failed += 1
            self.stats.rejected += int(rejected)
            if len(self.stats.failures) < FAILURES_KEPT:
                self.stats.failures.append(message)
        log.error("object failed", key=key, error=message, code=getattr(exc, "code", ""))

    # -- copy ------------------------------------------------------------------------------------
    def _submit_copy(self, action: Action) -> None:
        assert action.src is not None
        size = action.src.size
        self.stats.add(to_copy=1, bytes_to_copy=size)
        if self.settings.dry_run:
            return
        if self._whole(size):
            cost = 0 if self._server_side else size
            self._sched.submit(cost, lambda: self._copy_small(action))
        else:
            job = LargeJob(action, self._sched.open_large_slot(self._max_open_large))
            self._sched.submit(0, lambda: self._start_large(job))

    def _whole(self, size: int) -> bool:
        """True if an object of size goes in one request (or one server-side copy), not in parts."""
        if self._server_side:
            if not self.target.capabilities.server_side_part_copy:
                return True
            return size <= self.settings.copy_threshold and size <= self.target.capabilities.max_single_put
        return size <= self.settings.multipart_threshold and size <= self.target.capabilities.max_single_put

    def _copy_small(self, action: Action, *, second_try: bool = False) -> None:
        key, src = action.key, action.src
        assert src is not None
        started = time.monotonic()
        try:
            if self._server_side:
                written = self._call(self.target.copy_from, self.source, src, key)
                checksum = written.checksum
                moved = {"bytes_server_side": src.size}
            else:
                data, info = self._call(self.source.get, key)
                value = crc32c(data)
                stored = parse(info.checksum)
                if stored is not None and stored != value:
                    raise ChecksumMismatch(
                        f"{self.source.url}: {key}: bytes read do not match the stored {info.checksum}"
                    )
                checksum = label(value)
                spec = WriteSpec(content_type=info.content_type, metadata=info.metadata or {}, checksum=checksum)
                if self._limiter:
                    self._limiter.take(len(data))
                written = self._call(self.target.put, key, data, spec)
                moved = {"bytes_read": len(data), "bytes_written": len(data)}
                del data
            self._done(action, src, written.signature, checksum, started, moved)
        except ChecksumMismatch as exc:
            if second_try:
                self._fail(key, exc)
            else:
                log.warning("checksum mismatch, copying again", key=key, error=str(exc))
                self.stats.add(recopied_after_mismatch=1)
                self._copy_small(action, second_try=True)
        except Exception as exc:  # noqa: BLE001
            self._fail(key, exc)

    def _done(
        self, action: Action, src: ObjectInfo, dst_sig: str, checksum: str | None, started: float, moved: dict[str, int]
    ) -> None:
        self.ledger.record_object(self.job, ObjectRecord(action.key, src.size, src.signature, dst_sig, checksum))
        self.stats.finished(started, bytes_copied=src.size, **moved)

    # -- large objects -----------------------------------------------------------------------------
    def _start_large(self, job: LargeJob) -> None:
        """On a worker: begin the job's first attempt; whatever fails ends the job."""
        job.started = time.monotonic()
        try:
            self._begin_large(job)
        except Exception as exc:  # noqa: BLE001
            self._fail_large(job, exc)

    def _begin_large(self, job: LargeJob) -> None:
        """Begin an attempt: resume the upload the ledger holds for the object, or begin one; queue its parts."""
        key = job.key
        info = self._call(self.source.stat, key)
        part_size = part_size_for(info.size, self.settings, self.target)
        job.new_attempt(info, part_size, "server" if self._server_side else ("url" if self._url_ok else "stream"))
        spec = WriteSpec(content_type=info.content_type, metadata=info.metadata or {})
        previous = self.ledger.upload(self.job, key)
        if (
            previous is not None
            and (previous.size, previous.src_sig, previous.part_size) == (info.size, info.signature, part_size)
            and self._call(self.target.upload_alive, key, previous.upload_id)
        ):
            job.upload_id = previous.upload_id
            job.done = {p.number: p for p in self.ledger.parts(self.job, key, previous.upload_id)}
            self.stats.add(resumed_uploads=1, parts_resumed=len(job.done))
            log.info("resuming upload", key=key, parts_done=len(job.done), parts=job.total)
        else:
            if previous is not None:
                self._call(self.target.abort, key, previous.upload_id)
            job.upload_id = self._call(self.target.begin, key, spec, part_size)
            self.ledger.begin_upload(self.job, UploadRecord(key, job.upload_id, info.size, info.signature, part_size))
        pending = deque(n for n in range(1, job.total + 1) if n not in job.done)
        if not pending:
            self._finish_large(job)
        else:
            # Only streamed parts hold their bytes here; the stores move the others.
            cost = part_size if job.mode == "stream" else 0
            job.parts = Parts(pending, cost, lambda number: self._run_part(job, number))
            self._sched.add_large(job.parts)

    def _run_part(self, job: LargeJob, number: int) -> None:
        if job.over:
            return
        try:
            part = self._copy_part(job, number)
            self.ledger.record_part(self.job, job.key, job.upload_id, part)
        except Exception as exc:  # noqa: BLE001
            self._fail_large(job, exc)
            return
        with job.lock:
            job.done[number] = part
            last = len(job.done) == job.total and not job.over
        if last:
            try:
                self._finish_large(job)
            except Exception as exc:  # noqa: BLE001
                self._fail_large(job, exc)

    def _copy_part(self, job: LargeJob, number: int) -> Part:
        start, length = job.span(number)
        if job.mode == "server":
            part = self._call(
                self.target.copy_part_from, self.source, job.info, job.key, job.upload_id, number, start, length
            )
            self.stats.add(bytes_server_side=length)
            return part
        if job.mode == "url" and self._url_ok:
            if job.url is None:
                job.url = self.source.presign(job.key, self.settings.url_expiry_s)
            try:
                part = self._call(self.target.put_part_from_url, job.key, job.upload_id, number, job.url, start, length)
                self.stats.url_copy = "used"
                self.stats.add(bytes_url_pulled=length)
                return part
            except PermanentError as exc:
                if exc.code != "NotImplemented":
                    raise
                # Azurite (and some gateways) answer 501 to Put Block From URL: stream instead.
                if self._url_ok:
                    self._url_ok = False
                    self.stats.url_copy = f"unsupported by the target ({exc.code}): streamed instead"
                    log.warning("target cannot pull from a URL; streaming through ferry instead", code=exc.code)
        data = self._call(self.source.open_range, job.key, start, length)
        self.stats.add(bytes_read=len(data))
        if self._limiter:
            self._limiter.take(len(data))
        try:
            part = self._call(self.target.put_part, job.key, job.upload_id, number, data)
        except ChecksumMismatch:
            self.stats.add(recopied_after_mismatch=1)
            part = self._call(self.target.put_part, job.key, job.upload_id, number, data)
        self.stats.add(bytes_written=len(data))
        return part

    def _finish_large(self, job: LargeJob) -> None:
        parts = [job.done[n] for n in range(1, job.total + 1)]
        stored = parse(job.info.checksum)
        if all(p.crc32c is not None for p in parts):
            value = combine_parts([(p.crc32c, p.size) for p in parts])  # type: ignore[misc]
            if stored is not None and stored != value:
                raise ChecksumMismatch(
                    f"{self.source.url}: {job.key}: bytes read do not match the stored {job.info.checksum}"
                )
        else:
            value = stored  # bytes never passed through ferry: carry the source's own checksum
        checksum = label(value) if value is not None else None
        spec = WriteSpec(content_type=job.info.content_type, metadata=job.info.metadata or {}, checksum=checksum)
        try:
            written = self._call(self.target.complete, job.key, job.upload_id, parts, spec)
            self._verify(job, checksum)
            if job.mode != "server":
                now = self._call(self.source.stat, job.key)
                if (now.size, now.signature) != (job.info.size, job.info.signature):
                    raise PermanentError(
                        f"{self.source.url}: {job.key}: changed while it was being copied", code="Changed"
                    )
        except ChecksumMismatch as exc:
            self.ledger.end_upload(self.job, job.key)
            if job.attempt > 1:
                raise
            log.warning("checksum mismatch, copying again", key=job.key, error=str(exc))
            self.stats.add(recopied_after_mismatch=1)
            self._begin_large(job)
            return
        self.ledger.end_upload(self.job, job.key)
        record_sig = job.action.src.signature if job.action.src else job.info.signature
        self.ledger.record_object(self.job, ObjectRecord(job.key, job.size, record_sig, written.signature, checksum))
        self.stats.finished(job.started, bytes_copied=job.size)
        job.finish()

    def _verify(self, job: LargeJob, checksum: str | None) -> None:
        """Read back what the target holds: its size, and its stored checksum where it keeps one."""
        held = self._call(self.target.stat, job.key)
        if held.size != job.size:
            raise ChecksumMismatch(f"{self.target.url}: {job.key}: holds {held.size} bytes, expected {job.size}")
        if self.target.capabilities.stores_checksum and checksum and held.checksum != checksum:
            raise ChecksumMismatch(f"{self.target.url}: {job.key}: stores {held.checksum}, expected {checksum}")

    def _fail_large(self, job: LargeJob, exc: BaseException) -> None:
        """End the job as failed, once: drop its queued parts; a permanent failure also aborts its upload."""
        if not job.finish():
            return
        if job.parts is not None:
            self._sched.drop(job.parts)
        self._fail(job.key, exc)
        if job.upload_id and isinstance(exc, PermanentError) and not isinstance(exc, TransientError):
            # Nothing to resume: drop the parts. A transient failure keeps them for the next run.
            try:
                self.target.abort(job.key, job.upload_id)
                self.ledger.end_upload(self.job, job.key)
            except FerryError as abort_exc:
                log.warning("could not abort upload", key=job.key, error=str(abort_exc))

    # -- compare and delete ------------------------------------------------------------------------
    def _compare(self, action: Action) -> None:
        """Equal sizes and no ledger record (or --checksum): compare checksums, copy if they differ."""
        key, src, dst = action.key, action.src, action.dst
        assert src is not None and dst is not None
        try:
            src_sum, dst_sum = self._checksums(src, dst)
        except Exception as exc:  # noqa: BLE001
            self._fail(key, exc)
            return
        if src_sum is not None and src_sum == dst_sum:
            self.stats.add(skipped=1, bytes_skipped=src.size)
            if not self.settings.dry_run:
                self.ledger.record_object(self.job, ObjectRecord(key, src.size, src.signature, dst.signature, src_sum))
            return
        reason = "checksums differ" if dst_sum is not None else "target has no stored checksum"
        copy = Action(COPY, key, src, dst, action.record, reason)
        if self.on_action is not None:
            self.on_action(copy)
        self.stats.add(to_copy=1, bytes_to_copy=src.size)
        if self.settings.dry_run:
            return
        if self._whole(src.size):
            self._copy_small(copy)
        else:
            # A worker never waits for a slot (that could starve the parts that free one).
            self._start_large(LargeJob(copy, self._sched.open_large_slot(None)))

    def _checksums(self, src: ObjectInfo, dst: ObjectInfo) -> tuple[str | None, str | None]:
        if self.settings.checksum:
            return self._hash(self.source, src), self._hash(self.target, dst)
        held = self._call(self.target.stat, dst.key).checksum
        if held is None:
            return None, None
        source_sum = self._call(self.source.stat, src.key).checksum or self._hash(self.source, src)
        return source_sum, held

    def _hash(self, connector: Connector, info: ObjectInfo) -> str:
        checksum = hash_object(connector, info, self.settings.part_size, self._retrying)
        if connector is self.source:
            self.stats.add(bytes_read=info.size)
        return checksum

    def _submit_delete(self, action: Action) -> None:
        self.stats.add(deleted=1)
        if self.settings.dry_run:
            return

        def delete() -> None:
            try:
                self._call(self.target.delete, action.key)
                self.ledger.forget_object(self.job, action.key)
            except Exception as exc:  # noqa: BLE001
                self.stats.add(deleted=-1)
                self._fail(action.key, exc)

        self._sched.submit(0, delete)


def abort_incomplete(target: Connector) -> list[tuple[str, str]]:
    """Abort every unfinished multipart upload under the target's root; return what was aborted."""
    aborted = []
    for key, upload_id in target.list_incomplete():
        try:
            target.abort(key, upload_id)
        except NotFoundError:
            continue
        aborted.append((key, upload_id))
    return aborted
