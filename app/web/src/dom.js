// Small DOM helpers: elements built from data, never from HTML strings.

/** An element with attributes and children (strings become text nodes). */
export function el(tag, attributes = {}, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attributes)) {
    if (value === undefined || value === null || value === false) continue;
    if (name === "class") node.className = value;
    else if (name === "text") node.textContent = value;
    else if (name.startsWith("on")) node.addEventListener(name.slice(2), value);
    else node.setAttribute(name, value === true ? "" : String(value));
  }
  for (const child of children.flat()) {
    if (child === undefined || child === null || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

/** An SVG element with attributes. */
export function svg(tag, attributes = {}, ...children) {
  const node = document.createElementNS("http://www.w3.org/2000/svg", tag);
  for (const [name, value] of Object.entries(attributes)) node.setAttribute(name, String(value));
  for (const child of children.flat()) {
    if (child) node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

/** `text` with a one-line title: the document's name without its folder. */
export function shortSource(source) {
  const text = String(source || "");
  if (text.startsWith("wikipedia:")) return text.slice("wikipedia:".length);
  const withoutLine = text.replace(/#line\d+$/, "");
  const slash = withoutLine.lastIndexOf("/");
  return slash >= 0 ? withoutLine.slice(slash + 1) : withoutLine;
}

/** A score as text with its sign, two decimals. */
export function scoreText(score) {
  if (score === null || score === undefined) return "not scored";
  return (score >= 0 ? "+" : "") + Number(score).toFixed(2);
}
