"""Paths the tests share: the checkout and what it ships."""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHIPPED_TRACES = ROOT / "reports" / "traces"
