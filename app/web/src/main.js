// crag's chat page: wires the panels, the conversation and the runs together.
import { assistantFor, fetchMethod, makeClient, sentenceFor, signOut, startSession, uploadFile } from "./api.js";
import { answerColumn, failAnswer, finishAnswer, showCitation } from "./answer.js";
import { el } from "./dom.js";
import { feedbackBar, showThreadFeedback } from "./feedback.js";
import { installQuality } from "./quality.js";
import { streamRun } from "./runs.js";
import { chosenContext, drawSettings } from "./settings.js";
import { drawThreadList, listThreads, newThreadId, plainText, threadTurns, titleThread } from "./threads.js";

const $ = (id) => document.getElementById(id);
let client = null; // made once the session's CSRF token is known (start)
const page = {
  assistants: {}, method: { upper_threshold: 0.59, lower_threshold: -0.99 },
  threadId: null, messages: [], running: null, user: null,
};
window.cragTimings = [];

function showError(sentence) {
  const box = $("error");
  box.textContent = sentence;
  box.hidden = !sentence;
}

function setStatus(text) {
  $("status").textContent = text;
}

function openCitation(values, n) {
  showCitation($("citation-dialog"), values, n).catch((error) => showError(sentenceFor(error, "Opening the source")));
}

async function refreshThreads() {
  try {
    drawThreadList($("thread-list"), await listThreads(client, page.user), page.threadId, openThread);
  } catch (error) {
    showError(sentenceFor(error, "Listing the conversations"));
  }
}

function turnElement(question) {
  const answers = el("div", { class: "answers" });
  const item = el("li", { class: "turn" }, el("p", { class: "question" }, el("span", { class: "visually-hidden", text: "You asked: " }), question), answers);
  $("turns").append(item);
  return answers;
}

/** A feedback bar under a finished CRAG answer (the run: `runId`, else the thread's latest). */
function addFeedback(column, threadId, runId, compare) {
  const bar = feedbackBar({ threadId, runId, compare });
  column.append(bar.node);
  return bar;
}

/** Draw a stored turn; its feedback bar goes into `byRun` (only the last turn's run may be unknown). */
function drawStoredTurn(turn, threadId, last, byRun) {
  const answers = turnElement(turn.question);
  const { column } = answerColumn("crag");
  answers.append(column);
  if (!turn.values) {
    failAnswer(column, "This question has no stored answer (its run failed or was stopped).");
    return;
  }
  finishAnswer(column, { values: turn.values, path: [] }, page.method, openCitation);
  if (turn.runId || last) byRun.set(turn.runId, addFeedback(column, threadId, turn.runId, false));
}

async function openThread(threadId) {
  if (page.running) return;
  showError("");
  const byRun = new Map();
  try {
    const { turns, messages } = await threadTurns(client, threadId);
    page.threadId = threadId;
    page.messages = messages;
    $("turns").replaceChildren();
    turns.forEach((turn, i) => drawStoredTurn(turn, threadId, i === turns.length - 1, byRun));
    await refreshThreads();
    $("question").focus();
  } catch (error) {
    showError(sentenceFor(error, "Opening the conversation"));
    return;
  }
  try {
    await showThreadFeedback(threadId, byRun);
  } catch (error) {
    showError(sentenceFor(error, "Reading your feedback"));
  }
}

function newThread() {
  if (page.running) return;
  page.threadId = null;
  page.messages = [];
  $("turns").replaceChildren();
  showError("");
  refreshThreads();
  $("question").focus();
}

async function runInto(column, text, options, timing) {
  let first = true;
  const result = await streamRun(client, {
    ...options,
    onRunId: (runId) => {
      if (options.graph !== "crag") return;
      page.running.runId = runId;
      if (options.ifNotExists) {
        titleThread(client, options.threadId, timing.question).then(refreshThreads, (error) => showError(sentenceFor(error, "Naming the conversation")));
      }
    },
    onProgress: (line) => {
      const status = column.querySelector(".answer-status");
      if (status) status.textContent = `Working… (${line})`;
    },
    onToken: (token) => {
      text.append(token);
      if (first && options.graph === "crag") {
        first = false;
        timing.firstToken = performance.now();
        performance.mark("crag-first-token");
      }
    },
  });
  if (page.running.stopped) throw new DOMException("the run was stopped", "AbortError");
  finishAnswer(column, result, page.method, openCitation);
  return result;
}

async function runGraph(graph, answers, question, context, timing) {
  const { column, text } = answerColumn(graph);
  answers.append(column);
  const controller = new AbortController();
  page.running.controllers.push(controller);
  const input = { messages: [{ role: "user", content: question }] };
  const options = graph === "crag"
    ? { graph, threadId: page.threadId, assistantId: page.assistants.crag, input, context, signal: controller.signal,
        ifNotExists: page.running.newThread ? "create" : undefined }
    : { graph, threadId: null, assistantId: page.assistants.rag, context, signal: controller.signal,
        input: { messages: [...page.messages.map((m) => ({ role: m.type === "human" ? "user" : "assistant", content: plainText(m) })), input.messages[0]] } };
  try {
    const result = await runInto(column, text, options, timing);
    if (graph !== "crag") return;
    if (result.values && result.values.messages) page.messages = result.values.messages;
    addFeedback(column, options.threadId, result.runId, answers.classList.contains("side-by-side"));
  } catch (error) {
    const sentence = page.running.stopped ? "Stopped: the run was cancelled." : sentenceFor(error, "The answer");
    failAnswer(column, sentence);
    if (!page.running.stopped) showError(sentence);
  }
}

