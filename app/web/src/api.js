// The server's own API through @langchain/langgraph-sdk, and errors turned into sentences.
import { Client } from "@langchain/langgraph-sdk/client";

export const PAGE_TAG = "crag-chat";

export const CSRF_HEADER = "x-crag-csrf";
let csrf = "";

/**
 * Who is signed in, and the session's CSRF token, which every change sends from now on. A
 * browser whose sign-in expired is sent back to the sign-in page.
 */
export async function startSession() {
  const response = await fetch("api/session", { cache: "no-store" });
  if (response.status === 401) {
    window.location.assign("/chat/");
    throw new Error("the sign-in has expired: sign in again");
  }
  if (!response.ok) throw new Error(`HTTP ${response.status}: ${await response.text()}`);
  const session = await response.json();
  csrf = session.csrf;
  return session;
}

/** Forget this browser's sign-in, then show the sign-in page. */
export async function signOut() {
  await fetch("api/session", { method: "DELETE", headers: { [CSRF_HEADER]: csrf } });
  window.location.assign("/chat/");
}

/** A client for the server that served this page: same origin, its session cookie and CSRF token. */
export function makeClient() {
  return new Client({ apiUrl: window.location.origin, apiKey: null, defaultHeaders: { [CSRF_HEADER]: csrf } });
}

/** The `detail` a server error carries, or the error's own message. */
function detailOf(error) {
  const text = String((error && error.message) || error || "");
  const start = text.indexOf("{");
  if (start >= 0) {
    try {
      const body = JSON.parse(text.slice(start));
      if (body && typeof body.detail === "string") return body.detail;
      if (body && typeof body.message === "string") return body.message;
    } catch (_) {
      // not JSON: keep the text
    }
  }
  return text;
}

/** One sentence for what went wrong, naming the server when it could not be reached. */
export function sentenceFor(error, doing) {
  if (error && error.name === "AbortError") return `${doing} was stopped.`;
  const text = detailOf(error);
  // The SDK reconnects a broken run stream a few times (about 20 s) before giving up.
  const lostStream = Boolean(error && error.name === "MaxReconnectAttemptsError");
  const unreachable =
    lostStream ||
    error instanceof TypeError ||
    /Failed to fetch|NetworkError|network error|ECONNREFUSED|fetch failed|Load failed/i.test(text);
  if (unreachable) {
    return `The crag server at ${window.location.origin} is not answering, so ${doing.toLowerCase()} failed. Is it running (make serve)?`;
  }
  const status = error && (error.status || (error.response && error.response.status));
  const reason = text.replace(/^HTTP \d+:?\s*/, "").trim() || "no reason given";
  return status
    ? `${doing} failed: the server answered ${status}: ${reason}`
    : `${doing} failed: ${reason}`;
}

/** The assistant of graph `graphId` (the server creates one per graph). */
export async function assistantFor(client, graphId) {
  const found = await client.assistants.search({ graphId, limit: 1 });
  if (!found.length) throw new Error(`this server has no ${graphId} graph`);
  return found[0].assistant_id;
}

/** The method's thresholds as the server's operator set them. */
export async function fetchMethod() {
  const response = await fetch("api/method");
  if (!response.ok) throw new Error(`HTTP ${response.status}: ${await response.text()}`);
  return response.json();
}

/** Store one file on the server (POST api/uploads): its server path, or an error sentence. */
export async function uploadFile(file) {
  const response = await fetch(`api/uploads?name=${encodeURIComponent(file.name)}`, {
    method: "POST",
    headers: { "Content-Type": "application/octet-stream", [CSRF_HEADER]: csrf },
    body: file,
  });
  const body = await response.json().catch(() => ({}));
  if (!response.ok) {
    const error = new Error(body.detail || `HTTP ${response.status}`);
    error.status = response.status;
    throw error;
  }
  return body;
}

/** The address of a cited document's file on the server, or null when it does not share it. */
export async function documentFileUrl(source) {
  const url = `api/documents?source=${encodeURIComponent(source)}`;
  const response = await fetch(url, { method: "HEAD" });
  return response.ok ? url : null;
}

export const FEEDBACK_PATH = "/crag/feedback";

/** One call of the server's JSON API: its body, or an Error with its status and sentence. */
export async function jsonCall(url, init = {}) {
  const response = await fetch(url, { cache: "no-store", ...init });
  const body = await response.json().catch(() => ({}));
  if (!response.ok) {
    const error = new Error(body.detail || `HTTP ${response.status}`);
    error.status = response.status;
    throw error;
  }
  return body;
}

/**
 * Store the signed-in person's feedback on one answer (POST /crag/feedback): the record. Given
 * again on the same run, it replaces theirs.
 */
export async function sendFeedback(feedback) {
  return jsonCall(FEEDBACK_PATH, {
    method: "POST", headers: { "Content-Type": "application/json", [CSRF_HEADER]: csrf }, body: JSON.stringify(feedback),
  });
}

/** The signed-in person's feedback records on one thread. */
export async function threadFeedback(threadId) {
  return (await jsonCall(`${FEEDBACK_PATH}?thread_id=${encodeURIComponent(threadId)}`)).feedback || [];
}

/** Remove one of the signed-in person's feedback records. */
export async function removeFeedback(feedbackId) {
  return jsonCall(`${FEEDBACK_PATH}/${encodeURIComponent(feedbackId)}`, { method: "DELETE", headers: { [CSRF_HEADER]: csrf } });
}
