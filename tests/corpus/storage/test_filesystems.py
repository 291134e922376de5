"""The filesystem behind a URL and the options it is made with (``corpus/storage/filesystems.py``), checked without
an S3 server: building an fsspec filesystem connects to nothing, and what a missing package says is read by hiding
it. The retries of :func:`call` are in ``test_retries.py``; filesystems against a store in ``test_storage.py``."""

from __future__ import annotations

from collections.abc import Iterator

import fsspec
import pytest
from fsspec.implementations.memory import MemoryFileSystem

from corpus.storage import MissingExtra, StorageError, filesystems
from tests.conftest import invoke_cli

EXAMPLE = "'{\"endpoint_url\": \"http://localhost:9000\"}'"
STRICT_PROTOCOL = "strictfs-under-test"


@pytest.fixture(autouse=True)
def no_options() -> Iterator[None]:
    """Each test starts from no storage options and leaves none behind: they are the process's."""
    filesystems.configure({})
    yield
    filesystems.configure({})


class StrictFileSystem(MemoryFileSystem):
    """A filesystem taking no options, as a real one refuses a keyword it does not know (TypeError)."""

    protocol = STRICT_PROTOCOL

    def __init__(self) -> None:
        super().__init__()


def _hide(monkeypatch: pytest.MonkeyPatch, *hidden: str) -> None:
    """Make ``hidden`` packages look missing to filesystems.py, as on a machine without them."""
    real_missing = filesystems.missing
    monkeypatch.setattr(filesystems, "missing",
                        lambda module: f"{module} does not import" if module in hidden else real_missing(module))


@pytest.mark.parametrize("text", [None, ""])
def test_no_storage_options_are_none(text: str | None) -> None:
    assert filesystems.parse_options(text) == {}


def test_storage_options_are_the_json_object_typed() -> None:
    assert filesystems.parse_options('{"anon": true, "client_kwargs": {"region_name": "x"}}') == {
        "anon": True, "client_kwargs": {"region_name": "x"}}


@pytest.mark.parametrize("text, why", [("{anon: true}", "not valid JSON"), ("[1, 2]", "expected a JSON object")])
def test_storage_options_not_an_object_are_refused_with_an_example(text: str, why: str) -> None:
    """The refusal names what was typed and shows an object to write instead: the user fixes the flag from it."""
    with pytest.raises(StorageError) as refused:
        filesystems.parse_options(text)
    assert str(refused.value).startswith(f"--storage-options {text!r}: {why}")
    assert str(refused.value).endswith(EXAMPLE)


def test_the_flag_refuses_storage_options_not_an_object_in_one_line() -> None:
    """Where users reach the parsing: ``--storage-options`` on a command stops at the usage error, before work."""
    result = invoke_cli("corpus", "inspect", "s3://bucket/x", "--storage-options", "[1]")
    assert result.returncode == 2
    assert "--storage-options '[1]': expected a JSON object" in result.stderr


def test_configured_options_are_those_in_force_and_a_copy() -> None:
    filesystems.configure({"anon": True})
    current = filesystems.current_options()
    current["anon"] = False
    assert filesystems.current_options() == {"anon": True}


def test_s3_options_are_the_defaults_under_the_users() -> None:
    filesystems.configure({"anon": True, "use_listings_cache": True})
    options = filesystems.options_for("s3")
    assert options["anon"] is True and options["use_listings_cache"] is True
    assert options["config_kwargs"] == filesystems.DEFAULTS["s3"]["config_kwargs"]


def test_a_users_client_config_joins_the_default_retries() -> None:
    """``config_kwargs`` is merged one level down: a user's connect timeout must not drop botocore's retries."""
    filesystems.configure({"config_kwargs": {"connect_timeout": 5}})
    assert filesystems.options_for("s3")["config_kwargs"] == {
        "retries": {"max_attempts": 5, "mode": "standard"}, "connect_timeout": 5}


def test_a_scheme_without_defaults_gets_the_users_options_alone() -> None:
    filesystems.configure({"config_kwargs": {"connect_timeout": 5}})
    assert filesystems.options_for("gs") == {"config_kwargs": {"connect_timeout": 5}}


def test_options_handed_out_leave_the_defaults_as_they_were() -> None:
    """botocore rewrites the retries dict it is given; the next filesystem's options must still equal the first's,
    else fsspec builds a second filesystem and client."""
    first = filesystems.options_for("s3")
    first["config_kwargs"]["retries"]["total_max_attempts"] = first["config_kwargs"]["retries"].pop("max_attempts")
    assert filesystems.options_for("s3") == filesystems.DEFAULTS["s3"] == {
        "use_listings_cache": False, "config_kwargs": {"retries": {"max_attempts": 5, "mode": "standard"}}}


def test_a_local_path_has_no_filesystem_to_require() -> None:
    with pytest.raises(ValueError, match="^/data/x is a local path$"):
        filesystems.require("/data/x")


def test_a_scheme_of_fsspec_itself_needs_no_extra() -> None:
    assert filesystems.require("memory://bucket/key") == "memory"


def test_a_missing_package_is_named_with_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    _hide(monkeypatch, "s3fs")
    with pytest.raises(MissingExtra) as missing:
        filesystems.require("s3://bucket/key")
    assert str(missing.value) == ("s3://bucket/key: s3:// paths need 'blendforge[s3]': pip install 'blendforge[s3]' "
                                  "(s3fs does not import)")


def test_a_scheme_of_no_known_package_asks_for_fsspec_and_its_package(monkeypatch: pytest.MonkeyPatch) -> None:
    _hide(monkeypatch, "fsspec")
    with pytest.raises(MissingExtra, match=r"^memory://k: memory:// paths need the fsspec package for it: "):
        filesystems.require("memory://k")


def test_an_s3_filesystem_has_the_defaults_and_one_retry_loop() -> None:
    """Made with the s3 defaults (no listing cache), and s3fs's own retries down to one attempt (call retries)."""
    fs = filesystems.filesystem("s3://bucket/key")
    assert fs.storage_options["use_listings_cache"] is False
    assert fs.retries == 1


def test_a_scheme_fsspec_does_not_know_is_a_missing_extra() -> None:
    with pytest.raises(MissingExtra, match=r"^nosuchfs://b/k: no filesystem for nosuchfs:// \("):
        filesystems.filesystem("nosuchfs://b/k")


def test_options_a_filesystem_does_not_take_are_named() -> None:
    fsspec.register_implementation(STRICT_PROTOCOL, StrictFileSystem, clobber=True)
    filesystems.configure({"anon": True, "endpoint_url": "http://x"})
    with pytest.raises(StorageError, match=rf"^{STRICT_PROTOCOL}://b: storage options \['anon', 'endpoint_url'\] "
                                           rf"are not options of the {STRICT_PROTOCOL}:// filesystem \("):
        filesystems.filesystem(f"{STRICT_PROTOCOL}://b")
