"""DBLog watermark change-data capture engine (no Airflow import anywhere in this package).

The packages are the pipeline's stages, each importing only those before it (the order
`tests/unit/test_layering.py` holds):

    model/         positions, change events, table schemas, the staged row format, the paper's rules
    sources/       a database's log and chunk reads, one adapter per family
    stagedlog/     the staged log's files on any storage, and what retention may remove
    coordination/  ZooKeeper: the store, the capture checkpoint, the watermark index, health
    warehouse/     Iceberg tables, their commits and maintenance
    spark/         how dblog runs Spark: the session and its Python data sources
    snapshot/      dumps: their spec, watermark windows, workers, repairs
    capture/       the capture loop: source log -> staged segments -> checkpoint
    merge/         the Spark merge of the staged log and chunks into the warehouse
    operations/    status, verify, export, the reference merge, staged-log maintenance
    cli/           the `dblog` command, one module per command group

Comments cite the invariants the code keeps by number ("invariant 2"): docs/invariants.md lists
them, with the code that holds each and the tests that fail when it breaks.
"""
