"""A first load adopted: its chunk files become the table's data files, neither read nor rewritten.

A range dump stages each chunk in the warehouse's form too (`warehouse.adoption`): the table's
field ids, a warehouse row's `_dblog_*` columns, the bucket the dump's rows so far put it in. When
a first load's chunks (`first_load`: nothing stored, no event, one dump's chained ranges) all say
so, for buckets of this merge's size, and their columns are the table's, the merge copies each
file under the table's location (a hard link on one disk) and commits them as they are, bucket
by bucket; only the key columns are read, for each bucket's bounds. Otherwise it says why in
the merge's log and `first_load` writes the buckets from the chunks as before.

Rows keep the position their split was read at, not their window's HW: both lie inside the
window, and with no event of the table merged, every later event is after either (invariant 5's
order holds). A bucket holds a file per chunk: maintenance compacts a bucket of more than
`DBLOG_MAINTENANCE_COMPACT_MIN_FILES` files into one.
"""
from __future__ import annotations

import logging
import uuid
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from itertools import groupby

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ..model.staged_format import WarehouseForm
from ..settings import settings
from ..storage import filesystem
from ..warehouse import deletes
from ..warehouse.adoption import copy_in, mismatch
from ..warehouse.commit import Pending, WrittenFile
from ..warehouse.files import data_path
from ..warehouse.merged_state import TableState
from .first_load import LoadChunk, bucket_entry, loaded
from .rewrite import Rewritten

log = logging.getLogger("dblog.merge")


def adopt(base: TableState, pending: Pending, chunks: list[LoadChunk], bucket_rows: int,
          in_windows: Callable[[], dict[str, set[tuple]] | str] | None = None) -> Rewritten | None:
    """The first load of `chunks` (in key order) committed as they are; None (said in the log)
    when they cannot be: `first_load` then writes it. `in_windows`: the load came with events of
    the table (`job.MergeInputs.in_windows`): the rows each chunk's window drops are deleted by
    position in the same commit, and the events are merged over the load by a second pass."""
    tuned = settings()
    if tuned.merge.adopt_first_load == "off":
        return None
    if tuned.warehouse.change_table(base.table):
        # (Its change table takes a merge's dump rows by their `_dblog_merged_at`, which adopted rows
        # set to their chunk's read time, before the merge: they would never reach it.)
        log.info("%s/%s: the first load's chunk files are rewritten, not adopted: the table has a change table",
                 base.source, base.table)
        return None
    chunks = [c for c in chunks if c.rows]
    forms = [None if c.schema is None else WarehouseForm.of_footer(c.schema) for c in chunks]
    target = pa.ipc.read_schema(pa.py_buffer(pending.schema_ipc))
    why = _refusal(base, chunks, forms, target, bucket_rows)
    bounds = None
    if why is None:
        bounds = _bounds(base.key, target, chunks, forms)
        if bounds is None:
            why = "a bucket's keys reach into the next one's (the source's key order is not Spark's)"
    dropped: dict[str, np.ndarray] = {}
    if why is None and in_windows is not None:
        keys = in_windows()
        if isinstance(keys, str):
            why = keys
        else:
            found = _dropped(base.key, chunks, keys)
            why, dropped = (found, {}) if isinstance(found, str) else (None, found)
    if why is not None or bounds is None:
        log.info("%s/%s: the first load's chunk files are %s, not adopted: %s", base.source, base.table,
                 "merged with its events" if in_windows is not None else "rewritten", why)
        return None
    prefix = uuid.uuid4().hex[:12]
    files = [WrittenFile(data_path(pending.location, f.bucket, f"{prefix}-{c.uri.rsplit('/', 1)[-1][:-8]}"),
                         f.bucket, False, c.rows, 0, adopted=True) for c, f in zip(chunks, forms) if f is not None]
    try:
        with ThreadPoolExecutor(8) as pool:   # on an object store, a server-side copy each
            list(pool.map(lambda pair: copy_in(pair[0].uri, pair[1].uri), zip(chunks, files)))
    except BaseException:
        _delete([f.uri for f in files])
        raise
    out = loaded(base, chunks, files, written=len(bounds))
    out.without_spark = True
    out.buckets = [bucket_entry(label, None if i == 0 else [str(v) for v in lo], [f for f in files if f.bucket == label])
                   for i, (label, lo) in enumerate(bounds.items())]
    if in_windows is not None:
        out.log_next = True
        _delete_dropped(pending, chunks, files, dropped, out)
    return out


def _dropped(key: list[str], chunks: list[LoadChunk], keys: dict[str, set[tuple]]) -> dict[str, np.ndarray] | str:
    """Per chunk file, the positions of its rows whose keys the log touched inside its window
    (`keys`, per chunk URI): the rows the window rule drops (`frame_rules.window_dropped`); or
    why they cannot be found (a key the chunk's column cannot hold: its type widened since)."""
    def positions(c: LoadChunk) -> tuple[str, np.ndarray]:
        found = keys.get(c.uri)
        if not found:
            return c.uri, np.array([], dtype=np.int64)
        table = _keys(c.uri, key)
        if len(key) == 1:
            column = table[key[0]]
            if pa.types.is_integer(column.type):   # (compared as int64: an event's key may be wider)
                column = column.cast(pa.int64())
            values = pa.array([k[0] for k in found], type=column.type)
            return c.uri, np.flatnonzero(pc.is_in(column, value_set=values).to_numpy(zero_copy_only=False))
        rows = zip(*(table[k].to_pylist() for k in key))
        return c.uri, np.array([i for i, k in enumerate(rows) if k in found], dtype=np.int64)
    try:
        with ThreadPoolExecutor(8) as pool:
            return {uri: p for uri, p in pool.map(positions, chunks) if len(p)}
    except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError) as exc:
        return f"a key changed inside a window does not fit its chunk's key column ({exc})"


