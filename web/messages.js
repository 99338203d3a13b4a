/**
 * One message on screen: its data and the element that shows it.
 *
 * The rule this module keeps: a message element is always rebuilt from its data (never patched
 * from a delta), so what is shown is exactly the accumulated, sanitized text. The data records
 * what the server said; the view picks the restored text (what the user sees) or the model's
 * text (with tokens) depending on the mode. How a reply ended is told apart from what the
 * server stored (`status`, `finish_reason`) and what this page saw happen (a Stop it sent, a
 * connection it lost), so stopped by you, the model failing and a lost connection never share
 * one badge, and a reload shows the same state. Test hooks (`data-testid`, `data-role`,
 * `data-message-id`, `data-status`, `data-state`) are documented in docs/ui.md.
 */

import {
  knownValues, markRedactions, markRestored, markTokens, maskedFragment, maskedRanges,
  modelTextFromMasked, prettyArguments, renderMarkdown, renderModelMarkdown, tokenizedFragment,
} from './render.js';
import { icon } from './icons.js';

export { knownValues };

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
function shiftSpans(text, masked, start, end) {
  const from = [...text.slice(0, start)].length;
  const to = from + [...text.slice(start, end)].length;
  return (Array.isArray(masked) ? masked : [])
    .filter((m) => m && m.start >= from && m.end <= to)
    .map((m) => ({ ...m, start: m.start - from, end: m.end - from }));
}

function el(tag, className, text) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  if (text !== undefined) node.textContent = text;
  return node;
}

function actionButton(label, text, onClick, className = 'msg-action') {
  const button = el('button', className, text);
  button.type = 'button';
  button.setAttribute('aria-label', label);
  button.addEventListener('click', onClick);
  return button;
}

/** Copy to the clipboard; `done(ok)` says whether it worked. */
function copyText(text, done) {
  const clipboard = navigator.clipboard;
  if (!clipboard) { done(false); return; }
  clipboard.writeText(text).then(() => done(true), () => done(false));
}

/**
 * Add copy buttons to code blocks. The label is an aria-label (message text stays clean);
 * the button is always shown on touch screens, where there is no hover (style.css).
 */
function addCodeCopyButtons(root) {
  for (const pre of root.querySelectorAll('pre')) {
    const button = el('button', 'copy-code');
    button.type = 'button';
    button.setAttribute('aria-label', 'Copy code');
    button.title = 'Copy code';
    button.append(icon('copy', 16), icon('check', 16));
    button.addEventListener('click', () => {
      const code = pre.querySelector('code') ?? pre;
      copyText(code.textContent ?? '', (ok) => {
        if (!ok) return;
        button.classList.add('copied');
        setTimeout(() => button.classList.remove('copied'), 1200);
      });
    });
    pre.prepend(button);
  }
}

/** What a view may ask of the conversation it is in; every hook is optional. */
const NO_CONTEXT = {
  values: () => [],
  modelLabel: () => null,
  siblings: () => null,
  canAct: () => false,
  act: () => {},
};

export class MessageView {
  constructor(data, mode = 'restored', context = NO_CONTEXT) {
    this.data = data;
    this.mode = mode;
    this.context = { ...NO_CONTEXT, ...context };
    this.renderQueued = false;
    this.editor = null;
    this.element = el('article', `msg msg-${data.role}`);
    this.element.setAttribute('data-testid', 'message');
    this.element.dataset.role = data.role;
    this.content = el('div', data.role === 'user' ? 'bubble' : 'content md');
    this.content.setAttribute('data-testid', 'message-content');
    this.attachments = el('div', 'attachments');
    this.footer = el('div', 'msg-footer');
    if (data.role === 'assistant') {
      this.reasoning = null;
      this.tools = el('div', 'tool-calls');
      this.toolViews = new Map();
      this.element.append(this.tools, this.content, this.footer);
    } else {
      this.element.append(this.attachments, this.content, this.footer);
    }
    this.renderNow();
  }

  setMode(mode) {
    if (mode === this.mode) return;
    this.mode = mode;
    this.renderNow();
  }

  /** Re-render at the next animation frame; many deltas in one frame cost one render. */
  refresh() {
    if (this.renderQueued) return;
    this.renderQueued = true;
    requestAnimationFrame(() => {
      this.renderQueued = false;
      this.renderNow();
    });
  }

  renderNow() {
    const { data } = this;
    this.element.dataset.messageId = data.id ?? '';
    this.element.dataset.status = data.status;
    const state = describeState(data);
    this.element.dataset.state = state?.state ?? '';
    this.element.classList.toggle('model-mode', this.mode === 'model');
    if (data.role === 'user') this.renderUser();
    else this.renderAssistant();
    this.renderFooter(state);
  }

