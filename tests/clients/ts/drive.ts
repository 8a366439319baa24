// Drives Herald's API through a client generated from its served document: the types by
// openapi-typescript (herald.ts, written by the test next to this file's copy), the calls
// by openapi-fetch. `tsc --strict` compiles it first, so a document that no longer fits
// these calls fails the test before anything runs. Prints one JSON object of what each
// step answered; tests/clients/test_generated_clients.py checks it.
import createClient from "openapi-fetch";
import type { operations, paths } from "./herald.js";

// Node's globals, the one this script uses (no @types/node to install for it).
declare const process: { env: Record<string, string | undefined> };

type Created = operations["createIntent"]["responses"][201]["content"]["application/json"];
type Page = operations["listIntents"]["responses"][200]["content"]["application/json"];

const env = (name: string): string => {
  const value = process.env[name];
  if (!value) throw new Error(`${name} is not set`);
  return value;
};
const baseUrl = env("HERALD_API");
const prefix = env("HERALD_KEY_PREFIX");
const app = createClient<paths>({
  baseUrl,
  headers: { Authorization: `Bearer ${env("HERALD_APP_TOKEN")}` },
});

const intent = (n: number) => ({
  business_key: `${prefix}:${n}`,
  recipient_ref: "m-1842",
  template_key: "order-created",
  template_version: 1,
  phone: env("HERALD_PHONE"),
  variables: { order_id: "o-77" },
  // Scheduled an hour ahead, so the cancel below closes work still to come.
  send_at: new Date(Date.now() + 3600_000).toISOString(),
});

const once = { params: { header: { "Idempotency-Key": `${prefix}-first` } }, body: intent(1) };
const first = await app.POST("/v1/intents", once);
const replay = await app.POST("/v1/intents", once);
const created: Created | undefined = first.data;
if (!created) throw new Error(`create: ${first.response.status}`);
const read = await app.GET("/v1/intents/{id_or_key}", {
  params: { path: { id_or_key: created.intent_id } },
});
const second = await app.POST("/v1/intents", { body: intent(2) });
// A page at a time, newest first: the next page by the cursor the first handed out.
const page = await app.GET("/v1/intents", { params: { query: { limit: 1 } } });
const cursor = page.data?.next ?? undefined;
const older = await app.GET("/v1/intents", { params: { query: { limit: 1, cursor } } });
const ids = (p: Page | undefined) => (p ? p.items.map((item) => item.id) : []);
// An app cancels the intents it created (another app's is a 404, as for a read).
const cancel = await app.POST("/v1/intents/{id_or_key}/cancel", {
  params: { path: { id_or_key: created.intent_id } },
  body: { reason: "the order was withdrawn" },
});
const invalid = await app.POST("/v1/intents", { body: { ...intent(3), template_version: 0 } });
const missing = await app.GET("/v1/intents/{id_or_key}", {
  params: { path: { id_or_key: `${prefix}:never-recorded` } },
});

// A 422's detail is a list of issues, each naming its field; other refusals say it in words.
const fields = (detail: string | { loc: (string | number)[] }[] | undefined) =>
  Array.isArray(detail) ? detail.map((issue) => issue.loc.join(".")) : detail;

console.log(
  JSON.stringify({
    created: [first.response.status, created.intent_id, first.response.headers.get("Location")],
    replay: [replay.response.status, replay.data?.intent_id, replay.response.headers.get("Idempotent-Replayed")],
    read: [read.response.status, read.data?.intent.business_key],
    second: [second.response.status, second.data?.intent_id],
    page: [page.response.status, ids(page.data)],
    older: [older.response.status, ids(older.data), older.data?.previous !== null],
    cancel: [cancel.response.status, cancel.data?.accepted],
    invalid: [invalid.response.status, fields(invalid.error?.detail)],
    missing: [missing.response.status, missing.error?.detail],
  }),
);
