// What a run did to its retrieval: the action, the path, the scores, the strips, the web, notes.
import { el, scoreText, shortSource, svg } from "./dom.js";

const ACTION_WORDS = {
  correct: "Correct: a retrieved passage is relevant; its irrelevant strips were dropped.",
  ambiguous: "Ambiguous: the passages were refined and the web was searched; both were used.",
  incorrect: "Incorrect: every passage scored below the lower threshold; they were discarded and the web was searched.",
};

const NODE_WORDS = {
  contextualize: "contextualize", retrieve: "retrieve", grade: "grade", decide_action: "decide action",
  refine: "refine", rewrite_query: "rewrite query", web_search: "web search",
  decide_answer: "decide answer", generate: "generate", abstain: "abstain",
  pass_passages: "pass passages",
};

/** The action as a badge, with its meaning for screen readers and a tooltip. */
export function actionBadge(action) {
  if (!action) return null;
  const name = action.charAt(0).toUpperCase() + action.slice(1);
  return el("span", { class: `badge action-${action}`, title: ACTION_WORDS[action] || "", "data-action": action }, name);
}

function pathList(path) {
  return el("ol", { class: "path", "aria-label": "Path through the graph" },
    ...path.map((node) => el("li", { "data-node": node, text: NODE_WORDS[node] || node })));
}

const CHART = { width: 320, row: 18, left: 10, right: 10, top: 22 };

function xOf(score) {
  const inner = CHART.width - CHART.left - CHART.right;
  return CHART.left + ((Math.max(-1, Math.min(1, score)) + 1) / 2) * inner;
}

/** An SVG strip chart: each passage's score on [-1, 1], the two thresholds as lines. */
export function scoreChart(documents, method) {
  const height = CHART.top + CHART.row * Math.max(1, documents.length) + 6;
  const lines = [];
  for (const [name, value] of [["lower", method.lower_threshold], ["upper", method.upper_threshold]]) {
    if (typeof value !== "number") continue;
    const x = xOf(value);
    lines.push(svg("line", { x1: x, x2: x, y1: 14, y2: height, class: `threshold ${name}` }));
    lines.push(svg("text", { x, y: 11, class: "threshold-label", "text-anchor": "middle" }, `${name} ${scoreText(value)}`));
  }
  const dots = documents.map((doc, i) => {
    const y = CHART.top + CHART.row * i + CHART.row / 2;
    const score = typeof doc.score === "number" ? doc.score : 0;
    return svg("g", { class: "passage" },
      svg("line", { x1: xOf(-1), x2: xOf(1), y1: y, y2: y, class: "track" }),
      svg("circle", { cx: xOf(score), cy: y, r: 5, class: dotClass(score, method) }),
      svg("title", {}, `${i + 1}. ${shortSource(doc.source)}: ${scoreText(doc.score)}`));
  });
  return svg("svg", {
    viewBox: `0 0 ${CHART.width} ${height}`, class: "score-chart", role: "img",
    "aria-label": `Scores of ${documents.length} retrieved passages between -1 and 1, with the thresholds`,
  }, ...lines, ...dots);
}

function dotClass(score, method) {
  if (score > method.upper_threshold) return "dot above";
  if (score < method.lower_threshold) return "dot below";
  return "dot between";
}

function scoreTable(documents, method) {
  const rows = documents.map((doc, i) => el("tr", { "data-score": doc.score },
    el("td", { text: String(i + 1) }),
    el("td", { text: shortSource(doc.source) + (doc.location ? `, ${doc.location}` : "") }),
    el("td", { class: "num", text: scoreText(doc.score) }),
    el("td", { text: verdict(doc.score, method) })));
  return el("table", { class: "scores" },
    el("caption", { text: `Every retrieved passage's score (upper threshold ${scoreText(method.upper_threshold)}, lower ${scoreText(method.lower_threshold)})` }),
    el("thead", {}, el("tr", {}, ...["#", "Passage", "Score", "Against the thresholds"].map((h) => el("th", { scope: "col", text: h })))),
    el("tbody", {}, ...rows));
}

function verdict(score, method) {
  if (typeof score !== "number") return "not scored";
  if (score > method.upper_threshold) return "above the upper";
  if (score < method.lower_threshold) return "below the lower";
  return "between";
}

function normalized(text) {
  return text.toLowerCase().replace(/[^\p{L}\p{N}]+/gu, " ").trim();
}

