"""Kept for imports from before the rules moved: see :mod:`gateway.domain.validation`."""

from gateway.domain.validation import (
    ENV_NAME,
    parse_delay,
    parse_start,
    valid_image_reference,
    within_roots,
)

__all__ = ["ENV_NAME", "parse_delay", "parse_start", "valid_image_reference", "within_roots"]
