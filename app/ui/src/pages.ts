// The console's pages. Each takes the element to draw into and the session's context;
// buttons a role may not use are never drawn (the API would answer 403).

import {
  ApiError,
  DeadLetter,
  DeadLetterDetail,
  GroupItem,
  GroupSettings,
  MessageView,
  Page,
  Role,
  Schedule,
  Stats,
  TopicItem,
  call,
  seg,
} from "./api.js";
import { bars, line } from "./chart.js";
import { button, h, link, notice, table } from "./dom.js";
import { clock, count, duration, localInput, relative } from "./fmt.js";

export interface Ctx {
  role: Role;
  open: boolean;
  onLeave: (stop: () => void) => void; // a page that polls registers how to stop
}

type Action =
  | "listTopics"
  | "listMessages"
  | "cancel"
  | "reschedule"
  | "listGroups"
  | "editSettings"
  | "deadLetters"
  | "readSchedules"
  | "deleteSchedule";

// api.md's role table, for the calls the console makes (admin may do everything).
const ROLES: Record<Action, Role[]> = {
  listTopics: ["consumer"],
  listMessages: ["producer"],
  cancel: ["producer"],
  reschedule: ["producer"],
  listGroups: ["consumer"],
  editSettings: [],
  deadLetters: [],
  readSchedules: ["producer", "consumer"],
  deleteSchedule: ["producer"],
};

function can(ctx: Ctx, action: Action): boolean {
  return ctx.role === "admin" || ROLES[action].includes(ctx.role);
}

const OVERVIEW_POLL_MS = 2000;
const HISTORY = 60; // samples kept for the overview's lines: two minutes
const PAGE = 50;

