"""bench/results/*.json -> bench/results/bench.md (the tables of docs/performance.md) and writes.png."""
from __future__ import annotations

import json
from pathlib import Path

from common import parse_key

NAMES = {"mysql": "MariaDB 10.11", "postgres": "PostgreSQL 15"}
TOOLS = {"ours": "**dblog** (dump + merge into the warehouse)", "plain": "plain `SELECT *` → Parquet",
         "spark_jdbc": "Spark JDBC (parallel) → Parquet", "dlt": "dlt `sql_database` → Parquet"}


def _n(x) -> str:
    return f"{x:,}" if isinstance(x, int) else str(x)


def _table(header: list[str], rows: list[list]) -> list[str]:
    return ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)] + \
           ["| " + " | ".join(_n(c) for c in r) + " |" for r in rows]


def capture(doc: dict) -> list[str]:
    r = doc["result"]
    return ["**1. Capture throughput** (inserts then updates, staged end to end; medians of "
            f"{next(iter(r.values()))['reps']} runs)", ""] + _table(
        ["source", "row changes", "dblog capture rows/s", "bare read loop rows/s", "ratio",
         "read loop parsing every row rows/s", "ratio to it"],
        [[NAMES[k], v["rows_changed"], v["capture_rows_per_s"], v["bare_rows_per_s"], v["ratio"],
          v.get("decode_rows_per_s", "(the bare loop parses)"), v.get("ratio_to_decode", v["ratio"])]
         for k, v in r.items()])


def shape(doc: dict) -> list[str]:
    r = doc["result"]
    first, written = next(iter(r.values())), max(v["written_tables"] for v in r.values())
    big = f"; a full dump of a {first['big_rows']:,}-row table starts a third of the way in" \
        if first.get("big_rows") else ""
    return [f"**6. A database's shape** (one source, tables of {first['rows_per_table']:,} rows; then "
            f"{first['rate']:g} single-row updates/s over up to {written} of them for {first['seconds']:g} s, "
            f"continuous merge running{big})", ""] + _table(
        ["tables", "dump of all s", "first load s (dump to every table visible)", "oldest change's wait per commit "
         "p50 / p99 s", "cycle p50 / max s", "table merges / passed over", "big table: dump s / its merges"],
        [[v["tables"], v["dump_all_s"], v["first_load_s"], f"{v['oldest_wait_s_p50']} / {v['oldest_wait_s_p99']}",
          f"{v['cycle_s_p50']} / {v['cycle_s_max']}", f"{v['table_merges']:,} / {v['passed_over']:,}",
          f"{v['big_dump_s'] or '<= ' + str(v.get('big_dump_within_s'))} / {v['big_merges_during']}"
          if v.get("big_rows") else "-"]
         for v in r.values()])


def freshness(doc: dict) -> list[str]:
    r = doc["result"]
    if "continuous" not in r:   # a result from before the continuous merge
        return []
    c = r["continuous"]
    against = f" against the scheduled one (every {r['scheduled']['every_s'] / 60:g} min, same load)" \
        if "scheduled" in r else ""
    lines = [f"**1. Freshness**: a row's commit until a reader sees it in the Iceberg table, "
             f"{c['rate']:g} row changes/s per source, a full dump of {c['big_rows']:,} rows at the start; "
             f"the continuous merge (cycles every {c['every_s']:g} s, {c['seconds'] / 60:g} min){against}", ""]
    rows = []
    for mode in ("continuous", "scheduled"):
        if mode in r:
            rows += [[f"{NAMES[k]}, {mode}", v["probe_rows"], v["snapshots"], v["freshness_s_p50"],
                      v["freshness_s_p99"], v["freshness_s_max"]] for k, v in r[mode]["sources"].items()]
    lines += _table(["source, merge", "probe rows", "snapshots", "p50 s", "p99 s", "max s"], rows)
    lines += ["", f"Continuous merge: cycle p50 {c['cycle_s_p50']} s, max {c['cycle_s_max']} s; "
              f"{c['merge_cpu_cores']} cores of CPU; resident memory (Python + JVM) {c['merge_rss_mb_first_tenth']} "
              f"MiB in the first tenth of the run, {c['merge_rss_mb_last_tenth']} MiB in the last."]
    if "scheduled" in r:
        lines += [f"Scheduled merge runs: {', '.join(map(str, r['scheduled']['merge_s']))} s."]
    return lines


