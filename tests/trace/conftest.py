from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest


@pytest.fixture
def write_trace(tmp_path: Path) -> Callable[..., Path]:
    """Write a trace dict (or raw bytes) to a file in tmp_path; returns its path."""

    def write(content: dict[str, Any] | list[Any] | bytes, name: str = "trace.json") -> Path:
        path = tmp_path / name
        data = content if isinstance(content, bytes) else json.dumps(content).encode()
        path.write_bytes(data)
        return path

    return write
