"""``corpus``: prepare token data (tokenize, merge, inspect, blend, add-checksums). Each command parses its
options, calls one library function and prints; the logic lives in the ``corpus`` package."""

from __future__ import annotations

import logging

import click

from cli.app import CONTEXT, Group, version_option

#: Object-store clients whose INFO lines ("Found credentials in environment variables") are noise to a user.
QUIET_LOGGERS = ("botocore", "aiobotocore", "s3fs", "fsspec")


@click.group(cls=Group, context_settings=CONTEXT, lazy={
    "tokenize": "cli.corpus_tokenize:tokenize_command", "inspect": "cli.corpus_inspect:inspect_command",
    "blend": "cli.corpus_blend:blend", "autotune-workers": "cli.corpus_autotune:autotune_command",
    "merge": "cli.corpus_merge:merge_command", "add-checksums": "cli.corpus_checksums:add_checksums_command"})
@version_option("corpus")
@click.option("-v", "--verbose", is_flag=True, help="Log debug messages.")
def main(verbose: bool) -> None:
    """Turn raw text into Megatron-compatible token files and blends."""
    logging.basicConfig(level=logging.DEBUG if verbose else logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    for name in QUIET_LOGGERS:
        logging.getLogger(name).setLevel(logging.DEBUG if verbose else logging.WARNING)


if __name__ == "__main__":
    main()
