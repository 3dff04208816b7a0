-- The capture user on MariaDB/MySQL, least privilege: read the binlog, SELECT the captured
-- database, own the watermark database. Used by scripts/services.sh and docker-compose.yaml,
-- which set @dblog_password first in the same session (the password lives in no file here).
CREATE DATABASE IF NOT EXISTS shop;
CREATE DATABASE IF NOT EXISTS dblog;
EXECUTE IMMEDIATE CONCAT('CREATE USER IF NOT EXISTS ''dblog''@''127.0.0.1'' IDENTIFIED BY ', QUOTE(@dblog_password));
EXECUTE IMMEDIATE CONCAT('CREATE USER IF NOT EXISTS ''dblog''@''localhost'' IDENTIFIED BY ', QUOTE(@dblog_password));
EXECUTE IMMEDIATE CONCAT('CREATE USER IF NOT EXISTS ''dblog''@''%'' IDENTIFIED BY ', QUOTE(@dblog_password));
EXECUTE IMMEDIATE CONCAT('ALTER USER ''dblog''@''127.0.0.1'' IDENTIFIED BY ', QUOTE(@dblog_password));
EXECUTE IMMEDIATE CONCAT('ALTER USER ''dblog''@''localhost'' IDENTIFIED BY ', QUOTE(@dblog_password));
EXECUTE IMMEDIATE CONCAT('ALTER USER ''dblog''@''%'' IDENTIFIED BY ', QUOTE(@dblog_password));
GRANT REPLICATION SLAVE, BINLOG MONITOR, SLAVE MONITOR ON *.* TO 'dblog'@'127.0.0.1', 'dblog'@'localhost', 'dblog'@'%';
GRANT SELECT ON shop.* TO 'dblog'@'127.0.0.1', 'dblog'@'localhost', 'dblog'@'%';
GRANT ALL ON dblog.* TO 'dblog'@'127.0.0.1', 'dblog'@'localhost', 'dblog'@'%';