def dump(doc: dict) -> list[str]:
    out = []
    for kind, r in doc["result"].items():
        out += [f"**2. Full dump of {r['rows']:,} rows, idle source: {NAMES[kind]}** (chunk {r['chunk_size']:,}; "
                f"median of {r['reps']})", ""]
        rows = []
        for tool, v in r["tools"].items():
            extra = f" (dump {v['dump_s']} s at {v['dump_rows_per_s']:,} rows/s, catch-up {v['catch_up_s']} s, " \
                    f"merge {v['merge_s']} s)" if tool == "ours" else ""
            rows.append([TOOLS[tool], f"{v['seconds']}{extra}", v["rows_per_s"], v.get("vs_plain", ""),
                         v.get("vs_spark_jdbc", ""), v["rows_differing"]])
        out += _table(["tool", "seconds", "rows/s", "vs plain", "vs Spark JDBC", "rows differing"], rows) + [""]
    return out


def writes(doc: dict) -> list[str]:
    out = []
    for kind, r in doc["result"].items():
        nd = r["no_dump"]
        out += [f"**3. The same under {r['rate']:g} row changes/s: {NAMES[kind]}** ({r['rows']:,} rows; without a "
                f"copy: write p99 {nd['write_ms_p99']} ms, capture lag max {nd['lag_s_max']} s, longest "
                f"capture pause {nd['longest_pause_s']} s)", ""]
        rows = []
        for tool, v in r["tools"].items():
            ours = tool.startswith("ours")
            name = TOOLS.get(tool) if not ours else "**dblog** dump (merged once the writes stop)" + \
                (f", parallelism {v['parallelism']}" if v.get("parallelism", 1) != 1 else "")
            rows.append([name, v["rows_per_s"], f"{v['write_ms_p99']} ({v['write_p99_vs_no_dump']}x)",
                         f"{v['lag_s_p50']} / {v['lag_s_max']}" if ours else "n/a",
                         v["longest_pause_s"] if ours else "n/a", v.get("dropped_in_windows", "n/a"),
                         v["differ"]["total"]])
        out += _table(["tool", "rows/s", "write p99 ms (vs none)", "capture lag p50 / max s", "longest capture pause s",
                       "rows dropped in windows", "rows wrong once writes stop"], rows) + [""]
    return out


BEFORE = Path(__file__).parent / "results" / "history" / "merge-2026-11-24.json"   # before position deletes


def merge(doc: dict) -> list[str]:
    runs = doc["result"] if "local" in doc["result"] else {"local": doc["result"]}
    before = json.loads(BEFORE.read_text())["result"] if BEFORE.exists() else None
    before = before.get("local", before) if before else None
    rows = []
    for where, r in runs.items():
        old = before if where == "local" and before else None
        cases = [("full dump into an empty table", f["rows"], f["merge_s"], f.get("commit_s", ""), f["plain_write_s"],
                  f["ratio"], i, "full") for i, f in enumerate(r["full"])]
        cases += [(f"{b['keys']:,} keys ({b['keys_are']}) into", b["table_rows"], b["merge_s"], b.get("commit_s", ""),
                   b["rewrite_s"], b["ratio"], i, "batches") for i, b in enumerate(r["batches"])]
        for name, n, merge_s, commit_s, plain_s, ratio, i, kind in cases:
            was = old[kind][i]["ratio"] if old and i < len(old[kind]) else "n/a"
            rows.append([f"{where}: {name}", n, merge_s, commit_s, plain_s, ratio, was])
    return ["**4. Merge scaling** (Spark local[2], warm; Iceberg tables, one commit per merge; on S3 the staged "
            "input and the table live on SeaweedFS and the baseline is the same local plain write; "
            "ratio before: `bench/results/history/merge-2026-11-24.json`, before first loads went straight into "
            "buckets and before position deletes)", ""] + _table(
        ["merge", "rows", "merge s", "commit s", "plain rewrite s", "ratio", "ratio before"], rows)


