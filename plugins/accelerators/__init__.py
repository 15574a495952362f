"""Accelerator plugins (entry-point group ``jobgate.accelerators.v1``): cuda, rocm, tpu, mock.

The contract is in :mod:`.base`; the worker uses all of them through
:class:`plugins.accelerators.node.NodeAccelerators`. See ``README.md`` here for the map
and ``docs/accelerators.md`` for operators.
"""
