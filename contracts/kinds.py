"""Envelopes whose `payload` model is chosen by their `kind`: events and runtime events."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel


def payload_by_kind(data: Any, payloads: Mapping[str, type[BaseModel]]) -> Any:
    """Raw envelope data with its `payload` validated by the model its `kind` names, so a
    payload is never read as the wrong kind's (a before-validator of the envelope)."""
    if isinstance(data, dict):
        kind = data.get("kind")
        payload = data.get("payload")
        model = payloads.get(kind) if isinstance(kind, str) else None
        if model is not None and isinstance(payload, dict):
            return {**data, "payload": model.model_validate(payload)}
    return data


def require_payload_kind(
    payload: BaseModel, kind: str, payloads: Mapping[str, type[BaseModel]]
) -> None:
    """Raise unless `payload` is the model of `kind` (an after-validator of the envelope)."""
    if not isinstance(payload, payloads[kind]):
        raise ValueError(f"payload does not match kind {kind}")
