// The thread list, and a thread's earlier turns read back from its history.
import { PAGE_TAG } from "./api.js";
import { el } from "./dom.js";

/** The page's threads, newest first. */
export async function listThreads(client) {
  return client.threads.search({ metadata: { page: PAGE_TAG }, limit: 50, sortBy: "updated_at", sortOrder: "desc" });
}

/** A new thread titled by its first question. */
export async function createThread(client, question) {
  return client.threads.create({ metadata: { page: PAGE_TAG, title: question.slice(0, 80) } });
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
 * The turns of a thread: [{question, values}] where values is the final state of the run that
 * answered (from the thread's history), or the stored answer alone when that state is gone.
 */
export async function threadTurns(client, threadId) {
  const history = await client.threads.getHistory(threadId, { limit: 200 });
  const finalStates = new Map();
  for (const state of history) {
    if (state.next && state.next.length) continue;
    const messages = (state.values && state.values.messages) || [];
    const last = messages[messages.length - 1];
    if (last && last.type === "ai" && !finalStates.has(last.id)) finalStates.set(last.id, state.values);
  }
  const messages = (history[0] && history[0].values && history[0].values.messages) || [];
  const turns = [];
  for (const message of messages) {
    if (message.type === "human") turns.push({ question: textOf(message.content), values: null });
    else if (message.type === "ai" && turns.length) {
      const kwargs = message.additional_kwargs || {};
      turns[turns.length - 1].values = finalStates.get(message.id) ||
        { answer: textOf(message.content), action: kwargs.action, abstained: kwargs.abstained };
    }
  }
  return { turns, messages };
}
