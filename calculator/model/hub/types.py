"""What calculator.model.hub.client returns and raises (it re-exports all of it): the fetched model, its checkpoint count, and
the errors, whose str() is one line, "<what went wrong>: <what to change>"."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class CheckpointInfo:
    """The exact parameter count of a checkpoint, total and per safetensors dtype (e.g. {"BF16": 8030261248})."""

    total_parameters: int
    parameters_by_dtype: dict[str, int]
    source: str  # "api" | "safetensors-headers"


@dataclass(frozen=True)
class HubModel:
    """A model's raw config.json, its checkpoint count if known, and warnings worth showing the user."""

    model_id: str
    revision: str
    config: dict
    checkpoint: CheckpointInfo | None
    from_cache: bool  # True when served from the on-disk cache because the Hub could not be reached
    warnings: tuple[str, ...]


class HubError(Exception):
    """Base of every Hub failure. `problem` says what went wrong, `fix` what to change; str() joins them."""

    def __init__(self, problem: str, fix: str = ""):
        self.problem = " ".join(problem.split())
        self.fix = " ".join(fix.split())
        super().__init__(f"{self.problem}: {self.fix}" if self.fix else self.problem)


class InvalidModelId(HubError):
    """The text is not an "org/name" model id (checked before any request)."""


class ModelNotFound(HubError):
    """HTTP 404: no such repo, revision, or no config.json in it."""


class AccessDenied(HubError):
    """HTTP 401/403: the repo is gated or private, or the token was refused."""


class RateLimited(HubError):
    """HTTP 429 (after the retries the deadline allowed). `retry_after`: the server's Retry-After in seconds."""

    def __init__(self, problem: str, fix: str = "", retry_after: int | None = None):
        super().__init__(problem, fix)
        self.retry_after = retry_after


class HubTimeout(HubError):
    """The Hub did not answer within the call's deadline (and no cached copy could stand in)."""


class NoNetwork(HubError):
    """The Hub could not be reached: connection refused, DNS failure... (and no cached copy could stand in)."""


class MalformedConfig(HubError):
    """config.json is not JSON, not a JSON object, or has no model_type."""
