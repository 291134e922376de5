"""How strong are the tests of the code a change touches? Mutation testing with mutmut, scoped to those modules.

    python -m tests.mutate                          # the corpus/ and trainer/ modules changed since main
    python -m tests.mutate --base HEAD~3            # ... since another commit
    python -m tests.mutate corpus/blending/packing.py --tests tests/corpus/blending/test_packing.py
    python -m tests.mutate corpus/blending/packing.py --mutants 'corpus.blending.packing.x_epoch_plan*'
    python -m tests.mutate --tests tests/cli/test_corpus_inspect.py --recheck NAME...  # after a run, see below

mutmut plants one small defect at a time (an operator flipped, a constant changed, an argument dropped) in the
chosen modules and runs the tests that cover it; a mutant no test fails "survives": a behaviour nothing checks, or
an equivalent change. The tests run are the test files that import each module (or ``--tests``), in ``-m 'not
slow'`` as the README's test command runs them (``--slow`` adds the slow ones).

``--recheck NAME…`` runs the tests again on mutants of an earlier run (in its ``--workdir``, with this tree's test
files copied in), one at a time as mutmut runs them: for mutants mutmut cannot judge (``no tests`` when only
command-line tests in a fresh process reach the code, since its coverage does not follow subprocesses; code run at
import, such as a config's knobs, which mutmut's run imports before it picks a mutant and so calls survivors;
``timeout`` when a rerun's timing estimate is off) and to see that a new test kills the survivors it targets.

It works in a scratch copy of this tree (``--workdir``, default a folder under the system's temp dir, kept so
that ``mutmut show NAME`` and a second run can use it), never in the tree itself: mutmut writes a ``mutants/``
copy and a ``[tool.mutmut]`` section of its own. It prints every surviving mutant's diff, last.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
#: Seconds a --recheck test run may take before its mutant counts as caught (it hangs the tests).
RECHECK_TIMEOUT_S = 120
#: The packages whose modules are mutated; the rest of the tree is copied as it is.
MUTATED_PACKAGES = ("corpus", "trainer")


def changed_modules(base: str) -> list[str]:
    """The ``.py`` files of :data:`MUTATED_PACKAGES` that differ from ``base`` (committed or not) and still exist."""
    names = subprocess.run(["git", "diff", "--name-only", base, "--", *MUTATED_PACKAGES], cwd=REPO, check=True,
                           capture_output=True, text=True).stdout.split()
    return sorted(name for name in set(names) if name.endswith(".py") and (REPO / name).is_file())


def covering_tests(module: str) -> list[str]:
    """The test files that import ``module`` (``corpus/blending/packing.py``: ``corpus.blending.packing``, or
    ``packing`` from ``corpus.blending``)."""
    dotted = module.removesuffix(".py").removesuffix("/__init__").replace("/", ".")
    package, _, name = dotted.rpartition(".")
    imports = re.compile(rf"\b{re.escape(dotted)}\b|from {re.escape(package)} import [^\n]*\b{re.escape(name)}\b")
    return sorted(str(path.relative_to(REPO)) for path in (REPO / "tests").rglob("test_*.py")
                  if imports.search(path.read_text(encoding="utf-8")))


def mutmut_section(modules: list[str], tests: list[str], slow: bool) -> str:
    """The ``[tool.mutmut]`` section that mutates ``modules`` only and runs ``tests``."""
    def toml_list(items: list[str]) -> str:
        return "[" + ", ".join(f'"{item}"' for item in items) + "]"

    marks = [] if slow else ["-m", "not slow"]
    return (f"\n[tool.mutmut]\nsource_paths = {toml_list(list(MUTATED_PACKAGES))}\n"
            f"only_mutate = {toml_list(modules)}\n"
            f'also_copy = ["cli", "tests", "examples", "blends", "bench", "pyproject.toml"]\n'
            f"pytest_add_cli_args = {toml_list(['-p', 'no:cacheprovider', *marks])}\n"
            f"pytest_add_cli_args_test_selection = {toml_list(tests)}\n"
            # torch and the tokenizer libraries hold threads: fork workers from a process that never ran a test
            'process_isolation = "forkserver"\n')


def tree_files(*under: str) -> list[str]:
    """The tree's files (tracked and new, not ignored), all or those ``under`` the folders given."""
    return [name for name in subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard", *under],
                                            cwd=REPO, check=True, capture_output=True, text=True).stdout.splitlines()
            if (REPO / name).is_file()]


def copy_files(names: list[str], target: Path) -> None:
    for name in names:
        (target / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / name, target / name)


def prepare(workdir: Path, modules: list[str], tests: list[str], slow: bool) -> None:
    """A copy of the tree's files (tracked and new, not ignored) in ``workdir``, its pyproject with the section."""
    shutil.rmtree(workdir, ignore_errors=True)
    copy_files(tree_files(), workdir)
    pyproject = workdir / "pyproject.toml"
    pyproject.write_text(pyproject.read_text(encoding="utf-8") + mutmut_section(modules, tests, slow))


