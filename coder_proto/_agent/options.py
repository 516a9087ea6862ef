"""The settings of an agent and of the turns it runs, as one value (state machine H.2).

``AgentOptions`` is what ``CoderAgent``, ``run_turn`` and the agent core share: one frozen,
validated object instead of the same keyword list in every signature. Build it once and reuse
it for every agent of a service, every step of a workflow, and every runtime::

    options = AgentOptions(model="claude-sonnet-4-6", instructions="Be brief.", max_steps=8)
    agent = CoderAgent(options=options, tools=[get_weather])     # tools= overrides options
    result = await run_turn("wf-1", "Summarise.", store=store, options=options)

The public functions still take every option as a keyword argument. A keyword the caller
passes overrides the same field of ``options`` (``None`` included: ``request_timeout=None``
lifts a limit the options object sets); a keyword left out keeps the options object's value,
or the default when there is no options object. ``option_keywords`` is that rule, written
once for every such function.
"""

from __future__ import annotations

import functools
import inspect
import math
from collections.abc import Callable, Iterable, Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Final, TypeVar, cast

import attrs

from .._constants import DEFAULT_MAX_STEPS, SETTLE_DEADLINE, SETTLE_RETRY_DELAY
from .._errors import CoderAgentError
from .session_state import sanitize_duration

if TYPE_CHECKING:
    from .tools import Tool

__all__ = ["OPTION_NAMES", "AgentOptions", "option_keywords", "resolve_options"]

F = TypeVar("F", bound=Callable[..., Any])

#: ``busy_behavior`` values the server accepts (wire 2.2).
_BUSY_BEHAVIORS: Final = (None, "queue", "interrupt")


def _optional_str(name: str) -> Callable[[Any, Any, Any], None]:
    def check(_instance: Any, _attribute: Any, value: Any) -> None:
        if value is not None and not isinstance(value, str):
            raise CoderAgentError(f"{name} must be a string, got {value!r}")

    return check


def _tools(
    value: Iterable[Tool | Callable[..., Any]] | Mapping[str, Any] | None,
) -> Mapping[str, Tool]:
    if value is None:
        return _NO_TOOLS  # read-only, so every options object without tools shares one
    from .tools import tools_by_name

    return MappingProxyType(tools_by_name(value))


_NO_TOOLS: Final[Mapping[str, Tool]] = MappingProxyType({})


def _server_ids(value: Iterable[str] | None) -> tuple[str, ...]:
    if isinstance(value, str):
        raise CoderAgentError("mcp_server_ids must be a sequence of ids, not one string")
    try:
        ids = tuple(value or ())
    except TypeError:
        raise CoderAgentError(f"mcp_server_ids must be a sequence of ids, got {value!r}") from None
    if not all(isinstance(i, str) and i for i in ids):
        raise CoderAgentError("mcp_server_ids must be non-empty strings")
    return ids


def _settle_deadline(value: float) -> float:
    return sanitize_duration(value, SETTLE_DEADLINE)


def _settle_retry_delay(value: float) -> float:
    return sanitize_duration(value, SETTLE_RETRY_DELAY)


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


