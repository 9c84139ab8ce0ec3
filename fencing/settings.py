"""Configuration from the environment (pydantic-settings), used at the API boundary only."""

from __future__ import annotations

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from .keys import validate_name


class FencingSettings(BaseSettings):
    """Settings read from ``FENCING_*`` environment variables.

    ``FENCING_REDIS_URL``: where Redis is (default ``redis://localhost:6379/0``).
    ``FENCING_NAMESPACE``: prefix of every key (default ``fencing``).
    ``FENCING_SOCKET_TIMEOUT``: upper bound of socket timeouts in seconds; each handle uses
    at most a quarter of its lease TTL.
    ``FENCING_ALLOW_EVICTION``: set to 1 to run on a server whose ``maxmemory-policy`` is not
    ``noeviction`` (an eviction silently resets coordination state; see the README).

    >>> FencingSettings(namespace="billing").namespace
    'billing'
    """

    model_config = SettingsConfigDict(env_prefix="FENCING_", extra="ignore")

    redis_url: str = "redis://localhost:6379/0"
    namespace: str = "fencing"
    socket_timeout: float = Field(default=2.0, gt=0)
    allow_eviction: bool = False

    @field_validator("namespace")
    @classmethod
    def _namespace(cls, value: str) -> str:
        return validate_name("namespace", value)
