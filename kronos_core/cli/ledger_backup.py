"""``kronos ledger backup DIR`` and ``kronos ledger restore BACKUP``: a consistent copy of the
forecast ledger while the service runs, and that copy brought back as a new ledger folder
(``kronos_core.ledger.backup``; the procedure: docs/operations.md, "Ledger backup and restore").

Examples::

    kronos ledger backup /backups/ledger-$(date +%F) --ledger /data/ledger
    kronos ledger restore /backups/ledger-2026-12-01 --ledger /data/ledger-restored

The ledger is ``--ledger``, else ``KRONOS_LEDGER_DIR``, else ``<store>/_ledger`` (as ``kronos
score``). Exit 0: done; 2: refused (a used target folder, a damaged backup, no ledger).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def ledger_flags(parser: argparse.ArgumentParser) -> None:
    """``--ledger`` and ``--store``, shared with ``kronos ledger restore``."""
    parser.add_argument("--ledger", type=Path, metavar="DIR",
                        help="forecast ledger (default: KRONOS_LEDGER_DIR, else <store>/_ledger)")
    parser.add_argument("--store", type=Path, metavar="DIR",
                        help="K-line store whose default ledger is meant (<store>/_ledger)")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("dest", type=Path, metavar="DIR",
                        help="new (or empty) folder to copy the ledger to")
    ledger_flags(parser)


def ledger_dir(args: argparse.Namespace) -> Path:
    from kronos_core.cli.score import resolve_dirs

    return resolve_dirs(args.store, args.ledger)[1]


def run(args: argparse.Namespace) -> int:
    from kronos_core.ledger.backup import BackupError, backup

    source = ledger_dir(args)
    try:
        report = backup(source, args.dest)
    except (BackupError, OSError) as exc:
        print(f"kronos ledger backup: {exc}", file=sys.stderr)
        return 2
    gone = f"; {report.vanished} removed by retention during the copy" if report.vanished else ""
    print(f"ledger {source} backed up to {report.folder}: {report.files} file(s), "
          f"{report.bytes / 1e6:.1f} MB{gone}")
    return 0
