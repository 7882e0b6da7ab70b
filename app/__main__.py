"""``python -m app``: run the service with uvicorn (one worker: one process owns the store)."""

from __future__ import annotations

import logging

import uvicorn

from app.config import Settings
from app.main import create_app


def main() -> None:
    settings = Settings()
    logging.basicConfig(
        level=settings.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    uvicorn.run(
        create_app(settings),
        host=settings.host,
        port=settings.port,
        log_level=settings.log_level,
        access_log=False,
        loop="uvloop",
        http="httptools",
        timeout_graceful_shutdown=35,  # a long poll waits at most 30 s
    )


if __name__ == "__main__":
    main()
