// A tiny element builder: h("td", {class: "num"}, "3") — text children are escaped by the
// DOM itself (no innerHTML anywhere, so message bodies cannot inject markup).

type Child = Node | string | number | null | undefined | false;
type Attrs = Record<string, string | number | boolean | EventListener | undefined>;

export function h<K extends keyof HTMLElementTagNameMap>(
  tag: K,
  attrs: Attrs = {},
  ...children: Child[]
): HTMLElementTagNameMap[K] {
  const el = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs)) {
    if (value === undefined || value === false) continue;
    if (typeof value === "function") el.addEventListener(name.replace(/^on/, ""), value);
    else if (value === true) el.setAttribute(name, "");
    else el.setAttribute(name, String(value));
  }
  for (const child of children) {
    if (child === null || child === undefined || child === false) continue;
    el.append(child instanceof Node ? child : String(child));
  }
  return el;
}

export function svg(tag: string, attrs: Record<string, string | number> = {}): SVGElement {
  const el = document.createElementNS("http://www.w3.org/2000/svg", tag);
  for (const [name, value] of Object.entries(attrs)) el.setAttribute(name, String(value));
  return el;
}

export function table(headers: string[], rows: Node[][], numeric: Set<number>): HTMLElement {
  const head = h("tr", {}, ...headers.map((t, i) => h("th", numeric.has(i) ? { class: "num" } : {}, t)));
  const body = rows.map((cells) =>
    h("tr", {}, ...cells.map((c, i) => h("td", numeric.has(i) ? { class: "num" } : {}, c))),
  );
  return h("div", { class: "table-wrap" }, h("table", {}, h("thead", {}, head), h("tbody", {}, ...body)));
}

export function button(label: string, onclick: () => void, cls = ""): HTMLButtonElement {
  return h("button", { type: "button", class: cls, onclick: () => onclick() }, label);
}

export function link(href: string, text: string): HTMLAnchorElement {
  return h("a", { href }, text);
}

/** A status line that tells the user what happened (role=status: read by screen readers). */
export function notice(text: string, kind: "ok" | "error" | "info" = "info"): HTMLElement {
  return h("p", { class: `notice ${kind}`, role: kind === "error" ? "alert" : "status" }, text);
}
