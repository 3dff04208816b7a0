"""A table whose key changed: rebuilt from a full dump under the new key, swapped in one commit.

Rows stored under the old key cannot be merged with records keyed by the new one (a row's
identity changed), so the merge never mixes them. The capture asks for a full dump when it sees
the change (`model.schema_changes`: a new key rewrites rows). Until that dump is staged whole and
every window of it has passed the capture, merges of the table leave it as it is, readable as of
the change, and say what they wait for. Then one merge composes the table anew, as a first merge
does, from that dump's chunks and the log events after its first low watermark, and commits it
in place of every file the table had, with the new key, in one Iceberg commit (`job._merge`).

Events before that low watermark are left out on purpose: the dump read every row after it, and
an older event keyed by the old key may name a row the new key no longer does (an update that
changed a new-key column looked like an upsert of another row). Older snapshots keep the old rows.
"""
from __future__ import annotations

from ..coordination import store as paths
from ..coordination import watermark_index
from ..coordination.store import StateStore
from ..model.staged_format import key_columns
from ..snapshot.dump import finished_chunks
from ..stagedlog.staged_log import StagedLog
from ..warehouse.merged_state import Bucket, TableState
from .merge_inputs import chunk_windows


def fresh_state(store: StateStore, staged: StagedLog, state: TableState, key: list[str],
                upto: str) -> TableState | str:
    """The state a rebuild under `key` composes on: no row stored, every other dump counted as
    merged, the log merged up to the rebuilding dump's first low watermark. Or, while it cannot
    start yet, what it waits for."""
    source, table = state.source, state.table
    found = None
    for dump_id in staged.chunk_dumps(source, table):
        scope = store.get(paths.dump_path(source, dump_id))
        if scope is None or scope.get("keys") is not None:   # (a key list cannot rebuild a table)
            continue
        infos = staged.chunk_infos(staged.chunk_files(source, table, dump_id))
        if any(i.meta is not None and key_columns(i.schema) == key for i in infos):
            found = (dump_id, infos)   # the listing is in dump id order: the newest wins
    wanted = f"{table}'s key changed from ({', '.join(state.key)}) to ({', '.join(key)}): the table is rebuilt"
    if found is None:
        return (f"{wanted} from a full dump under the new key, which the capture asked for when it saw the "
                f"change (else run `dblog dump --source {source} --table {table}`); until then it stays as it was")
    dump_id, infos = found
    count = finished_chunks(store, source, dump_id, table)
    windows = chunk_windows(infos, lambda ids: watermark_index.positions(store, staged, source, ids))
    if count is None or any(not w.ready(upto) for w in windows):
        return f"{wanted} from dump {dump_id} once it finished and its windows passed the capture"
    lows = [w.low for w in windows if w.low is not None]
    others = {d: 0 for d in staged.chunk_dumps(source, table) if d != dump_id}
    return TableState(source, table, list(key), [], [Bucket(0, None)], log_upto=min(lows) if lows else None,
                      chunk_counts=others)
