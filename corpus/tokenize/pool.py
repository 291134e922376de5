"""The processes that write a run's parts side by side: this process (a thread) and worker processes.

Each worker builds the run's tokenizer once, then asks for a part, writes it (:func:`corpus.tokenize.part.run_part`),
reports progress after every batch, says when it is done and asks for the next. What they say arrives as
:class:`Event` s in the order it happens; the run decides which part goes where. The calling process takes parts too,
in a thread with the tokenizer it built at start-up, so a run never waits for a process to start before encoding.

NOTE: workers are forked by a server process that has imported what they run, never by this process
(:mod:`corpus.tokenize.processes` says why), and each kills itself when this process is gone: a worker never
outlives a run killed with ``kill -9`` and never writes beside the run that resumes it.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import pickle
import signal
import threading
import time
import traceback
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from typing import Any, Callable

from corpus.core.errors import UserError
from corpus.tokenize.part import Offer, PartTask, run_part
from corpus.tokenize.processes import join_run, worker_context
from corpus.tokenize.server_tokenizer import Settled, prebuilt
from corpus.tokenize.stats import Counters
from corpus.tokenize.worker import BatchEncoder, WorkerSpec
from corpus.tokenizers import TextTokenizer, TokenizerConfig, select_encoder

log = logging.getLogger(__name__)


class _Stopped(BaseException):
    """Raised in the local worker's thread to stop its part when the run stops. Private, and a ``BaseException`` so
    that no ``except Exception`` in the part swallows it: the worker's loop ends on it."""


@dataclass
class Event:
    """What a worker said: ``kind`` is ``ready`` (it wants a part), ``progress`` (``value``: the part's counters and
    the worker's peak RSS in KB), ``done`` (``value``: the part's :class:`~corpus.tokenize.part.PartResult`),
    ``failed`` (``value``: the exception) or ``died`` (the worker process ended without a word)."""

    kind: str
    worker: int
    part: int = -1
    value: Any = None


def _lowest_level() -> int:
    """The lowest level that any of this project's loggers logs at in this process: the level from which a worker
    sends this project's records (this process's loggers then keep what they would keep of their own)."""
    names = [name for name in logging.root.manager.loggerDict if name.split(".")[0] == "corpus"]
    return min(logging.getLogger(name).getEffectiveLevel() for name in ["corpus", *names])


class _SharedEnd:
    """A worker's end of its pipe, sent on by the part loop and by the log records of any of its threads."""

    def __init__(self, connection: Connection) -> None:
        self.connection, self.lock = connection, threading.Lock()

    def send(self, message: tuple) -> None:
        with self.lock:
            self.connection.send(message)

    def recv(self) -> Any:
        return self.connection.recv()


class _LogToRun(logging.Handler):
    """Sends a worker's log records to the run, which logs them as its own: they take the run's format and go where
    its logging goes, not to the stderr of the server that forked the worker."""

    def __init__(self, end: _SharedEnd) -> None:
        super().__init__()
        self.end = end

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self.end.send(("log", -1, (record.levelno, record.name, record.getMessage())))
        except Exception:  # noqa: BLE001 - logging never raises into the code that logs
            self.handleError(record)


def _serve(connection: Connection | _SharedEnd, encoder_for: Callable[[WorkerSpec], BatchEncoder],
           stop: threading.Event | None = None, offer: Offer | None = None) -> None:
    """A worker's loop: ask for a part, write it, say how it went, until told to end (None). ``encoder_for(spec)``:
    the encoder of a task's tokenizer; ``stop``: a local worker's signal to give up its part; ``offer``: the input
    check, in the process that holds it."""

    def report(counters: Counters, peak_rss_kb: int) -> None:
        if stop is not None and stop.is_set():
            raise _Stopped
        connection.send(("progress", task.part.index, (counters, peak_rss_kb)))

    while True:
        connection.send(("ready", -1, None))
        task: PartTask | None = connection.recv()
        if task is None:
            return
        try:
            result = run_part(task, encoder_for(task.spec), report, offer)
        except _Stopped:
            return
        except UserError as error:
            connection.send(("failed", task.part.index, _portable(error)))
            continue
        except Exception as error:  # noqa: BLE001 - a bug: its traceback goes to the run, which raises it
            text = "".join(traceback.format_exception(error))
            connection.send(("failed", task.part.index, RuntimeError(f"a tokenize worker failed:\n{text}")))
            continue
        connection.send(("done", task.part.index, result))


def _portable(error: UserError) -> UserError:
    """``error`` as the run can receive it: itself when it survives pickling, else a :class:`UserError` with its
    message (an error class whose constructor takes other arguments than its message cannot be rebuilt)."""
    try:
        pickle.loads(pickle.dumps(error))
    except Exception:  # noqa: BLE001 - any failure to rebuild it
        return UserError(str(error))
    return error


