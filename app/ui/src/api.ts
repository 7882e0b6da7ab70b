// The JSON API as the console uses it: one fetch wrapper that sends the session's key and
// turns problem+json replies into ApiError, plus the types of the replies it reads.

export type Role = "producer" | "consumer" | "admin";

export class ApiError extends Error {
  constructor(
    readonly status: number,
    readonly title: string,
    readonly detail: string,
  ) {
    super(`${status} ${title}: ${detail}`);
  }
}

const KEY_SLOT = "rocktimer.apiKey"; // sessionStorage: gone when the tab closes

export function storedKey(): string | null {
  return sessionStorage.getItem(KEY_SLOT);
}

export function storeKey(key: string | null): void {
  if (key === null) sessionStorage.removeItem(KEY_SLOT);
  else sessionStorage.setItem(KEY_SLOT, key);
}

export async function call<T>(method: string, path: string, body?: unknown): Promise<T> {
  const headers: Record<string, string> = { accept: "application/json" };
  const key = storedKey();
  if (key) headers.authorization = `Bearer ${key}`;
  const init: RequestInit = { method, headers };
  if (body !== undefined) {
    headers["content-type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  const reply = await fetch(path, init);
  const text = await reply.text();
  const parsed: unknown = text ? JSON.parse(text) : null;
  if (!reply.ok) {
    const p = (parsed ?? {}) as { title?: string; detail?: string };
    throw new ApiError(reply.status, p.title ?? reply.statusText, p.detail ?? text);
  }
  return parsed as T;
}

/** A path segment: topic names may hold %, which must travel as %25. */
export function seg(name: string): string {
  return encodeURIComponent(name);
}

export interface Identity {
  role: Role;
  open: boolean;
}

export interface Stats {
  now_ms: number;
  pending_timers: number;
  delivered_total: number;
  writer_queue: number;
  long_polls: number;
  lateness: { count: number; p50_ms: number | null; p99_ms: number | null };
  due_ahead: { bucket_ms: number; counts: number[]; capped: boolean };
}

export interface Page<T> {
  items: T[];
  next_cursor?: string | null;
}

export interface TopicItem {
  topic: string;
  scheduled: number;
  delivered: number;
  cancelled: number;
}

export interface GroupItem {
  group: string;
  backlog: number;
  inflight: number;
  retrying: number;
  dead: number;
  filter?: string;
  push?: { url: string } | null;
}

export interface MessageView {
  topic: string;
  msg_id: string;
  state: "scheduled" | "delivered" | "cancelled";
  deliver_at_ms: number;
  created_at_ms: number;
  delivered_at_ms?: number;
  cancelled_at_ms?: number;
  tag?: string | null;
  properties: Record<string, string>;
}

export interface DeadLetter {
  topic: string;
  msg_id: string;
  attempts: number;
  last_failure_ms: number;
  dead_at_ms: number;
}

export interface DeadLetterDetail extends DeadLetter {
  group: string;
  body: string;
  body_encoding: "utf8" | "base64";
  properties: Record<string, string>;
  tag?: string | null;
  deliver_at_ms: number;
}

export interface Schedule {
  topic: string;
  schedule_id: string;
  cron?: string | null;
  every_ms?: number | null;
  timezone?: string;
  next_fire_at_ms?: number | null;
  last_fire_at_ms?: number | null;
}

export type GroupSettings = Record<string, unknown>;
