"""The app proxy: authenticated URLs for the apps inside sessions (see README.md).

Kept free of imports so that the gateway can import :mod:`appproxy.contract` cheaply.
"""