  renderUser() {
    const { data } = this;
    this.renderAttachments();
    if (this.editor) {
      if (this.content.firstChild !== this.editor) this.content.replaceChildren(this.editor);
      return;
    }
    const model = this.mode === 'model';
    const text = model ? data.model?.text ?? modelTextFromMasked(data.text, data.masked) : data.text;
    const split = splitComposed(text, data.attachments);
    if (split === null) {
      this.content.replaceChildren(model ? tokenizedFragment(text) : maskedFragment(text, data.masked));
      return;
    }
    // Documents sent with the message: the typed text, then each document folded away.
    const show = (start, end) => (model
      ? tokenizedFragment(text.slice(start, end))
      : maskedFragment(text.slice(start, end), shiftSpans(text, data.masked, start, end)));
    const parts = [show(0, split.typedEnd)];
    for (const doc of split.documents) {
      const box = el('details', 'document');
      box.setAttribute('data-testid', 'document');
      const summary = el('summary', 'document-name');
      summary.append(show(doc.nameStart, doc.nameEnd));
      const body = el('div', 'document-text');
      body.append(show(doc.start, doc.end));
      box.append(summary, body);
      parts.push(box);
    }
    this.content.replaceChildren(...parts);
  }

  /** Attached documents as chips: the name and how many of their values were masked. */
  renderAttachments() {
    // A stored message's documents show inside it (renderUser); chips are for the names
    // this page sent them with, before the server's copy is loaded.
    const items = (this.data.attachments ?? []).filter((a) => typeof a.name === 'string');
    const chips = items.map((a) => {
      const chip = el('span', 'attachment-chip');
      chip.setAttribute('data-testid', 'attachment');
      chip.append(el('span', 'attachment-name', String(a.name ?? 'document')));
      const n = Array.isArray(a.masked) ? new Set(a.masked.map((m) => m.token)).size : 0;
      if (n > 0) chip.append(el('span', 'attachment-masked', `${n} ${n === 1 ? 'value' : 'values'} masked`));
      return chip;
    });
    this.attachments.replaceChildren(...chips);
    this.attachments.hidden = chips.length === 0;
  }

  renderAssistant() {
    const { data } = this;
    const model = this.mode === 'model' ? data.model : null;
    const reasoning = model ? model.reasoning : data.reasoning;
    const toolCalls = model ? model.toolCalls : data.toolCalls;
    const text = model ? model.text : data.text;
    const render = model ? renderModelMarkdown : renderMarkdown;
    const values = model ? [] : this.context.values();

    if (reasoning) {
      if (!this.reasoning) {
        this.reasoning = el('details', 'reasoning');
        this.reasoning.setAttribute('data-testid', 'reasoning');
        this.reasoningSummary = el('summary');
        this.reasoningBody = el('div', 'reasoning-body md');
        this.reasoning.append(this.reasoningSummary, this.reasoningBody);
        this.element.prepend(this.reasoning);
      }
      const thinking = data.status === 'streaming' && !data.text && data.toolCalls.length === 0;
      this.reasoningSummary.textContent = thinking ? 'Thinking…' : 'Reasoning';
      const body = render(reasoning);
      markRestored(body, values);
      this.reasoningBody.replaceChildren(body);
    } else if (this.reasoning) {
      this.reasoning.remove();
      this.reasoning = null;
    }

    const seen = new Set();
    for (const call of toolCalls) {
      seen.add(call.callId);
      let view = this.toolViews.get(call.callId);
      if (!view) {
        view = el('div', 'tool-call');
        view.setAttribute('data-testid', 'tool-call');
        const head = el('div', 'tool-call-head');
        head.append(el('span', 'tool-call-label', 'Tool call'), el('code', 'tool-call-name'));
        const pre = el('pre', 'tool-call-args');
        pre.append(el('code'));
        view.append(head, pre);
        this.toolViews.set(call.callId, view);
        this.tools.append(view);
      }
      view.dataset.callId = call.callId;
      view.querySelector('.tool-call-name').textContent = call.name || '(unnamed tool)';
      const code = view.querySelector('.tool-call-args code');
      code.textContent = prettyArguments(call.args);
      markRedactions(code);
      if (model) markTokens(code);
      else markRestored(code, values);
    }
    for (const [callId, view] of this.toolViews) {
      if (!seen.has(callId)) {
        view.remove();
        this.toolViews.delete(callId);
      }
    }

    const fragment = render(text);
    markRestored(fragment, values);
    addCodeCopyButtons(fragment);
    this.content.replaceChildren(fragment);
  }

  /** "2 values masked; the model saw <EMAIL_1>, <PHONE_1>": each value once. */
  privacyNote() {
    const { data } = this;
    const tokens = [];
    for (const span of maskedRanges(data.text, data.masked)) {
      if (!tokens.includes(span.token)) tokens.push(span.token);
    }
    if (tokens.length === 0) return null;
    const note = el('span', 'privacy-note');
    const n = tokens.length;
    note.append(`${n} ${n === 1 ? 'value' : 'values'} masked; the model saw `);
    tokens.forEach((token, i) => {
      if (i > 0) note.append(', ');
      note.append(el('code', 'token-name', token));
    });
    return note;
  }

