// Feedback on an answer: good or bad, then (after bad) the right answer and a comment, and in
// the side-by-side view which side was better. The server keeps one record per person and run
// (POST /crag/feedback replaces the earlier one), which the page shows again when the
// conversation is reopened. Only CRAG's answers get a bar: the standard RAG run beside one has
// no thread, so the choice of the better side is saved with the CRAG answer's vote.
import { removeFeedback, sendFeedback, sentenceFor, threadFeedback } from "./api.js";
import { el } from "./dom.js";

const MAX_TEXT = 2000; // the server's limit on the right answer and on the comment
const VERDICTS = { good: { text: "Good", glyph: "✓" }, bad: { text: "Bad", glyph: "✗" } };
const BETTER = [
  { value: "crag", text: "CRAG", label: "CRAG was better", said: "CRAG's was the better answer" },
  { value: "rag", text: "Standard RAG", label: "Standard RAG was better", said: "standard RAG's was the better answer" },
  { value: "same", text: "The same", label: "The same: neither was better", said: "neither was better" },
];
let bars = 0; // numbers each bar's form fields, so their labels point at them

/** What a stored record says, as the line under the buttons. */
function savedLine(record, prefix) {
  const better = BETTER.find((b) => b.value === record.better);
  const note = record.expected || record.comment ? ", with a note" : "";
  return `${prefix}you found this answer ${record.verdict}${note}${better ? `; ${better.said}` : ""}.`;
}

function setStatus(bar, text, refused = false) {
  bar.status.textContent = text;
  bar.status.classList.toggle("refused", refused);
}

/** Show the state: the saved vote pressed, the better side chosen, the edit button. */
function draw(bar) {
  for (const button of bar.votes) button.setAttribute("aria-pressed", String(button.dataset.verdict === bar.verdict));
  for (const button of bar.betterButtons) button.setAttribute("aria-pressed", String(button.dataset.better === bar.better));
  bar.edit.hidden = bar.verdict !== "bad" || !bar.form.hidden;
}

/** The request's body: the run, the vote, and only the fields that say something. */
function bodyOf(bar, verdict, expected, comment) {
  const body = { thread_id: bar.threadId };
  if (bar.runId) body.run_id = bar.runId;
  body.verdict = verdict;
  if (expected) body.expected = expected;
  if (comment) body.comment = comment;
  if (bar.better) body.better = bar.better;
  return body;
}

/** Store the vote with its note and the better side; whether the server took it. */
async function save(bar, verdict, expected, comment) {
  bar.busy = true;
  bar.node.setAttribute("aria-busy", "true");
  setStatus(bar, "Saving…");
  try {
    const record = await sendFeedback(bodyOf(bar, verdict, expected, comment));
    show(bar, record, "Saved: ");
    return true;
  } catch (error) {
    setStatus(bar, sentenceFor(error, "Saving your feedback"), true);
    return false;
  } finally {
    bar.busy = false;
    bar.node.setAttribute("aria-busy", "false");
    draw(bar);
  }
}

/** Take the vote back: the record is removed from the server. */
async function unvote(bar) {
  if (!bar.record) return;
  bar.busy = true;
  try {
    await removeFeedback(bar.record.id);
    Object.assign(bar, { record: null, verdict: null, better: null });
    closeForm(bar, false);
    setStatus(bar, "Your feedback on this answer was removed.");
  } catch (error) {
    setStatus(bar, sentenceFor(error, "Removing your feedback"), true);
  } finally {
    bar.busy = false;
    draw(bar);
  }
}

async function onVote(bar, verdict) {
  if (bar.busy) return;
  if (bar.verdict === verdict) {
    await unvote(bar);
    return;
  }
  const saved = bar.record || {};
  if (verdict === "bad") openForm(bar);
  // A good answer needs no right answer; a comment written earlier is kept.
  await save(bar, verdict, verdict === "bad" ? saved.expected : "", saved.comment);
}

async function onBetter(bar, value) {
  if (bar.busy) return;
  bar.better = bar.better === value ? null : value;
  draw(bar);
  if (!bar.verdict) {
    setStatus(bar, "Now say whether the CRAG answer was good or bad: the choice is saved with your vote.");
    return;
  }
  await save(bar, bar.verdict, bar.record.expected, bar.record.comment);
}

