"""Merge cost: a full dump of N and 10N rows merged into an empty warehouse table (Iceberg),
against a plain Spark Parquet write of the same rows; then a 1,000-key change batch merged into the
10N table, against rewriting that table. Same Spark session, same run. Each merge's Iceberg commit
time is reported too.

With `s3=True` the staged input and the warehouse live on the S3 server (`make up` + `services.sh
start seaweedfs`): the baselines stay Spark's local Parquet writes (Spark here has no S3 connector),
so the ratio shows what the object store costs the merge over a local plain write.

The staged input is synthesized (chunk files of `CHUNK` rows with their watermarks, a checkpoint
in ZooKeeper), so the figures are the merge's own, not the source's read speed.
"""
from __future__ import annotations

import datetime as dt
import os
import tempfile
import time
import uuid
from decimal import Decimal

import numpy as np
import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from dblog.coordination.checkpoint import checkpoint_path
from dblog.coordination.store import StateStore
from dblog.merge.job import merge_table
from dblog.model.events import ChangeEvent
from dblog.model.positions import encode
from dblog.model.schema import Column, TableSchema, encode_key
from dblog.model.staged_format import CHUNK_FIELDS, OP, POSITION, ChunkFile, ChunkMeta, Op, SegmentFile, arrow_schema
from dblog.settings import settings
from dblog.sources.base import WATERMARK_TABLE
from dblog.stagedlog.staged_log import StagedLog
from dblog.storage import filesystem
from dblog.warehouse.tables import Warehouse

SOURCE, TABLE, CHUNK = "bench", "bench.items", 50_000
SCHEMA = TableSchema(TABLE, (
    Column("id", "bigint", pa.int64()), Column("name", "varchar(32)", pa.string()),
    Column("amount", "decimal(12,2)", pa.decimal128(12, 2)), Column("ts", "timestamp(6)", pa.timestamp("us")),
    Column("note", "text", pa.string())), ("id",))


def _rows(ids: np.ndarray, salt: int) -> dict:
    n = len(ids)
    return {"id": pa.array(ids, pa.int64()),
            "name": pa.array([f"item-{i}-{salt}" for i in ids.tolist()]),
            "amount": pa.array([Decimal(int(i) % 100000) / 100 for i in ids.tolist()], pa.decimal128(12, 2)),
            "ts": pa.array(np.full(n, 1_700_000_000_000_000 + salt, dtype="int64"), pa.timestamp("us")),
            "note": pa.array(np.full(n, "x" * 40))}


def stage_dump(staged: StagedLog, rows: int, first_pos: int) -> int:
    """Chunk files for ids 1..rows and their watermark events; returns the last position used."""
    dump_id, pos, marks, after = f"d{uuid.uuid4().hex[:6]}", first_pos, [], None
    for number, start in enumerate(range(1, rows + 1, CHUNK)):
        ids = np.arange(start, min(start + CHUNK, rows + 1), dtype="int64")
        last = encode_key((int(ids[-1]),))   # each chunk reads the keys after the one before's last, as a dump does
        lw, hw = str(uuid.uuid4()), str(uuid.uuid4())
        marks += [(lw, encode(pos, 0, 0)), (hw, encode(pos + 1, 0, 0))]
        pos += 2
        cols = _rows(ids, 0)
        n = len(ids)
        # Column by column (what `staged.chunk_table` writes, without a Python tuple per row).
        meta = {**ChunkMeta(dump_id, number, lw, hw, key_from=after, key_to=last).columns(), OP: Op.READ}
        after = last
        table = pa.Table.from_arrays([cols[c] for c in SCHEMA.column_names] +
                                     [pa.array([meta.get(f.name)] * n, f.type) for f in CHUNK_FIELDS],
                                     schema=arrow_schema(SCHEMA, CHUNK_FIELDS))
        path = f"{staged.chunk_dir(SOURCE, TABLE, dump_id)}/{ChunkFile(dump_id, number).name}"
        os.makedirs(os.path.dirname(path), exist_ok=True)
        pq.write_table(table, path, compression="zstd")
    wm = pa.table({"value": [v for v, _ in marks], POSITION: [p for _, p in marks], OP: [Op.UPDATE] * len(marks)})
    directory = staged.log_dir(SOURCE, WATERMARK_TABLE)
    os.makedirs(directory, exist_ok=True)
    pq.write_table(wm, f"{directory}/{SegmentFile(marks[0][1], marks[-1][1]).name}")
    return pos


