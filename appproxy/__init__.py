"""The app proxy: authenticated URLs for the apps inside sessions (see README.md).

What it shares with the gateway (route records, keys, tokens) is in :mod:`contract`.
"""