export async function route(hash: string, el: HTMLElement, ctx: Ctx): Promise<void> {
  const parts = hash.replace(/^#\/?/, "").split("/").filter(Boolean).map(decodeURIComponent);
  const [first, topic, sub, group, leaf] = parts;
  if (first === undefined) return overview(el, ctx);
  if (first === "dead") return deadLetterIndex(el, ctx);
  if (first === "topics" && topic === undefined) return topics(el, ctx);
  if (first === "topics" && topic !== undefined) {
    if (sub === undefined) return scheduled(el, ctx, topic);
    if (sub === "schedules") return schedules(el, ctx, topic);
    if (sub === "groups" && group === undefined) return groups(el, ctx, topic);
    if (sub === "groups" && group !== undefined && leaf === undefined)
      return groupSettings(el, ctx, topic, group);
    if (sub === "groups" && group !== undefined && leaf === "dlq")
      return deadLetters(el, ctx, topic, group);
  }
  el.replaceChildren(h("h1", {}, "Not found"), notice(`No page at ${hash}.`, "error"));
}

function denied(el: HTMLElement, title: string, needs: string): void {
  el.replaceChildren(h("h1", {}, title), notice(`This page needs the ${needs} role.`, "info"));
}

function errorText(err: unknown): string {
  return err instanceof ApiError ? err.detail || err.message : String(err);
}

/** Run an action, then tell the user how it went in `out` (and refresh on success). */
async function act(out: HTMLElement, done: string, fn: () => Promise<unknown>, after?: () => void): Promise<void> {
  try {
    await fn();
    out.replaceChildren(notice(done, "ok"));
    after?.();
  } catch (err) {
    out.replaceChildren(notice(errorText(err), "error"));
  }
}

/** Draw the page again, keeping the notice the action left in ``out``. */
function redraw(el: HTMLElement, out: HTMLElement, draw: () => Promise<void>): () => void {
  return () => void draw().then(() => el.querySelector(".out")?.replaceWith(out));
}

/** A button that asks once more before a destructive action (no modal: keyboard-friendly). */
function confirmButton(label: string, ask: string, onConfirm: () => void): HTMLButtonElement {
  const b = h("button", { type: "button", class: "danger" }, label);
  let armed = false;
  b.addEventListener("click", () => {
    if (armed) {
      onConfirm();
      return;
    }
    armed = true;
    b.textContent = ask;
    setTimeout(() => {
      armed = false;
      b.textContent = label;
    }, 4000);
  });
  return b;
}

function pager(cursor: string | null | undefined, go: (c: string | null) => void, first: boolean): HTMLElement {
  return h(
    "div",
    { class: "pager" },
    first ? null : button("← First page", () => go(null)),
    cursor ? button("Next page →", () => go(cursor)) : null,
  );
}

function topicTabs(topic: string, here: "scheduled" | "groups" | "schedules"): HTMLElement {
  const base = `#/topics/${seg(topic)}`;
  const tabs: [string, string, string][] = [
    ["scheduled", base, "Scheduled"],
    ["groups", `${base}/groups`, "Groups"],
    ["schedules", `${base}/schedules`, "Schedules"],
  ];
  return h(
    "nav",
    { class: "tabs", "aria-label": "Topic" },
    ...tabs.map(([key, href, text]) => h("a", { href, "aria-current": key === here ? "page" : undefined }, text)),
  );
}

// --- overview --------------------------------------------------------------------------

/** Draw charts in CSS pixels, so their labels read the same at every screen width. */
function width(panel: HTMLElement): number {
  return Math.max(300, panel.clientWidth - 24);
}

function card(label: string, value: string, hint = ""): HTMLElement {
  return h("div", { class: "stat" }, h("div", { class: "label" }, label), h("div", { class: "value" }, value), hint ? h("div", { class: "hint" }, hint) : null);
}

async function overview(el: HTMLElement, ctx: Ctx): Promise<void> {
  const cards = h("div", { class: "stats", "aria-live": "polite" });
  const due = h("figure", { class: "panel" });
  const rate = h("figure", { class: "panel" });
  const queue = h("figure", { class: "panel" });
  el.replaceChildren(h("h1", {}, "Overview"));
  if (ctx.open)
    el.append(notice("This service is open: no API keys are configured (ROCKTIMER_API_KEYS), so anyone who can reach it may do anything.", "info"));
  el.append(cards, h("div", { class: "charts" }, due, rate, queue));
  const delivered: number[] = [];
  const queued: number[] = [];
  let last: Stats | null = null;
  const draw = (s: Stats): void => {
    const perSecond = last ? Math.max(0, ((s.delivered_total - last.delivered_total) * 1000) / Math.max(1, s.now_ms - last.now_ms)) : 0;
    if (last) delivered.push(perSecond);
    queued.push(s.writer_queue);
    for (const series of [delivered, queued]) if (series.length > HISTORY) series.shift();
    last = s;
    const c = s.due_ahead.counts;
    const hour = c.reduce((a, b) => a + b, 0);
    const lat = (v: number | null): string => (v === null ? "–" : duration(v));
    cards.replaceChildren(
      card("Scheduled", count(s.pending_timers), "not yet due"),
      card("Due next minute", count(c[0] ?? 0) + (s.due_ahead.capped && hour === (c[0] ?? 0) ? "+" : "")),
      card("Due next hour", count(hour) + (s.due_ahead.capped ? "+" : "")),
      card("Delivered / s", count(Math.round(perSecond)), `${count(s.delivered_total)} since start`),
      card("Lateness p50 / p99", `${lat(s.lateness.p50_ms)} / ${lat(s.lateness.p99_ms)}`, "delivered − due, at most"),
      card("Writer queue", count(s.writer_queue), `${count(s.long_polls)} long polls waiting`),
    );
    const minutes = s.due_ahead.bucket_ms / 60_000;
    due.replaceChildren(
      h("figcaption", {}, `Due in the next hour, per ${minutes === 1 ? "minute" : `${minutes} min`}${s.due_ahead.capped ? " (first 20k timers)" : ""}`),
      bars(width(due), "Messages due per minute over the next hour", c, [[0, "now"], [15, "+15 min"], [30, "+30 min"], [45, "+45 min"], [59, "+1 h"]], (i) => `${count(c[i] ?? 0)} due ${i === 0 ? "within a minute" : `in ${i}–${i + 1} min`}`),
    );
    const xs: [number, string][] = [[0, `${duration(HISTORY * OVERVIEW_POLL_MS)} ago`], [HISTORY - 1, "now"]];
    rate.replaceChildren(h("figcaption", {}, "Delivered per second"), line(width(rate), "Messages delivered per second, last two minutes", delivered, xs));
    queue.replaceChildren(h("figcaption", {}, "Writer queue"), line(width(queue), "Client operations waiting for the writer, last two minutes", queued, xs));
  };
  const tick = async (): Promise<void> => {
    try {
      draw(await call<Stats>("GET", "/v1/stats"));
    } catch (err) {
      cards.replaceChildren(notice(errorText(err), "error"));
    }
  };
  await tick();
  const timer = setInterval(() => void tick(), OVERVIEW_POLL_MS);
  ctx.onLeave(() => clearInterval(timer));
}

// --- topics ------------------------------------------------------------------------------

function openTopicForm(): HTMLElement {
  const input = h("input", { id: "open-topic", required: true, pattern: "[%|a-zA-Z0-9_-]{1,127}", placeholder: "orders" });
  const form = h("form", { class: "inline" }, h("label", { for: "open-topic" }, "Open a topic"), input, h("button", { type: "submit" }, "Open"));
  form.addEventListener("submit", (ev) => {
    ev.preventDefault();
    location.hash = `#/topics/${seg(input.value.trim())}`;
  });
  return form;
}

async function topics(el: HTMLElement, ctx: Ctx, cursor: string | null = null): Promise<void> {
  if (!can(ctx, "listTopics")) {
    el.replaceChildren(h("h1", {}, "Topics"), notice("Listing topics needs the consumer role; open one by name.", "info"), openTopicForm());
    return;
  }
  const q = new URLSearchParams({ limit: String(PAGE) });
  if (cursor) q.set("cursor", cursor);
  const page = await call<Page<TopicItem>>("GET", `/v1/topics?${q}`);
  const rows = page.items.map((t) => [link(`#/topics/${seg(t.topic)}`, t.topic), count(t.scheduled), count(t.delivered), count(t.cancelled), link(`#/topics/${seg(t.topic)}/groups`, "groups")] as Node[]);
  el.replaceChildren(
    h("h1", {}, "Topics"),
    openTopicForm(),
    page.items.length ? table(["Topic", "Scheduled", "Delivered", "Cancelled", ""], rows, new Set([1, 2, 3])) : notice("No topics yet: send a message to create one.", "info"),
    pager(page.next_cursor, (c) => void topics(el, ctx, c), cursor === null),
  );
}

function messageCard(m: MessageView, now: number, actions: Node | null): HTMLElement {
  const props = Object.entries(m.properties);
  return h(
    "section",
    { class: "card detail", "aria-label": `Message ${m.msg_id}` },
    h("h2", {}, m.msg_id, " ", h("span", { class: `badge state-${m.state}` }, m.state)),
    h(
      "dl",
      {},
      h("dt", {}, "Due"),
      h("dd", {}, `${clock(m.deliver_at_ms)} (${relative(m.deliver_at_ms, now)})`),
      h("dt", {}, "Created"),
      h("dd", {}, clock(m.created_at_ms)),
      m.delivered_at_ms ? h("dt", {}, "Delivered") : null,
      m.delivered_at_ms ? h("dd", {}, `${clock(m.delivered_at_ms)} (${duration(m.delivered_at_ms - m.deliver_at_ms)} late)`) : null,
      m.cancelled_at_ms ? h("dt", {}, "Cancelled") : null,
      m.cancelled_at_ms ? h("dd", {}, clock(m.cancelled_at_ms)) : null,
      m.tag ? h("dt", {}, "Tag") : null,
      m.tag ? h("dd", {}, m.tag) : null,
      props.length ? h("dt", {}, "Properties") : null,
      props.length ? h("dd", {}, props.map(([k, v]) => `${k}=${v}`).join(", ")) : null,
    ),
    actions,
  );
}

/** The reschedule form: a local date-time plus shortcuts, PATCHed as deliver_at_ms. */
function rescheduleForm(topic: string, m: { msg_id: string; deliver_at_ms: number }, out: HTMLElement, after: () => void): HTMLElement {
  const id = `when-${m.msg_id}`;
  const input = h("input", { id, type: "datetime-local", step: 1, value: localInput(Math.max(m.deliver_at_ms, Date.now())), required: true });
  const form = h("form", { class: "reschedule", "aria-label": `Reschedule ${m.msg_id}` }, h("label", { for: id }, "New time"), input);
  const shortcut = (label: string, ms: number): HTMLButtonElement => button(label, () => (input.value = localInput(Date.now() + ms)));
  form.append(shortcut("now", 0), shortcut("+1 min", 60_000), shortcut("+1 h", 3_600_000), shortcut("+1 d", 86_400_000), h("button", { type: "submit", class: "primary" }, "Reschedule"));
  form.addEventListener("submit", (ev) => {
    ev.preventDefault();
    const at = new Date(input.value).getTime();
    void act(out, `${m.msg_id} now due ${clock(at)}.`, () => call("PATCH", `/v1/topics/${seg(topic)}/messages/${seg(m.msg_id)}`, { deliver_at_ms: at }), after);
  });
  return form;
}

function messageActions(ctx: Ctx, topic: string, m: { msg_id: string; deliver_at_ms: number }, out: HTMLElement, after: () => void): HTMLElement {
  const box = h("div", { class: "actions" });
  if (can(ctx, "cancel"))
    box.append(confirmButton("Cancel", "Really cancel?", () => void act(out, `${m.msg_id} cancelled: it will never be delivered.`, () => call("DELETE", `/v1/topics/${seg(topic)}/messages/${seg(m.msg_id)}`), after)));
  if (can(ctx, "reschedule"))
    box.append(
      button("Reschedule…", () => {
        const open = box.querySelector("form");
        if (open) open.remove();
        else {
          const form = rescheduleForm(topic, m, out, after);
          box.append(form);
          form.querySelector("input")?.focus();
        }
      }),
    );
  return box;
}

async function scheduled(el: HTMLElement, ctx: Ctx, topic: string, cursor: string | null = null): Promise<void> {
  const out = h("div", { class: "out" });
  const found = h("div");
  const reload = redraw(el, out, () => scheduled(el, ctx, topic, cursor));
  const lookup = h("input", { id: "lookup", required: true, pattern: "[A-Za-z0-9._:-]{1,128}", placeholder: "msg_id" });
  const form = h("form", { class: "inline" }, h("label", { for: "lookup" }, "Find by msg_id"), lookup, h("button", { type: "submit" }, "Look up"));
  form.addEventListener("submit", (ev) => {
    ev.preventDefault();
    void (async () => {
      try {
        const m = await call<MessageView>("GET", `/v1/topics/${seg(topic)}/messages/${seg(lookup.value.trim())}`);
        found.replaceChildren(messageCard(m, Date.now(), m.state === "scheduled" ? messageActions(ctx, topic, m, out, reload) : null));
      } catch (err) {
        found.replaceChildren(notice(errorText(err), "error"));
      }
    })();
  });
  const parts: Node[] = [h("h1", {}, "Topic ", h("code", {}, topic)), topicTabs(topic, "scheduled"), out, form, found];
  if (!can(ctx, "listMessages")) {
    parts.push(notice("Listing scheduled messages needs the producer role.", "info"));
    el.replaceChildren(...parts);
    return;
  }
  const q = new URLSearchParams({ state: "scheduled", limit: String(PAGE) });
  if (cursor) q.set("cursor", cursor);
  const page = await call<Page<MessageView>>("GET", `/v1/topics/${seg(topic)}/messages?${q}`);
  const now = Date.now();
  const rows = page.items.map((m) => [h("code", {}, m.msg_id), h("span", { title: clock(m.deliver_at_ms) }, relative(m.deliver_at_ms, now)), clock(m.deliver_at_ms), m.tag ?? "", messageActions(ctx, topic, m, out, reload)] as Node[]);
  parts.push(
    h("h2", {}, "Scheduled, in due order"),
    page.items.length ? table(["msg_id", "Due", "Due at (local)", "Tag", ""], rows, new Set()) : notice("Nothing scheduled in this topic.", "info"),
    pager(page.next_cursor, (c) => void scheduled(el, ctx, topic, c), cursor === null),
  );
  el.replaceChildren(...parts);
}

// --- groups and their settings ----------------------------------------------------------

async function groups(el: HTMLElement, ctx: Ctx, topic: string): Promise<void> {
  if (!can(ctx, "listGroups")) return denied(el, `Groups of ${topic}`, "consumer");
  const page = await call<Page<GroupItem>>("GET", `/v1/topics/${seg(topic)}/groups`);
  const base = `#/topics/${seg(topic)}/groups`;
  const rows = page.items.map((g) => [
    link(`${base}/${seg(g.group)}`, g.group),
    count(g.backlog),
    count(g.inflight),
    count(g.retrying),
    g.dead && can(ctx, "deadLetters") ? link(`${base}/${seg(g.group)}/dlq`, count(g.dead)) : count(g.dead),
    h("code", {}, g.filter ?? "*"),
    g.push ? g.push.url : "pull",
  ] as Node[]);
  el.replaceChildren(
    h("h1", {}, "Topic ", h("code", {}, topic)),
    topicTabs(topic, "groups"),
    page.items.length
      ? table(["Group", "Backlog", "In flight", "Retrying", "Dead", "Filter", "Delivery"], rows, new Set([1, 2, 3, 4]))
      : notice("No consumer group has read this topic yet.", "info"),
  );
}

function field(label: string, input: HTMLInputElement | HTMLSelectElement, help: string | HTMLElement = ""): HTMLElement {
  const hint = typeof help === "string" ? (help ? h("small", {}, help) : null) : help;
  return h("div", { class: "field" }, h("label", { for: input.id }, label), input, hint);
}

/** What each retry policy waits before retry k (api.md, group settings). */
const POLICY_HINTS: Record<string, string> = {
  levels: "levels: RocketMQ's 10 s, 30 s, 1 min … 2 h",
  exponential: "exponential: the initial delay, multiplied by the multiplier at each retry, at most the longest delay",
  fixed: "fixed: the same interval before every retry",
};

async function groupSettings(el: HTMLElement, ctx: Ctx, topic: string, group: string): Promise<void> {
  const path = `/v1/topics/${seg(topic)}/groups/${seg(group)}`;
  const s = await call<GroupSettings>("GET", path);
  const editable = can(ctx, "editSettings");
  const retry = (s.retry ?? { policy: "levels" }) as Record<string, unknown>;
  const num = (id: string, value: unknown, min: number): HTMLInputElement => h("input", { id, type: "number", min, value: String(value ?? ""), disabled: !editable });
  const maxAttempts = num("max_attempts", s.max_attempts, 1);
  const policy = h("select", { id: "policy", disabled: !editable }, ...["levels", "exponential", "fixed"].map((p) => h("option", { value: p, selected: retry.policy === p }, p)));
  const initial = num("initial_ms", retry.initial_ms ?? 1000, 1);
  const multiplier = num("multiplier", retry.multiplier ?? 2, 1);
  multiplier.step = "0.1";
  const maxMs = num("max_ms", retry.max_ms ?? 7_200_000, 1);
  const interval = num("interval_ms", retry.interval_ms ?? 10_000, 1);
  const expo = h("div", { class: "fields" }, field("Initial delay (ms)", initial), field("Multiplier", multiplier), field("Longest delay (ms)", maxMs));
  const fixed = h("div", { class: "fields" }, field("Interval (ms)", interval));
  const policyHint = h("small", { id: "policy_hint" });
  const showPolicy = (): void => {
    expo.hidden = policy.value !== "exponential";
    fixed.hidden = policy.value !== "fixed";
    policyHint.textContent = POLICY_HINTS[policy.value] ?? "";
  };
  policy.addEventListener("change", showPolicy);
  showPolicy();
  const form = h("form", { class: "card settings", "aria-label": "Group settings" }, field("Max attempts", maxAttempts, "failed attempts before a message becomes a dead letter"), field("Retry policy", policy, policyHint), expo, fixed);
  const filter = "filter" in s ? h("input", { id: "filter", value: String(s.filter ?? "*"), disabled: !editable }) : null;
  if (filter) form.append(field("Tag filter", filter, "* or tags joined by || (TagA || TagB)"));
  const push = (s.push ?? null) as Record<string, unknown> | null;
  const pushUrl = "push" in s ? h("input", { id: "push_url", type: "url", value: String(push?.url ?? ""), placeholder: "empty: consumers pull", disabled: !editable }) : null;
  const pushSecret = pushUrl ? h("input", { id: "push_secret", type: "password", placeholder: "unchanged if empty", disabled: !editable }) : null;
  if (pushUrl && pushSecret) form.append(field("Push to URL (webhook)", pushUrl), field("Signing secret", pushSecret, "write-only"));
  const out = h("div", { class: "out" });
  if (editable) {
    form.append(h("button", { type: "submit", class: "primary" }, "Save settings"));
    form.addEventListener("submit", (ev) => {
      ev.preventDefault();
      const body: Record<string, unknown> = { max_attempts: Number(maxAttempts.value) };
      const p = policy.value;
      body.retry =
        p === "exponential"
          ? { policy: p, initial_ms: Number(initial.value), multiplier: Number(multiplier.value), max_ms: Number(maxMs.value) }
          : p === "fixed"
            ? { policy: p, interval_ms: Number(interval.value) }
            : { policy: p };
      if (filter) body.filter = filter.value;
      if (pushUrl && pushSecret) {
        const { secret: _hidden, ...kept } = push ?? {}; // GET shows the secret as null
        const secret = pushSecret.value ? { secret: pushSecret.value } : {};
        body.push = pushUrl.value ? { ...kept, url: pushUrl.value, ...secret } : null;
      }
      void act(out, "Settings saved.", () => call("PUT", path, body));
    });
  }
  const back = h("p", {}, link(`#/topics/${seg(topic)}/groups`, "← all groups"));
  if (can(ctx, "deadLetters")) back.append(" · ", link(`#/topics/${seg(topic)}/groups/${seg(group)}/dlq`, "dead letters"));
  el.replaceChildren(h("h1", {}, "Group ", h("code", {}, group), " on ", h("code", {}, topic)), back);
  if (!editable) el.append(notice("Read only: changing settings needs the admin role.", "info"));
  el.append(out, form);
}

// --- dead letters --------------------------------------------------------------------------

/** Every item of a listing, page after page until it has no next_cursor. */
async function everyItem<T>(path: string): Promise<T[]> {
  const items: T[] = [];
  let cursor: string | null | undefined = null;
  do {
    const q = new URLSearchParams({ limit: "1000" });
    if (cursor) q.set("cursor", cursor);
    const page: Page<T> = await call<Page<T>>("GET", `${path}?${q}`);
    items.push(...page.items);
    cursor = page.next_cursor;
  } while (cursor);
  return items;
}

async function deadLetterIndex(el: HTMLElement, ctx: Ctx): Promise<void> {
  if (!can(ctx, "deadLetters")) return denied(el, "Dead letters", "admin");
  const rows: Node[][] = [];
  for (const t of await everyItem<TopicItem>("/v1/topics")) {
    for (const g of await everyItem<GroupItem>(`/v1/topics/${seg(t.topic)}/groups`))
      if (g.dead > 0) rows.push([h("code", {}, t.topic), h("code", {}, g.group), link(`#/topics/${seg(t.topic)}/groups/${seg(g.group)}/dlq`, count(g.dead))]);
  }
  el.replaceChildren(
    h("h1", {}, "Dead letters"),
    h("p", { class: "muted" }, "Messages a group failed max_attempts times, by topic and group."),
    rows.length ? table(["Topic", "Group", "Dead letters"], rows, new Set([2])) : notice("No dead letters: every group is keeping up.", "ok"),
  );
}

function deadDetail(d: DeadLetterDetail): HTMLElement {
  const props = Object.entries(d.properties);
  return h(
    "section",
    { class: "card detail", "aria-label": `Dead letter ${d.msg_id}` },
    h("h2", {}, d.msg_id),
    h(
      "dl",
      {},
      h("dt", {}, "Attempts"),
      h("dd", {}, String(d.attempts)),
      h("dt", {}, "Last failure"),
      h("dd", {}, `${clock(d.last_failure_ms)} (${relative(d.last_failure_ms, Date.now())})`),
      h("dt", {}, "Dead since"),
      h("dd", {}, clock(d.dead_at_ms)),
      h("dt", {}, "Was due"),
      h("dd", {}, clock(d.deliver_at_ms)),
      d.tag ? h("dt", {}, "Tag") : null,
      d.tag ? h("dd", {}, d.tag) : null,
      h("dt", {}, "Properties"),
      h("dd", {}, props.length ? props.map(([k, v]) => `${k}=${v}`).join(", ") : "none"),
    ),
    h("h3", {}, `Body (${d.body_encoding})`),
    h("pre", { class: "body" }, d.body),
  );
}

async function deadLetters(el: HTMLElement, ctx: Ctx, topic: string, group: string, cursor: string | null = null): Promise<void> {
  if (!can(ctx, "deadLetters")) return denied(el, "Dead letters", "admin");
  const base = `/v1/topics/${seg(topic)}/groups/${seg(group)}/dlq`;
  const q = new URLSearchParams({ limit: String(PAGE) });
  if (cursor) q.set("cursor", cursor);
  const page = await call<Page<DeadLetter>>("GET", `${base}?${q}`);
  const out = h("div", { class: "out" });
  const detail = h("div");
  const reload = redraw(el, out, () => deadLetters(el, ctx, topic, group, cursor));
  const redrive = (id: string): Promise<unknown> => call("POST", `${base}/${seg(id)}/redrive`);
  const rows = page.items.map((d) => [
    button(d.msg_id, () => void call<DeadLetterDetail>("GET", `${base}/${seg(d.msg_id)}`).then((x) => detail.replaceChildren(deadDetail(x)), (err) => detail.replaceChildren(notice(errorText(err), "error"))), "link"),
    String(d.attempts),
    relative(d.last_failure_ms, Date.now()),
    clock(d.dead_at_ms),
    button("Redrive", () => void act(out, `${d.msg_id} is back in ${group}'s flow, attempts reset.`, () => redrive(d.msg_id), reload)),
  ] as Node[]);
  el.replaceChildren(
    h("h1", {}, "Dead letters of ", h("code", {}, group), " from ", h("code", {}, topic)),
    h("p", {}, link(`#/topics/${seg(topic)}/groups/${seg(group)}`, "← group settings")),
    out,
    page.items.length
      ? h(
          "div",
          {},
          table(["msg_id", "Attempts", "Last failure", "Dead since", ""], rows, new Set([1])),
          button(
            `Redrive all ${page.items.length} shown`,
            () => void act(out, `${page.items.length} dead letters redriven.`, () => Promise.all(page.items.map((d) => redrive(d.msg_id))), reload),
            "primary",
          ),
        )
      : notice("No dead letters here.", "ok"),
    pager(page.next_cursor, (c) => void deadLetters(el, ctx, topic, group, c), cursor === null),
    detail,
  );
}

// --- recurring schedules -----------------------------------------------------------------

async function schedules(el: HTMLElement, ctx: Ctx, topic: string, cursor: string | null = null): Promise<void> {
  const head = [h("h1", {}, "Topic ", h("code", {}, topic)), topicTabs(topic, "schedules")];
  if (!can(ctx, "readSchedules")) return void el.replaceChildren(...head, notice("Reading schedules needs the producer or consumer role.", "info"));
  const q = new URLSearchParams({ limit: String(PAGE) });
  if (cursor) q.set("cursor", cursor);
  let page: Page<Schedule>;
  try {
    page = await call<Page<Schedule>>("GET", `/v1/topics/${seg(topic)}/schedules?${q}`);
  } catch (err) {
    if (err instanceof ApiError && (err.status === 404 || err.status === 405)) {
      el.replaceChildren(...head, notice("This server has no recurring schedules.", "info"));
      return;
    }
    throw err;
  }
  const out = h("div", { class: "out" });
  const now = Date.now();
  const rows = page.items.map((s) => [
    h("code", {}, s.schedule_id),
    s.cron ? `cron ${s.cron} (${s.timezone ?? "UTC"})` : `every ${duration(s.every_ms ?? 0)}`,
    s.next_fire_at_ms ? `${clock(s.next_fire_at_ms)} (${relative(s.next_fire_at_ms, now)})` : "none",
    s.last_fire_at_ms ? relative(s.last_fire_at_ms, now) : "never",
    can(ctx, "deleteSchedule")
      ? confirmButton("Delete", "Really delete?", () => void act(out, `Schedule ${s.schedule_id} deleted: it will not fire again.`, () => call("DELETE", `/v1/topics/${seg(topic)}/schedules/${seg(s.schedule_id)}`), redraw(el, out, () => schedules(el, ctx, topic, cursor))))
      : "",
  ] as Node[]);
  el.replaceChildren(
    ...head,
    out,
    page.items.length ? table(["Schedule", "Rule", "Next fire", "Last fire", ""], rows, new Set()) : notice("No recurring schedules in this topic.", "info"),
    pager(page.next_cursor, (c) => void schedules(el, ctx, topic, c), cursor === null),
  );
}
