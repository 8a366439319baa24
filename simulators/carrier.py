"""The simulated carrier both provider simulators share, whatever API they speak.

The fault vocabulary (:class:`Fault`, :data:`FAULT_NUMBERS`), the carrier's timings
(:class:`SimDelays`), and :class:`ScriptedCarrier`: faults scripted per destination at run
time, the counting of every create, the message lifecycles scheduled as tasks (cut short
at shutdown), and the control endpoints (``/_sim/...``) that drive it. Each provider's
simulator (:mod:`simulators.twilio` for Twilio, :mod:`simulators.telnyx` for
Telnyx) subclasses it and keeps its own HTTP shapes: routes, bodies, error codes, status
words and how it signs what it POSTs.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from dataclasses import asdict, dataclass, field
from typing import Any, ClassVar, Generic, TypeVar
from urllib.parse import parse_qs, urlsplit

import httpx
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

FAULTS = (
    "accept_then_timeout",
    "queued_then_timeout",
    "rate_limit",
    "unavailable",
    "slow_response",
    "slow_lookup",
    "delayed_receipt",
    "duplicate_receipts",
    "out_of_order",
    "never_resolves",
    "api_error",
    "failed",
    "undelivered",
)
"""Fault kinds. ``api_error``, ``failed`` and ``undelivered`` take a code: ``api_error:21211``."""


@dataclass(frozen=True)
class SimDelays:
    """Timings of the simulated carrier, in seconds."""

    sent: float = 0.2
    """From create (or ``SendAt``) to ``sent``."""
    delivered: float = 0.5
    """From ``sent`` to the final receipt."""
    delayed_receipt: float = 5.0
    """From ``sent`` to the final receipt for the ``delayed_receipt`` fault."""
    slow_response: float = 2.0
    """How long a ``slow_response`` create takes to answer (below a 10 s read timeout)."""
    hang: float = 30.0
    """How long ``accept_then_timeout`` withholds the response; cut short at shutdown."""
    retry_after: int = 1
    """The ``Retry-After`` header (seconds) on 429 and 503 answers."""


@dataclass(frozen=True)
class Fault:
    """A scripted misbehaviour for one destination."""

    kind: str
    code: int | None = None
    """The error code for ``api_error``, ``failed`` and ``undelivered``."""
    count: int | None = None
    """``rate_limit``/``unavailable``: how many create calls fail (default 2 and 1);
    ``duplicate_receipts``: how many times each callback is delivered (default 3);
    ``never_resolves``: how many submissions never resolve (default: all of them)."""
    seconds: float | None = None
    """Overrides the matching :class:`SimDelays` value for this destination."""
    http_status: int | None = None
    """``api_error``: the 4xx the create is refused with (default 400), e.g. 403 or 404."""

    @classmethod
    def parse(
        cls,
        spec: str,
        *,
        count: int | None = None,
        seconds: float | None = None,
        http_status: int | None = None,
    ) -> Fault:
        kind, _, code = spec.partition(":")
        kind = kind.strip()
        if kind not in FAULTS:
            raise ValueError(f"unknown fault {kind!r}; known: {', '.join(FAULTS)}")
        needs_code = kind in ("api_error", "failed", "undelivered")
        if needs_code and not code:
            raise ValueError(f"fault {kind!r} needs a code, e.g. {kind}:30003")
        if code and not needs_code:
            raise ValueError(f"fault {kind!r} takes no code")
        if http_status is not None and (
            kind != "api_error" or not 400 <= http_status <= 499 or http_status == 429
        ):
            raise ValueError("http_status is a 4xx other than 429, for api_error only")
        if count is None:
            count = {"rate_limit": 2, "unavailable": 1, "duplicate_receipts": 3}.get(kind)
        return cls(kind, int(code) if code else None, count, seconds, http_status)

    @property
    def label(self) -> str:
        return f"{self.kind}:{self.code}" if self.code is not None else self.kind


# Valid UK mobile numbers (phonenumbers: valid, MOBILE, region GB) in the 07400 range.
# Behaviours end in 0000NN; error codes are spelled in the last five digits.
FAULT_NUMBERS: dict[str, Fault] = {
    "+447400000001": Fault.parse("accept_then_timeout"),
    "+447400000002": Fault.parse("rate_limit"),
    "+447400000003": Fault.parse("unavailable"),
    "+447400000004": Fault.parse("slow_response"),
    "+447400000005": Fault.parse("delayed_receipt"),
    "+447400000006": Fault.parse("duplicate_receipts"),
    "+447400000007": Fault.parse("out_of_order"),
    "+447400000008": Fault.parse("never_resolves"),
    "+447400021211": Fault.parse("api_error:21211"),
    "+447400021610": Fault.parse("api_error:21610"),
    "+447400021614": Fault.parse("api_error:21614"),
    "+447400030003": Fault.parse("undelivered:30003"),
    "+447400030004": Fault.parse("undelivered:30004"),
    "+447400030005": Fault.parse("undelivered:30005"),
    "+447400030006": Fault.parse("undelivered:30006"),
    "+447400030007": Fault.parse("failed:30007"),
}


@dataclass
class CallbackRecord:
    """One callback POST the simulator made (kept for tests and ``GET /_sim/callbacks``)."""

    url: str
    params: dict[str, str]
    headers: dict[str, str]
    status_code: int | None
    """The receiver's HTTP answer, or ``None`` if it could not be reached."""
    kind: str = "status"
    """``status`` (delivery receipt) or ``inbound`` (an inbound SMS webhook)."""


