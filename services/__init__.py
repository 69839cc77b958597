"""Entrypoints and adapters: one package per microservice, plus the `reminders` CLI."""
