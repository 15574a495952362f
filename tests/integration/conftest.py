"""Integration tests share the fixtures of ``tests/conftest.py`` (stacks on real services)."""
