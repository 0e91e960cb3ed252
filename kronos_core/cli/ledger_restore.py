"""``kronos ledger restore BACKUP``: a backup made by ``kronos ledger backup`` brought back as
a new ledger folder, every file checked against the backup's manifest first (see
``kronos_core.cli.ledger_backup`` and docs/operations.md, "Ledger backup and restore")."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from kronos_core.cli.ledger_backup import ledger_dir, ledger_flags


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("backup", type=Path, metavar="BACKUP",
                        help="a folder made by kronos ledger backup")
    ledger_flags(parser)


def run(args: argparse.Namespace) -> int:
    from kronos_core.ledger.backup import BackupError, restore

    target = ledger_dir(args)
    try:
        report = restore(args.backup, target)
    except (BackupError, OSError) as exc:
        print(f"kronos ledger restore: {exc}", file=sys.stderr)
        return 2
    print(f"backup {args.backup} restored as the ledger {report.folder}: {report.files} file(s), "
          f"{report.bytes / 1e6:.1f} MB")
    return 0
