"""The tokenizer that the server forking a run's workers builds once, so that no worker builds its own.

A run's workers are forked by a server process that has imported what they run (:mod:`corpus.tokenize.processes`).
Where they outnumber the cores their builds queue: on 2 cores the last of 15 workers each building the run's tokenizer
was ready 1.09 s after the pool was made, 0.29 s with this module; on 16 CPUs, where the builds run side by side, both
took about 0.43 s (``bench/worker_start.py``, bench/RESULTS.md). So the server imports
this module when it starts, and when the run that starts it names the tokenizer it will most likely use
(:func:`offered_to_server`, through :func:`corpus.tokenize.processes.worker_context`), the module builds it then:
every worker forked afterwards has it already, its pages shared copy-on-write.

NOTE: forking the server after the build is safe because the server never encodes: the tokenizer libraries start
their thread pools at the first parallel encode, not when built, so the server has none to pass on. Hence it builds
only a tokenizer whose encoder choice is settled (:func:`corpus.tokenizers.settled_encoder`): choosing would run the
fast encoder's check, which encodes. Nothing the build says reaches the server's stderr (the user's terminal): a
worker that finds no tokenizer here builds its own, and any error reaches the run from there. The tokenizer stays in
the server as long as the process that started it; a later run of that process with another tokenizer has each
worker build its own.
"""
from __future__ import annotations

import dataclasses
import json
import logging
import os
from collections.abc import Iterator
from contextlib import contextmanager

from corpus.core.errors import UserError
from corpus.tokenizers import TextTokenizer, TokenizerConfig, select_encoder, settled_encoder
from corpus.tokenizers.base import tokenizer_files
from corpus.tokenizers.huggingface import limit_rayon_threads

#: A tokenizer configuration with its encoder fixed, and the threads of each batch call.
Settled = tuple[TokenizerConfig, int]

#: The environment variable that carries the run's tokenizer to the server it starts.
VARIABLE = "BLENDFORGE_SERVER_TOKENIZER"

_built: tuple[Settled, tuple, TextTokenizer] | None = None
"""What the server built: the settings, its files as they were (:func:`_files_now`), the tokenizer."""


@contextmanager
def offered_to_server(settled: Settled | None) -> Iterator[None]:
    """Around the start of a run's first worker: a server that this start launches builds ``settled`` (the server
    takes this process's environment when it is launched; a server running already is not told)."""
    if settled is None:
        yield
        return
    config, threads = settled
    os.environ[VARIABLE] = json.dumps({"tokenizer": dataclasses.asdict(config), "threads": threads})
    try:
        yield
    finally:
        os.environ.pop(VARIABLE, None)


def _files_now(config: TokenizerConfig) -> tuple:
    """The tokenizer's files as they are now: absolute path, size and modification time of each. A tokenizer built
    from them is the one asked for only while they are unchanged: a long-lived process may run again after a file
    was rewritten, or from another working directory."""
    return tuple((path, (found := os.stat(path)).st_size, found.st_mtime_ns) for path in tokenizer_files(config))


def prebuilt(config: TokenizerConfig, threads: int) -> TextTokenizer | None:
    """The tokenizer the server built, when it is the one asked for, from the same files (its library's threads
    bounded in this worker, as a build here would have bounded them); else None."""
    try:
        if _built is None or _built[0] != (config, threads) or _built[1] != _files_now(config):
            return None
    except (OSError, UserError):  # a file gone: the worker's own build says what is wrong
        return None
    limit_rayon_threads(threads)
    return _built[2]


def _build_offered() -> None:
    """In the server, at its start: build the tokenizer its environment names, silently (see the module docstring)."""
    global _built
    offered = os.environ.pop(VARIABLE, None)
    if not offered:
        return
    logging.disable(logging.CRITICAL)
    try:
        record = json.loads(offered)
        settled = (TokenizerConfig(**record["tokenizer"]), record["threads"])
        if settled_encoder(settled[0]) != settled[0]:
            return  # its check is no longer cached: building it would encode here (the check), starting a pool
        files = _files_now(settled[0])
        _built = (settled, files, select_encoder(settled[0], (), settled[1])[0])
    except Exception:  # noqa: BLE001 - each worker then builds its own and reports what goes wrong
        _built = None
    finally:
        logging.disable(logging.NOTSET)


_build_offered()
