"""The providers' ingress: what providers and recipients call, each request authenticated
by a signature rather than a token (the provider's, or Herald's own in an unsubscribe
link). One module per provider, named for it (`twilio`, `telnyx`, `sendgrid`), the
unsubscribe link (`unsubscribe`), what they all do with what they receive (`receiving`),
and the ordinary SMS receipt's short path (`fast_receipts`).

`api.app.PUBLIC_ROUTERS` lists their routers: the public ingress serves only these. The
routes apps and operators call (bearer token, role checked) are the other modules of
`api/`. Nothing is imported here, so `api.deps` can use `api.ingress.telnyx_signature`
without importing the routers (which import `api.deps`).
"""
