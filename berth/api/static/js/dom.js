// Small helpers to build the page's elements: text always goes in as text,
// never as HTML, so nothing the API returns can become markup.

export function h(tag, attributes = {}, ...children) {
  const element = document.createElement(tag);
  for (const [name, value] of Object.entries(attributes)) {
    if (value === false || value === null || value === undefined) continue;
    if (name.startsWith("on")) element.addEventListener(name.slice(2), value);
    else element.setAttribute(name, value === true ? "" : String(value));
  }
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined || child === false) continue;
    element.append(child instanceof Node ? child : String(child));
  }
  return element;
}

// A table from a header row and rows of cells (text or elements).
export function table(caption, head, rows) {
  return h("table", {},
    h("caption", {}, caption),
    h("thead", {}, h("tr", {}, head.map((name) => h("th", { scope: "col" }, name)))),
    h("tbody", {}, rows.map((row) => h("tr", {}, row.map((cell) => h("td", {}, cell))))));
}

export function link(hash, text) {
  return h("a", { href: hash }, text);
}

export function encode(id) {
  return encodeURIComponent(id);
}

export function when(ms) {
  return ms === null || ms === undefined ? "" : new Date(ms).toISOString().replace(".000Z", "Z");
}
