"""The simulators are tested through the adapters that speak to them, so this tier reuses
the transports' fixtures (simulator, receiver, adapters) rather than keeping a copy."""

from tests.transports.conftest import (  # noqa: F401 (fixtures pytest finds by name)
    _clean_simulator,
    receiver,
    simulator,
    sms,
    telnyx,
    telnyx_simulator,
)
