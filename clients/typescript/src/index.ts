// The rocktimer HTTP API for TypeScript: the generated types (src/schema.d.ts, from
// ../openapi.json by `make clients`) and a typed fetch client over them (openapi-fetch).
import createClient from "openapi-fetch";

import type { components, operations, paths } from "./schema.d.ts";

export type { components, operations, paths };

type Schemas = components["schemas"];
export type SendMessage = Schemas["SendMessage"];
export type SendResult = Schemas["SendResult"];
export type MessageView = Schemas["MessageView"];
export type ReceivedMessage = Schemas["ReceivedMessage"];
export type GroupSettings = Schemas["GroupSettings"];
export type Problem = Schemas["Problem"];

/** A client for one rocktimer service; `apiKey` is sent as a bearer token when given. */
export function rocktimer(baseUrl: string, apiKey?: string) {
  const headers: Record<string, string> = apiKey ? { Authorization: `Bearer ${apiKey}` } : {};
  return createClient<paths>({ baseUrl, headers });
}

/** Schedule `body` on `topic` after `delayMs`; the reply's record, or the Problem. */
export async function sendLater(
  client: ReturnType<typeof rocktimer>,
  topic: string,
  body: string,
  delayMs: number,
): Promise<SendResult | Problem> {
  const { data, error } = await client.POST("/v1/topics/{topic}/messages", {
    params: { path: { topic } },
    body: { body, delay_ms: delayMs },
  });
  return data ?? error;
}

/** Receive up to `max` messages as `group`, hand each to `handle`, ack the ones it took. */
export async function consume(
  client: ReturnType<typeof rocktimer>,
  topic: string,
  group: string,
  handle: (message: ReceivedMessage) => boolean,
  max = 16,
): Promise<number> {
  const path = { topic, group };
  const got = await client.POST("/v1/topics/{topic}/groups/{group}/receive", {
    params: { path },
    body: { max_messages: max, wait_ms: 10_000 },
  });
  if (got.error) throw new Error(`${got.error.status} ${got.error.title}: ${got.error.detail}`);
  const receipts = got.data.messages.filter(handle).map((m) => m.receipt);
  if (receipts.length === 0) return 0;
  const acked = await client.POST("/v1/topics/{topic}/groups/{group}/ack", {
    params: { path },
    body: { receipts },
  });
  return acked.data?.results.filter((r) => r.status === "acked").length ?? 0;
}