def sweep(doc: dict) -> list[str]:
    out = []
    for kind, r in doc["result"].items():
        if kind == "recommended":
            continue
        # Results before the parallelism dimension keyed chunk sizes alone ("sizes").
        grid = r.get("grid") or {f"{s}x1": v for s, v in r["sizes"].items()}
        out += [f"**5. Chunk size x parallelism sweep: {NAMES[kind]}** ({r['rows']:,} rows, {r['rate']:g} row "
                f"changes/s alongside, write p99 without a dump {r['no_dump_write_ms_p99']} ms; medians of "
                f"{r['reps']}; recommended: {r['recommended']})", ""]
        out += _table(["chunk rows", "parallelism", "dump rows/s", "write p99 ms", "vs no dump"],
                      [[*parse_key(k), v["rows_per_s"], v["write_ms_p99"], v["write_p99_vs_no_dump"]]
                       for k, v in grid.items()]) + [""]
    out += [f"Recommended for every source, and dblog's defaults (chunk size x parallelism): "
            f"**{doc['result']['recommended']}** (the smallest window within 10% of the best throughput on each "
            "source).", ""]
    return out


def plot(doc: dict, path: Path) -> None:
    """Dump rows/s and capture lag over time, a line per source and dblog run (parallelism)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(9, 6), sharex=True)
    for kind, r in doc["result"].items():
        for tool, ours in r["tools"].items():
            if not tool.startswith("ours"):
                continue
            several = sum(t.startswith("ours") for t in r["tools"]) > 1
            label = NAMES[kind] + (f", parallelism {ours.get('parallelism', 1)}" if several else "")
            t = [s["t"] for s in ours["timeline"]]
            rates = [0] + [(b["rows"] - a["rows"]) / max(b["t"] - a["t"], 1e-9)
                           for a, b in zip(ours["timeline"], ours["timeline"][1:])]
            top.plot(t, [x / 1000 for x in rates], label=label)
            bottom.plot([s["t"] for s in ours["lag_timeline"]], [s["lag_s"] for s in ours["lag_timeline"]],
                        label=label)
    top.set_ylabel("dump rows/s (thousands)")
    bottom.set_ylabel("capture lag (s)")
    bottom.set_xlabel("seconds since the writer started (the dump starts 2 s in)")
    top.set_title(f"Full dump under {next(iter(doc['result'].values()))['rate']:g} row changes/s")
    for ax in (top, bottom):
        ax.grid(alpha=0.3)
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


SECTIONS = {"capture": capture, "freshness": freshness, "dump": dump, "writes": writes, "merge": merge,
            "sweep": sweep, "shape": shape}


def write(out: Path) -> str:
    lines = []
    for name, render in SECTIONS.items():
        path = out / f"{name}.json"
        if path.exists():
            doc = json.loads(path.read_text())
            lines += render(doc) + ["", f"<sub>{name}: {doc['when']}, {doc['machine']}, {doc['minutes']} min</sub>", ""]
            if name == "writes":
                plot(doc, out / "writes.png")
                lines += ["![dump throughput and capture lag over time](writes.png)", ""]
    per_parallelism = out / "writes-parallelism.json"   # scenario 3, dblog once per parallelism
    if per_parallelism.exists():
        doc = json.loads(per_parallelism.read_text())
        lines += writes(doc) + ["", f"<sub>writes-parallelism: {doc['when']}, {doc['machine']}, "
                                    f"{doc['minutes']} min</sub>", ""]
        plot(doc, out / "writes-parallelism.png")
        lines += ["![dump throughput and capture lag per parallelism](writes-parallelism.png)", ""]
    text = "\n".join(lines)
    (out / "bench.md").write_text(text)
    return text
