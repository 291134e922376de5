"""The one error hierarchy (``corpus/core/errors.py``): every exception class the project defines that can reach a
user derives from :class:`UserError`, a config mistake is always the one :class:`ConfigError`, and each package
keeps its own error classes in its ``errors`` module. The classes are found by importing every module of
``corpus``, ``trainer`` and ``cli``, so a class added anywhere is checked."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import subprocess
import sys

import pytest

from corpus.core.errors import ConfigError, InputError, UserError

PACKAGES = ("corpus", "trainer", "cli")
#: Exceptions that never reach a user: each is caught inside its own package (its docstring says where).
INTERNAL = {
    "corpus.storage.errors.Transient",  # retried by the storage layer; what outlives retries becomes StorageError
    "corpus.storage.errors.ShortRead",
    "corpus.storage.errors.ServerBusy",
    "corpus.storage.errors.ObjectChanged",  # translated into a StorageError that says the object changed
    "corpus.tokenizers.gigatoken.FastPathRefused",  # the encoder choice falls back to the reference library
    "corpus.tokenizers.huggingface.AffixError",  # encoded whole instead; the encoder choice keeps the reference
}
#: Modules besides a package's ``errors`` that may define a user error, and why.
OWN_MODULE = {
    "corpus.core.disk": "OutputError's message is made from the disk's state (free space, the file in the way)",
    "cli.corpus_inspect": "Unverified is an outcome of the command's check, with its own exit status",
}


def _modules() -> list[str]:
    names = []
    for package in PACKAGES:
        root = importlib.import_module(package)
        names.append(package)
        names += [info.name for info in pkgutil.walk_packages(root.__path__, f"{package}.")]
    return names


@pytest.fixture(scope="module")
def project_exceptions() -> dict[str, type]:
    """Every exception class defined in the project, by its dotted name."""
    found = {}
    for name in _modules():
        module = importlib.import_module(name)
        for attribute, value in vars(module).items():
            if inspect.isclass(value) and issubclass(value, BaseException) and value.__module__ == name:
                found[f"{name}.{attribute}"] = value
    return found


def test_every_exception_a_user_can_see_derives_from_the_one_base(project_exceptions):
    private = {name for name in project_exceptions if name.rsplit(".", 1)[1].startswith("_")}
    outside = {name for name, cls in project_exceptions.items() if not issubclass(cls, UserError)} - private
    assert outside == INTERNAL, "a public exception class that is not a UserError: derive it from UserError (or " \
                                "one of its kinds), or make it private to the module that catches it"
    for name in private | INTERNAL:
        assert project_exceptions[name].__doc__, f"{name}: say in its docstring why no user sees it"


def test_a_config_mistake_is_one_class(project_exceptions):
    config_classes = {name for name, cls in project_exceptions.items() if issubclass(cls, ConfigError)}
    assert config_classes == {"corpus.core.errors.ConfigError"}


def test_each_package_keeps_its_user_errors_in_its_errors_module(project_exceptions):
    for name, cls in project_exceptions.items():
        module = name.rsplit(".", 1)[0]
        if issubclass(cls, UserError) and not name.rsplit(".", 1)[1].startswith("_"):
            assert module.endswith(".errors") or module in OWN_MODULE, f"{name}: move it to its package's errors.py"


def test_a_config_error_names_its_file_line_and_key_and_keeps_them_when_located():
    error = ConfigError("must be at least 1", "weight").located(("sources", 2), "blends/b.yaml", lambda path: 7)
    assert str(error) == "blends/b.yaml:7: sources[2].weight: must be at least 1"
    assert (error.key, error.file, error.line, error.problem) == ("sources[2].weight", "blends/b.yaml", 7,
                                                                   "must be at least 1")
    assert isinstance(error, ValueError) and isinstance(InputError("x"), UserError)


def test_a_user_error_ends_the_command_with_its_message_and_exit_status(tmp_path):
    """``corpus inspect`` on a pair that does not exist: one ``Error:`` line, status 1, no traceback."""
    run = subprocess.run([sys.executable, "-m", "cli.corpus", "inspect", str(tmp_path / "missing")],
                         capture_output=True, text=True)
    assert run.returncode == UserError.exit_code == 1
    assert run.stderr.startswith("Error: ") and "Traceback" not in run.stderr and len(run.stderr.splitlines()) == 1
