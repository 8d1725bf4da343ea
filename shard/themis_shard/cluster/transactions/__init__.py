"""Cross-shard transactions: two-phase commit over the keys' primaries.

A transaction whose keys all have one primary takes the single-coordinator fast path in
``cluster.documents`` unchanged. Otherwise the shard that received it is the **coordinator**
(``coordinator.py``) and each primary of a key group is a **participant** (``participant.py``):

1. Prepare. Each participant checks the fence (it must be the keys' primary in the
   coordinator's epoch: ``fencing.fence_refusal``), takes the per-key locks single-shard writes
   take, validates every ``if_version`` and ``check``, stamps the records (``storage.stamps``)
   and writes a durable *primary intent* (``storage.intents``, column family ``intents``, synced)
   that locks the keys; then a *replica intent* goes to the keys' other owners, and the vote is
   yes only once the write concern's number of owners hold it.
2. Decide. All yes: the coordinator makes COMMIT final on a *decider* (``decisions.deciders``:
   a participant or owner other than itself; ``TxnLog.accept``, first writer wins against a
   terminator's fence), then logs it itself (column family ``txn_log``) *before* phase 2. Any
   refusal or unreachable participant: abort.
3. Commit or abort. Participants install the records (or drop the intent), log the decision in
   the same batch, release the keys, and pass it on to their replicas (a replica that misses the
   commit gets a hint).

Locks. A key held by a prepared intent refuses other writes at once — a single-key write with
409 ``transaction_in_progress``, another transaction's prepare with 409 ``transaction_conflict``
— rather than waiting: nothing ever waits on a lock held across the network, so there are no
distributed deadlocks, and the client retries (the lock lasts one commit round trip).

Termination (``recovery.py``; every ``THEMIS_TXN_RESOLVE_INTERVAL_S``). A shard with an intent
older than ``THEMIS_TXN_RESOLVE_AFTER_S`` looks for the decision (its own log, the coordinator's);
past ``THEMIS_TXN_TIMEOUT_S`` it fences every decider: a COMMIT anywhere commits, every decider
fenced aborts. No intent waits for a coordinator that is gone for good: each is settled within
``TxnSettings.in_doubt_bound_s`` while its deciders answer. A coordinator re-sends phase 2 for
every logged COMMIT not yet acknowledged, after a restart too. Intents and decisions are synced
RocksDB writes: they survive ``kill -9``. A client's transaction id (``POST /v1/transactions``
``id``) names one attempt whose outcome any shard answers (``admin.py``).

Isolation: **serializable**, by optimistic validation under two-phase-commit locks. A client
reads (any shard, any time), then sends its writes with ``if_version`` and a
``{"op": "check", "collection", "key", "if_version"}`` for every key it read but does not write.
Every such version is validated at prepare while the key is locked until the decision, so all
of a committed transaction's reads and writes happen at one point (its commit): write skew and
G2 anti-dependency cycles abort one of the transactions with 409, and no update is lost. Reads
outside a transaction are read-committed (a participant's keys show the old version until
phase 2 reaches it).

The coordinator log keeps finished decisions for ``THEMIS_TXN_LOG_RETENTION_S`` (then pruned).

Limits: an intent whose deciders do not answer (while none that answers knows a COMMIT) stays
in doubt until they do (one of them may hold the only COMMIT); a resharding in progress is not
read through by prepare (the single-coordinator path does);
``previous_version`` of a cross-shard result is not reported exactly.
``THEMIS_TXN_PAUSE_AFTER_PREPARE_S`` and ``THEMIS_TXN_PAUSE_AFTER_DECISION_S`` (off) are the
fault-injection hooks.

May import: ``documents`` (the commit body and refusals), ``replication``, ``placement``,
``transport``, ``tasks``, ``settings``.
"""
