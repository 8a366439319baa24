"""`herald doctor`: what a deployment lacks, one line per check (runtime/doctor.py).

Beside a running `herald dev` (this data folder's `dev.json`) it checks that stack: its
ledger, its Temporal, its simulators and its API address fill whatever the settings
leave unset, as every other command adopts the stack.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import Any

import settings as settings_module

EXIT_FAILED = 1
"""Some check failed (2 stays the CLI's own: a bad command line, unusable settings)."""


def adopt_dev_stack(cfg: settings_module.Settings) -> frozenset[str]:
    """Fill what the settings leave unset from a `herald dev` running on this data folder;
    the provider aliases whose simulators it runs (checked besides the ones in use)."""
    from cli.context import adopt_dev_stack as adopt_addresses
    from cli.context import running_dev_stack

    running = running_dev_stack(cfg)
    if running is None:
        return frozenset()
    given = cfg.model_fields_set
    adopt_addresses(cfg)
    cfg.public_base_url = cfg.public_base_url or running.api
    if "temporal_namespace" not in given:
        cfg.temporal_namespace = running.namespace
    served = {"twilio", "smtp"}
    cfg.sms_base_url = cfg.sms_base_url or running.simulator
    if running.telnyx_simulator:
        cfg.telnyx_base_url = cfg.telnyx_base_url or running.telnyx_simulator
        served.add("telnyx")
    if running.email_simulator:
        cfg.sendgrid_base_url = cfg.sendgrid_base_url or running.email_simulator
        served.add("sendgrid")
    host, _, port = running.smtp.rpartition(":")
    if host and port.isdigit() and not {"smtp_host", "smtp_port"} & given:
        cfg.smtp_host, cfg.smtp_port = host, int(port)
    return frozenset(served)


async def cmd_doctor(args: argparse.Namespace, cfg: settings_module.Settings) -> int:
    from runtime.doctor import run_checks

    findings = await run_checks(cfg, also_providers=adopt_dev_stack(cfg))
    for finding in findings:
        print(finding.line())
    failed = [f.what for f in findings if not f.ok]
    if failed:
        print(
            f"herald doctor: {len(failed)} of {len(findings)} checks failed: {', '.join(failed)}",
            file=sys.stderr,
        )
        return EXIT_FAILED
    return 0


def settings_refused(err: Exception) -> int:
    """The settings do not build (a malformed HERALD_* value, a production secret missing):
    the first check fails, and nothing else can be checked without them."""
    print(f"FAIL settings: {settings_module.problem(err)}")
    print("herald doctor: 1 of 1 checks failed: settings (nothing else checked)", file=sys.stderr)
    return EXIT_FAILED


def register(add: Callable[..., argparse.ArgumentParser]) -> dict[str, Any]:
    add(
        "doctor",
        "check a deployment from its settings, one line per check (settings, ledger "
        "reachable and migrated, data key, active policy, Temporal namespace and search "
        "attributes, each provider account in use, the public callback URL); sends "
        f"nothing; exit {EXIT_FAILED} if any check fails",
        json_flag=False,
        example="HERALD_ENV=production HERALD_DATABASE_URL=postgresql://... herald doctor",
    )
    return {"doctor": cmd_doctor}
