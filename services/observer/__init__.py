"""The observer service: lifecycle events → OpenTelemetry metrics, span events and ACP
`session/update` notifications for observability tooling (SPEC §6.1, §8, §10)."""
