"""The cut a backup takes, and why every transaction is in it entirely or not at all.

**Protocol** (``themis_core/cluster_backup/orchestrate.py``): (1) every shard closes its decision gate
(``storage/decision_gate.py``): from then on no COMMIT entry becomes durable in any shard's
transaction log, and ``close`` returns only once none is being written; (2) while every gate is
closed, every shard takes a RocksDB checkpoint — one atomic point across its column families
(documents, intents, transaction log); (3) every gate is renewed — the same closing number on
every shard proves no lease ran out between (1) and the last checkpoint, else the backup fails —
and opens. Single-shard writes, prepares and phase 2 of decisions already logged go on
throughout; only new COMMIT entries wait, for as long as (2) takes.

**Restore reads** (``restore.py``), for each key, only the copy of the key's *primary* at the
cut — its coordinator in the cut's plan epoch (``fencing.primary``: the first in-sync owner; an
owner out of sync was fenced and may lack acknowledged writes) — plus the primary intents of
transactions whose COMMIT some shard's transaction log in the backup holds (rolled forward);
every other intent is dropped (presumed abort).

**Why single-shard transactions are whole.** Their records are installed on the primary in one
synced ``WriteBatch``; a checkpoint holds the batch or not. (Other owners may hold part of one
for a moment — see ``storage/inflight.py`` — which is why replicas' copies are not read.)

**Why cross-shard transactions are whole.** Let t_i be shard i's checkpoint; all t_i fall in the
window W where every gate is closed. A transaction T is prepared on every participant before its
COMMIT is durable in a log (where it becomes final), and installed on a participant only after.
Either T's COMMIT became durable before W: then every participant prepared before W, so each
checkpoint holds T's primary intent or T's installed records (install drops the intent in the
same batch), and the checkpoint of the shard that logged the COMMIT holds it (a COMMIT is pruned
only once every participant installed it, or after the retention period, by when no intent of
it is left). Restore rolls the intents forward: T is whole. Or T's COMMIT became durable after W
(or never): then no participant installed T before its checkpoint, and no log in the backup
holds its COMMIT, so restore drops its intents: T is absent. No COMMIT becomes durable inside W —
the gates hold it back; an abort logged first wins over a COMMIT held back (first decision
wins), so such a T is absent in the source too.

**The plan epoch.** Every shard reports its ring version with the gate and the snapshot; the
backup fails unless they all agree, and a shard refuses the gate while it is resharding (its
primaries may not hold their keys yet). Independent, non-transactional writes to different
shards that race the few milliseconds of W may be in or out independently, as with any snapshot
taken while writes go on; a key's record is never torn.
"""

from __future__ import annotations

from collections.abc import Iterable

from ..storage.documents import Replicated
from ..storage.intents import Decision, Intent, LogEntry, Role


def committed_txns(entries: Iterable[LogEntry]) -> set[str]:
    """Transactions whose COMMIT some shard's transaction log in the backup holds."""
    return {e.txn for e in entries if e.decision is Decision.COMMIT}


def rolled_forward(intents: Iterable[Intent], committed: set[str], shard_id: str) -> list[Replicated]:
    """The records of ``shard_id``'s own primary intents whose transaction committed."""
    return [
        record
        for i in intents
        if i.role is Role.PRIMARY and i.primary == shard_id and i.txn in committed
        for record in i.records
    ]
