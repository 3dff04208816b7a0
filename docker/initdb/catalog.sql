-- Runs in the airflow-db image's first start: the Iceberg catalog's own database (docker-compose.yaml).
CREATE DATABASE dblog_catalog;
