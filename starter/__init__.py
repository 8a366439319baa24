"""What an app imports to start work: `starter.client.HeraldClient` (record an intent,
optionally in the app's own transaction, and start its workflow) and `starter.relay`
(the outbox relay that heals a crash between commit and start)."""
