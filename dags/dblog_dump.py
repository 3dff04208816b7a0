"""
### dblog_dump: watermark chunk dump of one source's tables, then a Spark merge

Trigger it from the UI (**Trigger DAG** shows the form) or the REST API with a conf:

| param | meaning |
|---|---|
| `source` | connection id of the source database |
| `tables` | tables to dump, `table` or `schema.table`, one per line; empty = every table |
| `exclude` | with every table: tables to leave out, one per line |
| `keys` | primary keys to re-read (a repair), with exactly one table: `[1, 2]` or `[[1, "a"]]` (in the form: one per line) |
| `chunk_size` | rows per chunk, 1 to `DBLOG_MAX_CHUNK_SIZE` (one short SELECT between a low and a high watermark) |
| `parallelism` | key ranges of `chunk_size` rows a window reads at once, each on its own connection, 1 to `DBLOG_MAX_PARALLELISM` |
| `delay_seconds` | pause between chunks, 0 to `DBLOG_MAX_DELAY_SECONDS`, to spare a busy source |
| `dump_id` | optional name (letters, digits, `._-`); to pause/resume/cancel it use **dblog_dump_control** |

The capture (**dblog_capture**) must be running: the dump's chunks are reconciled against the
change stream. A conf key that is not a param above (a misspelling), a value out of range, an
unknown table, a table outside the captured database/schema, a named table without a primary key
or malformed keys fail the `start` task at once, saying what to fix, and nothing is written. A dump
of every table skips the tables it cannot dump (no primary key) and logs each with the reason
(WARNING; XCom `dump` lists them under `skipped`). The dump id is in the `start` task's log and XCom
`dump`. One task per table runs in the `dblog_dump_<source>` pool; then the run waits (deferred)
for the capture to pass the dump and merges it into the warehouse, reporting the dump's own
chunks, rows and rows dropped in windows. Where **dblog_merge_continuous** runs, the merge task
leaves the chunks to it and waits (deferred) until it has merged them, starting no Spark job.
"""
from __future__ import annotations

from datetime import timedelta

from airflow.sdk import DAG

from dblog.connections import source_ids
from dblog.settings import settings
from dblog_airflow.groups import dump_source
from dblog_airflow.operators.merge import MergeOperator
from dblog_airflow.params import (
    chunk_size_param,
    delay_param,
    dump_id_param,
    exclude_param,
    keys_param,
    parallelism_param,
    source_param,
    tables_param,
)

SOURCES = source_ids()

with DAG(
    dag_id="dblog_dump",
    doc_md=__doc__,
    description="Dump tables (or a key list) of one source in watermark chunks under live writes, then merge",
    schedule=None,
    tags=["dblog", "dump"],
    max_active_runs=4,
    render_template_as_native_obj=True,
    default_args={"retries": 2, "retry_delay": timedelta(seconds=settings().dump.retry_delay_seconds)},
    params={
        "source": source_param(SOURCES),
        "tables": tables_param(),
        "exclude": exclude_param(),
        "keys": keys_param(),
        "chunk_size": chunk_size_param(),
        "parallelism": parallelism_param(),
        "delay_seconds": delay_param(),
        "dump_id": dump_id_param(),
    },
) as dag:
    groups = [dump_source(s, selected_source="{{ params.source }}", tables="{{ params.tables }}",
                          keys="{{ params['keys'] }}", chunk_size="{{ params.chunk_size }}",
                          delay_seconds="{{ params.delay_seconds }}", dump_id="{{ params.dump_id }}",
                          exclude="{{ params.exclude }}", parallelism="{{ params.parallelism }}")
              for s in SOURCES]
    groups >> MergeOperator(task_id="merge", sources="{{ params.source }}", tables="{{ params.tables }}",
                            trigger_rule="none_failed_min_one_success")
