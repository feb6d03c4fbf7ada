// The thread list, and a thread's earlier turns read back from its history.
import { PAGE_TAG } from "./api.js";
import { el } from "./dom.js";

/**
 * The signed-in person's conversations on this page, from any browser, most recently updated
 * first: the server stamps each thread with its owner and shows a member only their own; an
 * admin, who may see everyone's, lists their own here too.
 */
export async function listThreads(client, user) {
  return client.threads.search({
    metadata: { page: PAGE_TAG, owner: user }, limit: 100, sortBy: "updated_at", sortOrder: "desc",
  });
}

/** A new thread's id: a random UUID (crypto.randomUUID needs a secure context; this does not). */
export function newThreadId() {
  const bytes = crypto.getRandomValues(new Uint8Array(16));
  bytes[6] = (bytes[6] & 0x0f) | 0x40;
  bytes[8] = (bytes[8] & 0x3f) | 0x80;
  const hex = [...bytes].map((b) => b.toString(16).padStart(2, "0")).join("");
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20)}`;
}

/**
 * Title a thread the first run created (`ifNotExists: "create"`, which saves a round trip
 * before the first token) by its first question, and tag it as the page's.
 */
export async function titleThread(client, threadId, question) {
  return client.threads.update(threadId, { metadata: { page: PAGE_TAG, title: question.slice(0, 80) } });
}

/** Draw the list; `open(threadId)` is called when one is chosen. */
export function drawThreadList(list, threads, currentId, open) {
  list.replaceChildren(...threads.map((thread) => {
    const title = (thread.metadata && thread.metadata.title) || "Untitled conversation";
    const when = new Date(thread.updated_at || thread.created_at).toLocaleString();
    return el("li", {}, el("button", {
      type: "button", class: "thread", "data-thread": thread.thread_id,
      "aria-current": thread.thread_id === currentId ? "true" : null,
      onclick: () => open(thread.thread_id),
    }, el("span", { class: "thread-title", text: title }), el("span", { class: "thread-when", text: when })));
  }));
  if (!threads.length) list.append(el("li", { class: "hint", text: "No conversation yet." }));
}

function textOf(content) {
  if (typeof content === "string") return content;
  return Array.isArray(content) ? content.map((p) => (typeof p === "string" ? p : p.text || "")).join("") : "";
}

/**
 * A message's text as the page shows and sends it: an AI message's plain answer (recorded in
 * its additional_kwargs), not its content, which adds the sources and a note for chat
 * front-ends that read nothing else (the page shows the sources itself).
 */
export function plainText(message) {
  const kwargs = message.additional_kwargs || {};
  if (message.type === "ai" && typeof kwargs.answer === "string") return kwargs.answer;
  return textOf(message.content);
}

/**
 * The turns of a thread: [{question, values, runId}] where values is the final state of the run
 * that answered (from the thread's history), or the stored answer alone when that state is
 * gone, and runId that run's id (null when its state is gone).
 */
export async function threadTurns(client, threadId) {
  const history = await client.threads.getHistory(threadId, { limit: 200 });
  const finalStates = new Map();
  for (const state of history) {
    if (state.next && state.next.length) continue;
    const messages = (state.values && state.values.messages) || [];
    const last = messages[messages.length - 1];
    if (last && last.type === "ai" && !finalStates.has(last.id)) {
      finalStates.set(last.id, { values: state.values, runId: (state.metadata && state.metadata.run_id) || null });
    }
  }
  const messages = (history[0] && history[0].values && history[0].values.messages) || [];
  const turns = [];
  for (const message of messages) {
    if (message.type === "human") turns.push({ question: textOf(message.content), values: null, runId: null });
    else if (message.type === "ai" && turns.length) {
      const kwargs = message.additional_kwargs || {};
      const final = finalStates.get(message.id);
      Object.assign(turns[turns.length - 1], final ||
        { values: { answer: plainText(message), action: kwargs.action, abstained: kwargs.abstained }, runId: null });
    }
  }
  return { turns, messages };
}
