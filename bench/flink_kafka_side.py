"""The Apache Flink side of ``bench/latency.py``: the Kafka clickstream as one Flink SQL job, submitted to a cluster.

Run by Flink's own Python (PyFlink, in its virtualenv), never imported by ours. The job is
``examples/kafka-clickstream`` in Flink SQL with built-in functions only: the topic's JSON values
with the pipeline's schema (a record that does not parse is dropped: ``json.ignore-parse-errors``
keeps it with null fields, so rows whose ``event_id`` came out null are filtered), ``clean_events``
translated value for value (Spark's ``(event_type = 'click').cast('long')`` is null for a null
type, hence the CASE), then either straight to the output topic (``stateless``) or the running
per-user totals (``aggregate``) to an ``upsert-kafka`` topic keyed by user. Output is written
``exactly-once`` (Kafka transactions committed when a checkpoint completes: visible to a
``read_committed`` consumer only then) or ``at-least-once`` (visible as soon as it is produced).

    python flink_kafka_side.py {stateless,aggregate} --bootstrap HOST:PORT --topic-in T --topic-out T
        --rest-port P [--parallelism 2] [--checkpoint-ms 200] [--delivery exactly-once|at-least-once]
"""

from __future__ import annotations

import argparse
import json

CLICKS = "event_id STRING, user_id STRING, event_type STRING, amount_cents BIGINT, is_bot BOOLEAN, ts_ms BIGINT"
CLEAN = """
  SELECT event_id, user_id, event_type, amount_cents, is_bot, ts_ms,
         CASE WHEN event_type IS NULL THEN CAST(NULL AS BIGINT) WHEN event_type = 'click' THEN 1 ELSE 0 END AS is_click,
         CASE WHEN event_type IS NULL THEN CAST(NULL AS BIGINT) WHEN event_type = 'purchase' THEN 1 ELSE 0 END
           AS is_purchase,
         CASE WHEN event_type = 'purchase' THEN amount_cents ELSE 0 END AS revenue_cents
  FROM clicks
  WHERE event_id IS NOT NULL AND user_id IS NOT NULL AND user_id <> '' AND NOT COALESCE(is_bot, FALSE)"""


def statements(shape: str, bootstrap: str, topic_in: str, topic_out: str, delivery: str) -> list[str]:
    common = f"'properties.bootstrap.servers' = '{bootstrap}'"
    eos = (f", 'sink.delivery-guarantee' = '{delivery}', 'sink.transactional-id-prefix' = 'lat-{topic_out}', "
           "'properties.transaction.timeout.ms' = '60000'" if delivery == "exactly-once" else
           f", 'sink.delivery-guarantee' = '{delivery}'")
    source = (f"CREATE TABLE clicks ({CLICKS}) WITH ('connector' = 'kafka', 'topic' = '{topic_in}', {common}, "
              f"'properties.group.id' = 'lat-{topic_in}', 'scan.startup.mode' = 'earliest-offset', "
              "'properties.isolation.level' = 'read_committed', 'format' = 'json', 'json.ignore-parse-errors' = 'true')")
    if shape == "stateless":
        sink = ("CREATE TABLE output (event_id STRING, user_id STRING, event_type STRING, amount_cents BIGINT, "
                "is_bot BOOLEAN, ts_ms BIGINT, is_click BIGINT, is_purchase BIGINT, revenue_cents BIGINT) WITH ("
                f"'connector' = 'kafka', 'topic' = '{topic_out}', {common}, 'key.format' = 'raw', "
                f"'key.fields' = 'user_id', 'value.format' = 'json'{eos})")
        return [source, sink, f"INSERT INTO output {CLEAN}"]
    assert shape == "aggregate", shape
    sink = ("CREATE TABLE output (user_id STRING, events BIGINT, clicks BIGINT, purchases BIGINT, revenue_cents BIGINT, "
            "last_seen_ms BIGINT, PRIMARY KEY (user_id) NOT ENFORCED) WITH ("
            f"'connector' = 'upsert-kafka', 'topic' = '{topic_out}', {common}, 'key.format' = 'raw', "
            f"'value.format' = 'json'{eos})")
    return [source, sink, "INSERT INTO output SELECT user_id, COUNT(*), SUM(is_click), SUM(is_purchase), "
                          f"SUM(revenue_cents), MAX(ts_ms) FROM ({CLEAN}) GROUP BY user_id"]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("shape", choices=["stateless", "aggregate"])
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--topic-in", required=True)
    parser.add_argument("--topic-out", required=True)
    parser.add_argument("--rest-port", type=int, required=True)
    parser.add_argument("--parallelism", type=int, default=2)
    parser.add_argument("--checkpoint-ms", type=int, default=200)
    parser.add_argument("--delivery", choices=["exactly-once", "at-least-once"], default="exactly-once")
    args = parser.parse_args()

    from pyflink.common import Configuration
    from pyflink.table import EnvironmentSettings, TableEnvironment

    conf = Configuration()
    for key, value in {"execution.target": "remote", "rest.address": "localhost", "rest.port": str(args.rest_port),
                       "parallelism.default": str(args.parallelism),
                       "execution.checkpointing.interval": f"{args.checkpoint_ms}ms",
                       "execution.checkpointing.mode": "EXACTLY_ONCE" if args.delivery == "exactly-once"
                       else "AT_LEAST_ONCE",
                       "pipeline.name": f"latency-{args.shape}-{args.delivery}"}.items():
        conf.set_string(key, value)
    env = TableEnvironment.create(EnvironmentSettings.new_instance().in_streaming_mode().with_configuration(conf).build())
    *tables, insert = statements(args.shape, args.bootstrap, args.topic_in, args.topic_out, args.delivery)
    for ddl in tables:
        env.execute_sql(ddl)
    job = env.execute_sql(insert).get_job_client()
    assert job is not None
    print(json.dumps({"job": str(job.get_job_id())}), flush=True)


if __name__ == "__main__":
    main()
