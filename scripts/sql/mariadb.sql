-- The capture user on MariaDB/MySQL, least privilege: read the binlog, SELECT the captured
-- database, own the watermark database. Used by scripts/services.sh and docker-compose.yaml.
-- The local password is not a word that appears in logs: Airflow masks a connection's password
-- wherever it occurs in task logs ("dblog" would be masked everywhere).
CREATE DATABASE IF NOT EXISTS shop;
CREATE DATABASE IF NOT EXISTS dblog;
CREATE USER IF NOT EXISTS 'dblog'@'127.0.0.1' IDENTIFIED BY 'dblog-local-pw';
CREATE USER IF NOT EXISTS 'dblog'@'localhost' IDENTIFIED BY 'dblog-local-pw';
CREATE USER IF NOT EXISTS 'dblog'@'%' IDENTIFIED BY 'dblog-local-pw';
ALTER USER 'dblog'@'127.0.0.1' IDENTIFIED BY 'dblog-local-pw';
ALTER USER 'dblog'@'localhost' IDENTIFIED BY 'dblog-local-pw';
ALTER USER 'dblog'@'%' IDENTIFIED BY 'dblog-local-pw';
GRANT REPLICATION SLAVE, BINLOG MONITOR, SLAVE MONITOR ON *.* TO 'dblog'@'127.0.0.1', 'dblog'@'localhost', 'dblog'@'%';
GRANT SELECT ON shop.* TO 'dblog'@'127.0.0.1', 'dblog'@'localhost', 'dblog'@'%';
GRANT ALL ON dblog.* TO 'dblog'@'127.0.0.1', 'dblog'@'localhost', 'dblog'@'%';