@dataclass
class SimStats:
    """Counts of create requests and created messages (`GET /_sim/stats`)."""

    total: int = 0
    by_token: Counter[str] = field(default_factory=Counter)
    by_to: Counter[str] = field(default_factory=Counter)
    requests_total: int = 0
    requests_by_token: Counter[str] = field(default_factory=Counter)
    rejected_total: int = 0

    def as_json(self) -> dict[str, Any]:
        return {
            "total": self.total,
            "by_token": dict(self.by_token),
            "by_to": dict(self.by_to),
            "requests_total": self.requests_total,
            "requests_by_token": dict(self.requests_by_token),
            "rejected_total": self.rejected_total,
        }


def callback_token(url: str | None) -> str | None:
    """The attempt token Herald puts in a webhook URL (``?token=...``): how the
    simulator counts submissions per attempt."""
    if not url:
        return None
    values = parse_qs(urlsplit(url).query).get("token")
    return values[0] if values else None


MessageT = TypeVar("MessageT")
Lifecycle = Coroutine[Any, Any, None]
Receipt = Callable[[int], Awaitable[None]]
"""Posts one receipt (a status callback, a message event) that many times: a duplicate is
the same receipt again."""


class ScriptedCarrier(Generic[MessageT]):
    """A simulated carrier's state and scheduling, without any provider's HTTP shapes.

    A subclass answers in its provider's words: :meth:`error` builds its error body,
    :attr:`rate_limit_code` / :attr:`unavailable_code` are the codes a scripted
    ``rate_limit`` / ``unavailable`` answers with, :meth:`_set` moves a message to one of
    its status words and :meth:`_receipt` says so to the message's webhook.
    """

    rate_limit_code: ClassVar[int]
    unavailable_code: ClassVar[int]
    failed_status: ClassVar[str]
    """The status word of a message the carrier could not send (the ``failed`` fault)."""
    undelivered_status: ClassVar[str]
    """The status word of a message sent but not delivered (the ``undelivered`` fault)."""

    def __init__(
        self,
        *,
        delays: SimDelays | None = None,
        inbound_url: str | None = None,
        fault_numbers: dict[str, Fault] | None = None,
    ) -> None:
        self.delays = delays or SimDelays()
        self.inbound_url = inbound_url
        self._base_faults = dict(FAULT_NUMBERS if fault_numbers is None else fault_numbers)
        self.outage: Any = None
        """Set by the simulator's server: ``outage(seconds)`` refuses connections."""
        self._aborted = asyncio.Event()
        self._tasks: set[asyncio.Task[None]] = set()
        self._http: httpx.AsyncClient | None = None
        self._reset_state()

    def _reset_state(self) -> None:
        self._released: dict[str, asyncio.Event] = {}
        """`queued_then_timeout`: a destination's queued messages go once this is set."""
        self.messages: dict[str, MessageT] = {}
        self.scripts: dict[str, Fault] = {}
        self._remaining: dict[str, int] = {}
        self.stats = SimStats()
        self.callbacks: list[CallbackRecord] = []

    def error(self, status: int, code: int, message: str | None = None, **headers: str) -> Response:
        """The provider's error answer."""
        raise NotImplementedError

    def accept_credential(self, secret: str) -> None:
        """From now on accept `secret` (and only it) as the account's credential, as a
        provider does once the account's key or token is rotated: a client still holding
        the old one is refused (401) until its setting is fixed."""
        raise NotImplementedError

    # -- lifecycle of the simulator itself --------------------------------------

    def reset(self) -> None:
        """Forget everything but the configuration; running lifecycles are cancelled."""
        for task in list(self._tasks):
            task.cancel()
        self._reset_state()

    def abort(self) -> None:
        """Cut withheld responses short and stop every lifecycle (called at shutdown)."""
        self._aborted.set()
        for task in list(self._tasks):
            task.cancel()

    def released(self, to: str) -> asyncio.Event:
        """The event that lets `to`'s held (queued) messages go."""
        return self._released.setdefault(to, asyncio.Event())

    def to_of(self, message: MessageT) -> str:
        """The destination of a message this carrier holds."""
        return str(getattr(message, "to", ""))

    def resume(self) -> None:
        """Serve again after :meth:`abort` (the server is back after an outage): withheld
        responses are withheld again instead of answered at once."""
        self._aborted.clear()

    async def aclose(self) -> None:
        self.abort()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._http is not None:
            await self._http.aclose()
            self._http = None

    async def _pause(self, seconds: float) -> None:
        """Sleep, unless the simulator is shutting down."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._aborted.wait(), timeout=max(0.0, seconds))

    def _spawn(self, coro: Lifecycle) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    @property
    def http(self) -> httpx.AsyncClient:
        if self._http is None:
            self._http = httpx.AsyncClient(timeout=httpx.Timeout(5.0, connect=2.0))
        return self._http

    # -- faults -----------------------------------------------------------------

    def fault_for(self, to: str) -> Fault | None:
        if to in self.scripts:
            fault = self.scripts[to]
            return None if fault.kind == "none" else fault
        return self._base_faults.get(to)

    def script(self, to: str, fault: Fault | None) -> None:
        self.scripts[to] = fault or Fault("none")
        self._remaining.pop(to, None)

    def _within_count(self, to: str, fault: Fault | None) -> Fault | None:
        """`fault`, unless it is a `never_resolves` limited to a count that this
        destination's submissions have used up (a resend then goes through normally)."""
        if fault and fault.kind == "never_resolves" and fault.count is not None:
            return fault if self._take_limited(to, fault) else None
        return fault

    def _take_limited(self, to: str, fault: Fault) -> bool:
        """For count-limited faults: True while this call is one of the first N."""
        left = self._remaining.setdefault(to, fault.count or 0)
        if left <= 0:
            return False
        self._remaining[to] = left - 1
        return True

    # -- the create, as every provider's goes -----------------------------------

    def _count_request(self, token: str | None) -> None:
        """Every create request, refused or not."""
        self.stats.requests_total += 1
        if token:
            self.stats.requests_by_token[token] += 1

    def _reject(
        self, status: int, code: int, message: str | None = None, **headers: str
    ) -> Response:
        """A create refused: nothing created, counted as rejected."""
        self.stats.rejected_total += 1
        return self.error(status, code, message, **headers)

    def _refused_by_script(self, to: str, fault: Fault | None) -> Response | None:
        """The answer of a scripted rate limit, outage or API error, if one applies."""
        kind = fault.kind if fault else None
        if fault and kind in ("rate_limit", "unavailable") and self._take_limited(to, fault):
            retry = {"Retry-After": str(self.delays.retry_after)}
            if kind == "rate_limit":
                return self._reject(429, self.rate_limit_code, **retry)
            return self._reject(503, self.unavailable_code, "Service Unavailable", **retry)
        if fault and kind == "api_error":
            assert fault.code is not None
            return self._reject(fault.http_status or 400, fault.code)
        return None

    def _hold(
        self, key: str, message: MessageT, *, to: str, token: str | None, lifecycle: Lifecycle
    ) -> None:
        """Keep a created message, count it and start its lifecycle."""
        self.messages[key] = message
        # Counted here, before any response is withheld: the message exists now.
        self.stats.total += 1
        self.stats.by_to[to] += 1
        if token:
            self.stats.by_token[token] += 1
        self._spawn(lifecycle)

    async def _answer_delay(self, fault: Fault | None) -> None:
        """Withhold (``accept_then_timeout``, ``queued_then_timeout``) or slow
        (``slow_response``) a create's answer."""
        kind = fault.kind if fault else None
        if kind in ("accept_then_timeout", "queued_then_timeout"):
            await self._pause(fault.seconds if fault and fault.seconds else self.delays.hang)
        elif kind == "slow_response":
            await self._pause(
                fault.seconds if fault and fault.seconds else self.delays.slow_response
            )

    async def read_delay(self, to: str | None) -> None:
        """Slow a read of a message to `to` (a fetch or a list by ``To``): ``slow_lookup``
        answers after ``seconds`` (default ``delays.slow_response``)."""
        fault = self.fault_for(to) if to else None
        if fault and fault.kind == "slow_lookup":
            await self._pause(fault.seconds or self.delays.slow_response)

    # -- the carrier ------------------------------------------------------------

    def _set(self, m: MessageT, status: str, code: int | None = None) -> bool:
        """Move a message on to ``status``; False if it is gone (or cancelled) meanwhile."""
        raise NotImplementedError

    def _receipt(self, m: MessageT, status: str, code: int | None) -> Receipt | None:
        """The receipt saying ``status``, with the message as it stands now; ``None`` when
        the message asked for no receipts."""
        raise NotImplementedError

    async def _due(self, m: MessageT) -> bool:
        """Wait until the message is due to go (a scheduled one); False if it never is."""
        return True

    async def _report(self, receipt: Receipt | None, fault: Fault | None) -> None:
        if receipt is None:
            return
        copies = fault.count if fault and fault.kind == "duplicate_receipts" and fault.count else 1
        await receipt(copies)

    async def _lifecycle(self, m: MessageT, fault: Fault | None) -> None:
        """The message's way through the carrier, on its timers, as its fault bends it."""
        kind = fault.kind if fault else None
        code = fault.code if fault else None
        d = self.delays
        if not await self._due(m):
            return
        if kind == "queued_then_timeout":
            # Held queued (no date_sent: a DateSent list skips it) as long as the answer
            # is, or until released (`POST /_sim/release`), whichever comes first.
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(
                    self.released(self.to_of(m)).wait(),
                    timeout=fault.seconds if fault and fault.seconds else d.hang,
                )
        await asyncio.sleep(d.sent)
        if kind == "failed":
            if self._set(m, self.failed_status, code):
                await self._report(self._receipt(m, self.failed_status, code), fault)
            return
        if not self._set(m, "sent"):
            return
        if kind == "never_resolves":
            return  # stays `sent`, and no receipt ever comes
        if kind == "out_of_order":
            sent = self._receipt(m, "sent", None)  # taken while it is true, posted last
            await asyncio.sleep(d.delivered)
            if self._set(m, "delivered"):
                await self._report(self._receipt(m, "delivered", None), fault)
                await self._report(sent, fault)
            return
        await self._report(self._receipt(m, "sent", None), fault)
        if kind == "delayed_receipt":
            await asyncio.sleep(fault.seconds if fault and fault.seconds else d.delayed_receipt)
        else:
            await asyncio.sleep(d.delivered)
        if kind == "undelivered":
            if self._set(m, self.undelivered_status, code):
                await self._report(self._receipt(m, self.undelivered_status, code), fault)
        elif self._set(m, "delivered"):
            await self._report(self._receipt(m, "delivered", None), fault)

    async def inbound(self, *, from_: str, to: str, body: str) -> CallbackRecord:
        """POST an inbound SMS to :attr:`inbound_url` as the provider would."""
        raise NotImplementedError


