// Two small SVG charts (bars and a line), sized by viewBox so they scale with the page.

import { svg } from "./dom.js";
import { count } from "./fmt.js";

const H = 180;
const PAD = { left: 44, right: 8, top: 10, bottom: 24 };

function frame(W: number, title: string, max: number, xLabels: [number, string][]): SVGSVGElement {
  const root = svg("svg", {
    viewBox: `0 0 ${W} ${H}`,
    class: "chart",
    role: "img",
    "aria-label": title,
  }) as SVGSVGElement;
  const t = svg("title");
  t.textContent = title;
  root.append(t);
  for (const frac of [0, 0.5, 1]) {
    const y = PAD.top + (H - PAD.top - PAD.bottom) * (1 - frac);
    root.append(svg("line", { x1: PAD.left, x2: W - PAD.right, y1: y, y2: y, class: "grid" }));
    const label = svg("text", { x: PAD.left - 6, y: y + 4, class: "axis", "text-anchor": "end" });
    label.textContent = count(Math.round(max * frac));
    root.append(label);
  }
  for (const [x, text] of xLabels) {
    const label = svg("text", { x, y: H - 6, class: "axis", "text-anchor": "middle" });
    label.textContent = text;
    root.append(label);
  }
  return root;
}

/** A round top for the y axis, even in its leading digit so the middle line is round too. */
function niceMax(values: number[]): number {
  const top = Math.max(1, ...values);
  const step = 10 ** Math.floor(Math.log10(top));
  return Math.ceil(top / (2 * step)) * 2 * step;
}

/** One bar per value; `tip(i)` labels each bar's tooltip; `W` is the drawing's width in
 * text-sized units (wide charts get more, so their labels keep the same size). */
export function bars(
  W: number,
  title: string,
  values: number[],
  xLabels: [number, string][],
  tip: (i: number) => string,
): SVGSVGElement {
  const max = niceMax(values);
  const plotW = W - PAD.left - PAD.right;
  const plotH = H - PAD.top - PAD.bottom;
  const root = frame(
    W,
    title,
    max,
    xLabels.map(([i, text]) => [PAD.left + (plotW * i) / values.length, text]),
  );
  const bw = plotW / values.length;
  values.forEach((v, i) => {
    const bh = (plotH * v) / max;
    const rect = svg("rect", {
      x: PAD.left + i * bw + 1,
      y: PAD.top + plotH - bh,
      width: Math.max(1, bw - 2),
      height: bh,
      class: "bar",
    });
    const t = svg("title");
    t.textContent = tip(i);
    rect.append(t);
    root.append(rect);
  });
  return root;
}

/** A line over evenly spaced samples (oldest first), with the area under it shaded. */
export function line(W: number, title: string, values: number[], xLabels: [number, string][]): SVGSVGElement {
  const max = niceMax(values);
  const plotW = W - PAD.left - PAD.right;
  const plotH = H - PAD.top - PAD.bottom;
  const n = Math.max(2, values.length);
  const x = (i: number): number => PAD.left + (plotW * i) / (n - 1);
  const y = (v: number): number => PAD.top + plotH - (plotH * v) / max;
  const root = frame(
    W,
    title,
    max,
    xLabels.map(([i, text]) => [x(i), text]),
  );
  if (values.length > 1) {
    const pts = values.map((v, i) => `${x(i).toFixed(1)},${y(v).toFixed(1)}`);
    const base = PAD.top + plotH;
    root.append(
      svg("polygon", {
        points: `${x(0)},${base} ${pts.join(" ")} ${x(values.length - 1)},${base}`,
        class: "area",
      }),
    );
    root.append(svg("polyline", { points: pts.join(" "), class: "stroke" }));
  }
  return root;
}