  renderFooter(state) {
    const { data } = this;
    const parts = [];
    if (data.status === 'streaming' && !data.text) {
      const typing = el('span', 'typing');
      typing.setAttribute('aria-label', 'The model is replying');
      typing.append(el('span'), el('span'), el('span'));
      parts.push(typing);
    }
    if (data.status === 'pending') parts.push(el('span', 'note', 'Sending…'));
    if (state) {
      const badge = el('span', `status-badge state-${state.state}`, state.label);
      badge.setAttribute('data-testid', 'message-state');
      badge.dataset.state = state.state;
      if (data.finishReason) badge.title = `finish reason: ${data.finishReason}`;
      parts.push(badge);
      if (state.detail) {
        const detail = el('span', 'state-detail', state.detail);
        detail.setAttribute('data-testid', 'message-state-detail');
        parts.push(detail);
      }
    }
    if (data.role === 'user') {
      const note = this.privacyNote();
      if (note) parts.push(note);
    }
    if (this.mode === 'model' && data.role === 'assistant' && !data.model) {
      parts.push(el('span', 'note', 'Shown restored: not in the model view yet.'));
    }
    if (data.error) {
      const error = el('span', 'msg-error');
      error.setAttribute('role', 'alert');
      error.setAttribute('data-testid', 'message-error');
      error.textContent = data.error.message
        ? `${data.error.message} (${data.error.code})` : `Error: ${data.error.code}`;
      parts.push(error);
    }
    const label = data.role === 'assistant' && data.modelId ? this.context.modelLabel(data.modelId) : null;
    if (label) {
      const model = el('span', 'msg-model', label);
      model.setAttribute('data-testid', 'message-model');
      model.title = 'the model that wrote this reply';
      parts.push(model);
    }
    const actions = this.actions();
    if (actions.childElementCount > 0) parts.push(actions);
    this.footer.replaceChildren(...parts);
    this.footer.hidden = parts.length === 0;
  }

  /** The buttons under a message: versions, copy, regenerate or retry, continue, edit. */
  actions() {
    const { data, context } = this;
    const bar = el('div', 'msg-actions');
    const siblings = data.id === null ? null : context.siblings(data);
    if (siblings && siblings.count > 1) {
      const nav = el('span', 'branch-nav');
      nav.setAttribute('data-testid', 'branch-nav');
      const prev = actionButton('Previous version', '‹', () => context.act('branch', data, -1), 'branch-button');
      const next = actionButton('Next version', '›', () => context.act('branch', data, 1), 'branch-button');
      prev.disabled = siblings.index === 0;
      next.disabled = siblings.index === siblings.count - 1;
      const position = el('span', 'branch-position', `${siblings.index + 1}/${siblings.count}`);
      position.setAttribute('data-testid', 'branch-position');
      nav.append(prev, position, next);
      bar.append(nav);
    }
    if (this.mode === 'model' || data.id === null) return bar;
    const able = context.canAct();
    if (data.role === 'assistant' && data.text && data.status !== 'streaming') {
      const copy = actionButton('Copy reply', 'Copy', () => {
        copyText(data.text, (ok) => {
          if (!ok) return;
          copy.textContent = 'Copied';
          setTimeout(() => { copy.textContent = 'Copy'; }, 1200);
        });
      });
      bar.append(copy);
    }
    if (replyEnded(data) && context.writable?.() !== false) {
      const failed = replyFailed(data);
      const again = failed
        ? actionButton('Retry', 'Retry', () => context.act('regenerate', data))
        : actionButton('Regenerate', 'Regenerate', () => context.act('regenerate', data));
      again.disabled = !able;
      bar.append(again);
      if (data.finishReason === 'length') {
        const more = actionButton('Continue', 'Continue', () => context.act('continue', data));
        more.disabled = !able;
        bar.append(more);
      }
    }
    if (data.role === 'user' && data.status === 'complete' && !this.editor
      && context.writable?.() !== false) {
      const edit = actionButton('Edit', 'Edit', () => this.startEdit());
      edit.disabled = !able;
      bar.append(edit);
    }
    return bar;
  }

  /** Edit a sent message in place: a new version of it goes out, the old one stays. */
  startEdit() {
    const form = el('form', 'edit-form');
    const box = el('textarea', 'edit-input');
    box.setAttribute('aria-label', 'Edit message');
    box.value = this.data.text;
    box.rows = Math.min(10, Math.max(2, this.data.text.split('\n').length));
    const save = el('button', 'primary small', 'Send');
    save.type = 'submit';
    save.setAttribute('aria-label', 'Send edited message');
    const cancel = el('button', 'small', 'Cancel');
    cancel.type = 'button';
    const buttons = el('div', 'edit-buttons');
    buttons.append(cancel, save);
    form.append(box, buttons);
    const close = () => {
      this.editor = null;
      this.element.classList.remove('editing');
      this.renderNow();
    };
    cancel.addEventListener('click', close);
    form.addEventListener('keydown', (event) => {
      if (event.key === 'Escape') { event.preventDefault(); close(); }
    });
    form.addEventListener('submit', (event) => {
      event.preventDefault();
      const text = box.value;
      if (!text.trim() || !this.context.canAct()) return;
      if (this.context.act('edit', this.data, text) !== false) close();
    });
    this.editor = form;
    this.element.classList.add('editing');
    this.renderNow();
    box.focus();
  }
}
