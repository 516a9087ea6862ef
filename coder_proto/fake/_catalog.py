"""The model configurations the fake serves (``ChatModel``, wire 8; server-behaviour 1.4).

``ModelCatalog`` gives every ``FakeModelSpec`` of ``FakeConfig.models`` a config id and its
provider an id, resolves the ``model_config_id`` a request names, and writes the listing
routes' bodies. ``models_from_json`` reads a catalog from JSON (the ``--models`` file of
``coder-agent fake-server``).
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from typing import Any, Final

from ._config import FakeConfig
from ._errors import FakeApiError, FakeConfigError
from ._rows import FakeModelSpec
from ._util import UUID_RE, new_uuid

__all__ = ["ModelCatalog", "models_from_json"]

#: JSON keys of a catalog entry and the types they take.
_SPEC_FIELDS: Final[Mapping[str, type | tuple[type, ...]]] = {
    "model": str,
    "display_name": str,
    "provider": str,
    "enabled": bool,
    "is_default": bool,
    "context_limit": int,
    "compression_threshold": int,
    "reasoning_efforts": list,
}


class ModelCatalog:
    """Ids and JSON of the configured models. Specs added to ``config.models`` later get ids
    when first seen."""

    def __init__(
        self, config: FakeConfig, rng: random.Random, *, organization_id: str, created_at: str
    ) -> None:
        self._config = config
        self._rng = rng
        self._organization_id = organization_id
        self._created_at = created_at
        self.provider_ids: dict[str, str] = {}
        self.config_ids: dict[str, str] = {}
        for spec in config.models:
            self.provider_ids.setdefault(spec.provider, new_uuid(rng))
            self.config_ids[spec.model] = new_uuid(rng)

    def config_id(self, spec: FakeModelSpec) -> str:
        if spec.provider not in self.provider_ids:
            self.provider_ids[spec.provider] = new_uuid(self._rng)
        if spec.model not in self.config_ids:
            self.config_ids[spec.model] = new_uuid(self._rng)
        return self.config_ids[spec.model]

    def spec_by_id(self, config_id: str) -> FakeModelSpec | None:
        for spec in self._config.models:
            if self.config_id(spec) == config_id:
                return spec
        return None

    def default_spec(self) -> FakeModelSpec | None:
        """The organization's default model: the first enabled spec marked default, else the
        first enabled one."""
        enabled = [s for s in self._config.models if s.enabled]
        for spec in enabled:
            if spec.is_default:
                return spec
        return enabled[0] if enabled else None

    def resolve(self, raw: Any, fallback: str | None) -> str:
        """The config id a request's ``model_config_id`` names: ``fallback`` (else the
        default) when it names none; 400 as the server words it otherwise
        (server-behaviour 1.5 item 6)."""
        if raw is None or raw == "":
            if fallback is not None:
                return fallback
            spec = self.default_spec()
            if spec is None:
                raise FakeApiError(
                    400,
                    "No chat model is available in this organization.",
                    detail="Ask an organization administrator to configure and enable a chat model.",
                )
            return self.config_id(spec)
        if not isinstance(raw, str) or UUID_RE.match(raw.lower()) is None:
            raise FakeApiError(400, "Invalid model config ID.")
        found = self.spec_by_id(raw.lower())
        if found is None or not found.enabled:
            raise FakeApiError(400, "Invalid model_config_id: model config not found or disabled.")
        return raw.lower()

    # -- JSON ---------------------------------------------------------------------------------

    def config_json(self, spec: FakeModelSpec) -> dict[str, Any]:
        """A ``ChatModel`` (no ``provider`` string: server-behaviour 1.4, 9.9)."""
        default = self.default_spec()
        config_id = self.config_id(spec)
        return {
            "id": config_id,
            "organization_id": self._organization_id,
            "ai_provider_id": self.provider_ids[spec.provider],
            "model": spec.model,
            "display_name": spec.display_name,
            "enabled": spec.enabled,
            "is_default": default is not None and spec.model == default.model,
            "context_limit": spec.context_limit,
            "compression_threshold": spec.compression_threshold,
            "reasoning_efforts": list(spec.reasoning_efforts),
            "created_at": self._created_at,
            "updated_at": self._created_at,
        }

    def configs_json(self) -> list[dict[str, Any]]:
        """The legacy ``/api/experimental/chats/model-configs`` body."""
        return [self.config_json(s) for s in self._config.models]

    def catalog_json(self) -> dict[str, Any]:
        """The organization model route's body (wire 8)."""
        models = self.configs_json()
        providers = [
            {
                "id": provider_id,
                "type": provider,
                "display_name": provider.title(),
                "icon": "",
                "enabled": True,
                "available": True,
                "unavailable_reason": "",
                "has_api_key": True,
                "has_user_api_key": False,
                "has_effective_api_key": True,
                "allow_user_api_key": False,
            }
            for provider, provider_id in self.provider_ids.items()
            if any(s.provider == provider for s in self._config.models)
        ]
        return {"models": models, "providers": providers, "unsupported_providers": []}


