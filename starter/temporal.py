"""How Herald's processes connect to Temporal: address, namespace, TLS and API key.

The worker (`worker.connect`) and every client (`HeraldClient.connect`: the API, the CLI,
the demo) connect through :func:`connect`, so a frontend that needs TLS, a client
certificate (mTLS) or an API key (Temporal Cloud) is configured once, by settings
(README, "Pointing it at real services"):

- `HERALD_TEMPORAL_TLS=true`: TLS, trusting the system's roots;
- `HERALD_TEMPORAL_TLS_CERT` + `HERALD_TEMPORAL_TLS_KEY`: a client certificate (PEM files);
- `HERALD_TEMPORAL_TLS_CA`: the CA of the frontend's certificate (PEM), where the system
  does not trust it; `HERALD_TEMPORAL_TLS_SERVER_NAME`: the name to check it against;
- `HERALD_TEMPORAL_API_KEY`: a bearer token on every call.

Any of the files or the key turns TLS on. A file that cannot be read is refused before
connecting, in one line naming its setting.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from temporalio.api.workflowservice.v1 import DescribeNamespaceRequest
from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode, TLSConfig

import settings as settings_module


class TemporalSettingError(ValueError):
    """A TLS file named by a setting that cannot be read, or a namespace the server lacks."""


def tls_config(cfg: settings_module.Settings) -> TLSConfig | bool:
    """The client's TLS: False (plain, the dev server), True (the system's roots), or a
    config carrying the files the settings name."""
    cert = _read("HERALD_TEMPORAL_TLS_CERT", cfg.temporal_tls_cert)
    key = _read("HERALD_TEMPORAL_TLS_KEY", cfg.temporal_tls_key)
    ca = _read("HERALD_TEMPORAL_TLS_CA", cfg.temporal_tls_ca)
    if cert or key or ca or cfg.temporal_tls_server_name:
        return TLSConfig(
            server_root_ca_cert=ca,
            domain=cfg.temporal_tls_server_name,
            client_cert=cert,
            client_private_key=key,
        )
    return cfg.temporal_tls or cfg.temporal_api_key is not None


def _read(setting: str, path: Path | None) -> bytes | None:
    if path is None:
        return None
    try:
        return path.read_bytes()
    except OSError as err:
        raise TemporalSettingError(
            f"{setting}={path}: cannot read it ({err.strerror or type(err).__name__})"
        ) from None


def connect_options(cfg: settings_module.Settings) -> dict[str, Any]:
    """`Client.connect`'s keyword arguments for these settings (the target aside)."""
    key = cfg.temporal_api_key
    return {
        "namespace": cfg.temporal_namespace,
        "tls": tls_config(cfg),
        "api_key": key.get_secret_value() if key is not None else None,
    }


async def connect(cfg: settings_module.Settings, **kwargs: Any) -> Client:
    """A Temporal client for these settings; `kwargs` go to `Client.connect` as well (the
    worker's runtime). A namespace the server does not have is a TemporalSettingError
    here, not a failure at the first start (or a worker polling nothing)."""
    client = await Client.connect(cfg.temporal_target, **connect_options(cfg), **kwargs)
    try:
        await client.workflow_service.describe_namespace(
            DescribeNamespaceRequest(namespace=cfg.temporal_namespace)
        )
    except RPCError as err:
        if err.status == RPCStatusCode.NOT_FOUND:
            raise TemporalSettingError(
                f"HERALD_TEMPORAL_NAMESPACE={cfg.temporal_namespace}: no such namespace at "
                f"{cfg.temporal_target}"
            ) from None
        # Anything else (a key allowed to run workflows but not to describe the
        # namespace, a server without the call) is left to the calls that matter.
    return client
