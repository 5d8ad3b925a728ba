// The API as the page calls it: the bearer token kept in this tab's
// sessionStorage (gone when the tab closes), sent on every request.

const KEY = "berth-token";

export class ApiError extends Error {
  constructor(status, problem) {
    super(problem.detail || problem.title || `HTTP ${status}`);
    this.status = status;
    this.problem = problem;
  }
}

export function token() {
  return sessionStorage.getItem(KEY) || "";
}

export function setToken(value) {
  if (value) sessionStorage.setItem(KEY, value);
  else sessionStorage.removeItem(KEY);
}

export function headers(extra = {}) {
  const found = token();
  return found ? { ...extra, Authorization: `Bearer ${found}` } : extra;
}

export async function get(path, signal) {
  const response = await fetch(path, { headers: headers(), signal });
  return reply(response);
}

export async function post(path, body) {
  const response = await fetch(path, {
    method: "POST",
    headers: headers({ "Content-Type": "application/json" }),
    body: JSON.stringify(body),
  });
  return reply(response);
}

async function reply(response) {
  const data = await response.json().catch(() => ({}));
  if (!response.ok) throw new ApiError(response.status, data);
  return data;
}

// Server-Sent Events over fetch (EventSource cannot send a token): calls
// onEvent(name, data, id) for each event until the signal aborts; resumes
// from the last id after a dropped connection.
export async function follow(path, onEvent, signal, onOpen) {
  let last = null;
  while (!signal.aborted) {
    try {
      const extra = last ? { "Last-Event-ID": last } : {};
      const response = await fetch(path, { headers: headers(extra), signal });
      if (!response.ok) throw new ApiError(response.status, await response.json());
      if (onOpen) onOpen();
      const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
      let buffer = "";
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buffer += value;
        let end;
        while ((end = buffer.indexOf("\n\n")) >= 0) {
          const block = buffer.slice(0, end);
          buffer = buffer.slice(end + 2);
          last = dispatch(block, onEvent) ?? last;
        }
      }
    } catch (error) {
      if (signal.aborted) return;
      if (error instanceof ApiError) throw error;
    }
    await new Promise((resolve) => setTimeout(resolve, 1000));
  }
}

function dispatch(block, onEvent) {
  let name = "message";
  let id = null;
  const data = [];
  for (const line of block.split("\n")) {
    if (line.startsWith(":")) continue;
    const [field, ...rest] = line.split(":");
    const text = rest.join(":").replace(/^ /, "");
    if (field === "event") name = text;
    else if (field === "id") id = text;
    else if (field === "data") data.push(text);
  }
  if (data.length) onEvent(name, JSON.parse(data.join("\n")), id);
  return id;
}
