"""Helpers shared by the test packages (imported as `tests.support.<module>`)."""

from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
