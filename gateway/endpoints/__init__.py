"""Inference endpoints' control plane: the controller loop, its leader lock, what it reads
from the app proxy and the routes it writes (see gateway/README.md)."""
