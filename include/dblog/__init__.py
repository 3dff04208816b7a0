"""DBLog watermark change-data capture engine (no Airflow import anywhere in this package).

Comments cite the invariants the code keeps by number ("invariant 2"): docs/invariants.md lists
them, with the code that holds each and the tests that fail when it breaks.
"""
