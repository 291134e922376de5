"""``corpus tokenize`` on 1 to N cores, whole process, default settings, beside the engine's ceiling, gigatoken's own
reader and a Megatron-style pipeline on the same cores.

    python -m bench.installed_text --min-bytes 2e9          # once: ≥ 2 GB of installed sources and docs as JSONL
    python -m bench.tokenize_scaling --tokenizer-model DIR/tokenizer.json --cores 1 2 4 8 16
    python -m bench.tokenize_scaling --case zst --tokenizer-type SentencePieceTokenizer --tokenizer-model x.model
    python -m bench.tokenize_scaling --input code.jsonl --tokenizer-model DIR/tokenizer.json --cores 2 \
        --methods ours raw --variant "--threads-per-worker 2" --repeat 5 --repeat-cores 2   # another JSONL file

Every measurement is a fresh process bound to the first K CPUs of an order that takes one thread of every physical
core before a second (so 8 of 16 CPUs on 8 cores × 2 threads are 8 cores); the CPU topology is printed. Methods:

- ``ours``: ``corpus tokenize`` with its default settings (``--variant "--workers 8"`` adds runs with options), its
  outputs checked byte-identical across every run through the sidecar's sha256 of the ``.bin`` and ``.idx``;
- ``engine``: the ceiling: gigatoken's batch encode, all threads of the CPUs, on the same texts already in memory
  (decoding the JSON and everything else left out of the clock), in calls of :data:`ENGINE_BATCH_BYTES` of text;
- ``raw``: gigatoken's own JSONL reader, a fresh process, writing nothing (plain JSONL only);
- ``megatron``: ``Pool(K).imap(chunksize=32)`` of per-document encodes with the reference library, written with
  megatron-core's ``IndexedDatasetBuilder`` (Megatron's ``preprocess_data.py``), on the first ``--megatron-bytes``
  of the text: it is compared by rate.

CPU time: what a run used of its CPUs (``/proc/stat``, every process of its tree; the engine: its encode calls only),
per input byte. The engine's CPU per byte over ours ("share") is the most ``/engine`` can reach with every CPU busy
all the time; "busy" is how much of its CPUs' time ours used: ``/engine`` is about share × busy over the engine's own.

Peak memory is the largest sum over the whole process tree (every worker, the server that forks them): of the resident
sets (RSS, every 50 ms), and of the proportional sets (PSS, every 200 ms), which count a page the forked workers share
once.
Cases: ``jsonl`` (one file, ``scaled.jsonl``) and ``zst`` (the same text in ~32 MB ``.jsonl.zst`` files). Results
go to ``$OUT/tokenize_scaling.json``; a short table comes last.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from bench.installed_text import FOLDER, build

REPO = Path(__file__).resolve().parents[1]


def cpu_order() -> tuple[list[int], str]:
    """The CPUs this process may use, one thread of each physical core first; and the topology in words."""
    allowed = sorted(os.sched_getaffinity(0))
    cores: dict[tuple[str, str], list[int]] = {}
    for cpu in allowed:
        topology = Path(f"/sys/devices/system/cpu/cpu{cpu}/topology")
        try:
            key = ((topology / "physical_package_id").read_text().strip(), (topology / "core_id").read_text().strip())
        except OSError:
            key = ("?", str(cpu))
        cores.setdefault(key, []).append(cpu)
    order = [cpus[rank] for rank in range(max(map(len, cores.values()))) for cpus in cores.values()
             if rank < len(cpus)]
    threads = {len(cpus) for cpus in cores.values()}
    return order, f"{len(allowed)} CPUs = {len(cores)} cores × {'/'.join(map(str, sorted(threads)))} thread(s)"


class TreeMemory:
    """The peaks of the summed memory of a process and all its descendants, sampled in a thread: resident sets (RSS,
    every 50 ms), which count a page shared by several processes in each of them (the imports and tokenizer that the
    server's forked workers share), and proportional sets (PSS, every 200 ms: a process's ``smaps_rollup`` costs
    about 0.4 ms per 300 MB), which count it once in all."""

    PAGE = os.sysconf("SC_PAGE_SIZE")

    def __init__(self, pid: int) -> None:
        self.pid, self.peak, self.peak_pss, self._done = pid, 0, 0, threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()

    def _tree(self) -> set[int]:
        parents: dict[int, int] = {}
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                try:
                    parents[int(entry)] = int(Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[1])
                except (OSError, IndexError, ValueError):
                    pass
        tree, grew = {self.pid}, True
        while grew:
            grown = tree | {pid for pid, parent in parents.items() if parent in tree}
            grew, tree = grown != tree, grown
        return tree

    def _rss(self, pid: int) -> int:
        return int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * self.PAGE

    @staticmethod
    def _pss(pid: int) -> int:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                return int(line.split()[1]) * 1024
        return 0

    def _sum(self, tree: set[int], measure) -> int:
        total = 0
        for pid in tree:
            try:
                total += measure(pid)
            except (OSError, IndexError, ValueError):  # it ended since the listing
                pass
        return total

    def _sample(self) -> None:
        samples = 0
        while not self._done.wait(0.05):
            tree = self._tree()
            self.peak = max(self.peak, self._sum(tree, self._rss))
            if samples % 4 == 0:
                self.peak_pss = max(self.peak_pss, self._sum(tree, self._pss))
            samples += 1

    def stop(self) -> tuple[int, int]:
        """The peaks: (RSS, PSS) in bytes."""
        self._done.set()
        self._thread.join()
        return self.peak, self.peak_pss


def busy_seconds(cpus: list[int]) -> tuple[float, float]:
    """CPU time spent so far on ``cpus`` by everything, and the kernel's part of it (user, nice, system, interrupts; not
    idle, I/O wait or the time a hypervisor took), from ``/proc/stat``: the difference over a run is what the run used
    of its CPUs, every process of its tree counted, on a machine that is otherwise idle."""
    wanted, busy, kernel = {f"cpu{cpu}" for cpu in cpus}, 0, 0
    for line in Path("/proc/stat").read_text().splitlines():
        name, *fields = line.split()
        if name in wanted:
            user, nice, system, _idle, _iowait, irq, softirq = map(int, fields[:7])
            busy += user + nice + system + irq + softirq
            kernel += system + irq + softirq
    tick = os.sysconf("SC_CLK_TCK")
    return busy / tick, kernel / tick


def child_environment() -> dict[str, str]:
    """The environment of a measured process: this one's, with the repository importable."""
    return {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}