def _worker_main(connection: Connection, settled: Settled | None, environment: dict[str, str],
                 log_level: int) -> None:
    """Entry point of a worker process, in the run's ``environment``, its records logged by the run (this project's
    from ``log_level`` up, other libraries' warnings and errors). The run starts its workers before it has chosen and
    built its own tokenizer, so that their start-up overlaps its own; a worker takes the ``settled`` tokenizer (the
    one the run will choose, as far as it knows) from the server that forked it
    (:mod:`corpus.tokenize.server_tokenizer`) or builds it at once, else builds the one its first part names when that
    part comes."""
    started = time.perf_counter()
    join_run(environment)
    end = _SharedEnd(connection)
    logging.basicConfig(level=logging.WARNING, handlers=[_LogToRun(end)], force=True)
    logging.getLogger("corpus").setLevel(log_level)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C stops the run, which stops its workers
    tokenizers: dict[Settled, TextTokenizer] = {}
    encoders: dict[WorkerSpec, BatchEncoder] = {}

    def tokenizer_for(config: TokenizerConfig, threads: int) -> TextTokenizer:
        if (config, threads) not in tokenizers:
            tokenizers[config, threads] = prebuilt(config, threads) or select_encoder(config, (), threads)[0]
        return tokenizers[config, threads]

    def encoder_for(spec: WorkerSpec) -> BatchEncoder:
        if spec not in encoders:
            encoders[spec] = BatchEncoder(spec, tokenizer_for(spec.tokenizer, spec.threads))
        return encoders[spec]

    ready = "to build the tokenizer its first part names"
    if settled is not None:
        try:
            from_server = tokenizer_for(*settled) is prebuilt(*settled)
            ready = "with the server's tokenizer" if from_server else "its tokenizer built"
        except Exception:  # noqa: BLE001 - the run's own choice decides: this error, if it is one, comes with a part
            pass
    log.debug("worker process %d: ready %.2f s after it was forked, %s", os.getpid(), time.perf_counter() - started,
              ready)
    _serve(end, encoder_for)


class PartPool:
    """``processes`` worker processes, started at once, and (:meth:`add_local`) a thread of this process."""

    def __init__(self, processes: int, settled: Settled | None = None) -> None:
        """``settled``: the tokenizer configuration and threads the run will most likely give its parts
        (:func:`corpus.tokenizers.settled_encoder`): the server that forks the workers builds it once, if this pool
        launches the server, else every worker builds it as soon as it has started."""
        context = worker_context(settled)
        environment, log_level = dict(os.environ), _lowest_level()
        self.connections: list[Connection] = []
        self.processes: list[multiprocessing.Process | None] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        for _ in range(processes):
            mine, theirs = context.Pipe()
            process = context.Process(target=_worker_main, args=(theirs, settled, environment, log_level),
                                      daemon=True, name="blendforge-part-worker")
            process.start()
            theirs.close()
            self.connections.append(mine)
            self.processes.append(process)
        self._sentinels = {process.sentinel: index for index, process in enumerate(self.processes) if process}
        self._gone: set[int] = set()

    def add_local(self, encoder: BatchEncoder, offer: Offer | None = None) -> None:
        """Write parts in a thread of this process too, with ``encoder`` (and hand what it writes to ``offer``, the
        input check)."""
        mine, theirs = multiprocessing.Pipe()
        self._thread = threading.Thread(target=_serve, args=(theirs, lambda spec: encoder, self._stop, offer),
                                        daemon=True, name="blendforge-part")
        self._thread.start()
        self.connections.append(mine)
        self.processes.append(None)

    def events(self, timeout: float | None = None) -> list[Event]:
        """What the workers said since the last call (waiting up to ``timeout`` seconds for something)."""
        listening = [connection for index, connection in enumerate(self.connections) if index not in self._gone]
        sentinels = [sentinel for sentinel, index in self._sentinels.items() if index not in self._gone]
        found: list[Event] = []
        for item in wait([*listening, *sentinels], timeout):
            worker = self._sentinels[item] if item in self._sentinels else self.connections.index(item)
            if worker in self._gone or (item is self.connections[worker] and self._read(worker, found)):
                continue
            while self.connections[worker].poll() and self._read(worker, found):  # its last words first
                pass
            self._gone.add(worker)
            found.append(Event("died", worker))
        return found

    def _read(self, worker: int, found: list[Event]) -> bool:
        """Read one message of ``worker`` into ``found`` (a log record is logged here instead); False when its end
        of the pipe is closed."""
        try:
            kind, part, value = self.connections[worker].recv()
        except (EOFError, OSError):
            return False
        if kind == "log":
            level, name, message = value
            logging.getLogger(name).log(level, message)
        else:
            found.append(Event(kind, worker, part, value))
        return True

    def is_local(self, worker: int) -> bool:
        """Whether ``worker`` is this process's thread."""
        return self.processes[worker] is None

    def assign(self, worker: int, task: PartTask) -> None:
        """Give a part to a worker that said it is ready."""
        self.connections[worker].send(task)

    def describe(self, worker: int) -> str:
        process = self.processes[worker]
        if process is None:
            return "this process"
        process.join(1)
        return f"worker process {process.pid}, exit code {process.exitcode}"

    def close(self) -> None:
        """End every worker: the processes are killed (a busy one's part keeps its checkpoint), the thread told to
        stop after its current batch."""
        if self._stop.is_set():
            return
        self._stop.set()
        for process in self.processes:
            if process is not None and process.is_alive():
                process.kill()
        if self._thread is not None:
            try:
                self.connections[self.processes.index(None)].send(None)
            except OSError:
                pass
            self._thread.join()
        for process in self.processes:
            if process is not None:
                process.join()
        for connection in self.connections:
            connection.close()
