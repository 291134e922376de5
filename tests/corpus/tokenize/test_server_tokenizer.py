"""The run's tokenizer built once, by the server that forks the workers: a run's workers take it instead of building
their own, encode with it exactly as with their own, and a tokenizer the server cannot build leaves it silent."""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import sys

import pytest

from corpus.tokenize import server_tokenizer, worker
from corpus.tokenize.worker import WorkerSpec
from corpus.tokenizers import select_encoder, settled_encoder
from tests.conftest import REPO
from tests.corpus.tokenize.support import TOKENIZER, hf_tokenizer, output_bytes


@pytest.fixture
def server(monkeypatch):
    """This process as a server about to build what the environment offers (restored afterwards)."""
    monkeypatch.setattr(server_tokenizer, "_built", None)
    for name in ("RAYON_NUM_THREADS", "TOKENIZERS_PARALLELISM", server_tokenizer.VARIABLE):
        monkeypatch.delenv(name, raising=False)
    return server_tokenizer


def test_the_server_builds_the_offered_tokenizer_and_gives_it_only_for_the_same_settings_and_files(server, tmp_path):
    model = tmp_path / "tokenizer.json"
    shutil.copy(TOKENIZER, model)
    select_encoder(hf_tokenizer(model=str(model)))  # its check cached, as a run's first run leaves it
    config = settled_encoder(hf_tokenizer(model=str(model)))
    assert config.encoder == "gigatoken"
    with server.offered_to_server((config, 1)):
        server._build_offered()
    assert server.VARIABLE not in os.environ  # taken out: the workers forked later keep their run's environment
    built = server.prebuilt(config, 1)
    assert built is not None and built.encode_batch_flat(["def f(x):\n    return x"])[0].size > 0
    assert os.environ["RAYON_NUM_THREADS"] == "1"  # bounded in the worker, as a build of its own would bound it
    assert server.prebuilt(config, 2) is None
    assert server.prebuilt(config.replace(encoder="reference"), 1) is None
    os.utime(model, ns=(0, model.stat().st_mtime_ns + 1))  # rewritten since: a long-lived process runs again
    assert server.prebuilt(config, 1) is None


def test_an_encoder_process_of_a_compressed_stream_takes_the_servers_tokenizer_too(server, monkeypatch):
    """The other pool of a run (one ``.gz``/``.zst`` stream: this process reads, encoder processes encode)."""
    select_encoder(hf_tokenizer())  # its check cached
    config = settled_encoder(hf_tokenizer())
    with server.offered_to_server((config, 1)):
        server._build_offered()
    monkeypatch.setattr(worker, "_encoder", None)
    worker.start_worker(WorkerSpec(config, 1, ("text",), None, "int32"), dict(os.environ))
    assert worker._encoder.tokenizer is server.prebuilt(config, 1) is not None


def test_a_tokenizer_whose_check_is_not_cached_is_not_built_by_the_server(server, tmp_path, monkeypatch):
    """Choosing its encoder would encode in the server (the check), and a server that has encoded in parallel holds a
    thread pool that its forked workers would inherit without its threads."""
    monkeypatch.setenv("BLENDFORGE_TOKENIZER_CHECKS_DIR", str(tmp_path / "empty-checks"))

    chosen = []
    monkeypatch.setattr(server, "select_encoder", lambda *args: chosen.append(args))
    with server.offered_to_server((hf_tokenizer(encoder="gigatoken"), 1)):
        server._build_offered()
    assert chosen == [] and server.prebuilt(hf_tokenizer(encoder="gigatoken"), 1) is None


def test_a_tokenizer_the_server_cannot_build_is_left_to_the_workers_without_a_word(server, tmp_path, caplog):
    caplog.set_level(logging.DEBUG)
    missing = hf_tokenizer(model=str(tmp_path / "missing.json"), encoder="gigatoken")
    os.environ[server.VARIABLE] = json.dumps({"tokenizer": {**vars(missing)}, "threads": 1})
    server._build_offered()
    assert server.prebuilt(missing, 1) is None and server.VARIABLE not in os.environ
    assert caplog.records == []


#: A run of parts in a fresh process (so that it launches the server), its debug records on stderr.
RUN = """
import logging, sys
from pathlib import Path
from corpus.tokenize.run import tokenize
from tests.corpus.tokenize.support import CODE, WEB, config
logging.basicConfig(level=logging.DEBUG, format="%(message)s")
tokenize(config(Path(sys.argv[1]), [WEB, CODE], name=sys.argv[2], workers=int(sys.argv[3]), min_part_bytes=200000))
"""


def test_a_runs_workers_take_the_tokenizer_the_server_built_and_write_the_same_bytes(tmp_path):
    """The first run (one process) caches the tokenizer's check, which tells the second which tokenizer its workers
    will use before it builds its own."""
    command = [sys.executable, "-c", RUN, str(tmp_path)]
    environment = {**os.environ, "PYTHONPATH": str(REPO)}
    subprocess.run([*command, "one", "1"], check=True, capture_output=True, env=environment)
    parts = subprocess.run([*command, "parts", "3"], check=True, capture_output=True, text=True, env=environment)
    ready = [line for line in parts.stderr.splitlines() if ": ready " in line]
    assert len(ready) == 2 and all(line.endswith("with the server's tokenizer") for line in ready), parts.stderr
    assert output_bytes(tmp_path / "parts", ["text"]) == output_bytes(tmp_path / "one", ["text"])
