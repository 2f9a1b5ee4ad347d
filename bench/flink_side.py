"""The Apache Flink side of ``bench/vs_flink.py``: a workload as one Flink SQL job, submitted to a cluster.

Run by Flink's own Python (PyFlink, in its virtualenv: its pins differ from ours), never imported
by ours. It writes the workload's tables and INSERTs as Flink SQL with built-in functions only (no
Python UDF: every workload's logic is expressible in SQL), submits them as one statement set to
the standalone cluster behind ``--rest-port``, prints the job id and exits; the harness follows
the job over the REST API.

The SQL is the user functions of ``bench/vs_spark_workloads.py`` and ``examples/clickstream``
translated by hand, value for value: Spark's ``/`` divides as doubles (Flink's divides integers as
integers, hence the casts), ``floor`` of a double is a long, malformed JSON rows are dropped
(Flink's ``json.ignore-parse-errors`` nulls a field it cannot parse and keeps the row, so rows whose
typed fields came out null are filtered, as Spark's ``DROPMALFORMED`` and our dead letters drop them).
Flink SQL has no repartition between stateless stages: the deep chain's shuffles before ``tag``,
``engaged`` and ``shape`` do not exist on this side (its planner chains those stages, as a Flink user
gets); the keyed aggregate's is Flink's own. Per-stage parallelism is not a SQL setting either: the
job runs at ``--parallelism`` (the harness gives ``many-channels`` its widest stage's), its sinks at
``sink.parallelism`` (an append sink's: a changelog sink runs at its input's). Aggregates go to a ``debezium-json`` changelog (a filesystem sink takes updates
only in a changelog format), appends to JSON Lines: Flink's Parquet format needs Hadoop's jars.

    python flink_side.py WORKLOAD --input DIR --out DIR --rest-port P --parallelism N
        [--checkpoint-ms MS] [--sinks SINK=N ...] [--monitor]
"""

from __future__ import annotations

import argparse
import json

CLICKS = ("event_id STRING, user_id STRING, event_type STRING, page BIGINT, amount_cents BIGINT, "
          "is_bot BOOLEAN, ts_ms BIGINT")
ORDERS = "order_id STRING, user_id STRING, country STRING, amount_cents BIGINT, qty BIGINT"
TAGGED = """
  SELECT event_id, user_id, event_type, is_bot,
         CAST(FLOOR(CAST(page AS DOUBLE) / 50) AS BIGINT) AS section,
         CASE WHEN event_type = 'purchase' THEN CAST(amount_cents AS DOUBLE) / 100.0 ELSE 0.0 END AS revenue_eur,
         event_type <> 'view' AS engaged, ts_ms
  FROM clicks WHERE event_id IS NOT NULL"""
SHAPED = f"""
  SELECT event_id, user_id, event_type, section, revenue_eur,
         CAST(FLOOR(CAST(ts_ms AS DOUBLE) / 86400000) AS BIGINT) AS `day`
  FROM ({TAGGED}) WHERE engaged AND NOT is_bot AND user_id <> ''"""
ENRICHED = """
  SELECT order_id, user_id, country, amount_cents,
         CAST(amount_cents * qty AS DOUBLE) / 100.0 AS total_eur,
         CAST(amount_cents * qty AS DOUBLE) / 100.0 >= 500 AS big
  FROM orders WHERE order_id IS NOT NULL AND amount_cents IS NOT NULL AND qty IS NOT NULL"""


def source(name: str, columns: str, path: str, monitor: bool) -> str:
    watch = ", 'source.monitor-interval' = '200ms'" if monitor else ""
    return (f"CREATE TABLE {name} ({columns}) WITH ('connector' = 'filesystem', 'path' = 'file://{path}', "
            f"'format' = 'json', 'json.ignore-parse-errors' = 'true'{watch})")


def sink(name: str, columns: str, path: str, changelog: bool, parallelism: int) -> str:
    fmt = "debezium-json" if changelog else "json"
    wide = "" if changelog else f"'sink.parallelism' = '{parallelism}', "  # a changelog sink takes its input's
    return (f"CREATE TABLE {name} ({columns}) WITH ('connector' = 'filesystem', 'path' = 'file://{path}', "
            f"'format' = '{fmt}', {wide}"
            "'sink.rolling-policy.rollover-interval' = '1s', 'sink.rolling-policy.check-interval' = '200ms')")