def stage_updates(staged: StagedLog, ids: np.ndarray, first_pos: int) -> int:
    rows = pa.table(_rows(ids, 1)).to_pylist()
    staged.write_segment(SOURCE, SCHEMA, [ChangeEvent(SOURCE, TABLE, Op.UPDATE, encode(first_pos + i, 0, 0),
                                                      SCHEMA.key_of(r), r) for i, r in enumerate(rows)])
    return first_pos + len(rows)


def _merge(spark, store, staged, warehouse, upto: int) -> tuple[float, float, str]:
    """(seconds of the whole merge, seconds of its Iceberg commit, what it says it did)."""
    store.put(checkpoint_path(SOURCE), {"position": encode(upto, 0, 0)})
    started = time.perf_counter()
    result = merge_table(spark, store, staged, warehouse, SOURCE, TABLE)
    elapsed = time.perf_counter() - started
    print(f"    merge: {result.rows} rows, {result.buckets_written}/{result.buckets} buckets written, {elapsed:.1f}s "
          f"(commit {result.commit_seconds:.2f}s) {result.note}", flush=True)
    return elapsed, result.commit_seconds, result.note


def _plain_write(spark, source_paths: list[str], out: str) -> float:
    started = time.perf_counter()
    spark.read.parquet(*source_paths).write.parquet(out)
    return time.perf_counter() - started


def _roots(tmp: str, name: str, bucket: str | None) -> tuple[str, str]:
    return (f"{tmp}/{name}", f"{tmp}/wh-{name}") if bucket is None else \
        (f"s3://{bucket}/{name}", f"s3://{bucket}/wh-{name}")


def full_dump(spark, store, rows: int, tmp: str, bucket: str | None = None) -> dict:
    local = StagedLog(f"{tmp}/staged-{rows}")
    upto = stage_dump(local, rows, 1_000)
    chunk_files = local.chunk_files(SOURCE, TABLE)
    plain = _plain_write(spark, chunk_files, f"{tmp}/plain-{rows}")
    staged_root, warehouse_root = _roots(tmp, f"staged-{rows}", bucket)
    if bucket is not None:   # the same staged files, uploaded
        fs, base = filesystem(staged_root)
        pafs.copy_files(local.root, base, destination_filesystem=fs)
    catalog = None if bucket is None else f"sqlite:///{tmp}/catalog-{rows}.db"
    staged, warehouse = StagedLog(staged_root), Warehouse(warehouse_root, catalog)
    merged, commit_s, _ = _merge(spark, store, staged, warehouse, upto)
    return {"rows": rows, "merge_s": round(merged, 2), "commit_s": round(commit_s, 3), "plain_write_s": round(plain, 2),
            "ratio": round(merged / plain, 2), "staged": staged, "warehouse": warehouse, "upto": upto,
            "local_staged": local}


def change_batch(spark, store, base: dict, keys: int, clustered: bool, tmp: str, seed: int = 7,
                 rewrite: bool = True) -> dict:
    rng = np.random.default_rng(seed)
    rows = base["rows"]
    ids = np.arange(rows - keys + 1, rows + 1, dtype="int64") if clustered else \
        np.sort(rng.choice(np.arange(1, rows + 1, dtype="int64"), keys, replace=False))
    base["upto"] = stage_updates(base["staged"], ids, base["upto"] + 1)
    merged, commit_s, note = _merge(spark, store, base["staged"], base["warehouse"], base["upto"])
    if not rewrite:
        return {"merge_s": round(merged, 2), "how": note}
    if base["staged"].local:
        current = base["warehouse"].data_files(SOURCE, TABLE)
    else:   # Spark reads no S3 here: rewrite the same rows' staged copy on local disk
        current = base["local_staged"].chunk_files(SOURCE, TABLE)
    rewrite = _plain_write(spark, current, f"{tmp}/rewrite-{uuid.uuid4().hex[:6]}")
    return {"keys": keys, "table_rows": rows, "keys_are": "recent ids" if clustered else "random ids",
            "merge_s": round(merged, 2), "commit_s": round(commit_s, 3), "rewrite_s": round(rewrite, 2),
            "ratio": round(merged / rewrite, 3), "how": note}


