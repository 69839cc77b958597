"""The services: the adapters, one runtime, one package per worker and their registry."""
