/**
 * Message data: what the server said about a message, and what the page makes of it.
 *
 * The rules this module keeps: a message's data is built only from the server's fields (HTTP
 * or frames), each checked for its type; how a reply ended is told from the stored `status`,
 * `finish_reason` and `ended_by` and what this page saw (a Stop it sent, a lost connection),
 * so stopped by you, the model failing, a lost connection and a block never share one state,
 * and a reload says the same; a composed message is split into its typed text and documents
 * exactly by the server's rule (docs/protocol.md, "The composed message"). Pure, no DOM.
 */

export const FINAL_STATUSES = new Set(['complete', 'incomplete', 'blocked']);

/** Fresh message data. `toolCalls` is a list of {callId, name, args}. */
export function newMessage(fields) {
  return {
    id: null,
    role: 'assistant',
    text: '',
    reasoning: '',
    toolCalls: [],
    masked: [],
    status: 'complete',
    finishReason: null,
    error: null,
    model: null, // the model view's copy of this message (tokens), when loaded
    modelId: null, // the LLM that wrote a reply
    parentId: null,
    attachments: [],
    createdAt: null,
    seq: 0, // the last `seq` seen of a streaming reply
    endedBy: null, // who stopped a reply early: `user` (Stop) or `server` (shut down)
    moderationCategory: null, // why the team's policy moderator blocked a reply
    stoppedByYou: false,
    connectionLost: false,
    ...fields,
  };
}

/** Message data from `GET /api/conversations/{id}` (either view). */
export function messageFromServer(msg) {
  return newMessage({
    id: msg.id == null ? null : String(msg.id),
    role: msg.role === 'user' ? 'user' : 'assistant',
    text: typeof msg.text === 'string' ? msg.text : '',
    reasoning: typeof msg.reasoning === 'string' ? msg.reasoning : '',
    toolCalls: (Array.isArray(msg.tool_calls) ? msg.tool_calls : []).map((c) => ({
      callId: String(c.call_id ?? ''),
      name: String(c.name ?? ''),
      args: c.arguments ?? '',
    })),
    masked: Array.isArray(msg.masked) ? msg.masked : [],
    status: typeof msg.status === 'string' ? msg.status : 'complete',
    finishReason: msg.finish_reason ?? null,
    modelId: typeof msg.model === 'string' ? msg.model : null,
    parentId: msg.parent_id == null ? null : String(msg.parent_id),
    attachments: Array.isArray(msg.attachments) ? msg.attachments : [],
    createdAt: typeof msg.created_at === 'string' ? msg.created_at : null,
    endedBy: msg.ended_by === 'user' || msg.ended_by === 'server' ? msg.ended_by : null,
    moderationCategory: typeof msg.moderation_category === 'string' ? msg.moderation_category : null,
  });
}

/** Apply one `assistant_delta` frame to message data. */
export function applyDelta(data, frame) {
  const text = typeof frame.text === 'string' ? frame.text : '';
  if (frame.channel === 'reasoning') {
    data.reasoning += text;
  } else if (frame.channel === 'tool_call') {
    const callId = String(frame.call_id ?? '');
    let call = data.toolCalls.find((c) => c.callId === callId);
    if (!call) {
      call = { callId, name: '', args: '' };
      data.toolCalls.push(call);
    }
    if (frame.name) call.name = String(frame.name);
    call.args = String(call.args) + text;
  } else if (frame.channel === 'content' || frame.channel == null) {
    data.text += text;
  }
  // Any other channel is not part of the protocol this page knows: it is not shown as content.
}

// What the page says about how a reply ended. `data-state` names it for tests and styles.
const BLOCKED_REASON = 'It held text that may not be shown here (a value or a forbidden term '
  + 'the model wrote), so the output guard stopped it.';

/**
 * How a message ended, in words: `{state, label, detail}`, or null when there is nothing
 * to say. From the stored status and finish reason, and what this page saw itself.
 */