def timed(command: list[str], cpus: list[int]) -> dict:
    """Run ``command`` bound to ``cpus``; its wall time, the CPU time used on ``cpus``, the tree's peak memory and its
    last stdout line (JSON)."""
    (busy, kernel), began = busy_seconds(cpus), time.perf_counter()
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               env=child_environment(),
                               preexec_fn=lambda: os.sched_setaffinity(0, cpus))
    memory = TreeMemory(process.pid)
    out, err = process.communicate()
    seconds, (busy_after, kernel_after) = time.perf_counter() - began, busy_seconds(cpus)
    peak, peak_pss = memory.stop()
    if process.returncode:
        raise SystemExit(f"{' '.join(command[:6])}… failed:\n{err[-3000:]}")
    lines = out.strip().splitlines()
    return {"seconds": seconds, "cpu_seconds": busy_after - busy, "kernel_cpu_seconds": kernel_after - kernel,
            "peak_tree_mb": peak / 1e6, "peak_tree_pss_mb": peak_pss / 1e6, **(json.loads(lines[-1]) if lines else {})}


def _texts(inputs: list[str]) -> list[str]:
    import orjson
    import zstandard

    texts = []
    for path in inputs:
        with open(path, "rb") as handle:
            data = zstandard.ZstdDecompressor().stream_reader(handle).read() if path.endswith(".zst") else handle.read()
        texts += [orjson.loads(line)["text"] for line in data.splitlines() if line.strip()]
    return texts


def engine_tokenizer(args: argparse.Namespace):
    """gigatoken's own tokenizer of ``--tokenizer-model`` (a ``tokenizer.json`` or a SentencePiece ``.model``)."""
    import gigatoken

    if args.tokenizer_model.endswith(".model"):
        return gigatoken.Tokenizer.from_sentencepiece(args.tokenizer_model)
    return gigatoken.Tokenizer(args.tokenizer_model)


#: Text per batch call of the engine's ceiling. Every call ends when its longest text does, so small calls leave threads
#: idle: on the H200 host's 16 CPUs calls of 1,000 texts (~13 MB) gave 552-680 MB/s, of 20,000 texts 1,279.
ENGINE_BATCH_BYTES = 256 << 20


