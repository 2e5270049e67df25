"""PySpark jobs over the servers' event logs: ingest, load, sessions, capacity and the HTML report."""
