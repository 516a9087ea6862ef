"""Leases against a model: random sequences of acquire, renew, release and read, at wall-clock
times that jump back and forth (the stores must not assume a monotonic clock), on every
store; after every step the store holds exactly what the model says (D27), the fencing token of
each acquisition included (D37)."""

from __future__ import annotations

import uuid
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from coder_proto.durable import Lease

from .kinds import StoreMaker

OWNERS = st.sampled_from(["a", "b", "c"])
WORKFLOWS = st.sampled_from(["wf-1", "wf-2"])
# Whole seconds on a short range, so that calls often land exactly on an expiry.
NOW = st.integers(min_value=0, max_value=30).map(float) | st.floats(0.0, 30.0)
DURATION = st.sampled_from([0.5, 1.0, 2.0, 5.0, 10.0])
EXAMPLES = {"memory": 60, "sqlite": 40, "postgres": 25, "postgres_async": 25}


class LeaseModel(RuleBasedStateMachine):
    """Subclassed per test with ``store`` set; each run uses a tenant of its own."""

    store: Any = None

    @initialize()
    def fresh_tenant(self) -> None:
        self.tenant = f"model-{uuid.uuid4().hex[:12]}"
        self.model: dict[str, tuple[str, float]] = {}
        self.counters: dict[str, int] = {}

    def expected(self, workflow: str) -> Lease | None:
        held = self.model.get(workflow)
        if held is None:
            return None
        return Lease(
            tenant=self.tenant,
            workflow_id=workflow,
            owner=held[0],
            expires_at=held[1],
            fencing_token=self.counters[workflow],
        )

    @rule(workflow=WORKFLOWS, owner=OWNERS, now=NOW, duration=DURATION)
    def acquire(self, workflow: str, owner: str, now: float, duration: float) -> None:
        held = self.model.get(workflow)
        if held is None or held[0] == owner or held[1] <= now:
            self.model[workflow] = (owner, now + duration)
            self.counters[workflow] = self.counters.get(workflow, 0) + 1
        got = self.store.acquire_lease(self.tenant, workflow, owner, now, duration)
        assert got == self.expected(workflow)

    @rule(workflow=WORKFLOWS, owner=OWNERS, now=NOW, duration=DURATION)
    def renew(self, workflow: str, owner: str, now: float, duration: float) -> None:
        held = self.model.get(workflow)
        ours = held is not None and held[0] == owner
        if ours:
            self.model[workflow] = (owner, now + duration)
        assert self.store.renew_lease(self.tenant, workflow, owner, now, duration) is ours

    @rule(workflow=WORKFLOWS, owner=OWNERS)
    def release(self, workflow: str, owner: str) -> None:
        held = self.model.get(workflow)
        if held is not None and held[0] == owner:
            del self.model[workflow]
        self.store.release_lease(self.tenant, workflow, owner)

    @invariant()
    def the_store_holds_what_the_model_says(self) -> None:
        if not hasattr(self, "tenant"):
            return
        for workflow in ("wf-1", "wf-2"):
            assert self.store.get_lease(self.tenant, workflow) == self.expected(workflow)


def test_leases_follow_the_model(maker: StoreMaker) -> None:
    store = maker.open()

    class OnThisStore(LeaseModel):
        pass

    OnThisStore.store = store
    OnThisStore.TestCase.settings = settings(
        max_examples=EXAMPLES[maker.kind],
        stateful_step_count=25,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow],
    )
    OnThisStore.TestCase().runTest()
