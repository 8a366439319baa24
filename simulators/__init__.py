"""Stand-ins for the providers Herald talks to, each named for the one it stands in for:
the Twilio-compatible carrier (`twilio`), Telnyx (`telnyx`), SendGrid (`sendgrid`), an SMTP
relay that keeps what it receives (`smtp`), the carrier machinery the SMS ones share
(`carrier`) and the loopback server they all run on (`server`).

They back `herald dev`, `herald demo`, the bench and the tests; the production image
leaves them out (Dockerfile, .dockerignore), and nothing on the worker's or the API's
path imports them (tests/ops/test_production_image.py). `transports/` holds only what
production runs.
"""
