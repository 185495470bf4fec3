DROP TABLE IF EXISTS cellgate_console_sessions;
