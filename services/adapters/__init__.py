"""The impure edges every worker, the replay library and the client share.

NATS connection and credentials, stream provisioning and atomic batches, the projection
bucket's records, the dead-letter stream, HTTP probes, telemetry, logs, configuration from
the environment, and the clock and ids. Nothing here decides a rule: rules are in `core`.
"""
