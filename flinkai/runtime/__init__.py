"""Flink glue: jars, SQL script parsing, TableEnvironment set-up and the script runner."""
