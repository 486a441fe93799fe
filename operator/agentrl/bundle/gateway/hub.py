"""A Hugging Face model id's files, with the hub asked once.

huggingface_hub retries a hub that does not answer (a refused connection, a timeout, a 5xx)
with backoff for each file it is asked for that is not cached: at 2.4.0 some 23 seconds for
one file, and transformers asks for a tokenizer's files one by one (with an unreachable
`HF_ENDPOINT`, 88 requests and 280 seconds before it said it could not connect). So the
gateway asks the hub one question within huggingface_hub's metadata timeout
(`HF_HUB_ETAG_TIMEOUT`); when it gets no answer, or `HF_HUB_OFFLINE` is set, the files come
from the cache alone, and a cache without them is said at once, with the ways out.

One start-up (a gateway's, a rehearsal's) reads a hub id's config.json and its tokenizer,
and checks first where the rehearsal can name `--model-dir`: each asked the hub again, and
a silent hub cost each the timeout. Within `hub_answers()` the first answer about a
repository serves them all. Only within it: a hub that was silent when a gateway started is
asked again when one starts later in the same process (the rollout's long-lived process
restarts its gateway), rather than that gateway kept off the hub by a stale answer.

A gateway's render worker processes load the tokenizer again, each when it starts (on the
first large prompt, or to replace one that exited): each asked the hub once more, and a
silent hub held that prompt for the timeout. Within `hub_told()` (a worker's load) the hub
is not asked: the files come from the cache, where the gateway's own load left them.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator, Mapping
from contextvars import ContextVar
from pathlib import Path

from agentrl.api.tokenizer_files import VOCABULARY_NAMES, has_vocabulary

log = logging.getLogger("agentrl.gateway")

# The file asked about: every model repository SGLang serves has one.
PROBE_FILE = "config.json"
# The HTTP statuses huggingface_hub retries with backoff for each file (2.4.0's
# `utils/_http.py` `_DEFAULT_RETRY_ON_STATUS_CODES`: a request timeout, rate limiting, server
# errors): the hub is as good as silent. Any other status below 500 is its answer (a gated or
# missing repo or file), which huggingface_hub says at once. A rate-limited hub (429, as
# anonymous pulls from one cluster address meet) was taken for an answer, and the load then
# retried it for 280 seconds and 90 requests.
_RETRIED = frozenset({408, 429})
_SERVER_ERROR = 500


# The hub's answers of the start-up under way, by (repository, file); None outside one. A
# context variable: the loads run in worker threads (`asyncio.to_thread` copies the context,
# and with it this dictionary), and two gateways starting at once keep their own.
_ANSWERS: ContextVar[dict[tuple[str, str], str | None] | None] = ContextVar(
    "agentrl_hub_answers", default=None
)


# Why the hub is not asked at all in this context (a render worker's load); None: ask it.
_TOLD: ContextVar[str | None] = ContextVar("agentrl_hub_told", default=None)

# What a render worker is told when its gateway's start-up found the hub answering: the
# gateway's load put the files in the cache, and the worker reads those same files.
LOADED_AT_START = "the gateway loaded it at start, and its render workers read those files"


@contextlib.contextmanager
def hub_answers() -> Iterator[Mapping[tuple[str, str], str | None]]:
    """One start-up's questions to the hub: `hub_silent` asks about a repository once and
    answers again from memory until the block ends (a block inside another shares its
    answers). Yields those answers: (repository, file) -> why silent, or None."""
    answers = _ANSWERS.get()
    if answers is not None:
        yield answers
        return
    answers = {}
    token = _ANSWERS.set(answers)
    try:
        yield answers
    finally:
        _ANSWERS.reset(token)


def start_answer(answers: Mapping[tuple[str, str], str | None]) -> str:
    """What a gateway tells its render workers about the hub (`hub_told`): why it was silent
    at start, or that the start-up's load left the files in the cache."""
    return next((why for why in answers.values() if why is not None), LOADED_AT_START)


@contextlib.contextmanager
def hub_told(why: str) -> Iterator[None]:
    """The hub not asked within the block: `hub_silent` answers `why` (a render worker, whose
    gateway asked at start; its load left in the cache the files the worker reads, the same
    files the gateway renders with, even if the hub has changed them since)."""
    token = _TOLD.set(why)
    try:
        yield
    finally:
        _TOLD.reset(token)


