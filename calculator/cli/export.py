"""`python -m calculator export --format ...`: the estimate's input as a ready-to-run framework file
(calculator/exports). The file goes to stdout or --output; what the framework cannot express goes to stderr, one
`not expressed:` line each; --json prints the file with its target and that list as one object."""
from __future__ import annotations

import argparse
import json
import sys


def run_export(args: argparse.Namespace, model, workload) -> int:
    from calculator.cli.checks import CliError
    from calculator.exports import export
    out = export(model, workload, args.format)
    for line in out.warnings:  # what the framework cannot express: said, never dropped
        print(f"not expressed: {line}", file=sys.stderr)
    text = json.dumps(out.to_dict()) + "\n" if args.json else out.text
    if args.output:
        try:
            with open(args.output, "w", encoding="utf-8") as fh:
                fh.write(text)
        except OSError as exc:
            raise CliError(f"output: cannot write {args.output}: {exc.strerror}") from None
    else:
        sys.stdout.write(text)
    return 0
