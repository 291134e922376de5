"""``corpus``: prepare token data (tokenize, merge, inspect, blend). Each command parses its
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
    "merge": "cli.corpus_merge:merge_command"})
@version_option("corpus")
@click.option("-v", "--verbose", is_flag=True, help="Log debug messages.")
def main(verbose: bool) -> None:
    """Turn raw text into Megatron-compatible token files and blends."""
    logging.basicConfig(level=logging.DEBUG if verbose else logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    for name in QUIET_LOGGERS:
        logging.getLogger(name).setLevel(logging.DEBUG if verbose else logging.WARNING)


@main.command("add-checksums")
@click.argument("datasets", nargs=-1, required=True)
def add_checksums(datasets: tuple[str, ...]) -> None:
    """Record the checksums `corpus inspect --check --deep` compares in the sidecars of pairs written without them.

    DATASETS are prefixes, .idx/.bin paths, globs or directories. Each pair must pass every check first; checksums
    already recorded are compared, never replaced; each sidecar is replaced atomically.
    """
    from corpus.inspect.checksums import add_checksums as record

    for result in record(datasets):
        if not result.added:
            click.echo(f"{result.prefix}: checksums already recorded and matching")
        else:
            files = " and ".join(f".{kind}" for kind in result.added)
            where = "a new sidecar" if result.new_sidecar else "the sidecar"
            click.echo(f"{result.prefix}: recorded the checksums of the {files} in {where}")


if __name__ == "__main__":
    main()
