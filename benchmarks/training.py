"""Training benchmark: small models trained with torch's norm modules and with opgen's.

A thin entry point: the logic is opgen.bench_training, the same code as
``opgen bench --training``.

    python benchmarks/training.py [--quick] [--model unet|transformer] [--steps N] [--out F.json]
"""
from __future__ import annotations

import sys

from opgen.bench import cli

if __name__ == "__main__":
    raise SystemExit(cli(["--training", *sys.argv[1:]]))
