// Numbers and times for people: 1.2M, 3 ms, "in 2 h", local wall-clock times.
export function count(n) {
    const abs = Math.abs(n);
    if (abs < 1000)
        return String(n);
    for (const [size, unit] of [
        [1e9, "B"],
        [1e6, "M"],
        [1e3, "k"],
    ]) {
        if (abs >= size) {
            const v = n / size;
            return `${v >= 100 ? v.toFixed(0) : v.toFixed(1).replace(/\.0$/, "")}${unit}`;
        }
    }
    return String(n);
}
export function duration(ms) {
    const abs = Math.abs(ms);
    if (abs < 1)
        return `${ms.toFixed(1).replace(/\.0$/, "")} ms`;
    if (abs < 1000)
        return `${Math.round(ms)} ms`;
    if (abs < 60_000)
        return `${(ms / 1000).toFixed(1).replace(/\.0$/, "")} s`;
    if (abs < 3_600_000)
        return `${Math.round(ms / 60_000)} min`;
    if (abs < 86_400_000)
        return `${(ms / 3_600_000).toFixed(1).replace(/\.0$/, "")} h`;
    if (abs < 365.25 * 86_400_000)
        return `${Math.round(ms / 86_400_000)} d`;
    return `${(ms / (365.25 * 86_400_000)).toFixed(1).replace(/\.0$/, "")} y`;
}
/** "in 2 h", "3 min ago", "now" — relative to the server clock's `now`. */
export function relative(atMs, nowMs) {
    const d = atMs - nowMs;
    if (Math.abs(d) < 1000)
        return "now";
    return d > 0 ? `in ${duration(d)}` : `${duration(-d)} ago`;
}
export function clock(atMs) {
    const t = new Date(atMs);
    const pad = (v, w = 2) => String(v).padStart(w, "0");
    return (`${t.getFullYear()}-${pad(t.getMonth() + 1)}-${pad(t.getDate())} ` +
        `${pad(t.getHours())}:${pad(t.getMinutes())}:${pad(t.getSeconds())}`);
}
/** A value for <input type="datetime-local"> in the browser's zone. */
export function localInput(atMs) {
    return clock(atMs).replace(" ", "T");
}
