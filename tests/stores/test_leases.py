"""Workflow leases on every store (D27): a compare-and-set that takes a lease when it is free,
expired or already ours; renewal only by the holder; release only by the holder; expiry from
the wall-clock time the caller passes in (the stores never read a clock). Each acquisition
takes the next number of the workflow's counter as its fencing token; renewals keep it, and
nothing resets it (D37)."""

from __future__ import annotations

import pickle
from typing import Any

import pytest

from coder_proto._errors import CoderAgentError
from coder_proto.durable import DEFAULT_LEASE_DURATION, Lease, WorkflowBusyError

T, WF = "acme", "order-1042"


def lease(owner: str, expires_at: float, fence: int, workflow_id: str = WF) -> Lease:
    return Lease(
        tenant=T, workflow_id=workflow_id, owner=owner, expires_at=expires_at, fencing_token=fence
    )


def test_a_free_lease_is_taken_and_expires_after_its_duration(store: Any) -> None:
    assert store.get_lease(T, WF) is None
    taken = store.acquire_lease(T, WF, "worker-a", 1000.0, 60.0)
    assert taken == lease("worker-a", 1060.0, 1)
    assert taken.held_by("worker-a") and not taken.held_by("worker-b")
    assert store.get_lease(T, WF) == taken


def test_a_live_lease_held_by_another_is_not_taken(store: Any) -> None:
    store.acquire_lease(T, WF, "worker-a", 1000.0, 60.0)
    for now in (1000.0, 1030.0, 1059.999):
        seen = store.acquire_lease(T, WF, "worker-b", now, 60.0)
        assert seen == lease("worker-a", 1060.0, 1), now  # the holder, unchanged
    assert store.get_lease(T, WF) == lease("worker-a", 1060.0, 1)


def test_an_expired_lease_is_taken_over(store: Any) -> None:
    """A holder that crashed is outlived by its expiry: the lease is free again at exactly
    ``expires_at``."""
    store.acquire_lease(T, WF, "crashed", 1000.0, 60.0)
    taken = store.acquire_lease(T, WF, "worker-b", 1060.0, 30.0)
    assert taken == lease("worker-b", 1090.0, 2)
    # The old holder is out: it can neither renew nor release the new holder's lease.
    assert store.renew_lease(T, WF, "crashed", 1061.0, 60.0) is False
    store.release_lease(T, WF, "crashed")
    assert store.get_lease(T, WF) == lease("worker-b", 1090.0, 2)


def test_acquiring_a_lease_already_ours_extends_it(store: Any) -> None:
    store.acquire_lease(T, WF, "worker-a", 1000.0, 60.0)
    assert store.acquire_lease(T, WF, "worker-a", 1010.0, 60.0) == lease("worker-a", 1070.0, 2)
    # Ours even after it expired, as long as nobody took it over.
    assert store.acquire_lease(T, WF, "worker-a", 5000.0, 10.0) == lease("worker-a", 5010.0, 3)
    # Extending sets the expiry the caller asks for, shorter included.
    assert store.acquire_lease(T, WF, "worker-a", 5001.0, 1.0) == lease("worker-a", 5002.0, 4)


def test_renewal_extends_only_the_holders_lease(store: Any) -> None:
    assert store.renew_lease(T, WF, "worker-a", 1000.0, 60.0) is False  # never held
    assert store.get_lease(T, WF) is None  # and not created by the attempt
    store.acquire_lease(T, WF, "worker-a", 1000.0, 60.0)
    assert store.renew_lease(T, WF, "worker-b", 1020.0, 60.0) is False
    assert store.get_lease(T, WF) == lease("worker-a", 1060.0, 1)
    assert store.renew_lease(T, WF, "worker-a", 1020.0, 60.0) is True
    assert store.get_lease(T, WF) == lease("worker-a", 1080.0, 1)
    # A holder that stalled past its expiry keeps the lease if nobody took it.
    assert store.renew_lease(T, WF, "worker-a", 2000.0, 60.0) is True
    assert store.get_lease(T, WF) == lease("worker-a", 2060.0, 1)


def test_a_renewal_after_a_takeover_fails_and_changes_nothing(store: Any) -> None:
    store.acquire_lease(T, WF, "worker-a", 1000.0, 60.0)
    store.acquire_lease(T, WF, "worker-b", 1060.0, 60.0)
    assert store.renew_lease(T, WF, "worker-a", 1061.0, 600.0) is False
    assert store.get_lease(T, WF) == lease("worker-b", 1120.0, 2)


