"""An app factory for uvicorn's own worker processes in tests (`uvicorn.run(
"tests.support.worker_app:create", factory=True, workers=N)`): each worker loads the
configuration file named by LAKESHARE_TEST_CONFIG."""

from __future__ import annotations

import os

from fastapi import FastAPI

from app.main import create_app
from sharing.config import load_config

__all__ = ["CONFIG_ENV", "create"]

CONFIG_ENV = "LAKESHARE_TEST_CONFIG"


def create() -> FastAPI:
    return create_app(load_config(os.environ[CONFIG_ENV]))
