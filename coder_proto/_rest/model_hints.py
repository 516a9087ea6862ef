"""Model configs and model-hint resolution (wire 8, D16).

``ModelConfigsExchange`` lists the model configs a caller may use: the organization route
``GET /api/v2/organizations/{org}/chats/models`` first and, only when it answers 404, the legacy
``GET /api/experimental/chats/model-configs`` once. It never reads or sets the chat prefix lock
(D16): its requests are sent as they are, outside ``PrefixSelector``.

``resolve_model_hint`` maps a user's hint (``"claude-sonnet-4-6"``,
``"anthropic:claude-sonnet-4-6"``, ``"Claude Sonnet"`` or a config UUID) to a config id in the
exact order of wire 8. A UUID needs no request at all: check ``is_model_config_uuid`` first.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final
from urllib.parse import quote

import attrs

from .._constants import LEGACY_PREFIX, UUID_PATTERN
from .._errors import CoderAgentError, CoderApiError, CoderProtocolError
from .._wire.chats import ChatModelConfig, ModelCatalog
from .http import HttpRequest, HttpResponse, api_error_from_response
from .prefix import Failed, Retry, network_error

__all__ = [
    "LEGACY_MODEL_CONFIGS_PATH",
    "MODEL_CONFIG_OPS",
    "ModelConfigs",
    "ModelConfigsExchange",
    "is_model_config_uuid",
    "org_models_path",
    "resolve_model_hint",
]

#: The legacy listing (default organization; removed upstream, so 404 on current servers).
LEGACY_MODEL_CONFIGS_PATH: Final = f"{LEGACY_PREFIX}/model-configs"
#: The ops a listing may be stamped with (D24).
MODEL_CONFIG_OPS: Final = frozenset({"list_model_configs", "resolve_model_config_id"})


def org_models_path(organization_id: str) -> str:
    """``/api/v2/organizations/{org}/chats/models`` with the org id URL-encoded (wire 8)."""
    return f"/api/v2/organizations/{quote(organization_id, safe='')}/chats/models"


def is_model_config_uuid(hint: str) -> bool:
    """True when ``hint`` is a UUID (case-insensitive): it is then used as the config id as-is,
    with no request (wire 8 step 1)."""
    return type(hint) is str and UUID_PATTERN.match(hint) is not None


@attrs.frozen
class ModelConfigs:
    """The listing's result: the configs, and the route that produced them (``"org"`` or
    ``"legacy"``)."""

    configs: tuple[ChatModelConfig, ...]
    source: str


def _legacy_configs(body: Any, organization_id: str | None) -> tuple[ChatModelConfig, ...]:
    configs = ModelCatalog.from_legacy_json(body).models
    if organization_id is None:
        return configs
    # D16: the legacy route lists the default organization; keep only this org's entries
    # (an entry that does not say which organization it belongs to is kept).
    return tuple(
        c for c in configs if c.organization_id is None or c.organization_id == organization_id
    )


_ORG: Final = "org"
_LEGACY: Final = "legacy"
_DONE: Final = "done"


class ModelConfigsExchange:
    """The model listing as an exchange machine (wire 8, D16).

    Send ``request``; feed the answer to ``on_response`` (any status) or a transport failure to
    ``on_network_error``. Outcomes: ``Retry(request)`` (send the legacy fallback),
    ``ModelConfigs`` (done) or ``Failed(error)``:

    * org route 2xx -> its models, each joined with its provider's ``type``;
    * org route 404 -> the legacy route, once; legacy 2xx -> its entries of this organization;
      legacy 404 -> the **org-route** error; any other legacy error -> the legacy error;
    * any other org-route error, or a network error -> that error.

    With ``organization_id=None`` (the deprecated overload) the legacy route is called
    directly and its errors are raised as they are.
    """

    __slots__ = ("_org_error", "_organization_id", "_phase", "op", "request")

    def __init__(self, organization_id: str | None, *, op: str = "list_model_configs") -> None:
        if op not in MODEL_CONFIG_OPS:
            raise CoderAgentError(
                f"unknown model listing op {op!r}; expected one of "
                f"{', '.join(sorted(MODEL_CONFIG_OPS))}"
            )
        if organization_id is not None and (
            type(organization_id) is not str or not organization_id.strip()
        ):
            raise CoderAgentError(
                f"organization_id must be a non-empty string, got {organization_id!r}"
            )
        self.op = op
        self._organization_id = organization_id
        self._org_error: CoderApiError | None = None
        self.request: HttpRequest
        if organization_id is None:
            self._phase = _LEGACY
            self.request = HttpRequest.build(op, "GET", LEGACY_MODEL_CONFIGS_PATH)
        else:
            self._phase = _ORG
            self.request = HttpRequest.build(op, "GET", org_models_path(organization_id))

    @property
    def done(self) -> bool:
        return self._phase == _DONE

    def on_response(self, response: HttpResponse) -> ModelConfigs | Retry | Failed:
        """Feed the answer to ``request``."""
        phase = self._phase
        if phase == _DONE:
            raise CoderAgentError("this model listing has already finished")
        sent = self.request
        if phase == _ORG:
            if response.ok:
                self._phase = _DONE
                try:
                    catalog = ModelCatalog.from_json(response.json())
                except CoderProtocolError as exc:
                    return Failed(exc)
                return ModelConfigs(catalog.models, _ORG)
            error = api_error_from_response(sent, response)
            if response.status != 404:
                self._phase = _DONE
                return Failed(error)
            self._org_error = error
            self._phase = _LEGACY
            self.request = HttpRequest.build(self.op, "GET", LEGACY_MODEL_CONFIGS_PATH)
            return Retry(self.request)
        self._phase = _DONE
        if response.ok:
            return ModelConfigs(_legacy_configs(response.json(), self._organization_id), _LEGACY)
        if response.status == 404 and self._org_error is not None:
            return Failed(self._org_error)
        return Failed(api_error_from_response(sent, response))

    def on_network_error(self, message: str) -> Failed:
        """Feed a transport failure of ``request``: it is raised as a ``CoderNetworkError``."""
        if self._phase == _DONE:
            raise CoderAgentError("this model listing has already finished")
        self._phase = _DONE
        return Failed(network_error(self.request, message))


def _lower(value: str | None) -> str | None:
    return value.lower() if type(value) is str else None


def resolve_model_hint(hint: str, configs: Sequence[ChatModelConfig]) -> str | None:
    """The config id ``hint`` designates, or ``None`` when nothing matches (the caller then
    omits ``model_config_id`` and the server uses its default model). Wire 8, in order:

    1. a UUID hint is returned as-is;
    2. the pool is the configs with ``enabled`` not ``False``, or all configs if none is;
    3. the hint splits on its first ``:`` into a provider (lower-cased) and a model;
    4. exact: model id equal and (no provider, or provider equal);
    5. model id equal, ignoring the provider;
    6. the display name contains the whole lower-cased hint (provider prefix included);
    7. the model id contains the model part.

    Comparisons ignore case; fields that are missing or not strings never match. Configs
    without an id are never chosen, and an empty hint matches nothing.
    """
    if type(hint) is not str:
        raise CoderAgentError(f"a model hint must be a string, got {hint!r}")
    if is_model_config_uuid(hint):
        return hint
    if not hint:
        return None
    candidates = [c for c in configs if isinstance(c, ChatModelConfig) and c.id]
    pool = [c for c in candidates if c.enabled is not False] or candidates
    whole = hint.lower()
    provider: str | None
    if ":" in hint:
        left, _, right = hint.partition(":")
        provider, model = left.lower(), right.lower()
    else:
        provider, model = None, whole
    rows = [(c, _lower(c.model), _lower(c.provider), _lower(c.display_name)) for c in pool]
    for c, c_model, c_provider, _ in rows:
        if c_model == model and (provider is None or c_provider == provider):
            return c.id
    for c, c_model, _, _ in rows:
        if c_model == model:
            return c.id
    for c, _, _, c_display in rows:
        if c_display is not None and whole in c_display:
            return c.id
    for c, c_model, _, _ in rows:
        if c_model is not None and model in c_model:
            return c.id
    return None
