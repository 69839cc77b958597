"""The one registry of workers: everything else that names them derives from `WORKERS`.

`reminders serve NAME` offers exactly these names, `reminders up` starts each one's
processes, `reminders provision` and `reminders doctor` create and check each one's durable
consumers, and the table in `docs/workers.md` is rendered from here
(`python -m services.workers` rewrites it; a unit test checks it is current). The same test
demands what a registered worker needs outside Python: its NATS user in
`k8s/base/nats-auth.conf` (shared by compose and Kubernetes), its compose service and its
Kubernetes manifest. So a new worker is its own package, one entry here, and those
deployment files.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from services.adapters.provisioning import DurableConsumer
from services.adapters.settings import Settings
from services.gateway.app import Gateway
from services.observer.app import Observer, observer_consumers
from services.projector.app import ProjectorWorker
from services.projector.partitions import projector_consumers, projector_processes
from services.propagator.app import Propagator, propagator_consumers
from services.providers.app import Providers, providers_consumers
from services.runtime import Worker, WorkerProcess

#: The variable every worker reads its probe and /metrics port from (`Settings.http_port`).
HTTP_PORT_ENV = "REMINDERS_HTTP_PORT"


def no_consumers(settings: Settings) -> list[DurableConsumer]:
    """A worker without durable consumers (the gateway serves requests in a queue group)."""
    return []


@dataclass(frozen=True)
class RegisteredWorker:
    """One worker and every name the rest of the project knows it by."""

    #: `reminders serve NAME`; also its `reminders-NAME` connection and logger name.
    name: str
    #: What it does, in one line (the docs table).
    summary: str
    #: Builds the worker from the settings (what `serve` runs).
    factory: Callable[[Settings], Worker]
    #: Its durable consumers under these settings (what `provision` creates and `doctor`
    #: checks; the worker's own `consumers()` returns the same).
    consumers: Callable[[Settings], list[DurableConsumer]]
    #: The NATS user it logs in as (a user of `k8s/base/nats-auth.conf`); default: its name.
    nats_user: str = ""
    #: Its service in `docker-compose.yml`; default: its name.
    compose_service: str = ""
    #: Its Kubernetes manifest (relative to the repository) and the Deployment in it;
    #: default: `k8s/base/NAME.yaml` and its name.
    k8s_manifest: str = ""
    k8s_deployment: str = ""
    #: The variable its probe and /metrics port is read from.
    http_port_env: str = HTTP_PORT_ENV
    #: The processes `up` starts for it (default: one, labelled with its name).
    processes: Callable[[Settings], list[WorkerProcess]] | None = None

    def __post_init__(self) -> None:
        # Every deployment name defaults to the worker's: an entry states only what differs.
        defaults = {
            "nats_user": self.name,
            "compose_service": self.name,
            "k8s_manifest": f"k8s/base/{self.name}.yaml",
            "k8s_deployment": self.name,
        }
        for field, default in defaults.items():
            if not getattr(self, field):
                object.__setattr__(self, field, default)

    def processes_for(self, settings: Settings) -> list[WorkerProcess]:
        """The processes `up` starts for this worker under these settings."""
        if self.processes is None:
            return [WorkerProcess(self.name, {})]
        return self.processes(settings)


REGISTRY: tuple[RegisteredWorker, ...] = (
    RegisteredWorker(
        name="gateway",
        summary="commands in (request/reply in a queue group), atomic appends out, "
        "replies after the commit; the read queries",
        factory=Gateway,
        consumers=no_consumers,
    ),
    RegisteredWorker(
        name="projector",
        summary="folds every event into the session's value in the projection bucket",
        factory=ProjectorWorker,
        consumers=projector_consumers,
        processes=projector_processes,
    ),
    RegisteredWorker(
        name="propagator",
        summary="`handed_off` events become `inherit` commands on the child session",
        factory=Propagator,
        consumers=propagator_consumers,
    ),
    RegisteredWorker(
        name="observer",
        summary="metrics of the lifecycle and the ACP notification of every `fired` event",
        factory=Observer,
        consumers=observer_consumers,
    ),
    RegisteredWorker(
        name="providers",
        summary="runtime events on `agent.events.>` become `evaluate` commands",
        factory=Providers,
        consumers=providers_consumers,
    ),
)

#: The registry by name, in start order (`up` starts them in this order).
WORKERS: dict[str, RegisteredWorker] = {worker.name: worker for worker in REGISTRY}


def all_consumers(settings: Settings) -> list[DurableConsumer]:
    """Every worker's durable consumers, every partition's when the projector is
    partitioned, whichever partition this process's environment names (what `provision`
    creates and `doctor` checks)."""
    settings = settings.model_copy(update={"projector_partition": None})
    return [durable for worker in REGISTRY for durable in worker.consumers(settings)]


# --- the table in docs/workers.md -------------------------------------------------------------

DOCS_PATH = Path(__file__).resolve().parents[1] / "docs" / "workers.md"
TABLE_BEGIN = "<!-- BEGIN workers table: generated from services/workers.py; "
TABLE_END = "<!-- END workers table -->"
#: Partitions shown in the table's partitioned-projector example.
_EXAMPLE_PARTITIONS = 2


def _durables_cell(settings: Settings, worker: RegisteredWorker) -> str:
    durables = worker.consumers(settings)
    if not durables:
        return "none"
    cell = "<br>".join(
        f"`{d.name}` on `{d.stream}` (`{d.config['filter_subject']}`)" for d in durables
    )
    partitioned = settings.model_copy(update={"projector_partitions": _EXAMPLE_PARTITIONS})
    if [d.name for d in worker.consumers(partitioned)] != [d.name for d in durables]:
        names = ", ".join(f"`{d.name}`" for d in worker.consumers(partitioned))
        cell += (
            f"<br>with `REMINDERS_PROJECTOR_PARTITIONS={_EXAMPLE_PARTITIONS}`: {names} "
            f"on `{worker.consumers(partitioned)[0].stream}`, one process each"
        )
    return cell


def render_table() -> str:
    """The workers table in Markdown, between its begin and end markers."""
    settings = Settings()
    lines = [
        f"{TABLE_BEGIN}run `python -m services.workers` to rewrite it -->",
        "| worker (`reminders serve …`) | what it does | durable consumers | NATS user "
        "| probes and `/metrics` port | compose service | Kubernetes |",
        "|---|---|---|---|---|---|---|",
    ]
    for worker in REGISTRY:
        lines.append(
            f"| `{worker.name}` | {worker.summary} | {_durables_cell(settings, worker)} "
            f"| `{worker.nats_user}` | `{worker.http_port_env}` | `{worker.compose_service}` "
            f"| `{worker.k8s_manifest}` (Deployment `{worker.k8s_deployment}`) |"
        )
    lines.append(TABLE_END)
    return "\n".join(lines) + "\n"


def with_table(document: str) -> str:
    """`document` with its workers table replaced by the current one (appended when the
    document has none yet); the prose around it is left as it is."""
    begin, end = document.find(TABLE_BEGIN), document.find(TABLE_END)
    if begin < 0 or end < begin:
        return document.rstrip("\n") + "\n\n" + render_table()
    after = document[end + len(TABLE_END) :].removeprefix("\n")
    return document[:begin] + render_table() + after


def main() -> None:
    """Rewrite the table in docs/workers.md (or, with `--check`, exit 1 if it is stale)."""
    current = DOCS_PATH.read_text(encoding="utf-8") if DOCS_PATH.exists() else ""
    wanted = with_table(current)
    if "--check" in sys.argv[1:]:
        sys.exit(0 if current == wanted else 1)
    if current != wanted:
        DOCS_PATH.write_text(wanted, encoding="utf-8")
    print(DOCS_PATH)


if __name__ == "__main__":
    main()
