"""Real benchmark text, fetched from Debian packages into ``bench/.cache/`` and turned into JSONL.

    python -m bench.data          # writes bench/.cache/{prose,prose_large,code,code_60,code_300}.jsonl (idempotent)

Never a small sample repeated (that inflates tokenizer cache hits): every record is a distinct file.
- prose: the Linux kernel's Documentation (reStructuredText/plain text, English; translations left
  out) from ``linux-source-6.1``, then the Python 3.11 documentation sources from ``python3.11-doc``;
- prose_large: the same, then the main text of every page of 21 large Python projects' documentation
  (Debian's ``python-*-doc`` HTML builds: Django, SymPy, SciPy, pandas, scikit-learn...; navigation
  and sidebars left out);
- code: the kernel's C sources and headers (``.c``/``.h``; generated register headers left out), in
  archive order, cut at 30 MB (``code``), 60 MB (``code_60``) and 300 MB (``code_300``, for scale and memory).
Records are ``{"text": <file content>, "title": <path in the package>}``. Licences: GPL-2.0 (kernel),
PSF-2.0 (Python docs), the projects' own (mostly BSD/MIT) for their docs; the data stays in the
git-ignored cache and is never committed.
"""

from __future__ import annotations

import argparse
import html
import io
import re
import subprocess
import tarfile
from html.parser import HTMLParser
from pathlib import Path
from typing import Callable, Iterator

import orjson

from corpus.core.atomic_write import atomic_file

CACHE = Path(__file__).resolve().parent / ".cache"
MB = 1_000_000


def debian_package(name: str) -> Path:
    """The ``.deb`` of ``name`` in the cache, downloaded with ``apt-get download`` when missing."""
    folder = CACHE / "debs"
    folder.mkdir(parents=True, exist_ok=True)
    found = sorted(folder.glob(f"{name}_*.deb"))
    if not found:
        subprocess.run(["apt-get", "download", name], cwd=folder, check=True)
        found = sorted(folder.glob(f"{name}_*.deb"))
    return found[-1]


def package_files(deb: Path) -> Iterator[tuple[str, bytes]]:
    """``(path, bytes)`` of every regular file in a package, streaming; nested ``.tar.xz`` archives
    (``linux-source`` ships the kernel as one) are walked too."""
    data = subprocess.Popen(["dpkg-deb", "--fsys-tarfile", str(deb)], stdout=subprocess.PIPE)
    with tarfile.open(fileobj=data.stdout, mode="r|") as outer:
        for member in outer:
            if not member.isfile():
                continue
            content = outer.extractfile(member).read()
            if member.name.endswith(".tar.xz"):
                with tarfile.open(fileobj=io.BytesIO(content), mode="r|xz") as inner:
                    for item in inner:
                        if item.isfile():
                            yield item.name, inner.extractfile(item).read()
            else:
                yield member.name, content
    data.wait()


def is_kernel_prose(path: str) -> bool:
    return "/Documentation/" in path and "/translations/" not in path and path.endswith((".rst", ".txt"))


def is_python_prose(path: str) -> bool:
    return "/_sources/" in path and path.endswith(".txt")


def is_sphinx_page(path: str) -> bool:
    """A documentation page of a Sphinx HTML build (not highlighted source, indexes or search)."""
    skipped = ("/_modules/", "/_static/", "/_sources/", "genindex", "modindex", "/search.html")
    return path.endswith(".html") and not any(part in path for part in skipped)


#: HTML elements without an end tag (they open no nesting level).
VOID_TAGS = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track", "wbr"}