def engine_batches(texts: list[str], batch_bytes: int) -> list[list[str]]:
    """``texts`` cut, in order, into calls of about ``batch_bytes`` characters each."""
    batches, start, size = [], 0, 0
    for end, text in enumerate(texts, 1):
        size += len(text)
        if size >= batch_bytes:
            batches.append(texts[start:end])
            start, size = end, 0
    return batches + ([texts[start:]] if start < len(texts) else [])


def child_engine(args: argparse.Namespace) -> dict:
    from corpus.tokenizers.gigatoken_rows import without_awkward

    batches, tokenizer = engine_batches(_texts(args.inputs), ENGINE_BATCH_BYTES), engine_tokenizer(args)
    began, used, tokens = time.perf_counter(), _process_cpu_seconds(), 0
    with without_awkward():
        for batch in batches:
            tokens += len(tokenizer.encode_batch(batch, parallel=True).flat)
    # its own clock and CPU time: reading and decoding the texts are left out of both
    return {"seconds": time.perf_counter() - began, "encode_cpu_seconds": _process_cpu_seconds() - used,
            "tokens": tokens}


def _process_cpu_seconds() -> float:
    """The CPU time of this process so far, every thread of it."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def child_raw(args: argparse.Namespace) -> dict:
    import awkward
    import gigatoken

    ids = engine_tokenizer(args).encode_files(gigatoken.JsonlFileSource(args.inputs, field="text"))
    return {"tokens": int(awkward.sum(awkward.num(ids)))}


def child_megatron(args: argparse.Namespace) -> dict:
    from bench.tokenize_speed import megatron_style_run

    return megatron_style_run(_tokenizer_fields(args), args.inputs[0], args.out, len(os.sched_getaffinity(0)))


CHILDREN = {"engine": child_engine, "raw": child_raw, "megatron": child_megatron}


def _tokenizer_fields(args: argparse.Namespace) -> dict:
    return {"type": args.tokenizer_type, "model": args.tokenizer_model}


def _child_command(method: str, args: argparse.Namespace, inputs: list[str], out: str) -> list[str]:
    return [sys.executable, "-m", "bench.tokenize_scaling", "--child", method, "--tokenizer-type", args.tokenizer_type,
            "--tokenizer-model", args.tokenizer_model, "--out", out, "--inputs", *inputs]


def ours(args: argparse.Namespace, inputs: list[str], out: str, cpus: list[int], variant: str) -> dict:
    """One ``corpus tokenize`` run into a folder of its own, removed afterwards outside the clock: each run writes a
    new output, as a user's first run of a corpus does. Writing over the last run's output would add the freeing of
    its ``.bin`` by the filesystem to the clock (0.4-1.5 s for 2.3 GB on the H200 host), which the other methods,
    writing nothing, never pay."""
    run_folder = tempfile.mkdtemp(prefix="ours-", dir=out)
    stats_file = f"{run_folder}/stats.json"
    command = [sys.executable, "-m", "cli.corpus", "tokenize", "--input", *inputs, "--output-prefix",
               f"{run_folder}/ours", "--tokenizer-type", args.tokenizer_type, "--tokenizer-model",
               args.tokenizer_model, "--append-eod", "--quiet", "--stats-json", stats_file, *variant.split()]
    result = timed(command, cpus)
    stats = json.loads(Path(stats_file).read_text())
    meta = json.loads(Path(f"{run_folder}/ours_text_document.meta.json").read_text())
    shutil.rmtree(run_folder)
    return {**result, "processes": stats["processes"], "parts": stats["parts"], "tokens": stats["counters"]["tokens"],
            "startup": stats["startup_seconds"], "checksums": meta["checksums"]}


def measure(args: argparse.Namespace, inputs: list[str], size: int, cores: int, cpus: list[int], out: str,
            megatron_input: str) -> dict:
    """Every method on ``cores`` CPUs, in turn, ``--repeat`` times; the run of median time stands for each."""
    runs: dict[str, list[dict]] = {}
    variants = ["", *(variant.format(cores=cores, half=max(1, cores // 2), quarter=max(1, cores // 4))
                      for variant in args.variant)] if "ours" in args.methods else []
    variants = list(dict.fromkeys(variants))  # "--workers {half}" on 1 core is the default
    for _ in range(args.repeat if cores in args.repeat_cores else 1):
        for variant in variants:
            runs.setdefault(f"ours {variant}".strip(), []).append(ours(args, inputs, out, cpus, variant))
        if "engine" in args.methods:
            runs.setdefault("engine", []).append(timed(_child_command("engine", args, inputs, out), cpus))
        if "raw" in args.methods and args.case == "jsonl":
            runs.setdefault("raw", []).append(timed(_child_command("raw", args, inputs, out), cpus))
    if "megatron" in args.methods and cores in args.megatron_cores:
        runs["megatron"] = [{**timed(_child_command("megatron", args, [megatron_input], out), cpus),
                             "bytes": os.path.getsize(megatron_input)}]
    row: dict = {"cores": cores}
    for method, done in runs.items():
        for result in done:
            result["mb_per_s"] = result.get("bytes", size) / 1e6 / result["seconds"]
        row[method] = {**sorted(done, key=lambda r: r["seconds"])[(len(done) - 1) // 2],
                       "all_mb_per_s": [round(r["mb_per_s"], 1) for r in done]}
    print(json.dumps(row), flush=True)
    return row


def cache_bytecode() -> None:
    """Let every process of the runs read compiled bytecode, as on a machine whose packages pip installed: where
    this Python writes none (``PYTHONDONTWRITEBYTECODE``, set by some images), each process (every worker) would
    compile every module it imports from source, and its start-up would measure the compiler. It is written under
    ``bench/.cache/pycache`` by importing what the methods import, once, before any clock."""
    if sys.flags.dont_write_bytecode or os.environ.pop("PYTHONDONTWRITEBYTECODE", None):
        os.environ.setdefault("PYTHONPYCACHEPREFIX", str(FOLDER.parent / "pycache"))
        print(f"bytecode: written under {os.environ['PYTHONPYCACHEPREFIX']} (this Python writes none)", flush=True)
        subprocess.run([sys.executable, "-c", "import awkward, gigatoken, orjson, cli.corpus, corpus.tokenize.pool, "
                        "bench.tokenize_speed"], check=True, env=child_environment())


def prefix_file(source: str, size: int, folder: str) -> str:
    """The first ``size`` bytes of ``source``, whole lines, as a file of its own."""
    target = Path(folder) / "megatron_input.jsonl"
    with open(source, "rb") as lines, open(target, "wb") as out:
        for line in lines:
            out.write(line)
            if out.tell() >= size:
                break
    return str(target)


def _ns_per_byte(run: dict) -> float | None:
    """CPU nanoseconds per input byte of one run: the engine's encode calls, or a whole process tree (None for a run
    measured before CPU time was)."""
    cpu = run.get("encode_cpu_seconds", run.get("cpu_seconds"))
    return cpu / (run["mb_per_s"] * run["seconds"]) * 1e3 if cpu is not None else None


def _cpu_columns(ours_run: dict, engine_run: dict | None, cores: int) -> str:
    """Ours' CPU per byte (the whole process tree), the engine's (its encode calls only), the engine's share of ours
    (the most ``/engine`` can be with every CPU busy all the time) and how busy ours kept its CPUs."""
    ours_cost, engine_cost = _ns_per_byte(ours_run), _ns_per_byte(engine_run) if engine_run else None
    busy = ours_run["cpu_seconds"] / (ours_run["seconds"] * cores) if ours_cost is not None else None
    share = engine_cost / ours_cost if ours_cost and engine_cost else None
    return " ".join(f"{value:{width}.{digits}f}" if value is not None else f"{'-':>{width}}"
                     for value, width, digits in ((ours_cost, 8, 2), (engine_cost, 6, 2), (share, 5, 2), (busy, 5, 2)))


def print_table(rows: list[dict], topology: str, facts: dict, args: argparse.Namespace) -> None:
    text = (f"{Path(args.input).name} ({os.path.getsize(args.input) / 1e9:.2f} GB)" if args.input else
            f"{facts['unique_bytes'] / 1e9:.2f} GB of unique installed text" if args.unique else
            f"{facts['scaled_bytes'] / 1e9:.2f} GB ({facts['unique_bytes'] / 1e9:.2f} GB of unique installed text × "
            f"{facts['copies']})")
    print(f"\n{args.case}: {text}, {args.tokenizer_type} {Path(args.tokenizer_model).name}; {topology}")
    variants = list(dict.fromkeys(key for row in rows for key in row if key.startswith("ours")))
    two = next((row for row in rows if row["cores"] == 2), None)
    print(f"{'cores':>5} | " + " ".join(f"{name + ' MB/s':>16}" for name in variants) +
          f" | {'engine':>7} {'raw':>7} {'megatr.':>7} | {'/engine':>7} {'/raw':>6} {'/megatr.':>8} {'/2 cores':>8} "
          f"{'engine /2 cores':>15} | {'CPU ns/B':>8} {'engine':>6} {'share':>5} {'busy':>5} | {'tree MB':>7} "
          f"{'PSS MB':>7} | same")
    reference = rows[0][variants[0]]["checksums"]
    for row in rows:
        main = row[variants[0]]
        rates = " ".join(f"{row[name]['mb_per_s']:16.1f}" if name in row else f"{'-':>16}" for name in variants)
        other = " ".join(f"{row[m]['mb_per_s']:7.1f}" if m in row else f"{'-':>7}" for m in ("engine", "raw",
                                                                                               "megatron"))
        ratios = [main["mb_per_s"] / row[m]["mb_per_s"] if m in row else None for m in ("engine", "raw", "megatron")]
        ratios.append(main["mb_per_s"] / two[variants[0]]["mb_per_s"] if two else None)
        # the engine's own scaling: what the ratio to 2 CPUs can reach on this machine's cores
        ratios.append(row["engine"]["mb_per_s"] / two["engine"]["mb_per_s"] if two and "engine" in two else None)
        shown = " ".join(f"{r:{w}.2f}" if r is not None else f"{'-':>{w}}" for r, w in zip(ratios, (7, 6, 8, 8, 15)))
        cpu = _cpu_columns(main, row.get("engine"), row["cores"])
        same = "yes" if all(row[name]["checksums"] == reference for name in variants if name in row) else "NO"
        print(f"{row['cores']:>5} | {rates} | {other} | {shown} | {cpu} | {main['peak_tree_mb']:7.0f} "
              f"{main['peak_tree_pss_mb']:7.0f} | {same}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--case", choices=["jsonl", "zst"], default="jsonl")
    parser.add_argument("--unique", action="store_true", help="jsonl: the unique text only, not repeated")
    parser.add_argument("--input", help="jsonl: this JSONL file (a 'text' key) in place of the installed text")
    parser.add_argument("--tokenizer-type", default="HuggingFaceTokenizer")
    parser.add_argument("--tokenizer-model", required=True)
    parser.add_argument("--cores", type=int, nargs="+", default=[1, 2, 4, 8, 16])
    parser.add_argument("--methods", nargs="+", default=["ours", "engine", "raw", "megatron"],
                        choices=["ours", "engine", "raw", "megatron"])
    parser.add_argument("--variant", action="append", default=[],
                        help="extra corpus tokenize options to measure; {cores}, {half} and {quarter} are filled in")
    parser.add_argument("--repeat", type=int, default=1, help="runs of each method, in turn; the median is shown")
    parser.add_argument("--repeat-cores", type=int, nargs="+", default=[16], help="core counts --repeat applies to")
    parser.add_argument("--min-bytes", type=float, default=2e9)
    parser.add_argument("--megatron-bytes", type=float, default=64e6)
    parser.add_argument("--megatron-cores", type=int, nargs="+", default=[2, 16])
    parser.add_argument("--child", choices=list(CHILDREN), help=argparse.SUPPRESS)
    parser.add_argument("--inputs", nargs="+", help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(CHILDREN[args.child](args)))
        return
    facts = build(int(args.min_bytes))
    order, topology = cpu_order()
    inputs = ([args.input or str(FOLDER / ("sources.jsonl" if args.unique else "scaled.jsonl"))] if args.case == "jsonl"
              else sorted(str(path) for path in (FOLDER / "zst").iterdir()))
    size = sum(os.path.getsize(path) for path in inputs) if args.case == "jsonl" else facts["scaled_bytes"]
    # NOTE: a cache folder of this run's own, filled by one small run first, as every run after a user's first.
    os.environ["BLENDFORGE_TOKENIZER_CHECKS_DIR"] = tempfile.mkdtemp(prefix="bench-scaling-checks-")
    cache_bytecode()
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-scaling-", dir=FOLDER) as out:
        megatron_input = prefix_file(str(FOLDER / "scaled.jsonl"), int(args.megatron_bytes), out)
        ours(args, [megatron_input], out, order, "")
        for cores in args.cores:
            rows.append(measure(args, inputs, size, cores, order[:cores], out, megatron_input))
    from bench.timing import write_results

    write_results(f"tokenize_scaling_{args.case}{'_unique' if args.unique else ''}"
                  f"{'_' + Path(args.input).stem if args.input else ''}",
                  {"topology": topology, "facts": facts, "rows": rows})
    print_table(rows, topology, facts, args)


if __name__ == "__main__":
    main()
