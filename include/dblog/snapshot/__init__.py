"""Snapshots of source tables: a dump's spec, its watermark windows and workers, and the repairs
that re-read rows the log could not carry."""
