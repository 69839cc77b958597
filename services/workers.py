"""Every worker by name: what `reminders serve NAME` runs, and `up` starts one of each."""

from __future__ import annotations

from collections.abc import Callable

from services.adapters.settings import Settings
from services.gateway.app import Gateway
from services.observer.app import Observer
from services.projector.app import ProjectorWorker
from services.propagator.app import Propagator
from services.providers.app import Providers
from services.runtime import Worker

WORKERS: dict[str, Callable[[Settings], Worker]] = {
    "gateway": Gateway,
    "projector": ProjectorWorker,
    "propagator": Propagator,
    "observer": Observer,
    "providers": Providers,
}
