"""Inference endpoints' traffic state: replicas, balancing, readiness probes, load reports."""
