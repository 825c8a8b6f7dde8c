"""The data gate: does the target hold every selected source object, byte for byte?

Listings of both sides are merge-joined with the transfer state. An object it recorded as
verified, whose source and target are still exactly what they were then (same signatures), is
counted verified without reading it (or adopted, by its proof, when another tool wrote it and a
sync proved it equal); an object changed on either side since is a FAIL. Objects the state does
not know are compared by stored checksums, or by reading both when a side stores none.
`deep=True` re-reads every target object and compares its checksum.
"""

from __future__ import annotations

import threading
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor

from connectors.base import Connector, ObjectInfo
from connectors.transfer import (
    COMPARE,
    COPY,
    EQUAL,
    PROOFS,
    SKIP,
    SOURCE_CHECKSUMS,
    Action,
    ObjectRecord,
    TransferSettings,
    TransferState,
    hash_object,
    listing,
    merge_join,
    retrying,
)
from ferry.results import CheckResult, Status

NAME = "data.target_matches_source"
_EVIDENCE_KEPT = 20
_WINDOW = 256


def _hash(connector: Connector, info: ObjectInfo, settings: TransferSettings) -> str:
    return hash_object(connector, info, settings.part_size, retrying(settings))


class DataTally:
    """Counts and evidence of one comparison of target against source."""

    def __init__(self) -> None:
        self.counts = {
            "objects_source": 0,
            "objects_target": 0,
            "bytes_source": 0,
            "bytes_target": 0,
            "missing": 0,
            "size_mismatch": 0,
            "changed_after_copy": 0,
            "checksum_mismatch": 0,
            "extra_in_target": 0,
            "verified_by_state": 0,
            "verified_by_stored_checksum": 0,
            "verified_by_reading": 0,
            # Objects another tool wrote, proven equal without a copy (connectors.transfer.adopt), by proof.
            **{f"adopted_by_{proof}": 0 for proof in PROOFS},
            "could_not_compare": 0,
            # Of the objects verified, those whose copy held the bytes ferry read to the source's own checksum, by
            # kind (connectors.transfer.source_checksum).
            **{f"held_to_source_{kind}": 0 for kind in SOURCE_CHECKSUMS},
        }
        self._lock = threading.Lock()  # a run's outcomes of its compares come from its workers
        # The first keys of each kind of problem (extra objects too, failing or not), in key order.
        self.evidence: dict[str, list[str]] = {}

    def problem(self, kind: str, key: str, detail: str = "") -> None:
        self.counts[kind] += 1
        shown = self.evidence.setdefault(kind, [])
        if len(shown) < _EVIDENCE_KEPT:
            shown.append(f"{kind}: {key}" + (f" ({detail})" if detail else ""))

    def listed(self, src: ObjectInfo | None, dst: ObjectInfo | None) -> None:
        if src is not None:
            self.counts["objects_source"] += 1
            self.counts["bytes_source"] += src.size
        if dst is not None:
            self.counts["objects_target"] += 1
            self.counts["bytes_target"] += dst.size

    def observe_unchanged(self, action: Action) -> None:
        """Count one action of a sync that copied, deleted and failed nothing.

        Then the diff's own listing is the target's state: a SKIP of an object both sides hold
        means the state's verified record matched both signatures, and an EQUAL (a COMPARE's
        outcome) that the object was proven equal: adopted by its proof, or re-read (--checksum).
        """
        if action.kind in (COPY, COMPARE):
            return  # a copy changes the target (its gate re-lists both sides); a compare's outcome follows
        with self._lock:
            self.listed(action.src, action.dst)
            if action.src is None:
                self.problem("extra_in_target", action.key)
            elif action.kind == SKIP:
                proof = action.record.proof if action.record else None
                self.counts[f"adopted_by_{proof}" if proof else "verified_by_state"] += 1
                self.held(action.record)
            elif action.kind == EQUAL:
                self.counts["verified_by_reading" if action.record else f"adopted_by_{action.reason}"] += 1

    def held(self, record: ObjectRecord | None) -> None:
        """Count a verified object by what its copy was held to at the source, if anything."""
        if record is not None and record.held_to:
            self.counts[f"held_to_source_{record.held_to}"] += 1

    def result(self, settings: TransferSettings, note: str | None = None) -> CheckResult:
        counts = self.counts
        failing = ("missing", "size_mismatch", "changed_after_copy", "checksum_mismatch", "could_not_compare")
        if settings.delete:
            failing += ("extra_in_target",)
        status = Status.FAIL if any(counts[k] for k in failing) else Status.PASS
        evidence = [note] if note else []
        for kind, shown in self.evidence.items():
            evidence += shown
            if counts[kind] > len(shown):
                evidence.append(f"{kind}: {counts[kind] - len(shown)} more not listed")
        return CheckResult(NAME, status, dict(counts), {k: 0 for k in failing}, evidence)


