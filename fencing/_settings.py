"""Configuration from the environment (pydantic-settings), used at the API boundary only."""

from __future__ import annotations

from typing import Any

from pydantic import Field, ValidationError, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from ._keys import validate_name
from .errors import FencingError, InvalidArgument, InvalidArgumentType


class FencingSettings(BaseSettings):
    """Settings read from ``FENCING_*`` environment variables.

    ``FENCING_REDIS_URL``: where Redis is (default ``redis://localhost:6379/0``).
    ``FENCING_NAMESPACE``: prefix of every key (default ``fencing``).
    ``FENCING_SOCKET_TIMEOUT``: upper bound of socket timeouts in seconds; each handle uses
    at most an eighth of its lease TTL.
    ``FENCING_PRODUCER_STATE_TTL``: seconds after its last write that an idempotent
    producer's state (PID, sequence, duplicate window) is kept (default 7 days, at least
    1 s) on the topics this client *creates*; an existing topic keeps the expiry it was
    created with, whatever a client is set to.
    ``FENCING_ALLOW_EVICTION``: set to 1 to run on a server whose ``maxmemory-policy`` is not
    ``noeviction`` (an eviction silently resets coordination state; see
    docs/reference/limits.md).

    >>> FencingSettings(namespace="billing").namespace
    'billing'
    """

    model_config = SettingsConfigDict(env_prefix="FENCING_", extra="ignore")

    redis_url: str = "redis://localhost:6379/0"
    namespace: str = "fencing"
    socket_timeout: float = Field(default=2.0, ge=0.001, le=3600.0, allow_inf_nan=False)
    allow_eviction: bool = False
    producer_state_ttl: float = Field(
        default=7 * 24 * 3600.0, ge=1.0, le=10 * 365 * 24 * 3600.0, allow_inf_nan=False
    )

    @field_validator("namespace", mode="before")
    @classmethod
    def _namespace(cls, value: object) -> str:
        return validate_name("namespace", value)


def load_settings(base: FencingSettings | None = None, **overrides: Any) -> FencingSettings:
    """Settings from the environment (or ``base``) with ``overrides``, as library errors.

    pydantic's ValidationError is turned back into the library's own error (InvalidName,
    InvalidArgumentType) or an InvalidArgument naming the setting.
    """
    try:
        if base is None:
            return FencingSettings(**overrides)
        # (Only what was set: which settings somebody chose stays known, see Topic.)
        return base.model_validate({**base.model_dump(exclude_unset=True), **overrides})
    except ValidationError as exc:
        for error in exc.errors():
            original = (error.get("ctx") or {}).get("error")
            if isinstance(original, FencingError):
                raise original from None
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first.get("loc", ())) or "settings"
        kind = InvalidArgumentType if first.get("type", "").endswith("_type") else InvalidArgument
        raise kind(
            f"invalid redis-fencing setting {where!r}: {first.get('msg')} "
            f"(FENCING_{where.upper()} in the environment, or the argument of the same name)"
        ) from None