def control_routes(
    sim: ScriptedCarrier[Any], inbound_id: Callable[[CallbackRecord], dict[str, Any]]
) -> list[Route]:
    """The control endpoints (not part of any provider's API), the same for every
    simulator; ``inbound_id`` names the webhook an inbound POST made (its id field)."""

    async def script(request: Request) -> Response:
        payload = await request.json()
        if "inbound_url" in payload:
            sim.inbound_url = payload["inbound_url"]
        if "to" in payload:
            spec = payload.get("fault") or "none"
            try:
                fault = (
                    None
                    if spec == "none"
                    else Fault.parse(
                        spec,
                        count=payload.get("count"),
                        seconds=payload.get("seconds"),
                        http_status=payload.get("http_status"),
                    )
                )
            except ValueError as exc:
                return JSONResponse({"error": str(exc)}, status_code=400)
            sim.script(payload["to"], fault)
        return JSONResponse(
            {
                "scripts": {to: f.label for to, f in sim.scripts.items()},
                "inbound_url": sim.inbound_url,
            }
        )

    async def stats(request: Request) -> Response:
        return JSONResponse(sim.stats.as_json())

    async def callbacks(request: Request) -> Response:
        return JSONResponse([asdict(c) for c in sim.callbacks])

    async def inbound(request: Request) -> Response:
        payload = await request.json()
        try:
            record = await sim.inbound(
                from_=payload["from"], to=payload.get("to", ""), body=payload.get("body", "")
            )
        except LookupError as exc:
            return JSONResponse({"error": str(exc)}, status_code=409)
        except KeyError:
            return JSONResponse({"error": "'from' is required"}, status_code=400)
        return JSONResponse({**inbound_id(record), "status_code": record.status_code})

    async def reset(request: Request) -> Response:
        sim.reset()
        return JSONResponse({"reset": True})

    async def release(request: Request) -> Response:
        payload = await request.json()
        to = payload.get("to") if isinstance(payload, dict) else None
        if not isinstance(to, str) or not to:
            return JSONResponse({"error": "'to' is the destination to release"}, status_code=400)
        sim.released(to).set()
        return JSONResponse({"released": to})

    async def outage(request: Request) -> Response:
        return await start_outage(request, sim.outage)

    async def credential(request: Request) -> Response:
        payload = await request.json()
        secret = payload.get("secret") if isinstance(payload, dict) else None
        if not isinstance(secret, str) or not secret:
            return JSONResponse(
                {"error": "'secret' is the credential the carrier accepts from now on"},
                status_code=400,
            )
        sim.accept_credential(secret)
        return JSONResponse({"rotated": True})  # never the secret itself

    return [
        Route("/_sim/script", script, methods=["POST"]),
        Route("/_sim/stats", stats, methods=["GET"]),
        Route("/_sim/callbacks", callbacks, methods=["GET"]),
        Route("/_sim/inbound", inbound, methods=["POST"]),
        Route("/_sim/reset", reset, methods=["POST"]),
        Route("/_sim/release", release, methods=["POST"]),
        Route("/_sim/outage", outage, methods=["POST"]),
        Route("/_sim/credential", credential, methods=["POST"]),
    ]


