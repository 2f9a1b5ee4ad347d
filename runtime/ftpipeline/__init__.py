"""ftpipeline: fault-tolerant PySpark pipelines."""