/**
 * One refined passage, sentence by sentence: a sentence whose words are in a kept strip is
 * marked kept, the others are struck through as dropped. (Strips are recomposed, so a kept
 * strip's text may join sentences; the words are what is compared.)
 */
function refinedPassage(doc, kept) {
  const keptWords = ` ${kept.map((k) => normalized(k.text)).join(" ")} `;
  const sentences = doc.text.split(/(?<=[.!?]["')\]]?)\s+|\n+/).filter((s) => s.trim());
  let keptCount = 0;
  const pieces = sentences.map((sentence) => {
    const words = normalized(sentence);
    const isKept = kept.length > 0 && words && keptWords.includes(` ${words} `);
    if (isKept) keptCount += 1;
    return [isKept ? el("mark", { class: "kept", text: sentence }) : el("del", { class: "dropped", text: sentence }), " "];
  });
  return el("li", { class: "refined", "data-kept": keptCount },
    el("p", { class: "where", text: `${shortSource(doc.source)}${doc.location ? `, ${doc.location}` : ""} (score ${scoreText(doc.score)}): ${keptCount} of ${sentences.length} sentence(s) kept` }),
    el("p", {}, ...pieces.flat()));
}

function stripsSection(values, method) {
  const internal = (values.knowledge || []).filter((k) => k.origin === "internal");
  const documents = values.documents || [];
  const refined = documents.filter((d) => typeof d.score !== "number" || d.score >= method.lower_threshold);
  if (!refined.length) {
    return el("p", { class: "strips-none", text: "No passage was refined: every one scored below the lower threshold and was discarded." });
  }
  const stripsOf = (doc) => internal.filter((k) => k.source === doc.source && k.chunk === doc.chunk);
  const left = documents.length - refined.length;
  return el("section", { class: "strips", "aria-label": "Strips kept and dropped" },
    el("h4", { text: `Refinement: ${internal.length} strip(s) kept from ${refined.length} passage(s)` }),
    el("p", { class: "hint", text: "Highlighted: kept and given to the generator. Struck through: dropped as irrelevant." }),
    el("ol", {}, ...refined.map((doc) => refinedPassage(doc, stripsOf(doc)))),
    left ? el("p", { class: "hint", text: `${left} other passage(s) scored below the lower threshold and were not refined.` }) : null);
}

function webSection(values, searchQuery) {
  const external = (values.knowledge || []).filter((k) => k.origin === "external");
  if (!external.length && !searchQuery) return null;
  return el("section", { class: "web", "aria-label": "Web results used" },
    el("h4", { text: `Web: ${external.length} result(s) used` }),
    searchQuery ? el("p", {}, "Searched for ", el("q", { text: searchQuery })) : null,
    el("ul", {}, ...external.map((k) => el("li", {},
      el("a", { href: safeUrl(k.source), rel: "noreferrer noopener", target: "_blank", text: k.source }),
      el("p", { text: k.text })))));
}

function safeUrl(url) {
  return /^https?:\/\//i.test(String(url)) ? url : "#";
}

/** The notes of the run (web unavailable, knowledge cut, abstained). */
function notesSection(values) {
  const notes = [...(values.notes || [])];
  if (values.abstained) notes.unshift("The generator was not asked: no knowledge was found, so the run abstained.");
  if (!notes.length) return null;
  return el("section", { class: "notes", "aria-label": "Notes" },
    el("h4", { text: "Notes" }), el("ul", {}, ...notes.map((n) => el("li", { text: n }))));
}

/** The summary line and the details of a run's correction. */
export function correctionView(result, method, graph) {
  const values = result.values || {};
  const documents = values.documents || [];
  const summary = el("div", { class: "correction-summary" },
    graph === "crag" ? actionBadge(values.action) : el("span", { class: "badge action-none", text: "No correction" }),
    pathList(result.path || []));
  if (graph !== "crag") return el("div", { class: "correction" }, summary);
  const details = el("details", { class: "correction-details" },
    el("summary", { text: "How the answer was corrected" }),
    el("p", { text: ACTION_WORDS[values.action] || "" }),
    documents.length ? el("figure", {}, scoreChart(documents, method),
      el("figcaption", { text: "Each dot is a retrieved passage's score; the lines are the thresholds." })) : null,
    documents.length ? scoreTable(documents, method) : el("p", { text: "Nothing was retrieved." }),
    stripsSection(values, method), webSection(values, result.searchQuery), notesSection(values));
  return el("div", { class: "correction" }, summary, details);
}
