"""Write benchmark results as JSON under benchmarks/results/, with the machine they ran on."""

from __future__ import annotations

import json
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results"


def machine() -> dict[str, Any]:
    """What a result ran on."""
    return {"python": sys.version.split()[0], "platform": platform.platform(), "cpus": os.cpu_count()}


def write_result(name: str, payload: dict[str, Any]) -> Path:
    RESULTS.mkdir(parents=True, exist_ok=True)
    record = {
        "benchmark": name,
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": machine(),
        **payload,
    }
    path = RESULTS / f"{name}.json"
    path.write_text(json.dumps(record, indent=2) + "\n")
    return path