export function describeState(data) {
  if (data.role === 'user') {
    return data.status === 'failed' ? { state: 'not-sent', label: 'Not sent.' } : null;
  }
  if (data.status === 'streaming') {
    return data.connectionLost
      ? { state: 'connection-lost', label: 'Connection lost: this reply carries on at the server and resumes when the page is back online.' }
      : null;
  }
  if (data.status === 'blocked' && data.moderationCategory) {
    return {
      state: 'blocked-by-policy',
      label: `Blocked by this team's policy: ${data.moderationCategory}.`,
      detail: 'The policy check did not allow this reply; nothing after that point was shown.',
    };
  }
  if (data.status === 'blocked') {
    return { state: 'blocked', label: 'Blocked by the output guard.', detail: BLOCKED_REASON };
  }
  const reason = data.finishReason;
  if (data.status === 'incomplete' && data.error?.code === 'moderation_failed') {
    return {
      state: 'policy-check-failed',
      label: 'The policy check failed, so the reply was stopped: nothing unchecked was shown.',
    };
  }
  if (data.status === 'incomplete') {
    if (reason === 'error' || data.error?.code?.startsWith?.('upstream_')) {
      return { state: 'model-failed', label: 'The model failed: this reply is incomplete.' };
    }
    if (data.endedBy === 'user' || (data.stoppedByYou && data.endedBy === null)) {
      return { state: 'stopped', label: 'Stopped by you.' };
    }
    if (data.endedBy === 'server') {
      return { state: 'interrupted', label: 'Interrupted: the server stopped while this reply was being written.' };
    }
    if (reason === 'length') {
      return { state: 'cut-off', label: 'Cut off: the reply reached its length limit.' };
    }
    return { state: 'stopped', label: 'Stopped before the end: this reply is incomplete.' };
  }
  if (reason === 'length') {
    return { state: 'cut-off', label: 'Cut off: the reply reached its length limit.' };
  }
  return null;
}

/** Whether a reply may be retried (it failed) or regenerated (it ended). */
export function replyEnded(data) {
  return data.role === 'assistant' && FINAL_STATUSES.has(data.status);
}

export function replyFailed(data) {
  return replyEnded(data) && (data.status !== 'complete' || data.finishReason === 'error')
    && !(data.status === 'incomplete' && (data.endedBy === 'user' || data.finishReason === 'length'));
}

/**
 * A composed message (docs/protocol.md, "The composed message"): where its typed text ends
 * and where each document's name and text are, as UTF-16 offsets; null without documents or
 * when the text does not hold them (the whole text is then shown as it is). The fence length
 * and count come from the message's `attachments`: the last headers with that fence are the
 * documents', whatever the typed text holds.
 */
export function splitComposed(text, attachments) {
  const docs = Array.isArray(attachments) ? attachments : [];
  const fence = docs.length > 0 ? Number(docs[0].fence) : 0;
  if (docs.length === 0 || !Number.isInteger(fence) || fence < 3 || fence > 1000) return null;
  const mark = '='.repeat(fence);
  const headers = [...text.matchAll(new RegExp(`^${mark} document (\\d+): (.*) ${mark}\n`, 'gm'))]
    .slice(-docs.length);
  if (headers.length !== docs.length) return null;
  const documents = [];
  for (let n = 0; n < headers.length; n += 1) {
    const header = headers[n];
    const bodyStart = header.index + header[0].length;
    const endMark = `\n${mark} end of document ${header[1]} ${mark}`;
    const stop = n + 1 < headers.length ? headers[n + 1].index - 2 : text.length;
    const end = text.lastIndexOf(endMark, stop);
    if (end < bodyStart) return null;
    const nameStart = header.index + mark.length + ` document ${header[1]}: `.length;
    documents.push({ nameStart, nameEnd: nameStart + header[2].length, start: bodyStart, end });
  }
  const first = headers[0].index;
  const typedEnd = first >= 2 && text.slice(first - 2, first) === '\n\n' ? first - 2 : 0;
  return { typedEnd, documents };
}

/** The masked spans inside [start, end) of `text` (UTF-16), as offsets into that slice. */
export function shiftSpans(text, masked, start, end) {
  const from = [...text.slice(0, start)].length;
  const to = from + [...text.slice(start, end)].length;
  return (Array.isArray(masked) ? masked : [])
    .filter((m) => m && m.start >= from && m.end <= to)
    .map((m) => ({ ...m, start: m.start - from, end: m.end - from }));
}
