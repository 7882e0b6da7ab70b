"""The cluster as one node sees it (app/cluster/view.py): liveness by revisions seen on this
node's clock, the balanced rendezvous assignment, who takes an ownerless partition and
when, hand-overs and standbys. Time is passed in: no sleeping."""

from __future__ import annotations

from collections import Counter
from typing import Any

from app.cluster.view import HANDOVER_BEHIND, HANDOVER_LEASES, View, assignment, decode, order

LEASE_S = 4.0
P = 6


def nodes(*names: str, revision: int = 1) -> dict[str, tuple[int, dict[str, Any]]]:
    return {n: (revision, {"advertise": f"{n}:1"}) for n in names}


def owned(revision: int = 1, **by: int) -> dict[int, tuple[int, dict[str, Any]]]:
    """``owned(node1=2)``: partition 2 owned by node1."""
    return {k: (revision, {"node": n, "advertise": f"{n}:1", "epoch": 1}) for n, k in by.items()}


def test_the_assignment_is_balanced_and_the_same_from_every_node() -> None:
    for live in (["a", "b", "c"], ["a", "b"], ["n1", "n2", "n3", "n4"], ["x"]):
        firsts = [ranked[0] for ranked in assignment(live, P)]
        loads = Counter(firsts)
        assert set(loads) == set(live)
        assert max(loads.values()) - min(loads.values()) <= 1, loads
        # any node's list (the same nodes in another order) gives the same answer
        assert assignment(list(reversed(live)), P) == assignment(sorted(live), P)
    assert all(len(r) == 3 and len(set(r)) == 3 for r in assignment(["a", "b", "c"], P))


def test_a_node_whose_heartbeat_stops_changing_is_gone_after_a_lease() -> None:
    view = View("a", LEASE_S, P)
    view.saw(nodes("a", "b"), {}, now=100.0)
    assert view.live(100.0) == ["a", "b"]
    view.saw(nodes("a", "b"), {}, now=103.9)  # the same revision: no renewal seen
    assert view.live(103.9) == ["a", "b"]
    assert view.live(104.0) == ["a"]
    view.saw(nodes("a", "b", revision=2), {}, now=104.5)  # renewed: alive again
    assert view.live(104.5) == ["a", "b"]
    view.saw(nodes("a"), {}, now=105.0)  # deleted (it left)
    assert view.live(105.0) == ["a"]


def test_an_owner_lease_not_renewed_for_a_lease_is_over() -> None:
    view = View("a", LEASE_S, P)
    view.saw(nodes("a", "b"), owned(b=3), now=10.0)
    assert view.owner_node(3, 13.0) == "b"
    assert view.advertise(3, 13.0) == "b:1"
    assert view.owner_node(3, 14.0) is None
    assert view.advertise(3, 14.0) is None


def test_an_ownerless_partition_is_taken_by_its_first_node_at_once_by_the_next_after_a_lease() -> (
    None
):
    live = ["a", "b", "c"]
    k = 0
    first, second, third = assignment(live, P)[k]
    views = {n: View(n, LEASE_S, P) for n in live}
    for view in views.values():
        view.saw(nodes(*live), {}, now=0.0)
    settle = LEASE_S / 4  # a joining node first waits to hear of the others
    assert not views[first].should_take(k, 0.0)
    assert views[first].should_take(k, settle)
    assert not views[second].should_take(k, settle)
    for view in views.values():  # heartbeats renewed
        view.saw(nodes(*live, revision=2), {}, now=LEASE_S - 0.5)
    assert views[second].should_take(k, LEASE_S)
    assert not views[third].should_take(k, LEASE_S)
    for view in views.values():
        view.saw(nodes(*live, revision=3), {}, now=2 * LEASE_S - 0.5)
    assert views[third].should_take(k, 2 * LEASE_S)
    # once someone owns it, nobody else takes it
    for view in views.values():
        view.saw(nodes(*live, revision=4), owned(**{third: k}), now=2 * LEASE_S)
        assert not view.should_take(k, 2 * LEASE_S + 1)


def test_an_owner_hands_over_to_the_assigned_node_alive_a_while_and_caught_up() -> None:
    k = next(k for k, r in enumerate(assignment(["a", "b"], P)) if r[0] == "b")
    last = 5_000  # the owner's changelog
    view = View("a", LEASE_S, P)
    view.saw(nodes("a"), owned(a=k), now=0.0)
    assert view.should_hand_over(k, 0.0, last) is None  # alone: it is its own
    view.saw(nodes("a", "b"), owned(a=k), now=1.0)  # b joins
    assert view.should_hand_over(k, 1.0, last) is None
    assert view.standby(k, 1.0) == "b"  # b follows it meanwhile
    later = 1.0 + HANDOVER_LEASES * LEASE_S
    behind = {"a": (2, {}), "b": (2, {"advertise": "b:1", "applied": {str(k): 10}})}
    view.saw(behind, owned(a=k), now=later)
    assert view.should_hand_over(k, later, last) is None  # its copy is still rebuilding
    close = last - HANDOVER_BEHIND
    caught_up = {"a": (3, {}), "b": (3, {"advertise": "b:1", "applied": {str(k): close}})}
    view.saw(caught_up, owned(a=k), now=later + 1)
    assert view.should_hand_over(k, later + 1, last) == "b"


def test_the_standby_is_the_first_node_in_order_that_does_not_own_the_partition() -> None:
    live = ["a", "b", "c"]
    for k, ranked in enumerate(assignment(live, P)):
        view = View(ranked[1], LEASE_S, P)
        view.saw(nodes(*live), owned(**{ranked[0]: k}), now=0.0)
        assert view.standby(k, 0.0) == ranked[1]
        view.saw(nodes(*live), owned(2, **{ranked[1]: k}), now=1.0)  # another owns it
        assert view.standby(k, 1.0) == next(n for n in order(live, k) if n != ranked[1])


def test_a_node_that_joins_takes_its_share_and_nothing_else_moves() -> None:
    two = {k: r[0] for k, r in enumerate(assignment(["a", "b"], P))}
    three = {k: r[0] for k, r in enumerate(assignment(["a", "b", "c"], P, two))}
    moved = {k for k in range(P) if three[k] != two[k]}
    assert len(moved) == 2
    assert {three[k] for k in moved} == {"c"}
    assert {two[k] for k in moved} == {"a", "b"}  # one from each
    # and one that leaves: only its partitions move
    left = {k: n for k, n in three.items() if n != "b"}
    after = {k: r[0] for k, r in enumerate(assignment(["a", "c"], P, left))}
    assert {k for k in range(P) if after[k] != three[k]} == {k for k in range(P) if three[k] == "b"}


def test_stored_values_that_are_not_ours_are_ignored() -> None:
    assert decode(b"not json") is None
    assert decode(b"[1, 2]") is None
    assert decode(None) is None
    view = View("a", LEASE_S, P)
    view.saw(nodes("a"), {2: (1, {"epoch": 1})}, now=0.0)  # no "node": no owner
    assert view.owner_node(2, 0.0) is None
