"""Herald's processes reach a Temporal frontend that needs TLS, a client certificate or an
API key through the settings (starter.temporal): the certificate, key and CA named by
HERALD_TEMPORAL_TLS_* are the ones presented and trusted in a real TLS handshake.

No Temporal server here speaks TLS (the dev server has no flag for it), so the frontend
is a TLS listener on loopback that requires a client certificate signed by its CA and
records what it was shown, down to the headers of the client's first gRPC call (read
with h2); it answers none, so the connect fails after that, which is all the test needs
to see."""

from __future__ import annotations

import socket
import ssl
import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import h2.config
import h2.connection
import h2.events
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

import settings as settings_module
from starter import temporal

SERVER_NAME = "temporal.test"


def _name(common: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common)])


def _cert(
    subject: str,
    key: ec.EllipticCurvePrivateKey,
    issuer: tuple[str, ec.EllipticCurvePrivateKey] | None,
    *,
    dns: str | None = None,
) -> x509.Certificate:
    now = datetime.now(UTC)
    issuer_name, signer = (subject, key) if issuer is None else issuer
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(subject))
        .issuer_name(_name(issuer_name))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - timedelta(minutes=5))
        .not_valid_after(now + timedelta(hours=1))
        .add_extension(x509.BasicConstraints(ca=issuer is None, path_length=None), critical=True)
    )
    if dns:
        builder = builder.add_extension(x509.SubjectAlternativeName([x509.DNSName(dns)]), False)
    return builder.sign(signer, hashes.SHA256())


def _write(folder: Path, name: str, cert: x509.Certificate, key: Any) -> tuple[Path, Path]:
    cert_path, key_path = folder / f"{name}.pem", folder / f"{name}.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return cert_path, key_path


@pytest.fixture
def pki(tmp_path: Path) -> dict[str, Path]:
    """A CA, the frontend's certificate for SERVER_NAME and a worker's client certificate."""
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = _cert("Herald test CA", ca_key, None)
    server_key = ec.generate_private_key(ec.SECP256R1())
    server = _cert(SERVER_NAME, server_key, ("Herald test CA", ca_key), dns=SERVER_NAME)
    client_key = ec.generate_private_key(ec.SECP256R1())
    client = _cert("herald-worker", client_key, ("Herald test CA", ca_key))
    ca_path, _ = _write(tmp_path, "ca", ca, ca_key)
    server_cert, server_key_path = _write(tmp_path, "server", server, server_key)
    client_cert, client_key_path = _write(tmp_path, "client", client, client_key)
    return {
        "ca": ca_path,
        "server_cert": server_cert,
        "server_key": server_key_path,
        "client_cert": client_cert,
        "client_key": client_key_path,
    }


class Frontend:
    """A TLS listener (requiring a client certificate unless told not to); it records each
    handshake and the HTTP/2 headers of the first call made over it."""

    def __init__(self, pki: dict[str, Path], *, client_cert: bool = True) -> None:
        self.context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.context.load_cert_chain(pki["server_cert"], pki["server_key"])
        self.context.load_verify_locations(pki["ca"])
        self.context.verify_mode = ssl.CERT_REQUIRED if client_cert else ssl.CERT_NONE
        self.context.set_alpn_protocols(["h2"])
        self.context.sni_callback = self._sni
        self.seen: list[dict[str, Any]] = []
        self.calls: list[dict[str, str]] = []
        """The headers of the first request on each connection (the gRPC call)."""
        self.failed: list[str] = []
        self._names: list[str | None] = []
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)

    def _sni(self, _conn: Any, name: str | None, _ctx: Any) -> None:
        self._names.append(name)

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                raw, _ = self.sock.accept()
            except TimeoutError:
                continue
            raw.settimeout(5)
            try:
                with self.context.wrap_socket(raw, server_side=True) as tls:
                    peer = tls.getpeercert() or {}
                    subject = dict(pair[0] for pair in peer.get("subject", ()))
                    self.seen.append(
                        {
                            "client": subject.get("commonName"),
                            "sni": self._names[-1] if self._names else None,
                            "alpn": tls.selected_alpn_protocol(),
                        }
                    )
                    self._first_call(tls)
            except (ssl.SSLError, OSError) as err:
                self.failed.append(type(err).__name__)

    def _first_call(self, tls: ssl.SSLSocket) -> None:
        conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=False))
        conn.initiate_connection()
        tls.sendall(conn.data_to_send())
        while data := tls.recv(65535):
            for event in conn.receive_data(data):
                if isinstance(event, h2.events.RequestReceived):
                    self.calls.append({_text(name): _text(value) for name, value in event.headers})
                    return  # closing the connection fails the call: enough seen
            tls.sendall(conn.data_to_send())

    def __enter__(self) -> Frontend:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(5)
        self.sock.close()


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value


