// An answer: streamed text, then the final text with its citations as links.
import { documentFileUrl } from "./api.js";
import { correctionView } from "./correction.js";
import { el, shortSource } from "./dom.js";

const GRAPH_TITLES = { crag: "CRAG (corrected)", rag: "Standard RAG" };

/** An empty answer column for `graph`, filled as tokens arrive. */
export function answerColumn(graph) {
  const text = el("div", { class: "answer-text", "aria-busy": "true" });
  const column = el("article", { class: `answer graph-${graph}`, "data-graph": graph, "aria-label": GRAPH_TITLES[graph] || graph },
    el("h3", { text: GRAPH_TITLES[graph] || graph }), text,
    el("p", { class: "answer-status", role: "status", text: "Working…" }));
  return { column, text };
}

/** The answer's text with `[n]` made into buttons that open citation n. */
function linkedAnswer(answer, values, openCitation) {
  const knowledge = values.knowledge || [];
  const parts = [];
  let cursor = 0;
  for (const match of answer.matchAll(/\[(\d+)\]/g)) {
    const n = Number(match[1]);
    if (n < 1 || n > knowledge.length) continue;
    parts.push(answer.slice(cursor, match.index));
    parts.push(el("button", { type: "button", class: "cite", "data-citation": n, "aria-label": `Source ${n}: ${shortSource(knowledge[n - 1].source)}`, onclick: () => openCitation(values, n) }, `[${n}]`));
    cursor = match.index + match[0].length;
  }
  parts.push(answer.slice(cursor));
  return parts;
}

function sourcesList(values, openCitation) {
  const knowledge = values.knowledge || [];
  const cited = (values.citations || []).filter((n) => n >= 1 && n <= knowledge.length);
  if (!cited.length) return null;
  return el("div", { class: "sources" }, el("h4", { text: "Sources" }),
    el("ol", {}, ...cited.map((n) => {
      const strip = knowledge[n - 1];
      const label = `${shortSource(strip.source)}${strip.location ? `, ${strip.location}` : ""}`;
      return el("li", { value: n }, el("a", {
        href: "#", class: "citation-link", "data-citation": n,
        onclick: (event) => { event.preventDefault(); openCitation(values, n); },
      }, label));
    })));
}

/** Fill `column` with the run's final answer, its citations and its correction. */
export function finishAnswer(column, result, method, openCitation) {
  const values = result.values || {};
  const graph = column.dataset.graph;
  const text = column.querySelector(".answer-text");
  text.replaceChildren(...linkedAnswer(values.answer || text.textContent, values, openCitation));
  text.setAttribute("aria-busy", "false");
  column.querySelector(".answer-status").remove();
  const sources = sourcesList(values, openCitation);
  if (sources) column.append(sources);
  column.append(correctionView(result, method, graph));
  column.dataset.done = "true";
  if (values.action) column.dataset.action = values.action;
}

/** Mark `column` as failed or stopped, with the sentence. */
export function failAnswer(column, sentence) {
  const text = column.querySelector(".answer-text");
  text.setAttribute("aria-busy", "false");
  const status = column.querySelector(".answer-status");
  const line = el("p", { class: "answer-error", text: sentence });
  if (status) status.replaceWith(line);
  else column.append(line);
  column.dataset.done = "failed";
}

function pageOf(location) {
  const match = /\bp(?:age|\.)\s*(\d+)/i.exec(location || "");
  return match ? Number(match[1]) : null;
}

/** Open citation `n` of a run in the dialog: the strip, its passage, and the file if shared. */
export async function showCitation(dialog, values, n) {
  const strip = (values.knowledge || [])[n - 1];
  if (!strip) return;
  const passage = (values.documents || []).find((d) => d.source === strip.source && d.chunk === strip.chunk);
  dialog.querySelector("#citation-title").textContent = `Source ${n}: ${shortSource(strip.source)}`;
  const where = dialog.querySelector("#citation-where");
  where.textContent = strip.origin === "external"
    ? `From the web: ${strip.source}`
    : `From the document store: ${shortSource(strip.source)}${strip.location ? `, ${strip.location}` : ""}`;
  where.title = strip.source;
  dialog.querySelector("#citation-text").textContent = strip.text;
  const details = dialog.querySelector("#citation-passage-details");
  details.hidden = !passage || passage.text === strip.text;
  dialog.querySelector("#citation-passage").textContent = passage ? passage.text : "";
  const file = dialog.querySelector("#citation-file");
  file.replaceChildren(el("span", { text: "Looking for the document's file…" }));
  dialog.showModal();
  if (strip.origin === "external") {
    file.replaceChildren(el("a", { href: /^https?:\/\//.test(strip.source) ? strip.source : "#", rel: "noreferrer noopener", target: "_blank", text: "Open the web page" }));
    return;
  }
  let url = null;
  try {
    url = await documentFileUrl(strip.source);
  } catch (_) {
    url = null;
  }
  if (!url) {
    file.replaceChildren(el("span", { text: "The server does not share this document's file; the text above is the stored passage." }));
    return;
  }
  const page = pageOf(strip.location);
  const isPdf = /\.pdf$/i.test(strip.source);
  const href = isPdf && page ? `${url}#page=${page}` : url;
  file.replaceChildren(el("a", { href, target: "_blank", rel: "noopener", id: "citation-file-link",
    text: isPdf && page ? `Open the PDF at page ${page}` : "Open the document" }));
}