@attrs.frozen(kw_only=True)
class AgentOptions:
    """How an agent runs its turns (H.2). Every field is optional; durations are seconds.

    * ``organization_id``: the organization new chats belong to (default: the
      ``CODER_ORGANIZATION_ID`` or ``CODER_ORG_ID`` environment variable, read when the agent
      is built, else the signed-in user's first organization, asked once per client, D33);
    * ``model``: a model hint, resolved once per session (a model-config UUID,
      ``provider:model``, a model id or a display-name substring);
    * ``instructions``: the system prompt of new chats;
    * ``tools``: client tools (``@tool`` functions, ``Tool`` objects, plain functions), as a
      sequence or a name -> tool mapping; kept as a read-only name -> ``Tool`` mapping;
    * ``output_type``: enables structured output (``result.output``): a JSON Schema, a type,
      an attrs class, a dataclass or a pydantic model;
    * ``request_timeout``: bounds each segment (one model round trip); ``None`` or <= 0 is no
      limit;
    * ``workspace_id``, ``mcp_server_ids``, ``reasoning_effort``, ``plan_mode``: sent with
      new chats and prompts;
    * ``busy_behavior``: what the server does with a prompt while the chat is busy
      (``"queue"`` or ``"interrupt"``);
    * ``max_steps``: bounds the client-tool loop of a turn (default 64);
    * ``max_retries``: replays of a turn whose fresh chat lost its stream (default 0);
    * ``settle_deadline`` / ``settle_retry_delay``: bound interrupting and archiving (default
      15 s / 1 s; a missing, negative or non-numeric value falls back to the default).

    Construction validates and normalises (``CoderAgentError`` on a bad value) and does no
    I/O. Change a copy with ``attrs.evolve(options, model=...)``.
    """

    organization_id: str | None = attrs.field(
        default=None, validator=_optional_str("organization_id")
    )
    model: str | None = attrs.field(default=None, validator=_optional_str("model"))
    instructions: str | None = attrs.field(default=None, validator=_optional_str("instructions"))
    tools: Mapping[str, Tool] = attrs.field(
        default=None, converter=_tools, repr=lambda tools: repr(list(tools))
    )
    output_type: Any = None
    request_timeout: float | None = None
    workspace_id: str | None = attrs.field(default=None, validator=_optional_str("workspace_id"))
    mcp_server_ids: tuple[str, ...] = attrs.field(default=(), converter=_server_ids)
    reasoning_effort: str | None = attrs.field(
        default=None, validator=_optional_str("reasoning_effort")
    )
    plan_mode: str | None = attrs.field(default=None, validator=_optional_str("plan_mode"))
    busy_behavior: str | None = attrs.field(default=None, validator=_optional_str("busy_behavior"))
    max_steps: int = DEFAULT_MAX_STEPS
    max_retries: int = 0
    settle_deadline: float = attrs.field(default=SETTLE_DEADLINE, converter=_settle_deadline)
    settle_retry_delay: float = attrs.field(
        default=SETTLE_RETRY_DELAY, converter=_settle_retry_delay
    )

    def __attrs_post_init__(self) -> None:
        if self.busy_behavior not in _BUSY_BEHAVIORS:
            raise CoderAgentError(
                f'busy_behavior must be "queue" or "interrupt", got {self.busy_behavior!r}'
            )
        if not _is_int(self.max_steps) or self.max_steps < 1:
            raise CoderAgentError(f"max_steps must be a positive integer, got {self.max_steps!r}")
        if not _is_int(self.max_retries) or self.max_retries < 0:
            raise CoderAgentError(
                f"max_retries must be a non-negative integer, got {self.max_retries!r}"
            )
        timeout = self.request_timeout
        if timeout is not None and (
            isinstance(timeout, bool) or not isinstance(timeout, int | float) or math.isnan(timeout)
        ):
            raise CoderAgentError(f"request_timeout must be a number of seconds, got {timeout!r}")


#: The names of ``AgentOptions``' fields: the option keywords of the public functions.
OPTION_NAMES: Final[frozenset[str]] = frozenset(a.name for a in attrs.fields(AgentOptions))


def resolve_options(options: object, given: Mapping[str, Any]) -> AgentOptions:
    """``options`` (an ``AgentOptions`` or ``None``) with the option keywords a caller passed
    (``given``) applied on top: an explicit keyword wins over the options object."""
    if options is None:
        return AgentOptions(**given)
    if not isinstance(options, AgentOptions):
        raise CoderAgentError(f"options must be an AgentOptions, got {options!r}")
    return attrs.evolve(options, **given) if given else options


def option_keywords(func: F) -> F:
    """Give ``func`` (whose parameters are ``options`` and some of ``AgentOptions``' fields as
    keywords) the rule of the module docstring: its body receives ``options`` resolved
    (``resolve_options``) from the ``options`` argument and the option keywords the caller
    passed explicitly, and reads its settings from there only. Its signature, name and
    docstring are unchanged (``help()`` and type checkers see the keywords)."""
    signature = inspect.signature(func)
    names = [name for name in signature.parameters if name in OPTION_NAMES]
    if "options" not in signature.parameters or not names:
        raise TypeError(f"{func.__qualname__} takes no options and option keywords")

    def resolve(args: tuple[Any, ...], kwargs: dict[str, Any]) -> inspect.BoundArguments:
        bound = signature.bind(*args, **kwargs)
        arguments = bound.arguments
        given = {name: arguments[name] for name in names if name in arguments}
        arguments["options"] = resolve_options(arguments.get("options"), given)
        return bound

    if inspect.iscoroutinefunction(func):

        @functools.wraps(func)
        async def call_async(*args: Any, **kwargs: Any) -> Any:
            bound = resolve(args, kwargs)
            return await func(*bound.args, **bound.kwargs)

        return cast(F, call_async)

    @functools.wraps(func)
    def call(*args: Any, **kwargs: Any) -> Any:
        bound = resolve(args, kwargs)
        return func(*bound.args, **bound.kwargs)

    return cast(F, call)