def carrier_app(sim: ScriptedCarrier[Any], routes: list[Route]) -> Starlette:
    """A simulator's ASGI app: ``routes`` and the control endpoints, ``sim`` as
    ``app.state.sim``, closed when the app shuts down."""

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        sim.resume()  # bound again after an outage, whose shutdown aborted it
        yield
        await sim.aclose()

    app = Starlette(routes=routes, lifespan=lifespan)
    app.state.sim = sim
    return app


_OUTAGES: set[asyncio.Task[None]] = set()


def end_outages() -> None:
    """Cancel running outages (at shutdown: a server being stopped is not bound again)."""
    for task in list(_OUTAGES):
        task.cancel()


async def start_outage(request: Request, outage: Any) -> Response:
    """`POST /_sim/outage {"seconds": 20}`: answered first, then the server stops listening
    for that long (connections refused), then listens again on the same port. 409 when the
    app is not served by a simulator server (mounted elsewhere)."""
    payload = await request.json()
    seconds = payload.get("seconds") if isinstance(payload, dict) else None
    if not isinstance(seconds, int | float) or not 0 < seconds <= 600:
        return JSONResponse({"error": "'seconds' is a number in (0, 600]"}, status_code=400)
    if outage is None:
        return JSONResponse({"error": "not served by a simulator server"}, status_code=409)

    async def later() -> None:
        await asyncio.sleep(0.05)  # let this answer leave first
        await outage(float(seconds))

    task = asyncio.get_running_loop().create_task(later())
    _OUTAGES.add(task)
    task.add_done_callback(_OUTAGES.discard)
    return JSONResponse({"refusing_connections_for": seconds})


__all__ = [
    "FAULTS",
    "FAULT_NUMBERS",
    "CallbackRecord",
    "Fault",
    "ScriptedCarrier",
    "SimDelays",
    "SimStats",
    "callback_token",
    "carrier_app",
    "control_routes",
    "end_outages",
    "start_outage",
]
