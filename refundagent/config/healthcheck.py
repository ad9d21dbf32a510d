"""`python -m refundagent.config.healthcheck [--only beat,worker]`: /api/health's checks from a shell.

For container health checks (docker-compose.yml uses `--only beat` for the beat container: its
health is the sweep's last run). Prints the selected checks as JSON; exits 1 when one fails, 2
for an unknown check.
"""

import argparse
import json
import os
import sys

import django


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m refundagent.config.healthcheck", description=__doc__)
    parser.add_argument("--only", default="", help="comma-separated checks to judge (default: all)")
    args = parser.parse_args(argv)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "refundagent.config.settings")
    django.setup()
    # Imported once the apps are loaded: the checks read models.
    from .health import health_report

    _status, body = health_report()
    names = [n.strip() for n in args.only.split(",") if n.strip()] or [
        k for k in body if k not in {"status", "details"}
    ]
    unknown = [n for n in names if n not in body]
    if unknown:
        print(f"unknown check(s): {', '.join(unknown)}", file=sys.stderr)
        return 2
    selected = {name: body[name] for name in names}
    print(json.dumps({**selected, "details": body["details"]}, default=str))
    return 1 if any(value.startswith("error") for value in selected.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
