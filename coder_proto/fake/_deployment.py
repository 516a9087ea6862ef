"""The deployment routes of the fake server, as any Coder deployment answers them under
``/api/v2``: the signed-in user (``codersdk.User``) and the build information
(``codersdk.BuildInfoResponse``).

Clients given no organization id read ``GET /api/v2/users/me`` and take the first of its
``organization_ids`` (D33); the fake's user belongs to the one organization it serves.
"""

from __future__ import annotations

import random
from typing import Any

from ._http import not_found
from ._store import ChatStore
from ._util import new_uuid

__all__ = ["Deployment"]


class Deployment:
    """The fake deployment's one user and its build information."""

    def __init__(self, store: ChatStore, *, created_at: str) -> None:
        self._store = store
        self._created_at = created_at
        # Its own generator: the deployment id does not shift the ids of chats and files.
        self.deployment_id = new_uuid(random.Random(f"deployment:{store.config.seed}"))

    def user_json(self, user: str, now: float) -> dict[str, Any]:
        """``GET /api/v2/users/{user}`` for ``me``, the user's id or name; 404 for anyone
        else (the caller may read no other user)."""
        store = self._store
        username = store.config.username
        if user.lower() not in ("me", store.user_id, username.lower()):
            raise not_found()
        return {
            "id": store.user_id,
            "username": username,
            "avatar_url": "",
            "name": "",
            "email": f"{username}@example.com",
            "created_at": self._created_at,
            "updated_at": self._created_at,
            "last_seen_at": store.timestamp(store.advance_clock(now)),
            "status": "active",
            "login_type": "password",
            "theme_preference": "",
            "organization_ids": [store.organization_id],
            "roles": [],
        }

    def buildinfo_json(self) -> dict[str, Any]:
        """``GET /api/v2/buildinfo`` (no session needed)."""
        config = self._store.config
        return {
            "external_url": "",
            "version": config.build_version,
            "dashboard_url": config.access_url,
            "telemetry": False,
            "workspace_proxy": False,
            "agent_api_version": "2.0",
            "provisioner_api_version": "1.0",
            "upgrade_message": "",
            "deployment_id": self.deployment_id,
        }
