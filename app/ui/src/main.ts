// Start-up: find out who we are (asking for an API key when the service has keys), draw
// the navigation, and route #/… fragments to pages.

import { ApiError, Identity, call, storeKey, storedKey } from "./api.js";
import { h, notice } from "./dom.js";
import { Ctx, route } from "./pages.js";

const view = document.getElementById("view") as HTMLElement;
const nav = document.getElementById("nav") as HTMLElement;
const who = document.getElementById("who") as HTMLElement;
let stopPage: (() => void) | null = null;
let me: Identity | null = null;

async function identify(): Promise<Identity | null> {
  try {
    return await call<Identity>("GET", "/v1/me");
  } catch (err) {
    if (err instanceof ApiError && err.status === 401) return null;
    throw err;
  }
}

function askForKey(message: string | null): void {
  nav.hidden = true;
  who.replaceChildren();
  const input = h("input", {
    id: "api-key",
    type: "password",
    autocomplete: "off",
    required: true,
    "aria-describedby": "key-help",
  });
  const form = h(
    "form",
    { class: "card login", "aria-labelledby": "login-title" },
    h("h1", { id: "login-title" }, "Sign in to rocktimer"),
    h("label", { for: "api-key" }, "API key"),
    input,
    h(
      "p",
      { id: "key-help", class: "muted" },
      "This service has API keys. The key is kept for this browser tab only and sent as " +
        "'Authorization: Bearer …' with each call; the console shows what its role may do.",
    ),
    message ? notice(message, "error") : null,
    h("button", { type: "submit", class: "primary" }, "Sign in"),
  );
  form.addEventListener("submit", (ev) => {
    ev.preventDefault();
    storeKey(input.value.trim());
    void start();
  });
  view.replaceChildren(form);
  input.focus();
}

function drawChrome(id: Identity): void {
  nav.hidden = false;
  const links: [string, string][] = [
    ["#/", "Overview"],
    ["#/topics", "Topics"],
    ["#/dead", "Dead letters"],
  ];
  const here = location.hash || "#/";
  nav.replaceChildren(
    ...links.map(([href, text]) => {
      const active = href === "#/" ? here === "#/" : here.startsWith(href);
      return h("a", { href, "aria-current": active ? "page" : undefined }, text);
    }),
  );
  const signOut = h("button", { type: "button", class: "link" }, "Sign out");
  signOut.addEventListener("click", () => {
    storeKey(null);
    void start();
  });
  who.replaceChildren(
    id.open
      ? h("span", { class: "badge warn", title: "ROCKTIMER_API_KEYS is not set" }, "open service")
      : h("span", { class: "badge" }, `role: ${id.role}`),
  );
  if (!id.open) who.append(signOut);
}

async function show(): Promise<void> {
  if (me === null) return;
  stopPage?.();
  stopPage = null;
  drawChrome(me);
  const ctx: Ctx = { role: me.role, open: me.open, onLeave: (stop) => (stopPage = stop) };
  const page = h("div", { class: "page" });
  view.replaceChildren(page);
  try {
    await route(location.hash || "#/", page, ctx);
  } catch (err) {
    page.replaceChildren(h("h1", {}, "This page could not be loaded"), notice(err instanceof Error ? err.message : String(err), "error"));
  }
  const heading = view.querySelector("h1");
  if (heading instanceof HTMLElement) {
    heading.tabIndex = -1;
    heading.focus({ preventScroll: true }); // keyboard users land on the new page
  }
}

async function start(): Promise<void> {
  try {
    me = await identify();
  } catch (err) {
    view.replaceChildren(notice(`The service did not answer: ${String(err)}`, "error"));
    return;
  }
  if (me === null) {
    askForKey(storedKey() ? "That key was not accepted." : null);
    return;
  }
  await show();
}

window.addEventListener("hashchange", () => void show());
void start();
