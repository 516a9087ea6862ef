"""The organization by default (D33).

An organization id comes from the caller, else from the environment
(``CODER_ORGANIZATION_ID``, then ``CODER_ORG_ID``; ``organization_from_env``). With neither,
the first request that needs one (creating a chat, uploading a file, listing model configs)
asks ``GET /api/v2/users/me`` and takes the first of the user's ``organization_ids``
(``default_organization``). The answer is kept on the client's ``PrefixSelector``, so one
client asks once, however many agents and chats share it (calls that need it while the
question is out wait for the answer); a user with no organization gets a ``CoderAgentError``
saying to pass ``organization_id``.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any, Final

from .._engine import CoreMachine, Wait
from .._rest.prefix import PrefixSelector
from .._rest.routes import build_get_current_user, parse_default_organization

__all__ = [
    "ENV_ORGANIZATION_ID",
    "ENV_ORGANIZATION_NAMES",
    "ENV_ORG_ID",
    "LOOKUP_POLL",
    "LOOKUP_WAIT",
    "UNKNOWN_ORGANIZATION",
    "default_organization",
    "organization_from_env",
]

logger = logging.getLogger("coder_proto")

#: The environment variable an organization id is read from first.
ENV_ORGANIZATION_ID: Final = "CODER_ORGANIZATION_ID"
#: The name the reference client's tooling uses, read when the first one is unset.
ENV_ORG_ID: Final = "CODER_ORG_ID"
#: Both, in the order they are read.
ENV_ORGANIZATION_NAMES: Final = (ENV_ORGANIZATION_ID, ENV_ORG_ID)
#: How often a call waiting for another call's ``users/me`` answer checks for it (seconds).
LOOKUP_POLL: Final = 0.02
#: How long it waits for that answer before asking itself (seconds).
LOOKUP_WAIT: Final = 60.0
#: Stands in for the organization while a request is checked before the default is known.
UNKNOWN_ORGANIZATION: Final = "00000000-0000-0000-0000-000000000000"


def organization_from_env(env: Mapping[str, str] | None) -> str | None:
    """The organization id the environment names: ``CODER_ORGANIZATION_ID``, else
    ``CODER_ORG_ID`` (a blank value counts as unset); ``None`` when neither is set."""
    if env is None:
        return None
    for name in ENV_ORGANIZATION_NAMES:
        value = env.get(name)
        if isinstance(value, str) and value.strip():
            return value
    return None


def default_organization(machine: CoreMachine[Any]) -> Wait[str]:
    """The client's default organization (D33), for a request a core machine is about to
    send: the one already learned, else ``GET /api/v2/users/me`` through ``machine`` (a
    ``CoreMachine``) and the first of ``organization_ids``, kept on the machine's selector
    for every later call of the same client. While another call of the client is asking,
    this one waits for that answer (checking every ``LOOKUP_POLL`` seconds, at most
    ``LOOKUP_WAIT``) instead of asking again; if that call fails, this one asks itself."""
    selector: PrefixSelector = machine._selector
    give_up = machine.now + LOOKUP_WAIT
    while (
        selector.default_organization_id is None
        and selector.organization_lookups
        and machine.now < give_up
    ):
        yield from machine._sleep_until(machine.now + LOOKUP_POLL)
    known = selector.default_organization_id
    if known is not None:
        return known
    selector.organization_lookups += 1
    try:
        organization_id: str = yield from machine._rest(
            build_get_current_user(), parse_default_organization
        )
    finally:
        selector.organization_lookups -= 1
    if selector.default_organization_id is None:
        selector.default_organization_id = organization_id
        logger.info(
            "no organization id given: using the signed-in user's first, %s", organization_id
        )
    return selector.default_organization_id