async function ask(event) {
  event.preventDefault();
  const question = $("question").value.trim();
  if (!question || page.running) {
    if (!question) setStatus("Type a question first.");
    return;
  }
  const timing = { enter: performance.now(), question };
  performance.mark("crag-enter");
  showError("");
  const context = chosenContext($("settings-form"));
  const newThread = !page.threadId;
  if (newThread) page.threadId = newThreadId();
  page.running = { runId: null, controllers: [], stopped: false, threadId: page.threadId, newThread };
  setRunning(true);
  $("question").value = "";
  const answers = turnElement(question);
  const graphs = $("compare").checked ? ["rag", "crag"] : ["crag"];
  answers.classList.toggle("side-by-side", graphs.length > 1);
  await Promise.all(graphs.map((graph) => runGraph(graph, answers, question, context, timing)));
  if (newThread && !page.running.runId) page.threadId = null; // the server made no run, nor thread
  timing.done = performance.now();
  window.cragTimings.push(timing);
  page.running = null;
  setRunning(false);
  refreshThreads();
}

function setRunning(running) {
  $("ask-button").disabled = running;
  $("stop-button").disabled = !running;
  setStatus(running ? "Answering…" : "");
  if (!running) $("question").focus();
}

async function stop() {
  const running = page.running;
  if (!running) return;
  running.stopped = true;
  setStatus("Stopping…");
  // The page stops reading at once; the server cancels the run of a stream that went away
  // (onDisconnect: "cancel"), and is told so directly too.
  running.controllers.forEach((c) => c.abort());
  if (!running.runId) return;
  try {
    await client.runs.cancel(running.threadId, running.runId);
  } catch (error) {
    const status = error && (error.status || (error.response && error.response.status));
    if (status !== 404 && status !== 409) showError(sentenceFor(error, "Stopping the run"));
  }
}

async function upload(event) {
  event.preventDefault();
  const files = [...$("upload-files").files];
  const results = $("upload-results");
  if (!files.length) {
    results.replaceChildren(el("li", { class: "refused", text: "Choose one or more files first." }));
    return;
  }
  const tags = $("upload-tags").value.split(",").map((t) => t.trim()).filter(Boolean);
  $("upload-button").disabled = true;
  results.replaceChildren(el("li", { text: `Uploading ${files.length} file(s)…` }));
  const lines = [];
  const paths = [];
  for (const file of files) {
    try {
      paths.push((await uploadFile(file)).path);
    } catch (error) {
      lines.push(el("li", { class: "refused", text: `${file.name}: refused. ${sentenceFor(error, "The upload")}` }));
    }
  }
  if (paths.length) {
    try {
      const report = await client.runs.wait(null, page.assistants.ingest, { input: { paths, ...(tags.length ? { tags } : {}) } });
      lines.push(...ingestLines(report));
    } catch (error) {
      lines.push(el("li", { class: "refused", text: sentenceFor(error, "Ingesting the files") }));
    }
  }
  results.replaceChildren(...lines);
  $("upload-button").disabled = false;
}

function ingestLines(report) {
  if (report && report.__error__) return [el("li", { class: "refused", text: `Ingesting the files failed: ${report.__error__.message || report.__error__.error}` })];
  const name = (s) => s.split("/").pop();
  return [
    el("li", { class: "summary", text: report.summary || "Ingested." }),
    ...(report.added || []).map((s) => el("li", { class: "added", text: `${name(s)}: added` })),
    ...(report.skipped || []).map((s) => el("li", { text: `${name(s)}: already stored, unchanged` })),
    ...(report.relabelled || []).map((s) => el("li", { text: `${name(s)}: tags updated` })),
    ...(report.failed || []).map((f) => el("li", { class: "refused", text: `${name(f.source)}: refused. ${f.error}` })),
  ];
}

function toggle(button, panel) {
  const open = panel.hidden;
  panel.hidden = !open;
  button.setAttribute("aria-expanded", String(open));
  if (open) panel.querySelector("input, select, textarea, button").focus();
}

async function start() {
  try {
    const session = await startSession();
    page.user = session.user;
    $("signed-in").textContent = `Signed in as ${session.user}`;
    if (session.role === "admin") installQuality($("signed-in").parentElement, $("documents-panel"), toggle);
  } catch (error) {
    showError(sentenceFor(error, "Signing in"));
    return;
  }
  client = makeClient();
  $("sign-out").addEventListener("click", () => signOut().catch((error) => showError(sentenceFor(error, "Signing out"))));
  $("ask-form").addEventListener("submit", ask);
  $("question").addEventListener("keydown", (event) => {
    if (event.key === "Enter" && !event.shiftKey) ask(event);
  });
  $("stop-button").addEventListener("click", stop);
  $("new-thread").addEventListener("click", newThread);
  $("upload-form").addEventListener("submit", upload);
  $("toggle-settings").addEventListener("click", () => toggle($("toggle-settings"), $("settings-panel")));
  $("toggle-documents").addEventListener("click", () => toggle($("toggle-documents"), $("documents-panel")));
  try {
    const [crag, rag, ingest, method] = await Promise.all([
      assistantFor(client, "crag"), assistantFor(client, "rag"), assistantFor(client, "ingest"), fetchMethod(),
    ]);
    page.assistants = { crag, rag, ingest };
    page.method = method;
    drawSettings($("settings-form"), (await client.assistants.getSchemas(crag)).context_schema);
    document.body.dataset.ready = "true";
  } catch (error) {
    showError(sentenceFor(error, "Loading the page"));
  }
  await refreshThreads();
}

start();
