// One run streamed through the SDK: tokens as they come, the path, the final state.

const STREAM_MODES = ["messages-tuple", "updates", "values", "custom"];

function textOf(content) {
  if (typeof content === "string") return content;
  if (Array.isArray(content)) return content.map((part) => (typeof part === "string" ? part : part.text || "")).join("");
  return "";
}

/** A progress event as a line: "retrieve: embedding 512 of 10483". */
function progressLine(data) {
  const what = [data.node, data.event].filter(Boolean).join(": ");
  const count = typeof data.done === "number" && typeof data.total === "number" ? ` ${data.done} of ${data.total}` : "";
  return `${what || "working"}${count}`;
}

/**
 * Stream a run of `assistantId` on `threadId` (null: a run without a thread).
 * Calls onRunId(runId) once the server names the run, onToken(text) for each generator token and
 * onProgress(line) for each progress event (a store being filled, strips being scored).
 * Resolves with {values, path, searchQuery, runId}; throws the run's error as an Error.
 */
export async function streamRun(client, { threadId, assistantId, input, context, signal, ifNotExists, onRunId, onToken, onProgress }) {
  const result = { values: null, path: [], searchQuery: null, runId: null };
  const stream = client.runs.stream(threadId, assistantId, {
    input, context, streamMode: STREAM_MODES, signal, onDisconnect: "cancel", ifNotExists,
  });
  for await (const chunk of stream) {
    const data = chunk.data;
    if (chunk.event === "metadata" && data && data.run_id && !result.runId) {
      result.runId = data.run_id;
      if (onRunId) onRunId(data.run_id);
    } else if (chunk.event === "messages" || chunk.event === "messages-tuple") {
      const [message, metadata] = data;
      const text = textOf(message && message.content);
      if (text && metadata && metadata.langgraph_node === "generate" && onToken) onToken(text);
    } else if (chunk.event === "updates" && data) {
      for (const [node, update] of Object.entries(data)) {
        if (node.startsWith("__")) continue;
        result.path.push(node);
        if (update && typeof update.search_query === "string" && update.search_query) result.searchQuery = update.search_query;
      }
    } else if (chunk.event === "custom" && data && onProgress) {
      onProgress(progressLine(data));
    } else if (chunk.event === "values" && data) {
      result.values = data;
    } else if (chunk.event === "error") {
      const error = new Error((data && (data.message || data.error)) || "the run failed");
      error.runFailed = true;
      throw error;
    }
  }
  return result;
}
