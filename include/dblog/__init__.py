"""DBLog watermark change-data capture engine (no Airflow import anywhere in this package)."""
