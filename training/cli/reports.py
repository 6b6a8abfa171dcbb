"""Report commands: ``results`` and the ``describe-*`` tables."""

from __future__ import annotations

import argparse

from training.cli.common import write_report


def add_describe(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("describe-data", help="the datasets table from prepare --json summaries")
    p.add_argument("summaries", nargs="+", metavar="SUMMARY.json")
    p.add_argument("--json", required=True, help="output JSON (its table beside it, .md)")
    p.set_defaults(run=_run_describe)
    p = sub.add_parser("describe-latency", help="the range of each latency figure over "
                       "benchmark --suite latency reports (runs on a quiet machine)")
    p.add_argument("reports", nargs="+", metavar="LATENCY.json")
    p.add_argument("--json", required=True, help="output JSON (its table beside it, .md)")
    p.set_defaults(run=_run_describe)
    p = sub.add_parser("describe-models", help="the model sets' training table (time, "
                       "parameters, validation losses) from their manifests")
    p.add_argument("folders", nargs="+", metavar="MODELS")
    p.add_argument("--datasets", nargs="*", default=[], metavar="SUMMARY.json",
                   help="prepare --json summaries giving each set's train frames")
    p.add_argument("--json", required=True, help="output JSON (its table beside it, .md)")
    p.set_defaults(run=_run_describe)


def _run_describe(args: argparse.Namespace) -> int:
    from training.reports import describe

    if args.command == "describe-data":
        result, text = describe.describe_data(args.summaries), describe.datasets_markdown
    elif args.command == "describe-latency":
        result, text = describe.describe_latency(args.reports), describe.latency_markdown
    else:
        result = describe.describe_models(args.folders, args.datasets)
        text = describe.models_markdown
    table = text(result)
    print(table)
    write_report(args.json, args.command_line, result, table)
    return 0


def add_results(sub: argparse._SubParsersAction) -> None:
    from training.reports.results import RESULTS

    p = sub.add_parser("results", help="remake the published figures (docs/results/, the "
                       "tables in docs/RESULTS.md and the README) with the commands that make them")
    p.add_argument("names", nargs="*", metavar="NAME",
                   help=f"results to make (default all): {', '.join(RESULTS)}")
    p.set_defaults(run=_run_results)


def _run_results(args: argparse.Namespace) -> int:
    from training.reports.results import run

    run(args.names)
    return 0
