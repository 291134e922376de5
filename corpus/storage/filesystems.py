"""The filesystem behind a URL, the options it is made with, and the one place every remote call is retried.

Endpoint, credentials and region come the standard way: s3fs uses botocore, which reads ``AWS_ENDPOINT_URL``,
``AWS_ACCESS_KEY_ID``/``AWS_SECRET_ACCESS_KEY``, ``AWS_PROFILE``, ``AWS_REGION`` and ``~/.aws/config``.
Anything else is a *storage option*: keyword arguments of the fsspec filesystem (``endpoint_url``, ``anon``,
``client_kwargs``, …), given as ``--storage-options JSON`` on the commands or ``storage_options`` in a blend.
:func:`configure` makes them the options of this process (the commands call it once at start); objects that
outlive a command (a blend's token arrays) keep the filesystem they were opened with.
"""

from __future__ import annotations

import copy
import json
import logging
import random
import time
from typing import Any, Callable, TypeVar

from corpus.core.optional import missing
from corpus.core.typed_config import knob
from corpus.storage.errors import MissingExtra, StorageError, is_transient, translate
from corpus.storage.paths import protocol_of

log = logging.getLogger(__name__)

T = TypeVar("T")

#: The fsspec package of each scheme, and the extra (or package) to install for it.
PACKAGES: dict[str, tuple[str, str]] = {
    "s3": ("s3fs", "'blendforge[s3]'"), "s3a": ("s3fs", "'blendforge[s3]'"),
    "gs": ("gcsfs", "gcsfs"), "gcs": ("gcsfs", "gcsfs"),
    "az": ("adlfs", "adlfs"), "abfs": ("adlfs", "adlfs"), "abfss": ("adlfs", "adlfs"),
}
#: Options every filesystem of a scheme gets unless the user's say otherwise. No listing cache: another process
#: (a shard of the same job) may have written since. botocore's standard retry mode backs off on 503 SlowDown,
#: throttling and connection errors before :func:`call` sees them.
DEFAULTS: dict[str, dict] = {
    "s3": {"use_listings_cache": False, "config_kwargs": {"retries": {"max_attempts": 5, "mode": "standard"}}},
}
#: The attribute holding a filesystem's own retry loop (s3fs retries throttling and dropped connections itself,
#: between botocore's retries and :func:`call`'s), set to one attempt: :func:`call` is the one retry around the
#: client's, as on the S3 client's path. A third loop would multiply the attempts (5 x 5 x 5 against a store that
#: keeps failing before its one-line error) and keep its faults out of the log of retries.
OWN_RETRY_LOOPS: dict[str, str] = {"s3": "retries", "s3a": "retries"}
#: Attempts of one operation in :func:`call` (on top of the client's own retries) and the first backoff.
ATTEMPTS = 5
BACKOFF_S = 0.25
MAX_BACKOFF_S = 4.0

_options: dict = {}


def storage_options_knob() -> Any:
    """The ``storage_options`` field of every config whose paths may be URLs: one flag, one help text."""
    return knob(
        None, "Options of the filesystem behind s3:// (gs://, az://) paths, as JSON, e.g. "
        "'{\"endpoint_url\": \"http://localhost:9000\"}'. Endpoint, credentials and region otherwise come from "
        "AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, AWS_PROFILE and AWS_REGION.",
        "--storage-options", metavar="JSON")


def parse_options(text: str | None) -> dict:
    """``--storage-options`` as a dict: a JSON object of filesystem keyword arguments."""
    if not text:
        return {}
    try:
        value = json.loads(text)
    except ValueError as error:
        raise StorageError(f"--storage-options {text!r}: not valid JSON ({error}); write an object such as "
                           "'{\"endpoint_url\": \"http://localhost:9000\"}'") from None
    if not isinstance(value, dict):
        raise StorageError(f"--storage-options {text!r}: expected a JSON object of filesystem options, e.g. "
                           "'{\"endpoint_url\": \"http://localhost:9000\"}'")
    return value


def configure(options: dict | None) -> None:
    """Make ``options`` the storage options of this process; None keeps those in force ({} clears them)."""
    global _options
    if options is not None:
        _options = dict(options)


def current_options() -> dict:
    """The storage options in force."""
    return dict(_options)


def options_for(protocol: str) -> dict:
    """A fresh copy of the defaults of ``protocol`` with the options in force over them.

    A copy, because botocore rewrites the ``retries`` dict it is given (``max_attempts`` becomes
    ``total_max_attempts``): handed the shared one, the next call's options differ from the first's, so fsspec
    builds a second filesystem, and with it a second client (0.15-0.2 s of botocore start-up)."""
    defaults = DEFAULTS.get(protocol, {})
    merged = {**defaults, **_options}
    if "config_kwargs" in defaults and "config_kwargs" in _options:
        merged["config_kwargs"] = {**defaults["config_kwargs"], **_options["config_kwargs"]}
    return copy.deepcopy(merged)


def require(url: str) -> str:
    """The scheme of ``url`` after checking its fsspec package imports; :class:`MissingExtra` names what to
    install otherwise."""
    protocol = protocol_of(url)
    if protocol is None:
        raise ValueError(f"{url} is a local path")
    package, install = PACKAGES.get(protocol, (None, None))
    problem = missing("fsspec") or (missing(package) if package else None)
    if problem:
        wanted = install or "the fsspec package for it"
        raise MissingExtra(f"{url}: {protocol}:// paths need {wanted}: pip install {wanted} ({problem})")
    return protocol


def filesystem(url: str):
    """The fsspec filesystem for ``url`` with the options in force (fsspec reuses one instance per options)."""
    protocol = require(url)
    import fsspec

    try:
        fs = fsspec.filesystem(protocol, **options_for(protocol))
    except (ValueError, ImportError) as error:
        raise MissingExtra(f"{url}: no filesystem for {protocol}:// ({error})") from None
    except TypeError as error:
        raise StorageError(f"{url}: storage options {sorted(_options)} are not options of the {protocol}:// "
                           f"filesystem ({error})") from None
    if protocol in OWN_RETRY_LOOPS:
        setattr(fs, OWN_RETRY_LOOPS[protocol], 1)
    return fs


def call(action: str, url: str, function: Callable[..., T], *args, **kwargs) -> T:
    """``function(*args, **kwargs)``, retried with exponential backoff while the failure is transient
    (throttling, a dropped connection); any failure ends as one :class:`StorageError` naming ``url``."""
    for attempt in range(ATTEMPTS):
        try:
            return function(*args, **kwargs)
        except Exception as error:  # noqa: BLE001 - every client error becomes one StorageError below
            if attempt + 1 == ATTEMPTS or not is_transient(error):
                raise translate(error, url, action) from None
            delay = min(MAX_BACKOFF_S, BACKOFF_S * 2 ** attempt) * (0.5 + random.random())
            log.debug("%s %s failed (%s), retrying in %.2f s", action, url, error, delay)
            time.sleep(delay)
    raise AssertionError("unreachable")
