"""``kronos store verify|compact|gc DIR``: check a store, write its read snapshots, remove what
writers left behind (``kronos_core.data.housekeeping``; see ``docs/store.md``)."""

from __future__ import annotations

import argparse
import sys


def add_verify_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("store", metavar="DIR", help="store root")


def run_verify(args: argparse.Namespace) -> int:
    from kronos_core.data.housekeeping import verify

    r = verify(args.store)
    for problem in r.problems:
        print(f"problem: {problem}", file=sys.stderr)
    state = "ok" if r.ok else f"{len(r.problems)} problem(s)"
    print(f"{args.store}: store version {r.version}, {r.files} file(s), {r.rows} candles: {state}")
    return 0 if r.ok else 1


def add_compact_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("store", metavar="DIR", help="store root")
    parser.add_argument("--frequency", help="only this frequency (default: all)")


def run_compact(args: argparse.Namespace) -> int:
    from kronos_core.data.store import KlineStore

    report = KlineStore(args.store).compact(args.frequency)
    skipped = 0
    for freq, r in report.items():
        skipped += len(r["skipped"])
        for err in r["skipped"]:
            print(f"left out: {err.message}", file=sys.stderr)
        print(f"{freq}: {r['symbols']} symbols, {r['rows']} candles -> {r['path']}")
    if not report:
        print(f"{args.store}: no frequency to compact")
    return 1 if skipped else 0


def add_gc_arguments(parser: argparse.ArgumentParser) -> None:
    from kronos_core.data.housekeeping import DEFAULT_GRACE_S

    parser.add_argument("store", metavar="DIR", help="store root")
    parser.add_argument(
        "--grace", type=float, default=DEFAULT_GRACE_S, metavar="SECONDS",
        help="remove only what has been garbage this long (default %(default)s: a reader that "
        "resolved an older version may still open its files)",
    )
    parser.add_argument("--dry-run", action="store_true", help="list, remove nothing")


def run_gc(args: argparse.Namespace) -> int:
    from kronos_core.data.housekeeping import gc

    r = gc(args.store, args.grace, args.dry_run)
    verb = "would remove" if args.dry_run else "removed"
    for path in r.removed:
        print(f"{verb} {path}")
    young = f"; {r.kept_young} kept, younger than {args.grace:g} s" if r.kept_young else ""
    print(f"{args.store}: {verb} {len(r.removed)} file(s), {r.bytes / 1e6:.1f} MB{young}")
    return 0
