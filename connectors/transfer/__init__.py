"""The transfer engine: list -> diff -> schedule parts -> N workers -> verify.

One module per concern: settings (the knobs), diff (what to do with each key), stats (what was
done), scheduler (who runs what, under the byte budget), retry (the transient-error and checksum
mismatch policies), route (how bytes travel), state (one shard's durable record) and engine
(the transfer itself), forecast (the copies a diff decided and the requests the route sends for them), adopt
(proving what another tool wrote equal), source_checksum (what is read held to what the source holds). Callers
import from here.
"""

from connectors.transfer.adopt import PROOFS
from connectors.transfer.diff import COMPARE, COPY, DELETE, EQUAL, SKIP, Action, diff, merge_join
from connectors.transfer.engine import Transfer, abort_incomplete, remove_all
from connectors.transfer.forecast import SIZE_EDGES, Forecast
from connectors.transfer.retry import hash_object, listing, retrying
from connectors.transfer.settings import TransferSettings, bounds, effective_threads, part_size_for
from connectors.transfer.source_checksum import KINDS as SOURCE_CHECKSUMS
from connectors.transfer.state import ObjectRecord, TransferState, written_signatures
from connectors.transfer.stats import LatencyHistogram, Stats

__all__ = [
    "COMPARE",
    "COPY",
    "DELETE",
    "EQUAL",
    "PROOFS",
    "SIZE_EDGES",
    "SKIP",
    "SOURCE_CHECKSUMS",
    "Action",
    "Forecast",
    "LatencyHistogram",
    "ObjectRecord",
    "Stats",
    "Transfer",
    "TransferSettings",
    "TransferState",
    "abort_incomplete",
    "bounds",
    "diff",
    "effective_threads",
    "hash_object",
    "listing",
    "merge_join",
    "part_size_for",
    "remove_all",
    "retrying",
    "written_signatures",
]
