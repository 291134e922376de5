"""Object storage vs local disk, side by side in one run: ``corpus tokenize`` reading from a local S3 server (moto,
in its own process) vs the same file on local disk, and the loader's tokens/s on a remote vs a local blend, with a
cold and a warm chunk cache.

    python -m bench.data                                  # once: real prose and code from Debian packages
    PYTHONPATH=. python bench/object_storage.py [--corpus prose_large] [--rounds 3] [--loader-rounds 5]
        [--client-cores 2] [--tokenizer DIR]

Tokenize (fresh processes, cl100k tokenizer.json, ``--workers 0``): (a) local input, local output; (b) the same
file from the S3 server, local output; (c) S3 input and S3 output (staged, then uploaded). MB/s are input bytes
over the process's wall time; outputs are compared byte for byte. Beside them, the input object read front to back
in this process (1 MB reads, as the JSONL reader makes) through one streaming GET, and through ranged blocks
fetched ahead: wall time, the reader's CPU (all its threads) and the server's; and a fresh process's first answer
from the store (import, client, a HEAD) through the S3 client and through s3fs.

Loader (one process, seq 4096, micro-batch 8, index maps built before timing, every sample of the request read
once, timed from the first batch on: the first batch, which opens the pair, is reported apart): a blend on the
pair (a) wrote; the same blend on the pair (c) uploaded, with an empty chunk cache (cold: every chunk comes from
the server during the pass) and with the cache the cold pass filled (warm); and the alternative to a chunk cache,
a node-local copy on first use (the ``.bin`` downloaded whole, then read locally: tokens over download + pass).

``--client-cores N`` runs this process and its children (the tokenize runs, the loader) on N of the allowed
cores and the server on the others, as a real store's servers are not on the encoder's cores; on a machine of
2 cores it cannot, and the server shares them.

Rounds interleave the cases (the loader's, which are short, more rounds and warm/local twice in each); the
best of each is kept. Prints the machine's load (other users share its cores), the server's CPU seconds per
tokenize run (median) and a table last.
Targets: tokenize from S3 >= 0.8x local, warm loader >= 0.9x local, cold >= 10 M tokens/s.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import NamedTuple

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.data import CACHE  # noqa: E402
from bench.tokenizer_families import files as tokenizer_files  # noqa: E402
from corpus.core.cores import available_cores  # noqa: E402

BUCKET = "bench"
SEQ = 4096
MICRO_BATCH = 8


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def split_cores(client_cores: int | None) -> tuple[set[int] | None, set[int] | None]:
    """(this process's cores, the server's) for ``--client-cores``: the first N allowed cores and the rest;
    (None, None) when not asked. Exits with a message when fewer than N + 1 cores are allowed."""
    if client_cores is None:
        return None, None
    allowed = sorted(os.sched_getaffinity(0))
    if len(allowed) <= client_cores:
        sys.exit(f"--client-cores {client_cores}: this process may use {len(allowed)} cores, so none would be "
                 "left for the server; give fewer, or leave the option out to share the cores")
    return set(allowed[:client_cores]), set(allowed[client_cores:])


def start_server(work: Path, cores: set[int] | None = None) -> subprocess.Popen:
    """moto's S3 server in its own process (on ``cores`` when given), and this process's environment pointed
    at it."""
    port = _free_port()
    server = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    if cores is not None:
        os.sched_setaffinity(server.pid, cores)
    os.environ.update(AWS_ENDPOINT_URL=f"http://127.0.0.1:{port}", AWS_ACCESS_KEY_ID="bench",
                      AWS_SECRET_ACCESS_KEY="bench", AWS_DEFAULT_REGION="us-east-1",
                      BLENDFORGE_STAGING_DIR=str(work / "staging"), BLENDFORGE_CACHE_DIR=str(work / "maps"))
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            time.sleep(0.2)
    import boto3

    boto3.client("s3").create_bucket(Bucket=BUCKET)
    return server


def child_environment() -> dict[str, str]:
    """This process's environment with the repository first on the children's import path."""
    return {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, (str(REPO), os.environ.get("PYTHONPATH"))))}


def tokenize(source: str, prefix: str, work: Path, tokenizer: str) -> float:
    """Seconds of one ``corpus tokenize`` process."""
    command = [sys.executable, "-m", "cli.corpus", "tokenize", "--input", source, "--output-prefix", prefix,
               "--json-keys", "text", "--tokenizer-type", "HuggingFaceTokenizer", "--tokenizer-model", tokenizer,
               "--append-eod", "--quiet"]
    environment = {**child_environment(), "BLENDFORGE_OBJECT_CACHE_DIR": str(work / "tok-cache")}
    began = time.perf_counter()
    done = subprocess.run(command, env=environment, capture_output=True, text=True)
    if done.returncode:
        sys.exit(f"corpus tokenize of {source} exited {done.returncode}:\n{done.stderr}")
    return time.perf_counter() - began


def read_object(url: str, stream: bool) -> tuple[float, float]:
    """(seconds, this process's CPU seconds) to read the object ``url`` front to back in 1 MB reads, as the JSONL
    reader does: through one streaming GET, or ranged blocks fetched ahead (what other stores get)."""
    from corpus import storage
    from corpus.storage import remote_file

    found = storage.info(url)
    remote_file._first_blocks.clear()  # both ways fetch the first block
    began, cpu = time.perf_counter(), time.process_time()
    with remote_file.RemoteReader(found, stream=stream) as reader:
        while reader.read(1 << 20):
            pass
    return time.perf_counter() - began, time.process_time() - cpu


#: Storage options that leave S3 to s3fs (the S3 client does not take ``version_aware``).
S3FS_ONLY = {"version_aware": False}


def first_answer(url: str, options: dict) -> float:
    """Seconds a fresh process takes from importing the storage layer to the first answer about ``url`` (a
    HEAD): the start-up a command pays before its first byte, with the S3 client or with s3fs."""
    script = ("import json, sys, time; began = time.perf_counter(); from corpus import storage; "
              "storage.configure(json.loads(sys.argv[2])); storage.info(sys.argv[1]); "
              "print(time.perf_counter() - began)")
    done = subprocess.run([sys.executable, "-c", script, url, json.dumps(options)], capture_output=True, text=True,
                          env=child_environment(), check=True)
    return float(done.stdout)


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds process ``pid`` has used so far (from /proc; 0 where there is none)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Pass(NamedTuple):
    """One loader pass: seconds and tokens from its first batch on, tokens/s over the whole pass (first batch
    included), and the first batch's seconds."""

    seconds: float
    tokens: int
    whole_rate: float
    first_batch_seconds: float


def loader_pass(prefix: str, samples: int) -> Pass:
    """One pass of a BlendLoader over a one-source blend on ``prefix`` (maps built first), timed from its first
    batch on: opening the pair (for a remote one, a HEAD per file: tens of ms, once per process) is the first
    batch's, measured apart."""
    from corpus.blending.datasets import SampleCounts
    from corpus.blending.loader import BlendLoader, build_datasets
    from corpus.blending.schema import blend_from_dict

    blend = blend_from_dict({"seq_length": SEQ, "seed": 1234, "split": "100,0,0",
                             "sources": [{"name": "prose", "prefix": prefix}]})
    train, _, _, built = build_datasets(blend, SampleCounts(samples))
    batches = iter(BlendLoader(train, MICRO_BATCH, blend_fingerprint=built.fingerprint))
    opened = time.perf_counter()
    first = next(batches)["tokens"].numel()
    began = time.perf_counter()
    tokens = sum(batch["tokens"].numel() for batch in batches)
    ended = time.perf_counter()
    return Pass(ended - began, tokens, (first + tokens) / (ended - opened), began - opened)


def copy_first(work: Path, pair: str, samples: int) -> float:
    """Seconds to download the remote pair whole and read the samples from the copy."""
    from corpus import storage

    shutil.rmtree(work / "copy", ignore_errors=True)
    (work / "copy").mkdir()
    for small in (".idx", ".meta.json"):  # the index and the sidecar (the loader checks its tokenizer)
        storage.download(f"s3://{BUCKET}/out/prose{pair}{small}", work / "copy" / f"out{pair}{small}")
    began = time.perf_counter()
    storage.download(f"s3://{BUCKET}/out/prose{pair}.bin", work / "copy" / f"out{pair}.bin")
    copied = time.perf_counter() - began
    return copied + loader_pass(str(work / "copy" / f"out{pair}"), samples).seconds


def measure(args: argparse.Namespace, work: Path, server_pid: int) -> dict[str, list[float]]:
    from corpus import storage
    from corpus.storage import object_cache

    source = CACHE / f"{args.corpus}.jsonl"
    remote_input = f"s3://{BUCKET}/in/{source.name}"
    storage.upload(source, remote_input)
    runs: dict[str, list[float]] = {}
    cases = (("tokenize local", str(source), str(work / "local" / "out")),
             ("tokenize s3 in", remote_input, str(work / "s3in" / "out")),
             ("tokenize s3 in+out", remote_input, f"s3://{BUCKET}/out/prose"))
    for _ in range(args.rounds):
        for name, options in (("first answer client", {}), ("first answer s3fs", S3FS_ONLY)):
            runs.setdefault(name, []).append(first_answer(remote_input, options))
        for name, stream in (("read stream", True), ("read blocks", False)):
            served = cpu_seconds(server_pid)
            seconds, cpu = read_object(remote_input, stream)
            runs.setdefault(name, []).append(seconds)
            runs.setdefault(f"{name} cpu", []).append(cpu)
            runs.setdefault(f"{name} server cpu", []).append(cpu_seconds(server_pid) - served)
        for name, given, prefix in cases:
            served = cpu_seconds(server_pid)
            runs.setdefault(name, []).append(tokenize(given, prefix, work, args.tokenizer))
            runs.setdefault(f"{name} server cpu", []).append(cpu_seconds(server_pid) - served)
    pair = "_text_document"
    for suffix in (".bin", ".idx"):
        remote = storage.read_bytes(f"s3://{BUCKET}/out/prose{pair}{suffix}")
        assert remote == (work / "local" / f"out{pair}{suffix}").read_bytes() == \
            (work / "s3in" / f"out{pair}{suffix}").read_bytes(), f"outputs differ ({suffix})"
    runs["bytes"] = [source.stat().st_size]
    os.environ["BLENDFORGE_OBJECT_CACHE_DIR"] = str(work / "chunks")
    local, remote = str(work / "local" / f"out{pair}"), f"s3://{BUCKET}/out/prose{pair}"
    if args.samples is None:  # one epoch: a cold pass needs every chunk, as a first epoch of training does
        from corpus.indexed import IndexedReader

        with IndexedReader(local) as reader:
            args.samples = reader.num_tokens // (SEQ + 1)
    for _ in range(args.loader_rounds):  # passes are short: several rounds, and warm/local twice in each
        for name, prefix in (("loader local", local), ("loader s3 cold", remote), ("loader s3 warm", remote),
                             ("loader s3 warm", remote), ("loader local", local)):
            if name == "loader s3 cold":
                shutil.rmtree(work / "chunks", ignore_errors=True)
                storage.local_file(f"{remote}.idx")  # the .idx copy is part of resolving, untimed
            done = loader_pass(prefix, args.samples)
            tokens = done.tokens
            runs.setdefault(name, []).append(done.tokens / done.seconds)
            runs.setdefault(f"{name} first batch", []).append(done.first_batch_seconds)
            runs.setdefault(f"{name} whole", []).append(done.whole_rate)
        runs.setdefault("loader s3 copy first", []).append(tokens / copy_first(work, pair, args.samples))
    runs["cached MB"] = [sum(p.stat().st_size for p in object_cache.cache_root().rglob("*.chunk")) / 1e6]
    return runs


def _median(values: list[float]) -> float:
    return sorted(values)[len(values) // 2]


def report(runs: dict[str, list[float]], args: argparse.Namespace) -> None:
    megabytes = runs["bytes"][0] / 1e6
    speed = {name: megabytes / min(runs[name]) for name in ("tokenize local", "tokenize s3 in", "tokenize s3 in+out")}
    loader = {name: max(runs[name]) / 1e6 for name in ("loader local", "loader s3 cold", "loader s3 warm",
                                                       "loader s3 copy first")}
    cores = "the server on its own cores" if args.client_cores else "the server on the same cores"
    print(f"\n{args.corpus}.jsonl {megabytes:.1f} MB, best of {args.rounds} (loader: of {args.loader_rounds}); "
          f"cores {available_cores()} ({cores}), load {os.getloadavg()[0]:.1f}; "
          f"loader: seq {SEQ}, micro-batch {MICRO_BATCH}, "
          f"{args.samples:,} samples, "
          f"{runs['cached MB'][0]:.0f} MB in the chunk cache; outputs byte-identical")
    print(f"{'case':<22} {'figure':>14} {'x local':>8}  target (loader: from its first batch on; the whole pass, "
          "first batch included, and that batch's median time beside it)")
    for name, target in (("tokenize local", ""), ("tokenize s3 in", ">= 0.8"), ("tokenize s3 in+out", ">= 0.8")):
        server = _median(runs[f"{name} server cpu"])
        print(f"{name:<22} {speed[name]:>9.1f} MB/s {speed[name] / speed['tokenize local']:>8.2f}  {target:<18} "
              f"{min(runs[name]):.2f} s; the server's CPU {server:.2f} s")
    client, s3fs = _median(runs["first answer client"]), _median(runs["first answer s3fs"])
    print(f"{'first answer':<22} {client:>9.2f} s    {'':>8}  S3 client; s3fs {s3fs:.2f} s (import, client, a HEAD; "
          "fresh processes, median)")
    for name, how in (("read stream", "one streaming GET"), ("read blocks", "ranged blocks, read ahead")):
        print(f"{name:<22} {megabytes / min(runs[name]):>9.1f} MB/s {'':>8}  {how:<26} {min(runs[name]):.2f} s; "
              f"CPU: the reader's {_median(runs[f'{name} cpu']):.2f} s, the server's "
              f"{_median(runs[f'{name} server cpu']):.2f} s")
    for name, target in (("loader local", ""), ("loader s3 cold", ">= 10 M (whole)"), ("loader s3 warm", ">= 0.9"),
                         ("loader s3 copy first", "(the alternative)")):
        firsts = sorted(runs.get(f"{name} first batch", []))
        first = (f"whole pass {max(runs[f'{name} whole']) / 1e6:.1f} Mtok/s, first batch "
                 f"{1e3 * firsts[len(firsts) // 2]:.0f} ms") if firsts else ""
        print(f"{name:<22} {loader[name]:>7.1f} Mtok/s {loader[name] / loader['loader local']:>8.2f}  {target:<18} "
              f"{first}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", default="prose_large", help="bench/.cache/<corpus>.jsonl (python -m bench.data)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--samples", type=int, help="loader samples of seq 4096 per pass (default: one epoch)")
    parser.add_argument("--loader-rounds", type=int, default=5)
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/blendforge-bench-s3"))
    parser.add_argument("--client-cores", type=int, help="run the client on this many cores, the server on the rest")
    parser.add_argument("--tokenizer", help="a tokenizer.json or its folder (default: the family table's cl100k)")
    args = parser.parse_args()
    args.tokenizer = args.tokenizer or tokenizer_files()["cl100k_json"]
    shutil.rmtree(args.workdir, ignore_errors=True)
    args.workdir.mkdir(parents=True)
    client, server_cores = split_cores(args.client_cores)
    server = start_server(args.workdir, server_cores)
    if client is not None:
        os.sched_setaffinity(0, client)  # children (the tokenize runs) inherit it
    try:
        runs = measure(args, args.workdir, server.pid)
    finally:
        server.terminate()
        server.wait()
    report(runs, args)


if __name__ == "__main__":
    main()
