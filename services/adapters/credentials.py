"""NATS credentials and TLS from settings, in the forms nats-py and FastStream take (§10)."""

from __future__ import annotations

import ssl
from typing import Any

from faststream.nats.security import (
    NatsCredentials,
    NatsNKey,
    NatsSecurity,
    NatsToken,
    NatsUserPassword,
)
from faststream.security import BaseSecurity

from services.adapters.settings import Settings


def ssl_context(settings: Settings) -> ssl.SSLContext | None:
    """A client TLS context when a CA or a client certificate is configured."""
    if settings.nats_tls_ca is None and settings.nats_tls_cert is None:
        return None
    context = ssl.create_default_context(
        cafile=str(settings.nats_tls_ca) if settings.nats_tls_ca else None
    )
    if settings.nats_tls_cert is not None:
        context.load_cert_chain(
            str(settings.nats_tls_cert),
            str(settings.nats_tls_key) if settings.nats_tls_key else None,
        )
    return context


def nats_kwargs(settings: Settings) -> dict[str, Any]:
    """Keyword arguments for `nats.connect` (user/password, token, nkey, creds file, TLS)."""
    options: dict[str, Any] = {}
    if settings.nats_user is not None:
        options["user"] = settings.nats_user
        options["password"] = settings.nats_password or ""
    if settings.nats_token is not None:
        options["token"] = settings.nats_token
    if settings.nats_creds_file is not None:
        options["user_credentials"] = str(settings.nats_creds_file)
    if settings.nats_nkey_seed_file is not None:
        options["nkeys_seed"] = str(settings.nats_nkey_seed_file)
    context = ssl_context(settings)
    if context is not None:
        options["tls"] = context
    return options


def broker_security(settings: Settings) -> BaseSecurity | None:
    """The same credentials for a FastStream `NatsBroker`."""
    context = ssl_context(settings)
    if settings.nats_user is not None:
        return NatsUserPassword(
            username=settings.nats_user,
            password=settings.nats_password or "",
            ssl_context=context,
        )
    if settings.nats_token is not None:
        return NatsToken(token=settings.nats_token, ssl_context=context)
    if settings.nats_creds_file is not None:
        return NatsCredentials(credentials=str(settings.nats_creds_file), ssl_context=context)
    if settings.nats_nkey_seed_file is not None:
        return NatsNKey.from_file(str(settings.nats_nkey_seed_file), ssl_context=context)
    if context is not None:
        return NatsSecurity(ssl_context=context)
    return None
