"""The transfer engine: list -> diff -> schedule parts -> N workers -> verify.

Both listings are streamed and merge-joined in key order with the shard's transfer state, so
memory stays flat whatever the object count. One pool of worker threads takes work from two
lanes: whole small objects, and the parts of the large objects in flight. A byte budget caps
what is held in memory; large parts go first when the budget allows, small objects fill the
rest, so the two overlap. Every object is verified before the state records it.
"""

from __future__ import annotations

import contextlib
import contextvars
import itertools
import threading
import time
from collections import deque
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping
from typing import Any

import structlog

from connectors.base import Connector, ObjectInfo, Part, WriteSpec
from connectors.checksum import combine_parts, label, parse
from connectors.transfer.adopt import READING, prove
from connectors.transfer.diff import COMPARE, COPY, DELETE, EQUAL, SKIP, Action, diff
from connectors.transfer.forecast import Forecast
from connectors.transfer.retry import Recopy, listing, read_digests, retrying
from connectors.transfer.route import Route, Upload
from connectors.transfer.scheduler import Parts, Scheduler, Slot
from connectors.transfer.settings import TransferSettings, effective_threads
from connectors.transfer.state import ObjectRecord, TransferState, UploadRecord
from connectors.transfer.stats import Stats
from ferry.errors import ChecksumMismatch, FerryError, NotFoundError, PermanentError, RejectedKey, TransientError
from ferry.interrupts import failpoint
from ferry.malloc import tune as tune_malloc

log = structlog.get_logger("ferry.transfer")


def _changed_under_copy(exc: BaseException) -> bool:
    """Whether exc says the source's object is not the version listed any more: changed, or deleted (a key, not its
    bucket, not found; an upload not found is the target's)."""
    if isinstance(exc, NotFoundError):
        return exc.code not in ("NoSuchBucket", "NoSuchUpload")
    return getattr(exc, "code", "") == "Changed"


class LargeJob:
    """A multipart object in flight, across its attempts; it holds a large-object slot until finish().

    An attempt is one multipart upload: a re-copy after a checksum mismatch starts another.
    """

    def __init__(self, action: Action, slot: Slot):
        self.action = action
        self.key = action.key
        self.lock = threading.Lock()
        self.started = 0.0  # when a worker starts it, as for a small object
        self.attempt = 0
        # The current attempt: its upload, the parts done, the parts queued.
        self.upload: Upload | None = None
        self.done: dict[int, Part] = {}
        self.parts: Parts | None = None
        self._slot = slot

    def new_attempt(self, upload: Upload, done: dict[int, Part]) -> None:
        """Make upload (with the parts already done, when it resumes) the job's current attempt."""
        self.attempt += 1
        self.upload, self.done, self.parts = upload, done, None

    @property
    def over(self) -> bool:
        """True once the job is done or failed."""
        return not self._slot.held

    def finish(self) -> bool:
        """End the job, done or failed, and release its slot; True only for the first call."""
        return self._slot.release()