def _delete_dropped(pending: Pending, chunks: list[LoadChunk], files: list[WrittenFile],
                    dropped: dict[str, np.ndarray], out: Rewritten) -> None:
    """One position delete file per bucket naming its adopted files' dropped rows, in the load's
    commit; the bucket rows and survivors counted without them."""
    by_bucket: dict[int, dict[str, np.ndarray]] = {}
    for c, f in zip(chunks, files):
        if c.uri in dropped:
            by_bucket.setdefault(f.bucket, {})[f.uri] = dropped[c.uri]
            out.survivors[c.dump_id] -= len(dropped[c.uri])
    spec_id = pending.tx.table_metadata.default_spec_id  # type: ignore[attr-defined]
    out.deletes = {label: deletes.write(pending.location, spec_id, label, rows) for label, rows in by_bucket.items()}
    gone = {label: sum(len(p) for p in rows.values()) for label, rows in by_bucket.items()}
    for b in out.buckets:
        b.rows -= gone.get(b.id, 0)
    out.survivors_total -= sum(gone.values())


def _refusal(base: TableState, chunks: list[LoadChunk], forms: list[WarehouseForm | None], target: pa.Schema,
             bucket_rows: int) -> str | None:
    """Why these chunks cannot be adopted as they are; None when they can."""
    if not chunks:
        return "no chunk has rows"
    if any(f is None for f in forms):
        return ("a chunk was staged without the warehouse form (by an older version, by a dump that found the table "
                "loaded: `coordination/loaded_tables`, or its source did not say its log head)")
    sizes = {f.bucket_rows for f in forms if f is not None}
    if sizes != {bucket_rows}:
        return f"its dump made buckets of {', '.join(map(str, sorted(sizes)))} rows, this merge {bucket_rows} " \
               "(DBLOG_BUCKET_ROWS, --bucket-rows)"
    for c, f in zip(chunks, forms):
        # A split staged after its window's HW (a Spark task of a failed job, a deposed worker)
        # read its rows then: only HW's position keeps the events after the window behind them.
        if f is not None and not (c.low is not None and c.low <= f.position < c.high):
            return f"{c.uri.rsplit('/', 1)[-1]} was read at {f.position}, outside its window ({c.low}, {c.high})"
    labels = [f.bucket for f in forms if f is not None]
    if labels != sorted(labels):
        return "its chunks' buckets are not in key order"
    biggest = max(_bucket_sizes(chunks, labels).values())
    if biggest > 2 * bucket_rows:   # a window wider than a bucket (chunk size x parallelism)
        return f"a bucket would hold {biggest} rows, more than twice {bucket_rows}"
    for k in base.key:
        if not (pa.types.is_integer(target.field(k).type) or pa.types.is_string(target.field(k).type)
                or pa.types.is_large_string(target.field(k).type)):
            return f"key column {k} is {target.field(k).type}: only integer and string keys keep their bounds' form"
    for c in chunks:
        assert c.schema is not None
        problem = mismatch(c.schema, target)
        if problem is not None:
            return f"{c.uri.rsplit('/', 1)[-1]}: {problem}"
    return None


def _bucket_sizes(chunks: list[LoadChunk], labels: list[int]) -> Counter[int]:
    sizes: Counter[int] = Counter()
    for c, label in zip(chunks, labels):
        sizes[label] += c.rows
    return sizes


def _bounds(key: list[str], target: pa.Schema, chunks: list[LoadChunk],
            forms: list[WarehouseForm | None]) -> dict[int, tuple] | None:
    """Each bucket's lowest key, by bucket in key order; None when a bucket's highest key is not
    below the next one's lowest (in Spark's order: strings by their bytes). An integer key's rows
    are in that order already (a chunk is read in key order), so its ends are its first and last
    files' first and last rows; strings follow the source's collation: every file's keys are read."""
    integers = all(pa.types.is_integer(target.field(k).type) for k in key)
    labels = [f.bucket if f is not None else -1 for f in forms]   # `_refusal` saw every form there
    buckets = [(label, [c for c, _ in group]) for label, group in groupby(zip(chunks, labels), key=lambda p: p[1])]

    def ends(files: list[LoadChunk]) -> tuple[tuple, tuple]:
        read = [files[0], files[-1]] if integers else files
        keys = pa.concat_tables([_keys(c.uri, key) for c in read])
        if not integers:
            keys = keys.take(pc.sort_indices(keys, sort_keys=[(k, "ascending") for k in key]))
        first, last = keys.slice(0, 1).to_pylist()[0], keys.slice(keys.num_rows - 1).to_pylist()[0]
        return tuple(first[k] for k in key), tuple(last[k] for k in key)

    with ThreadPoolExecutor(8) as pool:
        found = list(pool.map(lambda b: ends(b[1]), buckets))
    if any(hi >= lo for (_, hi), (lo, _) in zip(found, found[1:])):
        return None
    return {label: lo for (label, _), (lo, _) in zip(buckets, found)}


def _keys(uri: str, key: list[str]) -> pa.Table:
    fs, path = filesystem(uri)
    with fs.open_input_file(path) as handle:
        return pq.read_table(handle, columns=key)


def _delete(uris: list[str]) -> None:
    for uri in uris:
        fs, path = filesystem(uri)
        try:
            fs.delete_file(path)
        except (FileNotFoundError, OSError):
            pass
