"""Paths the tests share: the checkout and what it ships."""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHIPPED_TRACES = ROOT / "sim" / "traces" / "data"
"""The real traces and measured runs shipped in the package (package data)."""