def series(spark, store, rows: int, batches: int, tmp: str, bucket: str | None, driver: bool) -> dict:
    """`batches` merges of 1,000 random keys each into a fresh 10M-row table, one after another,
    as a continuous merge of a busy table runs them: on the driver (its buckets keep one delta
    file and one delete file) or through Spark (a file of each per merge, every bucket rewritten
    after `delta.MAX_DELETES`)."""
    name = f"series-{'driver' if driver else 'spark'}"
    os.makedirs(f"{tmp}/{name}")
    base = full_dump(spark, store, rows, f"{tmp}/{name}", bucket)
    before = os.environ.get("DBLOG_MERGE_LOCAL_ROWS")
    if not driver:
        os.environ["DBLOG_MERGE_LOCAL_ROWS"] = "0"
    try:
        times = [change_batch(spark, store, base, 1000, False, tmp, seed=100 + i, rewrite=False)["merge_s"]
                 for i in range(batches)]
    finally:
        os.environ.pop("DBLOG_MERGE_LOCAL_ROWS", None)
        if before is not None:
            os.environ["DBLOG_MERGE_LOCAL_ROWS"] = before
    state = base["warehouse"].state(SOURCE, TABLE, files=True)
    return {"path": "driver" if driver else "spark", "table_rows": rows, "batches": batches, "merge_s": times,
            "total_s": round(sum(times), 2), "max_s": max(times),
            "delete_files": sum(len(b.deletes) for b in state.buckets),
            "data_files": sum(len(b.files) for b in state.buckets)}


def run(spark, rows: int, zk_hosts: str, s3: bool = False) -> dict:
    """`s3`: staged input and warehouse on the local S3 server (its credentials in the environment
    before the Spark session started: executors write there)."""
    bucket = f"bench-{uuid.uuid4().hex[:8]}" if s3 else None
    store = StateStore(zk_hosts, f"/bench_merge_{uuid.uuid4().hex[:6]}").start()
    try:
        with tempfile.TemporaryDirectory(dir=os.environ.get("DBLOG_BENCH_TMP")) as tmp:
            print("  warm-up", flush=True)
            os.makedirs(f"{tmp}/warm-up")
            warm = full_dump(spark, store, CHUNK * 2, f"{tmp}/warm-up", bucket)
            # ... and a change batch: the first merge of updates in a session pays Spark's start of
            # that path (code generation, its Python workers' imports), 3-8 s that a long-running
            # merge pays once; both the merge and the rewrite it is held to are timed warm.
            local_rows = os.environ.get("DBLOG_MERGE_LOCAL_ROWS")
            os.environ["DBLOG_MERGE_LOCAL_ROWS"] = "0"   # (through Spark, not the driver's small merge)
            try:
                change_batch(spark, store, warm, 100, False, f"{tmp}/warm-up")
            finally:
                os.environ.pop("DBLOG_MERGE_LOCAL_ROWS")
                if local_rows is not None:
                    os.environ["DBLOG_MERGE_LOCAL_ROWS"] = local_rows
            tuned = settings().merge
            out = {"full": [], "batches": [], "when": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
                   "bucket_rows": tuned.bucket_rows, "delta_ratio": tuned.delta_ratio}
            for n in (rows, rows * 10):
                print(f"  full dump of {n} rows", flush=True)
                result = full_dump(spark, store, n, tmp, bucket)
                out["full"].append({k: v for k, v in result.items()
                                    if k in ("rows", "merge_s", "commit_s", "plain_write_s", "ratio")})
            for clustered in (True, False):
                print(f"  1,000-key batch into {rows * 10} rows ({'recent' if clustered else 'random'} ids)", flush=True)
                out["batches"].append(change_batch(spark, store, result, 1000, clustered, tmp))
            batches = int(os.environ.get("DBLOG_BENCH_MERGE_SERIES", "0"))
            if batches:
                out["series"] = []
                for driver in (True, False):
                    print(f"  {batches} batches of 1,000 random keys into {rows * 10} rows, "
                          f"{'on the driver' if driver else 'through Spark'}", flush=True)
                    out["series"].append(series(spark, store, rows * 10, batches, tmp, bucket, driver))
            return out
    finally:
        store.stop()