def hub_silent(repo: str, filename: str = PROBE_FILE) -> str | None:
    """Why the hub is not to be asked about `repo`: `HF_HUB_OFFLINE`, or the one HEAD
    request for `filename` that got no answer (no connection, a timeout, a 5xx, a 408 or a
    429: what huggingface_hub would retry); None when the hub answered. Within
    `hub_answers()`, the hub is asked once per repository and file; within `hub_told()`,
    not at all."""
    from huggingface_hub import constants

    if constants.HF_HUB_OFFLINE:
        return "HF_HUB_OFFLINE is set"
    told = _TOLD.get()
    if told is not None:
        return told
    answers = _ANSWERS.get()
    if answers is None:
        return _ask(repo, filename)
    if (repo, filename) not in answers:
        answers[repo, filename] = _ask(repo, filename)
    return answers[repo, filename]


def _ask(repo: str, filename: str) -> str | None:
    """The one HEAD request, within HF_HUB_ETAG_TIMEOUT: why the hub is silent, or None."""
    from huggingface_hub import constants, get_hf_file_metadata, hf_hub_url
    from huggingface_hub.errors import HfHubHTTPError

    try:
        get_hf_file_metadata(hf_hub_url(repo, filename))  # within HF_HUB_ETAG_TIMEOUT
    except HfHubHTTPError as exc:
        status = getattr(exc.response, "status_code", None)
        if isinstance(status, int) and status < _SERVER_ERROR and status not in _RETRIED:
            return None
        why = f"the hub {constants.ENDPOINT} answered {status}"
    except Exception as exc:  # no connection, no name, a timeout, TLS
        why = f"the hub {constants.ENDPOINT} did not answer ({type(exc).__name__})"
    else:
        return None
    log.info("gateway: %s: %s; reading the Hugging Face cache only", repo, why)
    return why


def cached_snapshot(repo: str, revision: str | None = None) -> Path | None:
    """The cached snapshot directory of `repo` at `revision` (a branch, a tag or a commit;
    default main), where huggingface_hub's cache (`HF_HUB_CACHE`) has one."""
    from huggingface_hub import constants
    from huggingface_hub.file_download import repo_folder_name

    folder = Path(constants.HF_HUB_CACHE) / repo_folder_name(repo_id=repo, repo_type="model")
    ref = revision or "main"
    try:
        commit = (folder / "refs" / ref).read_text(encoding="utf-8").strip()
    except OSError:
        commit = ref  # a commit id is its own snapshot's name
    snapshot = folder / "snapshots" / commit
    return snapshot if snapshot.is_dir() else None


def uncached_tokenizer(model_id: str, source: str, revision: str | None, why: str) -> str | None:
    """The error when `source` (the repository `model_id`'s tokenizer loads from) has no
    tokenizer vocabulary in the cache while the hub is not asked (`why`); None when cached."""
    snapshot = cached_snapshot(source, revision)
    if snapshot is not None and has_vocabulary(p.name for p in snapshot.iterdir() if p.is_file()):
        return None
    from huggingface_hub import constants

    return (
        f"the tokenizer of {model_id!r} cannot be loaded: {why}, and the Hugging Face cache "
        f"{constants.HF_HUB_CACHE} holds no tokenizer of {source!r} ({VOCABULARY_NAMES}). "
        f"Download it where the hub is reachable (`hf download {source} tokenizer.json "
        "tokenizer_config.json config.json`, into the cache this process reads: HF_HOME or "
        "HF_HUB_CACHE), then run with HF_HUB_OFFLINE=1 and that cache; or give the path of "
        "a local copy of the checkpoint instead of the hub id"
    )


@contextlib.contextmanager
def cache_only() -> Iterator[None]:
    """huggingface_hub (and transformers, which asks it) kept off the hub for a load:
    its offline switch, read at each call, set for the duration."""
    from huggingface_hub import constants

    before = constants.HF_HUB_OFFLINE
    constants.HF_HUB_OFFLINE = True
    try:
        yield
    finally:
        constants.HF_HUB_OFFLINE = before