def test_release_frees_the_lease_only_for_its_holder(store: Any) -> None:
    store.acquire_lease(T, WF, "worker-a", 1000.0, 60.0)
    store.release_lease(T, WF, "worker-b")
    assert store.get_lease(T, WF) == lease("worker-a", 1060.0, 1)
    store.release_lease(T, WF, "worker-a")
    assert store.get_lease(T, WF) is None
    store.release_lease(T, WF, "worker-a")  # idempotent
    # Free again: the next worker takes it at once, long before the old expiry.
    assert store.acquire_lease(T, WF, "worker-b", 1001.0, 60.0) == lease("worker-b", 1061.0, 2)
    # A released holder's renewal does not bring its lease back.
    assert store.renew_lease(T, WF, "worker-a", 1002.0, 60.0) is False


def test_leases_are_per_workflow_and_per_tenant(store: Any) -> None:
    store.acquire_lease(T, WF, "worker-a", 1000.0, 60.0)
    other = store.acquire_lease(T, "order-7", "worker-b", 1000.0, 60.0)
    assert other == lease("worker-b", 1060.0, 1, "order-7")
    elsewhere = store.acquire_lease("globex", WF, "worker-c", 1000.0, 60.0)
    assert elsewhere.owner == "worker-c" and elsewhere.tenant == "globex"
    store.release_lease(T, WF, "worker-a")
    assert store.get_lease("globex", WF) == elsewhere
    assert store.get_lease(T, "order-7") == other


def test_each_acquisition_takes_the_next_number_of_the_workflows_counter_d37(store: Any) -> None:
    """Fresh takes, take-overs of an expired lease and a holder's own re-acquisition each take
    the next number; renewals keep it, a refused acquisition takes none, and a release does
    not reset the counter. Each (tenant, workflow) counts on its own."""
    assert store.acquire_lease(T, WF, "a", 1000.0, 60.0).fencing_token == 1
    assert store.renew_lease(T, WF, "a", 1020.0, 60.0) is True
    assert store.get_lease(T, WF) == lease("a", 1080.0, 1)
    # Refused while live: the holder's number, nothing taken.
    assert store.acquire_lease(T, WF, "b", 1030.0, 60.0) == lease("a", 1080.0, 1)
    assert store.acquire_lease(T, WF, "b", 1080.0, 60.0) == lease("b", 1140.0, 2)
    assert store.renew_lease(T, WF, "a", 1081.0, 60.0) is False
    assert store.get_lease(T, WF) == lease("b", 1140.0, 2)
    store.release_lease(T, WF, "b")
    assert store.get_lease(T, WF) is None
    assert store.acquire_lease(T, WF, "c", 1100.0, 60.0) == lease("c", 1160.0, 3)
    assert store.acquire_lease(T, WF, "c", 1101.0, 60.0).fencing_token == 4
    assert store.acquire_lease(T, "order-7", "c", 1100.0, 60.0).fencing_token == 1
    assert store.acquire_lease("globex", WF, "c", 1100.0, 60.0).fencing_token == 1
    assert store.get_lease(T, WF) == lease("c", 1161.0, 4)


def test_times_are_kept_exactly(store: Any) -> None:
    """Epoch seconds with a fraction come back as the same float (no rounding to a
    column's precision), and integers are accepted as seconds."""
    now = 1_754_321_987.123456
    assert store.acquire_lease(T, WF, "a", now, 0.001).expires_at == now + 0.001
    assert store.acquire_lease(T, "wf-int", "a", 1000, 60).expires_at == 1060.0
    held = store.get_lease(T, "wf-int")
    assert held is not None and type(held.expires_at) is float


def test_lease_records_and_the_busy_error() -> None:
    held = lease("worker-a", 1060.0, 1)
    assert held.live(1059.9) and not held.live(1060.0)
    assert DEFAULT_LEASE_DURATION == 60.0
    for bad in (
        {"owner": ""},
        {"expires_at": float("nan")},
        {"workflow_id": "\x07"},
        {"fencing_token": 0},
        {"fencing_token": True},
        {"fencing_token": 1.0},
    ):
        with pytest.raises(CoderAgentError):
            Lease(**{"tenant": T, "workflow_id": WF, "owner": "o", "expires_at": 1.0, **bad})
    error = WorkflowBusyError(tenant=T, workflow_id=WF, owner="worker-a", expires_at=1060.0)
    assert isinstance(error, CoderAgentError) and error.retryable
    assert "order-1042" in str(error) and "worker-a" in str(error)
    assert (error.tenant, error.workflow_id, error.owner, error.expires_at) == (
        T,
        WF,
        "worker-a",
        1060.0,
    )
    # It crosses process boundaries (workers, engines) whole.
    again = pickle.loads(pickle.dumps(error))
    assert type(again) is WorkflowBusyError and str(again) == str(error)
    assert (again.owner, again.expires_at, again.retryable) == ("worker-a", 1060.0, True)
    assert repr(again) == repr(error) and "1060.0" in repr(error)
    plain = WorkflowBusyError("busy, come back later", tenant=T, workflow_id=WF)
    assert str(plain) == "busy, come back later" and plain.owner is None
