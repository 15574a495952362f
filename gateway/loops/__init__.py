"""The gateway's background loops: the worker-event consumer (``consumer``, ``events``), the
reconciler, the endpoint controller and its leader lease, the webhook deliverer, the
pruning loops, and the scheduler process that composes the scheduler's queue with the
reconciler and the endpoint controller (gateway/README.md)."""