class Transfer:
    """One sync of source into target. `run()` returns the stats; failures are in them, not raised."""

    def __init__(
        self,
        source: Connector,
        target: Connector,
        state: TransferState,
        settings: TransferSettings,
        on_action: Callable[[Action], None] | None = None,
        stop: threading.Event | None = None,
        keys: Collection[str] | None = None,
        source_listing: Iterable[ObjectInfo] | None = None,
        source_known: Mapping[str, ObjectInfo | None] | None = None,
    ):
        self.source = source
        # Only these keys (a change log's), each side asked for each instead of listed; None: the listings.
        self.keys = keys
        # What the source holds of some of those keys, known without asking it (a change log's latest events): the
        # object, or None where it holds none.
        self.source_known = source_known or {}
        # The source's objects as another listing gives them (an inventory report), in key order; None: its own.
        self.source_listing = source_listing
        self.target = target
        self.state = state
        self.settings = settings
        self.stats = Stats()
        self.on_action = on_action
        # Set by whoever runs the transfer when it must stop (an interrupt in another thread).
        self.stop = stop
        self.threads = effective_threads(settings.threads, source, target)
        self._sched = Scheduler(settings.memory_budget, 2 * self.threads)
        self._max_open_large = max(4, 2 * settings.memory_budget // settings.part_size)
        self._retrying = retrying(settings, on_retry=self._note_retry)
        self._recopy = Recopy(on_recopy=lambda: self.stats.add(recopied_after_mismatch=1))
        self._route = Route(source, target, settings, self.stats, self._call, self._recopy)
        # Every copy and delete decided, with the calls the route makes for it (what a dry run's estimate reads).
        self.forecast = Forecast()
        self._sent_before = {"source": source.requests_sent(), "target": target.requests_sent()}

    def in_parts(self, size: int) -> bool:
        """Whether an object of size goes in parts (a multipart upload) on this transfer's route."""
        return not self._route.whole(size)

    def _note_retry(self) -> None:
        self.stats.add(retries=1)

    def _call(self, fn: Callable, *args: Any, **kwargs: Any) -> Any:
        # A copy per call: retry state must not be shared between worker threads.
        return self._retrying.copy()(fn, *args, **kwargs)

    # -- the run ---------------------------------------------------------------------------------
    def run(self) -> Stats:
        """Copy, verify and record until done; interrupted, it drops queued work and lets running tasks finish.

        An exception in this thread (KeyboardInterrupt, a signal handler's) propagates after that;
        a set stop event ends the run early with stats.interrupted set. Either way the state keeps
        every object and part verified so far, for the next run to resume.
        """
        self.source.check()
        self.target.prepare_target(self.settings.dry_run)
        tune_malloc()  # where the process's entry point did not (a phase's step, a Dask worker)
        # Each worker runs in a copy of this context: bound log fields (run, phase) and an
        # orchestrator's run context reach the workers' log lines.
        workers = [
            threading.Thread(target=contextvars.copy_context().run, args=(self._worker,), daemon=True)
            for _ in range(self.threads)
        ]
        for worker in workers:
            worker.start()
        finished = threading.Event()
        if self.stop is not None:
            threading.Thread(target=self._watch, args=(self.stop, finished), daemon=True).start()
        try:
            self._produce()
            self._sched.close()
            for worker in workers:
                worker.join()
        except BaseException:
            # Interrupted (or broken) here: queued work is dropped, running tasks finish and are recorded.
            self._interrupted()
            self._sched.close()
            for worker in workers:
                worker.join()
            raise
        finally:
            finished.set()
            self.state.flush()
            self.stats.requests = {
                side: _since(before, connector.requests_sent())
                for (side, before), connector in zip(self._sent_before.items(), (self.source, self.target), strict=True)
            }
            self.stats.receipt_check = self.target.receipt_check()
        return self.stats

    def _watch(self, stop: threading.Event, finished: threading.Event) -> None:
        while not finished.wait(0.2):
            if stop.is_set():
                self._interrupted()
                return

    def _interrupted(self) -> None:
        if not self._sched.aborted:
            log.warning("stopping: queued work dropped, running requests finish and are recorded")
        self.stats.interrupted = True
        self._sched.abort()

    def _produce(self) -> None:
        if self.keys is None:
            if self.source_listing is None:
                source = listing(self.source, self.settings, self._note_retry)
            else:
                source = (info for info in self.source_listing if self._in_shard(info.key))
            counted = self._count_listed(source)
            target = listing(self.target, self.settings, self._note_retry)
        else:
            counted = self._count_listed(self._stated(self.source, self.source_known))
            target = self._stated(self.target, {})
        records = self.state.objects()
        actions = diff(counted, target, records, self.settings)
        for action in itertools.islice(actions, self.settings.sample) if self.settings.dry_run else actions:
            if self._sched.aborted:
                return
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

    def _stated(self, connector: Connector, known: Mapping[str, ObjectInfo | None]) -> Iterator[ObjectInfo]:
        """What connector holds of self.keys within the shard (its prefix and key range), in key order, as a listing
        would give it: one stat per key not known, a key it does not hold left out."""
        for key in sorted(self.keys or ()):
            if not self._in_shard(key):
                continue
            if key in known:
                if (info := known[key]) is not None:
                    yield info
                continue
            try:
                yield self._call(connector.stat, key)
            except NotFoundError:
                continue

    def _in_shard(self, key: str) -> bool:
        """Whether key is in the shard: under its prefix and in its key range."""
        settings = self.settings
        if not key.startswith(settings.prefix) or (settings.start_after and key <= settings.start_after):
            return False
        return not (settings.end_at and key > settings.end_at)

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
        if self.settings.live and _changed_under_copy(exc):
            # A live source's object changed (or went) under the copy: the next delta copies its new version.
            self.stats.add(changed_during_copy=1)
            log.info("changed during its copy: copied again by the next delta", key=key)
            return
        message = str(exc) if isinstance(exc, FerryError) else f"{key}: {type(exc).__name__}: {exc}"
        self.stats.add_failure(message, rejected=isinstance(exc, RejectedKey))
        log.error("object failed", key=key, error=message, code=getattr(exc, "code", ""))

    # -- copy ------------------------------------------------------------------------------------
    def _submit_copy(self, action: Action) -> None:
        assert action.src is not None
        size = action.src.size
        self.stats.add(to_copy=1, bytes_to_copy=size)
        self.forecast.copy(action.src, action.dst, self._route)
        if self.settings.dry_run:
            return
        if self._route.whole(size):
            self._sched.submit(self._route.whole_cost(size), lambda: self._copy_small(action))
        else:
            job = LargeJob(action, self._sched.open_large_slot(self._max_open_large))
            self._sched.submit(0, lambda: self._start_large(job))

    def _copy_small(self, action: Action) -> None:
        """On a worker: copy a whole object in one request and record it; a mismatch is copied once more."""
        key, src = action.key, action.src
        assert src is not None
        started = time.monotonic()
        try:
            written, checksum, held, moved = self._recopy.run(key, lambda: self._route.copy_object(key, src))
            record = ObjectRecord(key, src.size, src.signature, written.signature, checksum, held_to=held)
            self.state.record_object(record)
            self.stats.finished(started, bytes_copied=src.size, **moved)
            self.stats.held(held)
        except Exception as exc:  # noqa: BLE001
            self._fail(key, exc)

    # -- large objects -----------------------------------------------------------------------------
    def _start_large(self, job: LargeJob) -> None:
        """On a worker: begin the job's first attempt; whatever fails ends the job."""
        job.started = time.monotonic()
        try:
            self._begin_large(job)
        except Exception as exc:  # noqa: BLE001
            self._fail_large(job, exc)

    def _begin_large(self, job: LargeJob) -> None:
        """Begin an attempt: resume the upload the state holds for the object, or begin one; queue its parts."""
        key = job.key
        info = self._call(self.source.stat, key)
        upload = self._route.upload(key, info)
        done: dict[int, Part] = {}
        previous = self.state.upload(key)
        if (
            previous is not None
            and (previous.size, previous.src_sig, previous.part_size) == (info.size, info.signature, upload.part_size)
            and self._call(self.target.upload_alive, key, previous.upload_id)
        ):
            upload.upload_id = previous.upload_id
            done = {p.number: p for p in self.state.parts(key, previous.upload_id)}
            recorded = len(done)
            # What the store holds beyond the state's record: the parts sent after its last commit (a killed
            # worker's, or those since the last checkpoint of a state restored on another worker).
            for listed in self._call(self.target.uploaded_parts, key, upload.upload_id):
                if listed.number not in done and 1 <= listed.number <= upload.total:
                    part = self._route.adopt_part(upload, listed)
                    if part is not None:
                        self.state.record_part(key, upload.upload_id, part)
                        done[part.number] = part
            self.stats.add(resumed_uploads=1, parts_resumed=len(done), parts_reconciled=len(done) - recorded)
            log.info("resuming upload", key=key, parts_done=len(done), parts=upload.total, listed=len(done) - recorded)
        else:
            if previous is not None:
                self._call(self.target.abort, key, previous.upload_id)
            spec = WriteSpec(content_type=info.content_type, metadata=info.metadata or {})
            policy = self._retrying.copy()
            upload.upload_id = policy(self.target.begin, key, spec, upload.part_size)
            if policy.statistics.get("attempt_number", 1) > 1:
                self._abort_lost_uploads(key, upload.upload_id)
            self.state.begin_upload(UploadRecord(key, upload.upload_id, info.size, info.signature, upload.part_size))
        job.new_attempt(upload, done)
        pending = deque(n for n in range(1, upload.total + 1) if n not in done)
        if not pending:
            self._finish_large(job, upload)
        else:
            job.parts = Parts(pending, upload.part_cost, lambda number: self._run_part(job, upload, number))
            self._sched.add_large(job.parts)

    def _abort_lost_uploads(self, key: str, kept: str) -> None:
        """A begin that was tried again may have begun an upload whose answer was lost (the store did the work, the
        answer stalled or was cut): abort every other unfinished upload of this key, which nothing would ever
        finish or abort (and the store bills). Rare (a retried begin), so a listing of the target's uploads."""
        for other_key, upload_id in self._call(lambda: list(self.target.list_incomplete())):
            if other_key == key and upload_id != kept:
                with contextlib.suppress(NotFoundError):
                    self._call(self.target.abort, key, upload_id)
                log.warning("aborted an upload a lost answer began", key=key, upload_id=upload_id[:16])

    def _run_part(self, job: LargeJob, upload: Upload, number: int) -> None:
        if job.over:
            return
        try:
            part = self._route.copy_part(upload, number)
            self.state.record_part(job.key, upload.upload_id, part)
            failpoint("transfer:part", self.stop)
        except Exception as exc:  # noqa: BLE001
            self._fail_large(job, exc)
            return
        with job.lock:
            job.done[number] = part
            last = len(job.done) == upload.total and not job.over
        if last:
            try:
                self._finish_large(job, upload)
            except Exception as exc:  # noqa: BLE001
                self._fail_large(job, exc)

    def _finish_large(self, job: LargeJob, upload: Upload) -> None:
        """Complete the upload, verify what the target holds and record it; a mismatch starts one more attempt."""
        key, info = job.key, upload.info
        parts = [job.done[n] for n in range(1, upload.total + 1)]
        crc = combine_parts([(p.crc32c, p.size) for p in parts]) if all(p.crc32c is not None for p in parts) else None
        # Where the bytes never passed through ferry, the source's own checksum is carried.
        value = crc if crc is not None else parse(info.checksum)
        checksum = label(value) if value is not None else None
        spec = WriteSpec(content_type=info.content_type, metadata=info.metadata or {}, checksum=checksum)
        checked = False
        try:
            # Before anything is completed: what was read must be what the source holds.
            held, why_not = self._route.held_upload(upload, parts, crc)
            checked = True
            written = self._call(self.target.complete, key, upload.upload_id, parts, spec)
            self._verify(key, info.size, checksum)
            if upload.mode != "server":
                now = self._call(self.source.stat, key)
                if (now.size, now.signature) != (info.size, info.signature):
                    raise PermanentError(f"{self.source.url}: {key}: changed while it was being copied", code="Changed")
        except ChecksumMismatch as exc:
            if not checked:  # never completed: its parts are dropped
                with contextlib.suppress(FerryError):
                    self._call(self.target.abort, key, upload.upload_id)
            self.state.end_upload(key)
            if not self._recopy.again(job.attempt, key, exc):
                raise
            self._begin_large(job)
            return
        self.state.end_upload(key)
        record_sig = job.action.src.signature if job.action.src else info.signature
        self.state.record_object(ObjectRecord(key, info.size, record_sig, written.signature, checksum, held_to=held))
        self.stats.finished(job.started, bytes_copied=info.size)
        self.stats.held(held, why_not)
        job.finish()

    def _verify(self, key: str, size: int, checksum: str | None) -> None:
        """Read back what the target holds: its size, and its stored checksum where it keeps one."""
        held = self._call(self.target.stat, key)
        if held.size != size:
            raise ChecksumMismatch(f"{self.target.url}: {key}: holds {held.size} bytes, expected {size}")
        if self.target.capabilities.stores_checksum and checksum and held.checksum != checksum:
            raise ChecksumMismatch(f"{self.target.url}: {key}: stores {held.checksum}, expected {checksum}")

    def _fail_large(self, job: LargeJob, exc: BaseException) -> None:
        """End the job as failed, once: drop its queued parts; a permanent failure also aborts its upload."""
        if not job.finish():
            return
        if job.parts is not None:
            self._sched.drop(job.parts)
        self._fail(job.key, exc)
        if job.upload is not None and isinstance(exc, PermanentError) and not isinstance(exc, TransientError):
            # Nothing to resume: drop the parts. A transient failure keeps them for the next run.
            try:
                self.target.abort(job.key, job.upload.upload_id)
                self.state.end_upload(job.key)
            except FerryError as abort_exc:
                log.warning("could not abort upload", key=job.key, error=str(abort_exc))

    # -- compare and delete ------------------------------------------------------------------------
    def _compare(self, action: Action) -> None:
        """Equal sizes and no record in the state (or --checksum): prove the target's object equal and record it
        (adopted, when ferry has no record of it), or copy it. Its outcome goes to on_action: EQUAL or COPY."""
        key, src, dst = action.key, action.src, action.dst
        assert src is not None and dst is not None
        try:
            equal, how, checksum = self._prove(src, dst)
        except Exception as exc:  # noqa: BLE001
            self._fail(key, exc)
            return
        if equal:
            if action.record is None:
                self.stats.adopt(how, src.size)
            else:
                self.stats.add(skipped=1, bytes_skipped=src.size)
            if not self.settings.dry_run:
                proof = how if action.record is None else None
                self.state.record_object(ObjectRecord(key, src.size, src.signature, dst.signature, checksum, proof))
            if self.on_action is not None:
                self.on_action(Action(EQUAL, key, src, dst, action.record, how))
            return
        copy = Action(COPY, key, src, dst, action.record, how)
        if self.on_action is not None:
            self.on_action(copy)
        self.stats.add(to_copy=1, bytes_to_copy=src.size)
        self.forecast.copy(src, dst, self._route)
        if self.settings.dry_run:
            return
        if self._route.whole(src.size):
            self._copy_small(copy)
        else:
            # A worker never waits for a slot (that could starve the parts that free one).
            self._start_large(LargeJob(copy, self._sched.open_large_slot(None)))

    def _prove(self, src: ObjectInfo, dst: ObjectInfo) -> tuple[bool, str, str | None]:
        """(equal, the proof or why not, ferry's checksum of the bytes where known): --checksum reads both sides."""
        if self.settings.checksum:
            src_sum, dst_sum = self._hash(self.source, src), self._hash(self.target, dst)
            if src_sum == dst_sum:
                return True, READING, src_sum
            return False, f"checksums differ ({src_sum}, {dst_sum})", None
        return prove(self.source, self.target, src, dst, self._call, self._read)

    def _read(self, connector: Connector, info: ObjectInfo, md5: bool, part_size: int | None) -> ObjectInfo:
        read = read_digests(connector, info, self.settings.part_size, self._retrying, md5=md5, part_size=part_size)
        if connector is self.source:
            self.stats.add(bytes_read=info.size)
        return read

    def _hash(self, connector: Connector, info: ObjectInfo) -> str:
        checksum = self._read(connector, info, False, None).checksum
        assert checksum is not None
        return checksum

    def _submit_delete(self, action: Action) -> None:
        self.stats.add(deleted=1)
        self.forecast.delete(action.dst)
        if self.settings.dry_run:
            return

        def delete() -> None:
            try:
                self._call(self.target.delete, action.key)
                self.state.forget_object(action.key)
            except Exception as exc:  # noqa: BLE001
                self.stats.add(deleted=-1)
                self._fail(action.key, exc)

        self._sched.submit(0, delete)


def _since(before: dict[str, int] | None, now: dict[str, int] | None) -> dict[str, int] | None:
    """The requests sent between two counts of one connector, by class (None where it does not count them)."""
    if before is None or now is None:
        return None
    return {kind: n - before.get(kind, 0) for kind, n in now.items() if n - before.get(kind, 0)}


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


def remove_all(target: Connector) -> str:
    """Delete every object under the target's root and abort its unfinished uploads; say what was done."""
    keys = [info.key for info in target.list()]
    for key in keys:
        target.delete(key)
    aborted = abort_incomplete(target)
    return f"deleted {len(keys)} object(s) and aborted {len(aborted)} unfinished upload(s) under {target.url}"
