"""NATS credentials and TLS from settings, in the form nats-py takes (SPEC §10)."""

from __future__ import annotations

import ssl
from typing import Any

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
    inbox_prefix = inbox_prefix_for(settings)
    if inbox_prefix is not None:
        options["inbox_prefix"] = inbox_prefix
    return options


def inbox_prefix_for(settings: Settings) -> str | None:
    """The private reply inbox of the configured user: replies and JetStream deliveries come
    back under it, and the server lets only that user subscribe there (SPEC §10)."""
    if settings.nats_inbox_prefix:
        return settings.nats_inbox_prefix
    if settings.nats_user:
        return f"_INBOX.{settings.nats_user}"
    return None