def statements(workload: str, data: str, out: str, monitor: bool, sinks: dict[str, int]) -> tuple[list[str], list[str]]:
    """(table definitions, inserts) of ``workload``."""
    if workload in ("aggregate", "stateless", "deep-chain"):
        tables = [source("clicks", CLICKS, data, monitor)]
    else:
        tables = [source("orders", ORDERS, data, monitor)]
    if workload == "aggregate":
        tables.append(sink("output", "user_id STRING, events BIGINT, clicks BIGINT, purchases BIGINT, "
                           "revenue_cents BIGINT, first_seen_ms BIGINT, last_seen_ms BIGINT", f"{out}/output", True,
                           sinks.get("output", 2)))
        return tables, ["""INSERT INTO output
          SELECT user_id, COUNT(*), SUM(CASE WHEN event_type = 'click' THEN 1 ELSE 0 END),
                 SUM(CASE WHEN event_type = 'purchase' THEN 1 ELSE 0 END),
                 SUM(CASE WHEN event_type = 'purchase' THEN amount_cents ELSE 0 END), MIN(ts_ms), MAX(ts_ms)
          FROM clicks WHERE user_id <> '' AND NOT is_bot GROUP BY user_id"""]
    if workload == "stateless":
        tables.append(sink("output", "event_id STRING, user_id STRING, event_type STRING, section BIGINT, "
                           "revenue_eur DOUBLE, `day` BIGINT", f"{out}/output", False, sinks.get("output", 2)))
        return tables, [f"INSERT INTO output {SHAPED}"]
    if workload == "deep-chain":
        tables.append(sink("output", "user_id STRING, events BIGINT, eur DOUBLE", f"{out}/output", True,
                           sinks.get("output", 2)))
        return tables, [f"INSERT INTO output SELECT user_id, COUNT(*), SUM(revenue_eur) FROM ({SHAPED}) GROUP BY user_id"]
    assert workload in ("six-stage", "many-channels"), workload
    tables += [sink("totals", "country STRING, user_id STRING, orders BIGINT, eur DOUBLE, largest_cents BIGINT",
                    f"{out}/totals", True, sinks.get("totals", 2)),
               sink("big", "order_id STRING, user_id STRING, country STRING, total_eur DOUBLE", f"{out}/big", False,
                    sinks.get("big", 2))]
    return tables, [
        f"INSERT INTO totals SELECT country, user_id, COUNT(*), SUM(total_eur), MAX(amount_cents) FROM ({ENRICHED}) "
        "GROUP BY country, user_id",
        f"INSERT INTO big SELECT order_id, user_id, country, total_eur FROM ({ENRICHED}) WHERE big"]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("workload")
    parser.add_argument("--input", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--rest-port", type=int, required=True)
    parser.add_argument("--parallelism", type=int, default=2)
    parser.add_argument("--checkpoint-ms", type=int, default=1000)
    parser.add_argument("--sinks", nargs="*", default=[], help="SINK=N: a sink's parallelism")
    parser.add_argument("--monitor", action="store_true", help="keep watching the input directory")
    args = parser.parse_args()

    from pyflink.common import Configuration
    from pyflink.table import EnvironmentSettings, TableEnvironment

    conf = Configuration()
    # the client applies its own checkpoint settings, not the cluster's config.yaml: set them here
    for key, value in {"execution.target": "remote", "rest.address": "localhost", "rest.port": str(args.rest_port),
                       "parallelism.default": str(args.parallelism),
                       "execution.checkpointing.interval": f"{args.checkpoint_ms}ms",
                       "execution.checkpointing.mode": "EXACTLY_ONCE",
                       "pipeline.name": f"vs-flink-{args.workload}"}.items():
        conf.set_string(key, value)
    env = TableEnvironment.create(EnvironmentSettings.new_instance().in_streaming_mode().with_configuration(conf).build())
    sinks = {k: int(v) for k, v in (s.split("=", 1) for s in args.sinks)}
    tables, inserts = statements(args.workload, args.input, args.out, args.monitor, sinks)
    for ddl in tables:
        env.execute_sql(ddl)
    batch = env.create_statement_set()
    for insert in inserts:
        batch.add_insert_sql(insert)
    job = batch.execute().get_job_client()
    print(json.dumps({"job": str(job.get_job_id())}), flush=True)


if __name__ == "__main__":
    main()