def recheck(workdir: Path, names: list[str], tests: list[str], slow: bool) -> list[str]:
    """Run ``tests`` (this tree's ``tests/``, copied into the workdir's mutated copy) once per mutant of ``names``, with
    mutmut's ``MUTANT_UNDER_TEST`` set; print each outcome and return the survivors."""
    mutants = workdir / "mutants"
    if not mutants.is_dir():
        raise SystemExit(f"{workdir} holds no mutmut run: run python -m tests.mutate MODULE --workdir {workdir} first")
    # all of tests/, not the named files alone: a new test may import a new helper module or need a new conftest
    copy_files(tree_files("tests"), mutants)
    marks = [] if slow else ["-m", "not slow"]

    def run_tests(mutant: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", *marks, *tests],
                              cwd=mutants, capture_output=True, text=True, timeout=RECHECK_TIMEOUT_S,
                              env={**os.environ, "MUTANT_UNDER_TEST": mutant, "PYTHONPATH": str(mutants)})

    # the tests must pass on the copy with no mutant first: a test file that does not import there (the copy's
    # source is older than this tree's tests) fails on every mutant, and each would read as killed
    baseline = run_tests("")
    if baseline.returncode not in (0, 5):
        raise SystemExit(f"{' '.join(tests)} fail(s) in {mutants} with no mutant, so no mutant can be judged there "
                         f"(its source may be older than these tests: run the modules again in a new --workdir):\n"
                         f"{baseline.stdout[-3000:]}")
    survivors = []
    for name in names:
        try:
            run = run_tests(name)
        except subprocess.TimeoutExpired:  # a mutant that hangs the tests is caught: a user would see it hang
            print(f"{name}: killed (timed out)", flush=True)
            continue
        if run.returncode == 5:
            raise SystemExit(f"no test of {' '.join(tests)} ran (slow ones only with --slow): name others with --tests")
        print(f"{name}: {'survived' if run.returncode == 0 else 'killed'}", flush=True)
        if run.returncode == 0:
            survivors.append(name)
    print(f"{len(survivors)} of {len(names)} mutant(s) survived {' '.join(tests)}")
    return survivors


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.mutate", description=__doc__.split("\n\n")[0])
    parser.add_argument("modules", nargs="*", help="source files to mutate (default: those changed since --base)")
    parser.add_argument("--base", default="main", help="what the change is measured against (default: main)")
    parser.add_argument("--tests", nargs="+", help="test files to run (default: those importing the modules)")
    parser.add_argument("--mutants", nargs="+", default=[],
                        help="names or patterns of the mutants to test, as mutmut names them (e.g. "
                             "'corpus.blending.packing.x_epoch_plan*'; default: every mutant of the modules)")
    parser.add_argument("--recheck", nargs="+", metavar="NAME",
                        help="run --tests again on these mutants of the run in --workdir, one at a time")
    parser.add_argument("--slow", action="store_true", help="run the tests marked slow too")
    parser.add_argument("--max-children", type=int, default=2, help="mutants tested at once (default: 2)")
    parser.add_argument("--workdir", type=Path, default=Path(tempfile.gettempdir()) / "blendforge-mutants")
    options = parser.parse_args(argv)
    if options.recheck:
        if not options.tests:
            parser.error("--recheck needs --tests")
        recheck(options.workdir, options.recheck, options.tests, options.slow)
        return 0
    modules = options.modules or changed_modules(options.base)
    if not modules:
        print(f"no module of {', '.join(MUTATED_PACKAGES)} changed since {options.base}")
        return 0
    tests = options.tests or sorted({test for module in modules for test in covering_tests(module)})
    if not tests:
        print(f"no test file imports {', '.join(modules)}: name them with --tests", file=sys.stderr)
        return 1
    print(f"mutating {', '.join(modules)}\nrunning {', '.join(tests)}\nin {options.workdir}", flush=True)
    prepare(options.workdir, modules, tests, options.slow)
    mutmut = [sys.executable, "-m", "mutmut"]
    run = subprocess.run([*mutmut, "run", "--max-children", str(options.max_children), *options.mutants],
                         cwd=options.workdir)
    if run.returncode:
        return run.returncode
    listed = subprocess.run([*mutmut, "results"], cwd=options.workdir, capture_output=True, text=True)
    survivors = [line.split(":")[0].strip() for line in listed.stdout.splitlines() if line.strip().endswith(
        ": survived")]
    for name in survivors:
        subprocess.run([*mutmut, "show", name], cwd=options.workdir)
    print(f"{len(survivors)} surviving mutant(s) of {', '.join(modules)} (details: cd {options.workdir} && "
          "python -m mutmut browse)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
