// The JSON API as the console uses it: one fetch wrapper that sends the session's key and
// turns problem+json replies into ApiError, plus the types of the replies it reads.
export class ApiError extends Error {
    status;
    title;
    detail;
    constructor(status, title, detail) {
        super(`${status} ${title}: ${detail}`);
        this.status = status;
        this.title = title;
        this.detail = detail;
    }
}
const KEY_SLOT = "rocktimer.apiKey"; // sessionStorage: gone when the tab closes
export function storedKey() {
    return sessionStorage.getItem(KEY_SLOT);
}
export function storeKey(key) {
    if (key === null)
        sessionStorage.removeItem(KEY_SLOT);
    else
        sessionStorage.setItem(KEY_SLOT, key);
}
export async function call(method, path, body) {
    const headers = { accept: "application/json" };
    const key = storedKey();
    if (key)
        headers.authorization = `Bearer ${key}`;
    const init = { method, headers };
    if (body !== undefined) {
        headers["content-type"] = "application/json";
        init.body = JSON.stringify(body);
    }
    const reply = await fetch(path, init);
    const text = await reply.text();
    const parsed = text ? JSON.parse(text) : null;
    if (!reply.ok) {
        const p = (parsed ?? {});
        throw new ApiError(reply.status, p.title ?? reply.statusText, p.detail ?? text);
    }
    return parsed;
}
/** A path segment: topic names may hold %, which must travel as %25. */
export function seg(name) {
    return encodeURIComponent(name);
}