class MainText(HTMLParser):
    """The text of a page's main content (``role="main"``, or Django's ``id="yui-main"``): no navigation,
    sidebars, scripts or styles."""

    MAIN_IDS = {"yui-main"}
    SKIPPED = {"script", "style"}

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self.depth = 0  # open elements inside the main one (0: outside it)
        self.skipping = 0

    def handle_starttag(self, tag: str, attrs: list) -> None:
        attributes = dict(attrs)
        if self.depth:
            self.depth += tag not in VOID_TAGS
        elif attributes.get("role") == "main" or attributes.get("id") in self.MAIN_IDS:
            self.depth = 1
        self.skipping += self.depth > 0 and tag in self.SKIPPED

    def handle_endtag(self, tag: str) -> None:
        if self.depth and tag not in VOID_TAGS:
            self.depth -= 1
            self.skipping -= tag in self.SKIPPED and self.skipping > 0

    def handle_data(self, data: str) -> None:
        if self.depth and not self.skipping:
            self.parts.append(data)

    def text(self) -> str:
        joined = html.unescape("".join(self.parts)).replace("\xb6", "")  # Sphinx's ¶ header links
        return re.sub(r"\n\s*\n(\s*\n)+", "\n\n", joined).strip()


def sphinx_page_text(content: bytes) -> str:
    """The main text of a Sphinx HTML page."""
    parser = MainText()
    parser.feed(content.decode("utf-8"))
    return parser.text()


def is_kernel_code(path: str) -> bool:
    return path.endswith((".c", ".h")) and "/asic_reg/" not in path and "/Documentation/" not in path


Source = tuple[str, Callable[[str], bool]]
#: Large Python projects' documentation, as HTML pages (their main text only).
SPHINX_DOCS: list[Source] = [(f"python-{name}-doc", is_sphinx_page) for name in (
    "django", "sympy", "scipy", "pandas", "sqlalchemy", "astropy", "sklearn", "dask", "statsmodels", "skimage",
    "pyfai", "silx", "qutip", "ase", "pymatgen", "vispy", "fonttools", "sfepy", "taurus", "xraylarch", "escript")]
PROSE: list[Source] = [("linux-source-6.1", is_kernel_prose), ("python3.11-doc", is_python_prose)]
#: What each corpus takes: (package, which files) in order, and its size cap.
CORPORA: dict[str, tuple[list[Source], int]] = {
    "prose": (PROSE, 10**12),
    "prose_large": (PROSE + SPHINX_DOCS, 10**12),
    "code": ([("linux-source-6.1", is_kernel_code)], 30 * MB),
    "code_60": ([("linux-source-6.1", is_kernel_code)], 60 * MB),
    "code_300": ([("linux-source-6.1", is_kernel_code)], 300 * MB),
}


def records(sources: list[tuple[str, Callable[[str], bool]]]) -> Iterator[bytes]:
    """JSONL lines of every selected, valid UTF-8, non-empty file of the sources."""
    for package, wanted in sources:
        for path, content in package_files(debian_package(package)):
            if not wanted(path) or len(content) > MB:
                continue
            try:
                text = sphinx_page_text(content) if path.endswith(".html") else content.decode("utf-8")
            except UnicodeDecodeError:
                continue
            if text.strip():
                yield orjson.dumps({"text": text, "title": path}) + b"\n"


def build(name: str) -> Path:
    """Write ``bench/.cache/<name>.jsonl`` unless it exists; returns its path."""
    target = CACHE / f"{name}.jsonl"
    if target.exists():
        return target
    sources, cap = CORPORA[name]
    CACHE.mkdir(parents=True, exist_ok=True)
    written = 0
    with atomic_file(target) as out:
        for line in records(sources):
            if written + len(line) > cap:
                break
            out.write(line)
            written += len(line)
    print(f"{target}: {written / MB:.1f} MB")
    return target


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("names", nargs="*", help=f"corpora to build (default: all of {', '.join(CORPORA)})")
    names = parser.parse_args().names or list(CORPORA)
    unknown = sorted(set(names) - set(CORPORA))
    if unknown:
        parser.error(f"unknown corpus {', '.join(unknown)}; choose from {', '.join(CORPORA)}")
    for name in names:
        build(name)


if __name__ == "__main__":
    main()
