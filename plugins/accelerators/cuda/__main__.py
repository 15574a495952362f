"""``python -m plugins.accelerators.cuda --proof``: see :mod:`.proof`."""

from __future__ import annotations

import argparse
import json
import sys
from decimal import Decimal, InvalidOperation
from typing import Any

from pydantic import ValidationError

from plugins.accelerators.cuda.proof import run_proof
from plugins.accelerators.cuda.settings import CudaSettings


def _positive(text: str) -> Decimal:
    try:
        value = Decimal(text)
    except InvalidOperation:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not value.is_finite() or value <= 0:
        raise argparse.ArgumentTypeError(f"must be positive: {text!r}")
    return value


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m plugins.accelerators.cuda",
        description="Check the cuda accelerator plugin against this machine's GPUs.",
    )
    parser.add_argument(
        "--proof",
        action="store_true",
        required=True,
        help="fingerprint, reserve a GPU and 0.5 shares, check MPS limits",
    )
    parser.add_argument(
        "--shares-per-device",
        type=_positive,
        default=Decimal(1),
        help="shares per GPU for the fractional step (default 1)",
    )
    args = parser.parse_args(argv)
    try:
        settings = CudaSettings()
    except ValidationError as exc:
        print(f"invalid JOBGATE_CUDA_* settings: {exc}", file=sys.stderr)
        return 2

    def emit(obj: dict[str, Any]) -> None:
        print(json.dumps(obj, default=str), flush=True)

    return 0 if run_proof(settings, args.shares_per_device, emit) else 1


if __name__ == "__main__":
    sys.exit(main())
