"""``GET /v1/tenants`` shows each tenant's token status (issue 22 loose end): revoked or not, the
last rotation, a running grace; never a token or its hash."""

from __future__ import annotations

from typing import Any

from ._support import ADMIN, Api


def _listed(api: Api) -> dict[str, dict[str, Any]]:
    r = api.client.get("/v1/tenants", headers=api.as_(ADMIN))
    assert r.status_code == 200, r.text
    return {t["name"]: t for t in r.json()}


def _audit(api: Api, name: str) -> list[dict[str, Any]]:
    return list(api.client.get(f"/v1/tenants/{name}/token/audit", headers=api.as_(ADMIN)).json())


def test_the_tenant_list_shows_revocation_rotation_and_grace_but_no_secret(api_any_db: Api) -> None:
    api = api_any_db
    tokens = {name: api.tenant(name) for name in ("alice", "bob", "carol")}
    fresh = _listed(api)["carol"]
    assert (fresh["token_revoked"], fresh["token_revoked_at"], fresh["token_rotated_at"],
            fresh["token_grace_until"]) == (False, None, None, None)
    r = api.client.post("/v1/tenants/alice/token/rotate", json={"grace_s": 3600, "reason": "routine"},
                        headers=api.as_(tokens["alice"]))
    assert r.status_code == 200, r.text
    grace_until = r.json()["previous_valid_until"]
    r = api.client.post("/v1/tenants/bob/token/revoke", json={"reason": "offboarded"}, headers=api.as_(ADMIN))
    assert r.status_code == 200, r.text
    got = _listed(api)
    alice, bob = got["alice"], got["bob"]
    assert alice["token_revoked"] is False and alice["token_revoked_at"] is None
    assert alice["token_rotated_at"] == _audit(api, "alice")[-1]["created_at"]
    assert alice["token_grace_until"] == grace_until and grace_until > alice["token_rotated_at"]
    assert bob["token_revoked"] is True and bob["token_rotated_at"] is None
    assert bob["token_revoked_at"] == _audit(api, "bob")[-1]["created_at"]
    r = api.client.post("/v1/tenants/bob/token/rotate", json={}, headers=api.as_(ADMIN))  # restores bob
    bob = _listed(api)["bob"]
    assert (bob["token_revoked"], bob["token_revoked_at"], bob["token_grace_until"]) == (False, None, None)
    assert bob["token_rotated_at"] == _audit(api, "bob")[-1]["created_at"]
    body = api.client.get("/v1/tenants", headers=api.as_(ADMIN)).text
    for secret in (*tokens.values(), r.json()["token"]):
        assert secret not in body
    assert "hash" not in body
    assert api.client.get("/v1/tenants", headers=api.as_(tokens["alice"])).status_code in (401, 403)
