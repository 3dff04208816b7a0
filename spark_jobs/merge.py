"""spark-submit entry point: merge staged changes and dump chunks into the warehouse.

    spark-submit --master local[2] spark_jobs/merge.py --source dblog_mariadb [--table shop.accounts]

Arguments are `dblog merge`'s; the session takes spark-submit's master and settings.
The work itself is `dblog.spark.job.merge_table` (DataFrame functions in `dblog.spark.merge`).
"""
import sys

from dblog.cli import main

if __name__ == "__main__":
    sys.exit(main(["merge", *sys.argv[1:]]))
