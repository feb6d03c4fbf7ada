// The admins' quality view: the team's feedback counted by the action of the run it judges,
// the thresholds the server runs with, the last evaluation's table and picture (crag eval
// --output DIR, in the server's eval_dir), and the feedback export. Only an admin's page builds
// it: a member's page has no such button nor panel, and the server refuses a member its routes.
import { jsonCall, sentenceFor } from "./api.js";
import { el } from "./dom.js";

export const QUALITY_PATH = "/crag/quality";
const ACTIONS = ["correct", "ambiguous", "incorrect", "other"];
const EXPORT_NAME = "crag-feedback.jsonl";

function countsTable(feedback) {
  const rows = ACTIONS.map((action) => {
    const votes = feedback.actions[action];
    return el("tr", { "data-action": action },
      el("th", { scope: "row", text: action }),
      el("td", { class: "count-good", text: String(votes.good) }),
      el("td", { class: "count-bad", text: String(votes.bad) }));
  });
  return el("table", { class: "quality-counts" },
    el("caption", { text: `Feedback: ${feedback.records} record(s), by the action of the run judged` }),
    el("thead", {}, el("tr", {}, el("th", { scope: "col", text: "Action" }), el("th", { scope: "col", text: "Good" }), el("th", { scope: "col", text: "Bad" }))),
    el("tbody", {}, rows));
}

function comparisonsLine(comparisons) {
  return el("p", { class: "quality-comparisons",
    text: `Side-by-side votes: CRAG better ${comparisons.crag}, standard RAG better ${comparisons.rag}, the same ${comparisons.same}.` });
}

function thresholdsList(thresholds) {
  const item = (name, value) => [el("dt", { text: name }), el("dd", { text: String(value) })];
  return el("dl", { class: "quality-thresholds" },
    item("Upper threshold", thresholds.upper_threshold),
    item("Lower threshold", thresholds.lower_threshold),
    item("Evaluator", thresholds.evaluator));
}

function evaluationPart(evaluation, note) {
  const heading = el("h3", { text: "Last evaluation" });
  if (!evaluation) return [heading, el("p", { class: "quality-note", text: note })];
  const then = evaluation.thresholds;
  const parts = [
    heading,
    el("p", { class: "quality-run",
      text: `${evaluation.run}: written ${evaluation.written_at}, ${evaluation.questions} question(s) from ${evaluation.questions_file}, thresholds then ${then.upper_threshold} / ${then.lower_threshold}.` }),
    el("pre", { class: "quality-table", tabindex: "0", "aria-label": "The evaluation's table", text: evaluation.table.join("\n") }),
  ];
  if (evaluation.picture) {
    // An <img>, never the SVG's markup in the page: the file runs nothing here.
    parts.push(el("img", { class: "quality-picture", src: `${QUALITY_PATH}/report.svg?run=${encodeURIComponent(evaluation.run)}`,
      alt: "Best passage score per question against the thresholds, and accuracy per action" }));
  }
  return parts;
}

async function load(body) {
  body.dataset.loaded = "false";
  body.replaceChildren(el("p", { text: "Loading…" }));
  try {
    const view = await jsonCall(QUALITY_PATH);
    body.replaceChildren(
      el("h3", { text: "Thresholds in force" }), thresholdsList(view.thresholds),
      el("h3", { text: "Feedback" }), countsTable(view.feedback), comparisonsLine(view.feedback.comparisons),
      ...evaluationPart(view.evaluation, view.note));
  } catch (error) {
    body.replaceChildren(el("p", { class: "refused", text: sentenceFor(error, "Loading the quality view") }));
  }
  body.dataset.loaded = "true";
}

/**
 * Add the Quality button to `nav` and its panel before `before`; `toggle(button, panel)` opens
 * and closes it as the other panels. The view is loaded again each time it is opened.
 */
export function installQuality(nav, before, toggle) {
  const button = el("button", { type: "button", id: "toggle-quality", "aria-expanded": "false", "aria-controls": "quality-panel", text: "Quality" });
  const body = el("div", { class: "quality-body", "aria-live": "polite" });
  const reload = el("button", { type: "button", id: "quality-reload", text: "Reload" });
  const download = el("a", { class: "button-link", href: `${QUALITY_PATH}/export`, download: EXPORT_NAME, text: "Download the feedback export" });
  const panel = el("section", { id: "quality-panel", class: "panel quality", hidden: true, "aria-labelledby": "quality-heading" },
    el("h2", { id: "quality-heading", text: "Answer quality (admins only)" }),
    el("div", { class: "quality-actions" }, reload, download),
    body);
  nav.insertBefore(button, nav.querySelector("#signed-in"));
  before.before(panel);
  button.addEventListener("click", () => {
    toggle(button, panel);
    if (!panel.hidden) load(body);
  });
  reload.addEventListener("click", () => load(body));
}