def check_data(
    source: Connector, target: Connector, state: TransferState, settings: TransferSettings, *, deep: bool = False
) -> CheckResult:
    """Compare target against source: objects, bytes, per-object size and checksum."""
    tally = DataTally()
    joined = merge_join(listing(source, settings), listing(target, settings), state.objects(), settings)
    pending: deque[tuple[Future, ObjectRecord | None]] = deque()
    with ThreadPoolExecutor(max_workers=min(32, settings.threads)) as pool:
        for key, cur_s, cur_d, record in joined:
            tally.listed(cur_s, cur_d)
            if cur_s is None:
                tally.problem("extra_in_target", key)
            elif cur_d is None:
                tally.problem("missing", key)
            elif cur_s.size != cur_d.size:
                tally.problem("size_mismatch", key, f"source {cur_s.size}, target {cur_d.size} bytes")
            elif verdict := _by_state(cur_s, cur_d, record, deep):
                _count(verdict, record, tally)  # settled without a request: no thread needed
            else:
                future = pool.submit(_compare, source, target, cur_s, cur_d, record, settings, deep)
                pending.append((future, record))
                while len(pending) >= _WINDOW:
                    _count(*_outcome(pending.popleft()), tally)
        while pending:
            _count(*_outcome(pending.popleft()), tally)
    return tally.result(settings)


def _outcome(waiting: tuple[Future, ObjectRecord | None]) -> tuple[tuple[str, str, str], ObjectRecord | None]:
    future, record = waiting
    return future.result(), record


def _count(outcome: tuple[str, str, str], record: ObjectRecord | None, tally: DataTally) -> None:
    kind, key, detail = outcome
    if kind.startswith(("verified", "adopted")):
        tally.counts[kind] += 1
        tally.held(record)
    else:
        tally.problem(kind, key, detail)


def _by_state(
    src: ObjectInfo, dst: ObjectInfo, record: ObjectRecord | None, deep: bool
) -> tuple[str, str, str] | None:
    """The outcome the state's record gives an equal-sized pair without a request, or None if it takes
    requests: no record, or (deep) a verified pair that must be re-read."""
    if record is None or record.size != src.size:
        return None
    if record.dst_sig != dst.signature:
        return "changed_after_copy", src.key, "the target object was rewritten after ferry verified it"
    if record.src_sig != src.signature:
        return "changed_after_copy", src.key, "the source object changed after the copy"
    if deep:
        return None
    return (f"adopted_by_{record.proof}" if record.proof else "verified_by_state"), src.key, ""


def _compare(
    source: Connector,
    target: Connector,
    src: ObjectInfo,
    dst: ObjectInfo,
    record: ObjectRecord | None,
    settings: TransferSettings,
    deep: bool,
) -> tuple[str, str, str]:
    """One object both sides hold with equal sizes that needs requests to settle: (outcome, key, detail).

    A pair the state verified gets here only with deep=True, to be re-read.
    """
    key = src.key
    try:
        if record is not None and record.size == src.size:
            expected = record.checksum or _hash(source, src, settings)
            held = _hash(target, dst, settings)
            return (
                ("verified_by_reading", key, "")
                if held == expected
                else ("checksum_mismatch", key, f"target reads {held}, expected {expected}")
            )
        # A listing that carries stored checksums (Azure metadata, local xattrs) spares a request per side.
        call = retrying(settings)
        src_sum = src.checksum or call.copy()(source.stat, key).checksum
        dst_sum = dst.checksum or call.copy()(target.stat, key).checksum
        if src_sum and dst_sum and not deep:
            if src_sum == dst_sum:
                return "verified_by_stored_checksum", key, ""
            return "checksum_mismatch", key, f"source stores {src_sum}, target {dst_sum}"
        src_sum = _hash(source, src, settings)
        dst_sum = _hash(target, dst, settings)
        if src_sum == dst_sum:
            return "verified_by_reading", key, ""
        return "checksum_mismatch", key, f"source reads {src_sum}, target {dst_sum}"
    except Exception as exc:  # noqa: BLE001 - a gate reports, it does not crash
        return "could_not_compare", key, str(exc)
