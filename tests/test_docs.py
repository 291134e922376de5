"""The user documentation (README.md, docs/, the READMEs beside the code users touch) stays true to the tree: the
README stays short, every link resolves inside the repository, every flag and Python name a page mentions exists,
and no page narrates how things were measured."""

from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path

import click
import pytest

from cli.corpus import main as corpus_main
from cli.trainer import main as trainer_main

REPO = Path(__file__).resolve().parents[1]
README_MAX_LINES = 150
PAGES = sorted([REPO / "README.md", *(REPO / "docs").glob("*.md"), REPO / "tests" / "README.md",
                REPO / "blends" / "README.md", REPO / "examples" / "README.md"])
#: Where the flags the pages mention are checked: the README and docs/ (the other READMEs quote other tools).
FLAG_PAGES = [page for page in PAGES if page.parent == REPO / "docs" or page == REPO / "README.md"]
HISTORY = re.compile(r"session [0-9]|(fifth|sixth|seventh|eighth|ninth|tenth|eleventh|twelfth|thirteenth|fourteenth|"
                     r"fifteenth|[0-9]+th) run", re.IGNORECASE)
#: Flags of other tools the pages show next to ours (torchrun, srun, Slurm, nsys) or compare ours with (Megatron's).
OTHER_TOOLS_FLAGS = {"--nproc-per-node", "--nnodes", "--node-rank", "--master-addr", "--master-port", "--no-python",
                     "--ntasks", "--array", "--capture-range", "--find-optimal-num-workers", "--train-data-path"}
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
CODE_SPAN = re.compile(r"`([^`\n]+)`")
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.MULTILINE | re.DOTALL)
FLAG = re.compile(r"(?<![\w-])--[a-z][a-z0-9-]*")
REPO_FILE = re.compile(r"^(?:corpus|trainer|cli|bench|blends|examples|tests|docs)/[\w./-]+\.(?:py|md|yaml|sh)$")
PYTHON_NAME = re.compile(r"^((?:corpus|trainer|cli)(?:\.\w+)+)(?:\(.*\))?$")


def _text(page: Path) -> str:
    return page.read_text(encoding="utf-8")


def _prose(page: Path) -> str:
    """The page without its fenced code blocks."""
    return FENCE.sub("", _text(page))


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces as hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _anchors(page: Path) -> set[str]:
    return {_slug(line.lstrip("#")) for line in _prose(page).splitlines() if line.startswith("#")}


def test_readme_is_short():
    lines = len(_text(REPO / "README.md").splitlines())
    assert lines <= README_MAX_LINES, f"README.md has {lines} lines; move reference material into docs/"


@pytest.mark.parametrize("page", PAGES, ids=lambda page: str(page.relative_to(REPO)))
def test_no_measurement_history(page):
    hits = [line for line in _text(page).splitlines() if HISTORY.search(line)]
    assert not hits, f"{page.relative_to(REPO)} narrates history (say what holds; figures: bench/RESULTS.md): {hits}"


@pytest.mark.parametrize("page", PAGES, ids=lambda page: str(page.relative_to(REPO)))
def test_links_resolve_inside_the_repository(page):
    broken = []
    for target in LINK.findall(_prose(page)):
        if re.match(r"^[a-z]+:", target):  # a web address, not a file of the repository
            continue
        path, _, anchor = target.partition("#")
        resolved = (page.parent / path).resolve() if path else page
        if not resolved.is_relative_to(REPO) or not resolved.exists():
            broken.append(f"{target}: no such file in the repository")
        elif anchor and resolved.suffix == ".md" and anchor not in _anchors(resolved):
            broken.append(f"{target}: no heading #{anchor} there")
    assert not broken, f"{page.relative_to(REPO)}: {broken}"


@pytest.mark.parametrize("page", PAGES, ids=lambda page: str(page.relative_to(REPO)))
def test_named_repository_files_exist(page):
    missing = [span for span in CODE_SPAN.findall(_prose(page)) if REPO_FILE.match(span) and not (REPO / span).exists()]
    assert not missing, f"{page.relative_to(REPO)} names files that do not exist: {missing}"


def _cli_flags() -> set[str]:
    """Every option of every ``corpus`` and ``trainer`` command (and of the groups), both spellings of a switch."""
    flags = {"--help"}
    for group in (corpus_main, trainer_main):
        context = click.Context(group)
        for command in [group, *(group.get_command(context, name) for name in group.list_commands(context))]:
            for param in command.params:
                if isinstance(param, click.Option):
                    flags.update(opt for opt in [*param.opts, *param.secondary_opts] if opt.startswith("--"))
    return flags


@pytest.mark.parametrize("page", FLAG_PAGES, ids=lambda page: str(page.relative_to(REPO)))
def test_flags_exist(page):
    unknown = sorted(set(FLAG.findall(_text(page))) - _cli_flags() - OTHER_TOOLS_FLAGS)
    assert not unknown, f"{page.relative_to(REPO)} mentions flags no command has (check `--help`): {unknown}"


def _resolves(dotted: str) -> bool:
    """Whether ``dotted`` is a module, or an attribute reached from the longest importable module prefix."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            target = importlib.import_module(".".join(parts[:cut]))
        except ModuleNotFoundError:
            continue
        for name in parts[cut:]:
            if not hasattr(target, name):
                return False
            target = getattr(target, name)
        return True
    return False


def _python_names(page: Path) -> set[str]:
    """Dotted names in code spans, and what the page's Python blocks import."""
    names = {match.group(1) for span in CODE_SPAN.findall(_prose(page)) if (match := PYTHON_NAME.match(span))}
    for language, block in FENCE.findall(_text(page)):
        if language == "python":
            for node in ast.walk(ast.parse(block)):
                if isinstance(node, ast.ImportFrom):
                    names.update(f"{node.module}.{alias.name}" for alias in node.names)
                elif isinstance(node, ast.Import):
                    names.update(alias.name for alias in node.names)
    return {name for name in names if name.split(".")[0] in ("corpus", "trainer", "cli")}


@pytest.mark.parametrize("page", PAGES, ids=lambda page: str(page.relative_to(REPO)))
def test_python_names_exist(page):
    missing = sorted(name for name in _python_names(page) if not _resolves(name))
    assert not missing, f"{page.relative_to(REPO)} names Python objects that do not exist: {missing}"
