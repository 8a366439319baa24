"""`herald api`: the HTTP ingress and operator API as a process of its own."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

import settings as settings_module


async def cmd_api(args: argparse.Namespace, cfg: settings_module.Settings) -> int:
    from cli.context import CliError, adopt_dev_stack
    from cli.errors import operational_error

    # Beside a running `herald dev`, reuse its Temporal and Postgres (like `herald show`).
    adopt_dev_stack(cfg)
    from api.server import serve

    if args.port is not None:
        try:
            settings_module.check_port(args.port)
        except ValueError as err:
            raise CliError(f"--port: {err}") from None
    try:
        await serve(cfg, host=args.host, port=args.port, ingress_port=args.ingress_port)
    except RuntimeError as err:  # missing production secrets, Temporal unreachable
        raise CliError(operational_error(err, cfg) or str(err)) from err
    return 0


def register(add: Callable[..., argparse.ArgumentParser]) -> dict[str, Any]:
    api = add(
        "api",
        "serve the HTTP ingress and operator API (receipts, STOP, unsubscribe, /v1/intents, "
        "/metrics) with uvicorn",
        json_flag=False,
        example="herald api --host 0.0.0.0 --port 8080",
    )
    api.add_argument("--host", help="bind address (default: HERALD_API_HOST, 127.0.0.1)")
    api.add_argument("--port", type=int, help="port (default: HERALD_API_PORT, 58080)")
    api.add_argument(
        "--ingress-port",
        type=int,
        help="also serve the public ingress (provider webhooks and unsubscribe links only) "
        "on this port, the one a proxy exposes (default: HERALD_INGRESS_PORT, none)",
    )
    return {"api": cmd_api}