def _settings(frontend: Frontend, tmp_path: Path, **tls: Any) -> settings_module.Settings:
    return settings_module.Settings(
        data_dir=tmp_path / "data", temporal_address=f"127.0.0.1:{frontend.port}", **tls
    )


async def test_the_client_certificate_and_ca_the_settings_name_are_used_in_the_handshake(
    pki: dict[str, Path], tmp_path: Path
) -> None:
    with Frontend(pki) as frontend:
        cfg = _settings(
            frontend,
            tmp_path,
            temporal_tls_cert=pki["client_cert"],
            temporal_tls_key=pki["client_key"],
            temporal_tls_ca=pki["ca"],
            temporal_tls_server_name=SERVER_NAME,
        )
        with pytest.raises(RuntimeError, match="(?i)client connect"):
            await temporal.connect(cfg)  # no gRPC behind the handshake
    assert frontend.seen, frontend.failed
    assert frontend.seen[0] == {"client": "herald-worker", "sni": SERVER_NAME, "alpn": "h2"}
    assert frontend.calls and "authorization" not in frontend.calls[0]  # no key configured


async def test_without_the_client_certificate_the_frontend_refuses_the_handshake(
    pki: dict[str, Path], tmp_path: Path
) -> None:
    with Frontend(pki) as frontend:
        cfg = _settings(
            frontend, tmp_path, temporal_tls_ca=pki["ca"], temporal_tls_server_name=SERVER_NAME
        )
        with pytest.raises(RuntimeError, match="(?i)client connect"):
            await temporal.connect(cfg)
    assert frontend.seen == [] and frontend.failed  # it asked for one and got none


async def test_the_api_key_is_a_bearer_token_on_the_call_over_tls(
    pki: dict[str, Path], tmp_path: Path
) -> None:
    with Frontend(pki, client_cert=False) as frontend:
        cfg = _settings(
            frontend,
            tmp_path,
            temporal_api_key="key-123",
            temporal_tls_ca=pki["ca"],
            temporal_tls_server_name=SERVER_NAME,
        )
        with pytest.raises(RuntimeError, match="(?i)client connect"):
            await temporal.connect(cfg)
    assert frontend.calls, frontend.failed
    call = frontend.calls[0]
    assert call["authorization"] == "Bearer key-123"
    assert call[":path"].startswith("/temporal.api.workflowservice.v1.WorkflowService/")
    assert call["content-type"].startswith("application/grpc")


def test_plain_by_default_tls_with_an_api_key_and_the_key_sent_as_given(tmp_path: Path) -> None:
    plain = settings_module.Settings(data_dir=tmp_path)
    assert temporal.connect_options(plain) == {
        "namespace": "default",
        "tls": False,
        "api_key": None,
    }
    cloud = settings_module.Settings(
        data_dir=tmp_path,
        temporal_address="herald.a1b2c.tmprl.cloud:7233",
        temporal_namespace="herald.a1b2c",
        temporal_api_key="key-123",  # type: ignore[arg-type]
    )
    assert temporal.connect_options(cloud) == {
        "namespace": "herald.a1b2c",
        "tls": True,  # the system's roots
        "api_key": "key-123",
    }
    assert "key-123" not in repr(cloud)  # a secret, as the other tokens


def test_a_certificate_without_its_key_is_refused_when_the_settings_are_built(
    tmp_path: Path,
) -> None:
    with pytest.raises(ValueError, match="HERALD_TEMPORAL_TLS_CERT is set without"):
        settings_module.Settings(data_dir=tmp_path, temporal_tls_cert=tmp_path / "c.pem")


def test_an_unreadable_tls_file_is_named_by_its_setting(tmp_path: Path) -> None:
    cfg = settings_module.Settings(
        data_dir=tmp_path,
        temporal_tls_cert=tmp_path / "missing.pem",
        temporal_tls_key=tmp_path / "missing.key",
    )
    with pytest.raises(temporal.TemporalSettingError) as err:
        temporal.connect_options(cfg)
    assert str(err.value).startswith(f"HERALD_TEMPORAL_TLS_CERT={tmp_path / 'missing.pem'}: ")
