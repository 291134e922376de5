"""How a tokenize run starts its worker processes: forked from a server process that has already imported what a
worker runs, where the platform has one (Linux, macOS); spawned elsewhere.

Why a server: a spawned worker is a fresh interpreter that imports numpy, the readers, the index writer and the
tokenizer libraries before it can build its tokenizer, about 0.3 s of CPU each. Sixteen workers starting at once on
a node whose CPUs share cores took 0.65–0.97 s to be ready, a tenth of a 2 GB run. Forked from the server they skip
the imports, and the build of the tokenizer when the server has built the run's
(:mod:`corpus.tokenize.server_tokenizer`; ``bench/worker_start.py`` times the ways side by side, its figures are in
``bench/RESULTS.md``).

NOTE: never forked from the run's own process: a forked child would inherit the rayon thread pools of the
tokenizer libraries without their threads, and hang. The server imports, and builds the run's tokenizer when the
run that launches it names one, but encodes nothing, so it has no pool to pass on.
"""

from __future__ import annotations

import multiprocessing
import multiprocessing.context
import os
import signal
import threading
from collections.abc import Mapping
from multiprocessing import forkserver
from multiprocessing.connection import wait

from corpus.tokenize.server_tokenizer import Settled, offered_to_server

#: What the server imports once for every worker it forks: the part loop and the encoder (with numpy, the readers
#: and the index writer), the run's tokenizer built once (:mod:`corpus.tokenize.server_tokenizer`) and the modules
#: that build each tokenizer family. A name that does not import (a library not installed) is skipped by the server;
#: the worker imports what it needs itself.
PRELOADED = (
    "corpus.tokenize.pool",
    "corpus.tokenize.server_tokenizer",
    "corpus.tokenizers.gigatoken",
    "corpus.tokenizers.huggingface",
    "corpus.tokenizers.sentencepiece",
    "corpus.tokenizers.tiktoken",
)


def worker_context(settled: Settled | None = None) -> multiprocessing.context.BaseContext:
    """The multiprocessing context that tokenize's workers start from (see the module docstring), its server running.

    The server is started by the first call of the process and then serves every later run of the process, with
    the modules above imported and, when that first call names the run's tokenizer (``settled``), that tokenizer
    built (:mod:`corpus.tokenize.server_tokenizer`). A server started before with other modules (by another library)
    still forks workers that work: they import and build what they miss."""
    if "forkserver" not in multiprocessing.get_all_start_methods():
        return multiprocessing.get_context("spawn")
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(list(PRELOADED))
    with offered_to_server(settled):
        forkserver.ensure_running()
    return context


def adopt_environment(environment: Mapping[str, str]) -> None:
    """Make ``environment`` (the run's, when it started its workers) this worker's own.

    A worker forked by the server has the server's environment, which is the environment of the process at the time
    its first worker started: in a long-lived process, an earlier run's, which may lack what this run was given (an
    object store's endpoint and keys, a cache folder, the library thread counts)."""
    if dict(os.environ) != environment:
        os.environ.clear()
        os.environ.update(environment)


def die_with_the_run() -> None:
    """Kill this worker as soon as the run that started it is gone (``kill -9`` included), from a thread watching
    the pipe the run holds open for that (:func:`multiprocessing.parent_process`'s sentinel). The run is not this
    worker's parent when the server forked it, so the kernel's parent-death signal would watch the wrong process."""
    run = multiprocessing.parent_process()
    if run is None:
        return

    def watch() -> None:
        wait([run.sentinel])
        os.kill(os.getpid(), signal.SIGKILL)

    threading.Thread(target=watch, daemon=True, name="blendforge-run-watch").start()


def join_run(environment: Mapping[str, str]) -> None:
    """What every worker process of a run does first, whichever pool started it: go when the run goes
    (:func:`die_with_the_run`), and take the run's ``environment`` (:func:`adopt_environment`)."""
    die_with_the_run()
    adopt_environment(environment)
