"""``plant-store token add``, ``list`` and ``revoke``: the bearer tokens in the token
file, which running servers read again within a second."""

import argparse
import sys

from plant_store import config
from plant_store.cli.grammar import TOKENS, Commands, command, group
from plant_store.tokens import TokenFile


def register(commands: Commands) -> None:
    token = group(commands, "token", "issue, list and revoke bearer tokens", "token_command")
    add = command(token, "add", "issue a token and print it, this once", TOKENS,
                  handler=add_token)
    add.add_argument("--label", required=True, help="a name for whoever holds the token")
    command(token, "list", "show each token's label and creation time, never the token",
            TOKENS, handler=list_tokens)
    revoke = command(token, "revoke", "revoke a token; servers refuse it within a second",
                     TOKENS, handler=revoke_token)
    revoke.add_argument("label", metavar="LABEL", help="the label given to 'token add'")


def add_token(args: argparse.Namespace, cfg: config.Config) -> int:
    print(TokenFile(cfg.token_file).add(args.label))
    return 0


def list_tokens(args: argparse.Namespace, cfg: config.Config) -> int:
    tokens = TokenFile(cfg.token_file)
    entries = tokens.entries()
    for entry in entries:
        print(f"{entry.label}\t{entry.created}")
    if not entries:
        print(f"no tokens in {tokens.path}", file=sys.stderr)
    return 0


def revoke_token(args: argparse.Namespace, cfg: config.Config) -> int:
    TokenFile(cfg.token_file).revoke(args.label)
    print(f"revoked {args.label!r}", file=sys.stderr)
    return 0
