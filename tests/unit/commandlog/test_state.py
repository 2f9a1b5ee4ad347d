"""The fold of the command log: deterministic, snapshot + tail = whole log, the ring always a ring."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from ftpipeline.commandlog.state import ClusterState, Command, apply, fold
from ftpipeline.lineage.stepclock import StepClock

PEERS = ["a", "b", "c", "d", "e"]


def log_of(*entries: tuple[str, dict[str, Any]]) -> list[Command]:
    return [Command(i, kind, body) for i, (kind, body) in enumerate(entries)]


def join(peer: str) -> list[tuple[str, dict[str, Any]]]:
    return [("prepare-join", {"peer": peer, "worker": peer.upper()}), ("notify-watchers", {"peer": peer}),
            ("accept-join", {"peer": peer})]


def test_the_first_peer_joins_at_once_and_the_second_pairs_with_it() -> None:
    s = fold(log_of(("prepare-join", {"peer": "a", "worker": "A"})))
    assert s.members == {"a": "A"} and not s.watches
    s = fold(log_of(("prepare-join", {"peer": "a", "worker": "A"}), *join("b")))
    assert s.watches == {"a": "b", "b": "a"}
    assert s.is_ring()


def test_a_crash_in_a_ring_of_four_is_closed_by_its_watcher() -> None:
    """Onyx example 1: A watches B watches C watches D; B dies; A now watches C."""
    s = ClusterState(members={p: p.upper() for p in "abcd"}, watches={"a": "b", "b": "c", "c": "d", "d": "a"})
    s = apply(s, Command(0, "leave", {"peer": "b", "reason": "heartbeat expired"}))
    assert s.watches == {"a": "c", "c": "d", "d": "a"}
    s = apply(s, Command(1, "leave", {"peer": "c"}))  # example 2: and C too
    assert s.watches == {"a": "d", "d": "a"}
    again = apply(s, Command(2, "leave", {"peer": "c"}))  # reported twice: nothing changes but the position
    assert again == ClusterState(**{**s.__dict__, "seq": 2})


def test_a_joiner_whose_target_dies_is_aborted_and_may_try_again() -> None:
    entries = [("prepare-join", {"peer": "a", "worker": "A"}), ("prepare-join", {"peer": "b", "worker": "B"}),
               ("leave", {"peer": "a"})]
    s = fold(log_of(*entries))
    assert "b" not in s.prepared and not s.members
    s = fold(log_of(*entries, ("prepare-join", {"peer": "b", "worker": "B"})))
    assert s.members == {"b": "B"}


def test_two_joiners_never_target_the_same_member() -> None:
    s = fold(log_of(("prepare-join", {"peer": "a", "worker": "A"}), ("prepare-join", {"peer": "b", "worker": "B"}),
                    ("prepare-join", {"peer": "c", "worker": "C"})))
    assert s.prepared == {"b": "a"}  # a is b's target; c found no candidate and was aborted


def test_steps_commits_and_rollbacks() -> None:
    s = fold(log_of(
        ("run-started", {"run_epoch": 1, "epoch": 0, "fresh": True}),
        ("step-started", {"step": 1, "offsets": {"src.0": [0, 10]}}),
        ("step-started", {"step": 2, "offsets": {"src.0": [10, 20]}}),
        ("step-committed", {"step": 1}),
        ("checkpoint-committed", {"epoch": 1, "boundary": 1}),
        ("step-committed", {"step": 2}),
        ("step-committed", {"step": 2}),                                       # a duplicate: counted
        ("step-started", {"step": 3, "offsets": {"src.0": [20, 30]}}),
        ("step-started", {"step": 3, "offsets": {"src.0": [20, 31]}}),         # other offsets: counted
    ))
    assert (s.committed, s.duplicate_commits, s.conflicting_starts) == (2, 1, 1)
    assert s.started == {2: {"src.0": (10, 20)}, 3: {"src.0": (20, 30)}}  # after the checkpoint's boundary
    assert s.frontier == {"src.0": 30}
    rolled = apply(s, Command(99, "recovery", {"epoch": 4, "lost": "w1", "strategy": "checkpoint", "boundary": 1}))
    assert (rolled.committed, rolled.epoch, rolled.recoveries) == (1, 4, 1)
    moved = apply(s, Command(99, "evacuation", {"epoch": 5, "worker": "w1"}))  # a drain's handover: no rollback
    assert (moved.committed, moved.epoch, moved.recoveries) == (2, 5, 0)
    resumed = apply(s, Command(99, "run-started", {"run_epoch": 2, "epoch": 5, "fresh": False}))
    assert (resumed.committed, resumed.run_epoch, resumed.started) == (1, 2, s.started)


def test_a_new_run_dissolves_the_ring_but_keeps_the_peers_it_took_over() -> None:
    ring = ClusterState(members={p: p.upper() for p in "abcd"}, watches={"a": "b", "b": "c", "c": "d", "d": "a"},
                        prepared={"e": "a"}, joining={"e": "E"}, run_epoch=1)
    kept = apply(ring, Command(9, "run-started", {"run_epoch": 2, "epoch": 3, "fresh": False, "kept": ["a", "c"]}))
    assert kept.members == {"a": "A", "c": "C"} and kept.watches == {"a": "c", "c": "a"} and kept.is_ring()
    assert not kept.prepared and not kept.joining and kept.run_epoch == 2
    alone = apply(ring, Command(9, "run-started", {"run_epoch": 2, "epoch": 3, "fresh": False, "kept": ["d", "x"]}))
    assert alone.members == {"d": "D"} and not alone.watches  # a peer not in the ring is not made a member
    none = apply(ring, Command(9, "run-started", {"run_epoch": 2, "epoch": 3, "fresh": False}))
    assert not none.members and not none.watches
    fresh = apply(ring, Command(9, "run-started", {"run_epoch": 2, "epoch": 3, "fresh": True, "kept": ["a"]}))
    assert not fresh.members  # a fresh run forgets everything, its workers included


# --- properties ------------------------------------------------------------------
def command() -> st.SearchStrategy[tuple[str, dict[str, Any]]]:
    peer = st.sampled_from(PEERS)
    step = st.integers(1, 6)
    return st.one_of(
        st.builds(lambda p: ("prepare-join", {"peer": p, "worker": p.upper()}), peer),
        st.builds(lambda p: ("notify-watchers", {"peer": p}), peer),
        st.builds(lambda p: ("accept-join", {"peer": p}), peer),
        st.builds(lambda p: ("abort-join", {"peer": p}), peer),
        st.builds(lambda p: ("leave", {"peer": p, "reason": "heartbeat expired"}), peer),
        st.builds(lambda n: ("step-started", {"step": n, "offsets": {"s.0": [n * 10 - 10, n * 10]}}), step),
        st.builds(lambda n: ("step-committed", {"step": n}), step),
        st.builds(lambda n: ("checkpoint-committed", {"epoch": n, "boundary": n}), step),
        st.builds(lambda n, strat: ("recovery", {"epoch": n, "strategy": strat, "boundary": n - 1}), step,
                  st.sampled_from(["lineage", "checkpoint"])),
        st.builds(lambda f: ("run-started", {"run_epoch": 1, "epoch": 1, "fresh": f}), st.booleans()),
        st.builds(lambda kept: ("run-started", {"run_epoch": 1, "epoch": 1, "fresh": False, "kept": kept}),
                  st.lists(peer, unique=True, max_size=3)),
        st.just(("suspended", {})), st.just(("resumed", {})),
        st.builds(lambda n: ("resumed", {"epoch": n, "boundary": n - 1}), step),
    )


def interleave(draw: st.DrawFn, sources: list[list[tuple[str, dict[str, Any]]]]) -> list[Command]:
    """One total order of several peers' appends (each peer's own order kept), as ZooKeeper makes."""
    queues = [list(s) for s in sources if s]
    out: list[tuple[str, dict[str, Any]]] = []
    while queues:
        i = draw(st.integers(0, len(queues) - 1))
        out.append(queues[i].pop(0))
        queues = [q for q in queues if q]
    return log_of(*out)


@st.composite
def logs(draw: st.DrawFn) -> list[Command]:
    sources = draw(st.lists(st.lists(command(), max_size=25), min_size=1, max_size=4))
    return interleave(draw, sources)


@settings(max_examples=300, deadline=None)
@given(logs(), st.data())
def test_every_peer_folds_any_interleaving_to_the_same_state(log: list[Command], data: st.DataObject) -> None:
    """Peers read the same log in different batches, some from a snapshot (JSON) and some from the start."""
    whole = fold(log)
    for _ in range(3):
        cut = data.draw(st.integers(0, len(log)))
        snapshot = ClusterState.from_json(fold(log[:cut]).to_json())
        assert fold(log[cut:], snapshot) == whole
        assert fold(log, snapshot) == whole  # commands a snapshot covers are skipped, not applied twice


@settings(max_examples=300, deadline=None)
@given(logs())
def test_the_ring_stays_a_ring_whatever_the_order(log: list[Command]) -> None:
    state = ClusterState()
    for cmd in log:
        state = apply(state, cmd)
        assert state.is_ring(), (cmd, state)
        assert set(state.prepared) <= set(state.joining) and not set(state.prepared) & set(state.members)
        boundary = (state.checkpoint or {}).get("boundary", 0)
        assert state.committed >= 0 and all(s > boundary for s in state.started)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from(PEERS), min_size=1, max_size=5, unique=True), st.permutations(PEERS))
def test_reports_of_deaths_commute(joined: list[str], order: list[str]) -> None:
    """However the reports of several deaths are ordered, the survivors end as the same ring."""
    entries: list[tuple[str, dict[str, Any]]] = [("prepare-join", {"peer": joined[0], "worker": "x"})]
    for p in joined[1:]:
        entries += join(p)
    base = fold(log_of(*entries))
    assert set(base.members) == set(joined) and base.is_ring()
    dead = [p for p in order if p in joined][: max(0, len(joined) - 1)]
    a = fold([Command(100 + i, "leave", {"peer": p}) for i, p in enumerate(dead)], base)
    b = fold([Command(100 + i, "leave", {"peer": p}) for i, p in enumerate(reversed(dead))], base)
    assert set(a.members) == set(b.members) == set(joined) - set(dead)
    assert a.is_ring() and b.is_ring()


def test_a_steps_watermark_is_part_of_its_start_and_survives_a_snapshot() -> None:
    s = fold(log_of(
        ("run-started", {"run_epoch": 1, "epoch": 0, "fresh": True}),
        ("step-started", {"step": 1, "offsets": {"src.0": [0, 10]}}),
        ("step-started", {"step": 2, "offsets": {"src.0": [10, 20]}, "watermark": 5_000}),
        ("step-started", {"step": 2, "offsets": {"src.0": [10, 20]}, "watermark": 5_000}),  # a replay: the same
        ("step-started", {"step": 3, "offsets": {"src.0": [20, 30]}, "watermark": 9_000}),
        ("step-started", {"step": 3, "offsets": {"src.0": [20, 30]}, "watermark": 9_001}),  # another: counted
        ("step-started", {"step": 4, "offsets": {"src.0": [30, 40]}, "watermark": 9_500, "before": 9_000}),
        ("checkpoint-committed", {"epoch": 1, "boundary": 2}),
    ))
    # a step recorded before there was a watermark before it judged every row by its own: it still does
    assert s.clocks == {3: StepClock(9_000, before=9_000), 4: StepClock(9_500, before=9_000)}
    assert s.conflicting_starts == 1
    assert ClusterState.from_json(s.to_json()) == s
