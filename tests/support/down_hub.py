"""A Hugging Face endpoint that is down (503, or another status, to every request, each one
counted), and a subprocess environment that points huggingface_hub at it: huggingface_hub
reads its endpoint, cache and offline switch at import, so each check runs in a fresh
process."""

from __future__ import annotations

import http.server
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, ClassVar


class DownHub(http.server.BaseHTTPRequestHandler):
    """`status` (503 unless told) to every request, each one recorded as `METHOD /path`."""

    seen: ClassVar[list[str]] = []
    status: ClassVar[int] = 503

    def _answer(self) -> None:
        DownHub.seen.append(f"{self.command} {self.path}")
        self.send_response(DownHub.status)
        self.send_header("Content-Length", "0")
        self.end_headers()

    do_HEAD = do_GET = _answer

    def log_message(self, *args: Any) -> None:  # quiet
        pass


@contextmanager
def down_hub(status: int = 503) -> Iterator[tuple[str, list[str]]]:
    """(the endpoint's URL, the requests it has seen); it answers `status` to each."""
    DownHub.seen = []
    DownHub.status = status
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), DownHub)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", DownHub.seen
    finally:
        server.shutdown()
        server.server_close()


def hub_env(url: str, home: Path, cache: Path, offline: bool) -> dict[str, str]:
    """This process's env with huggingface_hub pointed at `url` and `cache`, and no other
    HF_ settings (a developer's token or cache)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HUGGING"))}
    env.update(HF_ENDPOINT=url, HF_HOME=str(home), HF_HUB_CACHE=str(cache))
    if offline:
        env["HF_HUB_OFFLINE"] = "1"
    return env


def cache_snapshot(cache: Path, repo: str) -> Path:
    """An empty snapshot of `repo` in the hub cache `cache`, refs/main naming it."""
    commit = "0" * 40
    snapshot = cache / f"models--{repo.replace('/', '--')}" / "snapshots" / commit
    snapshot.mkdir(parents=True)
    (snapshot.parents[1] / "refs").mkdir()
    (snapshot.parents[1] / "refs" / "main").write_text(commit)
    return snapshot
