-- The capture role on PostgreSQL (run in the captured database), least privilege: REPLICATION,
-- SELECT on the captured schema, its own watermark schema, one publication.
-- Used by scripts/services.sh and docker-compose.yaml, which set the psql variable dblog_password
-- first (the password lives in no file here).
SET client_min_messages = warning;
DO $$ BEGIN
  IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'dblog') THEN
    CREATE ROLE dblog LOGIN REPLICATION;
  END IF;
END $$;
ALTER ROLE dblog PASSWORD :'dblog_password';
CREATE SCHEMA IF NOT EXISTS dblog AUTHORIZATION dblog;
GRANT USAGE ON SCHEMA public TO dblog;
ALTER DEFAULT PRIVILEGES IN SCHEMA public GRANT SELECT ON TABLES TO dblog;
GRANT SELECT ON ALL TABLES IN SCHEMA public TO dblog;
-- FOR ALL TABLES only because the tests create a schema per test under this one publication; a
-- real set-up publishes the captured schema and dblog.watermarks only (`dblog setup --print-sql`).
DO $$ BEGIN
  IF NOT EXISTS (SELECT 1 FROM pg_publication WHERE pubname = 'dblog') THEN
    CREATE PUBLICATION dblog FOR ALL TABLES;
  END IF;
END $$;