def _spec_from_json(obj: Any, index: int) -> FakeModelSpec:
    where = f"model {index}"
    if not isinstance(obj, Mapping):
        raise FakeConfigError(f"{where}: expected an object with at least a 'model' name")
    unknown = sorted(set(obj) - set(_SPEC_FIELDS))
    if unknown:
        raise FakeConfigError(f"{where}: unknown key {unknown[0]!r}")
    for key, value in obj.items():
        kind = _SPEC_FIELDS[key]
        if not isinstance(value, kind) or (isinstance(value, bool) and kind is int):
            raise FakeConfigError(f"{where}: {key!r} has the wrong type")
    name = obj.get("model")
    if not isinstance(name, str) or not name.strip():
        raise FakeConfigError(f"{where}: 'model' must be a non-empty string")
    limit = obj.get("context_limit", 200_000)
    if limit < 1:
        raise FakeConfigError(f"{where}: 'context_limit' must be positive")
    threshold = obj.get("compression_threshold", 70)
    if not 0 <= threshold <= 100:
        raise FakeConfigError(f"{where}: 'compression_threshold' must be from 0 to 100")
    efforts = obj.get("reasoning_efforts", ["low", "medium", "high"])
    if not all(isinstance(e, str) and e for e in efforts):
        raise FakeConfigError(f"{where}: 'reasoning_efforts' must be a list of names")
    provider = obj.get("provider", "anthropic")
    if not provider:
        raise FakeConfigError(f"{where}: 'provider' must not be empty")
    return FakeModelSpec(
        model=name,
        display_name=obj.get("display_name", name),
        provider=provider,
        enabled=obj.get("enabled", True),
        is_default=obj.get("is_default", False),
        context_limit=limit,
        compression_threshold=threshold,
        reasoning_efforts=tuple(efforts),
    )


def models_from_json(value: Any) -> tuple[FakeModelSpec, ...]:
    """A model catalog from JSON: a list of entries (or ``{"models": [...]}``), each an object
    with ``model`` and optionally ``display_name``, ``provider``, ``enabled``,
    ``is_default``, ``context_limit``, ``compression_threshold`` and ``reasoning_efforts``.
    Raises ``FakeConfigError`` on anything malformed, a repeated model name or more than one
    default."""
    if isinstance(value, Mapping) and set(value) == {"models"}:
        value = value["models"]
    if not isinstance(value, list):
        raise FakeConfigError('a model catalog is a list of models (or {"models": [...]})')
    specs = tuple(_spec_from_json(obj, n) for n, obj in enumerate(value))
    names = [s.model for s in specs]
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise FakeConfigError(f"model {repeated[0]!r} is listed more than once")
    if sum(1 for s in specs if s.is_default) > 1:
        raise FakeConfigError("more than one model is marked is_default")
    return specs
