"""Metric names: one dotted part per subject, whatever characters a table name holds."""
from __future__ import annotations

from dblog_airflow.metrics import name


def test_a_metric_name_keeps_its_own_dots_and_reduces_each_subject_to_one_safe_part():
    assert name("capture.lag_seconds", "dblog_mariadb") == "dblog.capture.lag_seconds.dblog_mariadb"
    assert name("dump.rows", "src", "shop.order lines/x") == "dblog.dump.rows.src.shop_order_lines_x"
    assert name("dump.rows", "src", "...") == "dblog.dump.rows.src._"
