"""The driver's merges (`local_delta`) put a key in the bucket Spark's merge would: bounds stored as
Spark's string form, parsed back per key type, give the bucket `bucket_merge.bucket_of` gives."""
from __future__ import annotations

import datetime as dt
import random
from decimal import Decimal

import pytest

from dblog.merge import bucket_merge as M
from dblog.merge.bucket_bounds import BucketBounds
from dblog.warehouse.merged_state import Bucket, TableState

rnd = random.Random(11)
WORDS = ["", "a", "ab", "b", "z", "Z", "é", "ée", "中", "中文", "😀", "a b", "a\u0000"]
VALUES = {   # a Spark type -> keys of it
    "int": [rnd.randint(-2**31, 2**31 - 1) for _ in range(60)] + [-1, 0, 1],
    "bigint": [rnd.randint(-2**63, 2**63 - 1) for _ in range(60)],
    "string": WORDS + ["".join(rnd.choice("aZé中😀 ") for _ in range(rnd.randint(0, 4))) for _ in range(60)],
    "binary": [bytes(rnd.randrange(256) for _ in range(rnd.randint(0, 3))) for _ in range(60)],
    "date": [dt.date(1970, 1, 1) + dt.timedelta(days=rnd.randint(-40_000, 40_000)) for _ in range(60)],
    "decimal(10,2)": [Decimal(rnd.randint(-10**9, 10**9)) / 100 for _ in range(60)],
}


@pytest.mark.parametrize("types", [["int"], ["bigint"], ["string"], ["binary"], ["date"], ["decimal(10,2)"],
                                   ["string", "int"], ["date", "bigint"]], ids=lambda t: "+".join(t))
def test_the_driver_puts_a_key_in_the_bucket_sparks_merge_puts_it(spark, types):
    key = [f"k{i}" for i in range(len(types))]
    rows = list({tuple(rnd.choice(VALUES[t]) for t in types) for _ in range(80)})
    df = spark.createDataFrame(rows, ", ".join(f"{k} {t}" for k, t in zip(key, types)))
    kinds = dict(zip(key, types))
    # Bounds as a merge stores them: Spark's string form of sampled keys, in Spark's key order.
    sample = df.orderBy(*key).select(*M.key_strings(key, kinds)).collect()
    lows = [list(r) for r in sample[3::9]]
    bounds: list[list[str] | None] = [None, *lows]
    state = TableState("s", "t", key, list(kinds.items()), [Bucket(i, lo) for i, lo in enumerate(bounds)])
    found = BucketBounds.of(state)
    assert found is not None
    got = df.withColumn("_b", M.bucket_of(key, kinds, bounds)).collect()
    assert len(got) == len(rows)
    for r in got:
        assert found.bucket(tuple(r[k] for k in key)) == r["_b"], r


def test_a_key_of_a_type_without_a_python_order_here_leaves_its_merges_to_spark():
    for kind in ("timestamp", "double", "float", "boolean"):
        state = TableState("s", "t", ["k"], [("k", kind)], [Bucket(0, None)])
        assert BucketBounds.of(state) is None, kind
