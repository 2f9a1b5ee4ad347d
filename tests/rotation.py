"""Which of the long tests a run of the whole suite executes.

Why: every pipeline test starts real JVMs, Redis, ZooKeeper (and Kafka) and
compares with an oracle, about two minutes each on two cores; all of them
take over two hours, past CI's limit. So the long tests are sorted here:

- not named: run every time (one test of every mechanism: a kill, a
  rollback, a coordinator crash, an outage, each sink);
- ``A``, ``B`` or ``C``: one part per run, the others skipped saying so. The
  part is ``FTPIPELINE_TEST_ROTATION`` modulo 3 (default: the day's number,
  so three days in a row run all three); the header of a run prints it, and
  a run with the same value runs the same tests;
- ``full``: further cases (more seeds, more moments of a kill, longer runs),
  run with ``FTPIPELINE_TEST_FULL=1`` only, as are all three parts.

A node id matches an entry that it starts with.
"""

from __future__ import annotations

import os
import time

FULL = os.environ.get("FTPIPELINE_TEST_FULL") == "1"
ROTATION = int(os.environ.get("FTPIPELINE_TEST_ROTATION") or int(time.time() // 86400))
PARTS = "ABC"
PART = PARTS[ROTATION % len(PARTS)]

CHAOS = "tests/chaos/test_chaos.py::test_a_fault_schedule_ends_equal_to_the_oracle"
CKPT = "tests/integration/coordinator/test_checkpoints.py::"
LOG = "tests/integration/coordinator/test_command_log.py::"
RECOVERY = "tests/integration/coordinator/test_recovery.py::"
DELTA = "tests/integration/test_delta_pipeline.py::"
KAFKA = "tests/integration/test_kafka_pipeline.py::"
BOUNDED = "tests/integration/coordinator/test_bounded.py::"
OUTAGES = "tests/integration/coordinator/test_outages.py::"
CLI = "tests/integration/test_cli.py::"
SESSIONS = "tests/integration/eventtime/test_sessions.py::"
JOINS = "tests/integration/eventtime/test_joins.py::"
PROCESS = "tests/integration/eventtime/test_process.py::"
CHAINS = "tests/integration/eventtime/test_chains.py::"

GROUPS: dict[str, str] = {
    # several nodes: a node stopped every time; a node drained, Redis's node lost, and the one-node eviction
    # (which the drain covers, budget included), each in one part
    "tests/e2e/test_nodes.py::test_the_node_holding_redis_stopped": "B",
    "tests/e2e/test_nodes.py::test_a_drained_node_hands_its_workers_channels_over": "A",
    "tests/e2e/test_operator.py::test_an_evicted_worker_hands_its_channels_over": "B",
    # the chart's life: an upgrade from a checkpoint (and a broken one rolled back), and finished pipelines kept
    # across an operator restart and a helm upgrade, each in one part (the helm install and uninstall every time)
    "tests/e2e/test_upgrades.py::test_a_changed_spec_is_upgraded_from_a_checkpoint": "C",
    "tests/e2e/test_lifecycle.py::test_finished_pipelines_stay_finished": "A",
    # a ZooKeeper follower's node alone (the node stopped with workers takes a follower too where it can)
    "tests/e2e/test_nodes.py::test_a_zookeeper_members_node_stopped": "C",
    # a ZooKeeper ensemble's member killed mid-run: a follower (no pause) every time, the leader in one part
    "tests/integration/embedded/test_zookeeper_ensemble.py::test_a_member_lost_mid_run_neither_stops_the_run_nor_loses_a_worker[leader]": "C",
    # chaos: schedule 1 every time; 2 and 3 hold every other fault kind, 6 the loss of every worker
    f"{CHAOS}[2-": "A", f"{CHAOS}[3-": "B", f"{CHAOS}[6-": "C", f"{CHAOS}[4-": "full", f"{CHAOS}[5-": "full",
    # checkpoints: pipelined-checkpoint-during-checkpoint every time
    f"{CKPT}test_every_committed_checkpoint_is_a_consistent_cut": "A",
    f"{CKPT}test_a_killed_worker_with_checkpoints[pipelined-auto-random]": "B",
    f"{CKPT}test_a_zookeeper_session_expiry_during_a_checkpoint_leaves_no_half_commit": "C",
    # re-partitioned state, a kind in each part: an aggregate grown (A) or shrunk (B); windows, a join and a keyed
    # function (C); sessions (B)
    "tests/integration/checkpoint/test_rescale.py::test_an_aggregate_resumed_on_another_parallelism_keeps_every_keys_state[grow]": "A",
    "tests/integration/checkpoint/test_rescale.py::test_an_aggregate_resumed_on_another_parallelism_keeps_every_keys_state[shrink]": "B",
    "tests/integration/eventtime/test_windows.py::test_a_windowed_stage_rescaled_from_a_checkpoint": "C",
    f"{CKPT}test_a_killed_worker_with_checkpoints[lockstep-auto-during-checkpoint]": "full",
    f"{CKPT}test_a_killed_worker_with_checkpoints[lockstep-lineage-random]": "full",
    f"{CKPT}test_buffered_bytes_stay_bounded_over_200_steps": "full",
    # the command log: a coordinator killed mid-recovery every time
    f"{LOG}test_a_stopped_worker_is_found_by_its_heartbeat_and_recovered[w1]": "A",
    f"{LOG}test_a_killed_coordinator_resumes_from_the_log[mid-step-private]": "B",
    f"{LOG}test_a_zombie_worker_that_wakes_up_after_its_epoch_is_refused": "C",
    f"{LOG}test_a_stopped_worker_is_found_by_its_heartbeat_and_recovered[w2]": "full",
    f"{LOG}test_a_killed_coordinator_resumes_from_the_log[mid-step]": "full",
    f"{LOG}test_the_log_stays_bounded_over_500_steps": "full",
    # recovery: the example with a killed worker every time
    f"{RECOVERY}test_a_kill_in_the_middle_of_a_chain_reruns_the_chain_whole": "A",
    f"{RECOVERY}test_recovery_replays_only_the_lost_work": "B",
    f"{RECOVERY}test_example_survives_a_killed_worker[0]": "full",
    f"{BOUNDED}test_five_hundred_steps_with_default_settings_stay_flat": "A",
    f"{BOUNDED}test_five_hundred_windowed_steps_keep_state_and_checkpoints_flat": "C",
    f"{BOUNDED}test_five_hundred_steps_of_a_join_and_a_keyed_function_keep_state_flat": "B",
    "tests/integration/eventtime/test_windows.py::test_kafka_views_to_delta_windows": "B",
    "tests/integration/eventtime/test_windows.py::test_a_coordinator_crashed_while_windows": "A",
    # event-time chains: a window of windows every time (the order of early and late rows); the other chains,
    # and an input channel with no input, in one part each
    f"{CHAINS}test_a_join_of_two_windows_pairs_every_minute": "A",
    f"{CHAINS}test_windows_of_sessions_count_every_session": "B",
    f"{CHAINS}test_windows_of_a_keyed_functions_timers_count_every_firing": "C",
    f"{CHAINS}test_windows_of_a_left_join_count_every_impression": "C",
    f"{CHAINS}test_windows_of_deduplicated_views": "A",
    "tests/integration/eventtime/test_inputs.py::test_a_source_channel_with_no_input": "B",
    # sessions: a kill while sessions are open every time
    f"{SESSIONS}test_sessions_equal_the_oracle_through_a_killed_worker[update-lineage-closing]": "A",
    f"{SESSIONS}test_sessions_rescaled_from_a_checkpoint": "B",
    f"{SESSIONS}test_sessions_equal_the_oracle_through_a_killed_worker[append-lineage-before-checkpoint]": "C",
    f"{SESSIONS}test_a_coordinator_crashed_while_sessions": "C",
    # joins: a left join's kill while rows are buffered every time
    f"{JOINS}test_a_join_equals_the_oracle_through_a_killed_worker[full-checkpoint-ending]": "A",
    f"{JOINS}test_a_coordinator_crashed_while_rows_are_buffered": "A",
    f"{JOINS}test_a_join_equals_the_oracle_through_a_killed_worker[inner-lineage-before-checkpoint]": "B",
    f"{JOINS}test_a_join_equals_the_oracle_through_a_killed_worker[right-checkpoint-buffering]": "C",
    f"{JOINS}test_a_join_rescaled_from_a_checkpoint": "C",
    f"{JOINS}test_the_ad_clicks_example": "B",
    # lookups: a left lookup of a changing Delta table every time
    "tests/integration/dataflow/test_lookup.py::test_a_delta_table_changing_mid_run_is_joined_at_each_steps_version[inner]": "B",
    "tests/integration/dataflow/test_lookup.py::test_a_parquet_table_that_changes_under_the_run": "C",
    "tests/integration/dataflow/test_lookup.py::test_a_compacted_kafka_topic_changing_mid_run": "A",
    # keyed functions: a kill mid-run every time
    f"{PROCESS}test_a_keyed_function_equals_the_oracle_through_a_killed_worker[checkpoint-last-input]": "A",
    f"{PROCESS}test_a_keyed_function_equals_the_oracle_through_a_killed_worker[lineage-before-checkpoint]": "B",
    f"{PROCESS}test_a_coordinator_crashed_with_timers_pending": "B",
    f"{PROCESS}test_a_keyed_function_rescaled_from_a_checkpoint": "C",
    f"{PROCESS}test_the_fraud_alerts_example": "C",
    f"{BOUNDED}test_a_kill_with_default_settings": "C",
    f"{OUTAGES}test_a_redis_that_comes_back_empty": "A",
    f"{OUTAGES}test_unwritable_checkpoint_storage": "B",
    "tests/integration/state/test_ttl.py::test_a_ttl_aggregate_equals_the_oracle_through_a_killed_worker[memory": "B",
    f"{CLI}test_existing_output_is_not_overwritten_silently": "A",
    "tests/integration/worker/test_jvmarchive.py::": "A",  # a JVM's start and its dump (~40 s)
    f"{CLI}test_a_recovery_replays_no_dead_letter_twice": "B",
    # Delta and Kafka: a killed worker every time
    f"{DELTA}test_kafka_to_delta_equals_the_oracle_whatever_is_killed[in-commit]": "A",
    f"{DELTA}test_kafka_to_delta_equals_the_oracle_whatever_is_killed[timed]": "B",
    f"{DELTA}test_a_step_whose_schema_the_table_refuses": "C",
    f"{DELTA}test_with_merge_schema": "C",
    f"{DELTA}test_kafka_to_delta_equals_the_oracle_whatever_is_killed[rollback]": "full",
    f"{DELTA}test_a_coordinator_that_crashes_resumes": "full",
    f"{KAFKA}test_partitions_added_while_it_runs": "A",
    f"{KAFKA}test_kafka_to_kafka_equals_the_oracle_whatever_is_killed[in-commit]": "B",
    f"{KAFKA}test_kafka_to_kafka_equals_the_oracle_whatever_is_killed[zombie]": "C",
    f"{KAFKA}test_a_coordinator_that_crashes_resumes": "C",
    f"{KAFKA}test_a_broker_killed_and_restarted_mid_run": "C",
    f"{KAFKA}test_kafka_to_kafka_equals_the_oracle_whatever_is_killed[clean]": "full",
    f"{KAFKA}test_kafka_to_kafka_equals_the_oracle_whatever_is_killed[rollback]": "full",
    f"{KAFKA}test_kafka_to_kafka_equals_the_oracle_whatever_is_killed[timed]": "full",
}


def group(nodeid: str) -> str | None:
    for prefix, name in GROUPS.items():
        if nodeid.startswith(prefix):
            return name
    return None


def skipped_because(nodeid: str) -> str | None:
    """Why this run skips the test, or None when it runs it."""
    name = group(nodeid)
    if FULL or name is None or name == PART:
        return None
    if name == "full":
        return "a further case: runs with FTPIPELINE_TEST_FULL=1 (tests/rotation.py)"
    return (f"part {name} of the long tests: this run is part {PART} (FTPIPELINE_TEST_ROTATION={ROTATION}); "
            f"FTPIPELINE_TEST_FULL=1 runs all (tests/rotation.py)")
