"""The transfer engine: list -> diff -> schedule parts -> N workers -> verify.

One module per concern: settings (the knobs), diff (what to do with each key), stats (what was
done), scheduler (who runs what, under the byte budget), retry (the transient-error and checksum
mismatch policies), route (how bytes travel) and engine (the transfer itself). Callers import
from here.
"""

from connectors.transfer.diff import COMPARE, COPY, DELETE, SKIP, Action, decide, diff, merge_join
from connectors.transfer.engine import Transfer, abort_incomplete, effective_threads, job_name
from connectors.transfer.retry import hash_object, listing, retrying
from connectors.transfer.settings import TransferSettings, part_size_for
from connectors.transfer.stats import LatencyHistogram, Stats

__all__ = [
    "COMPARE",
    "COPY",
    "DELETE",
    "SKIP",
    "Action",
    "LatencyHistogram",
    "Stats",
    "Transfer",
    "TransferSettings",
    "abort_incomplete",
    "decide",
    "diff",
    "effective_threads",
    "hash_object",
    "job_name",
    "listing",
    "merge_join",
    "part_size_for",
    "retrying",
]
