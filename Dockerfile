# syntax=docker/dockerfile:1
# One image for every Reminder Ledger process. The entrypoint is the `reminders` command, so
# the arguments pick the service or tool:
#   docker run IMAGE serve gateway        (or projector, propagator, observer)
#   docker run IMAGE doctor               (checks a deployment; exits non-zero on failure)
# Configuration comes from REMINDERS_* and OTEL_* variables (README, "Configuration").

ARG PYTHON_IMAGE=python:3.11-slim

FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1
RUN python -m venv /opt/venv
ENV PATH="/opt/venv/bin:${PATH}"
WORKDIR /src
# Dependencies first, in their own layer: a code change does not reinstall them.
COPY pyproject.toml README.md ./
RUN python -c "import tomllib; print('\n'.join(tomllib.load(open('pyproject.toml', 'rb'))['project']['dependencies']))" > /tmp/requirements.txt \
 && pip install -r /tmp/requirements.txt
COPY contracts ./contracts
COPY core ./core
COPY services ./services
COPY replay ./replay
COPY cli ./cli
COPY client ./client
RUN pip install --no-deps . \
 && reminders --help > /dev/null

FROM ${PYTHON_IMAGE}
LABEL org.opencontainers.image.title="reminder-ledger" \
      org.opencontainers.image.description="Event-sourced system reminders for LLM agent sessions, on NATS JetStream."
# tini as PID 1 forwards SIGTERM to the service (a clean stop on `docker stop` and on pod
# deletion) and reaps zombies.
RUN apt-get update \
 && apt-get install -y --no-install-recommends tini \
 && rm -rf /var/lib/apt/lists/* \
 && groupadd --system --gid 10001 reminders \
 && useradd --system --uid 10001 --gid 10001 --home-dir /app --no-create-home \
            --shell /usr/sbin/nologin reminders \
 && install -d -o 10001 -g 10001 /app
COPY --from=build /opt/venv /opt/venv
ENV PATH="/opt/venv/bin:${PATH}" \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    REMINDERS_HTTP_HOST=0.0.0.0 \
    REMINDERS_HTTP_PORT=8080
WORKDIR /app
# Numeric, so Kubernetes can check runAsNonRoot against the image.
USER 10001:10001
# /healthz, /readyz and /metrics of every service.
EXPOSE 8080
ENTRYPOINT ["/usr/bin/tini", "--", "reminders"]
CMD ["--help"]