function openForm(bar) {
  const saved = bar.record || {};
  bar.expected.value = saved.expected || "";
  bar.comment.value = saved.comment || "";
  bar.form.hidden = false;
  draw(bar);
  bar.expected.focus();
}

function closeForm(bar, focus = true) {
  bar.form.hidden = true;
  draw(bar);
  if (focus) bar.votes[1].focus();
}

async function onSend(event, bar) {
  event.preventDefault();
  if (bar.busy) return;
  if (await save(bar, "bad", bar.expected.value.trim(), bar.comment.value.trim())) closeForm(bar);
}

function voteButton(bar, verdict) {
  const { text, glyph } = VERDICTS[verdict];
  return el("button", {
    type: "button", class: `vote vote-${verdict}`, "data-verdict": verdict, "aria-pressed": "false",
    "aria-label": `${text} answer`, onclick: () => onVote(bar, verdict),
  }, el("span", { "aria-hidden": "true", text: `${glyph} ` }), text);
}

function betterGroup(bar) {
  const id = `feedback-${bar.number}-better`;
  bar.betterButtons = BETTER.map((b) => el("button", {
    type: "button", class: "better", "data-better": b.value, "aria-pressed": "false", "aria-label": b.label,
    onclick: () => onBetter(bar, b.value),
  }, b.text));
  return el("div", { class: "feedback-better", role: "group", "aria-labelledby": id },
    el("span", { id, class: "feedback-better-label", text: "Which answer was better?" }), ...bar.betterButtons);
}

function noteForm(bar) {
  const id = `feedback-${bar.number}`;
  bar.expected = el("textarea", { id: `${id}-expected`, rows: 2, maxlength: MAX_TEXT });
  bar.comment = el("textarea", { id: `${id}-comment`, rows: 2, maxlength: MAX_TEXT });
  bar.form = el("form", { class: "feedback-form", hidden: true, "aria-label": "What was wrong with this answer", onsubmit: (event) => onSend(event, bar) },
    el("label", { for: bar.expected.id, text: "The right answer (optional)" }), bar.expected,
    el("label", { for: bar.comment.id, text: "Comment (optional)" }), bar.comment,
    el("div", { class: "feedback-form-buttons" },
      el("button", { type: "submit", text: "Send" }),
      el("button", { type: "button", class: "feedback-cancel", text: "Cancel", onclick: () => closeForm(bar) })));
  return bar.form;
}

/** Show a stored record (the server's answer, or the one read back when reopening). */
function show(bar, record, prefix = "") {
  Object.assign(bar, { record, verdict: record.verdict, better: record.better || null });
  setStatus(bar, savedLine(record, prefix ? prefix : "Your feedback: "));
  draw(bar);
}

/**
 * The feedback bar of one finished CRAG answer: `threadId` and `runId` name its run (a null
 * runId: the thread's latest finished run, which the server then judges); `compare` adds the
 * choice of the better side. Returns {node, show(record)}.
 */
export function feedbackBar({ threadId, runId, compare }) {
  bars += 1;
  const bar = { number: bars, threadId, runId, record: null, verdict: null, better: null, busy: false, betterButtons: [] };
  bar.votes = [voteButton(bar, "good"), voteButton(bar, "bad")];
  bar.edit = el("button", { type: "button", class: "feedback-edit", hidden: true, text: "Say what was wrong", onclick: () => openForm(bar) });
  bar.status = el("p", { class: "feedback-status", role: "status" });
  const form = noteForm(bar);
  bar.node = el("div", { class: "feedback", role: "group", "aria-label": "Your feedback on this answer" },
    el("div", { class: "feedback-row" }, el("span", { class: "feedback-label", "aria-hidden": "true", text: "Was this answer right?" }), ...bar.votes, bar.edit),
    compare ? betterGroup(bar) : null, bar.status, form);
  return { node: bar.node, show: (record) => show(bar, record) };
}

/** Show the signed-in person's stored votes on a reopened thread: `byRun` maps run ids to bars. */
export async function showThreadFeedback(threadId, byRun) {
  for (const record of await threadFeedback(threadId)) {
    const bar = byRun.get(record.run_id);
    if (bar) bar.show(record);
  }
}
