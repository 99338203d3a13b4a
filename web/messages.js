/**
 * One message on screen: its data and the element that shows it.
 *
 * The rule this module keeps: a message element is always rebuilt from its data (never patched
 * from a delta), so what is shown is exactly the accumulated, sanitized text. The data records
 * what the server said; the view picks the restored text (what the user sees) or the model's
 * text (with tokens) depending on the mode. Test hooks (`data-testid`, `data-role`,
 * `data-message-id`, `data-status`) are documented in docs/ui.md and must not change.
 */

import {
  maskedFragment, modelTextFromMasked, prettyArguments, renderMarkdown, renderModelMarkdown,
  tokenizedFragment, markRedactions, markTokens,
} from './render.js';

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
    model: null,
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

const STATUS_NOTES = {
  incomplete: 'Stopped: this reply is incomplete.',
  blocked: 'Blocked by the output guard.',
  failed: 'Not sent.',
};

function el(tag, className, text) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  if (text !== undefined) node.textContent = text;
  return node;
}

/** Add copy buttons to code blocks; the label is an aria-label so message text stays clean. */
function addCodeCopyButtons(root) {
  for (const pre of root.querySelectorAll('pre')) {
    const button = el('button', 'copy-code');
    button.type = 'button';
    button.setAttribute('aria-label', 'Copy code');
    button.title = 'Copy code';
    button.addEventListener('click', () => {
      const code = pre.querySelector('code') ?? pre;
      navigator.clipboard?.writeText(code.textContent ?? '').then(() => {
        button.classList.add('copied');
        setTimeout(() => button.classList.remove('copied'), 1200);
      }, () => {});
    });
    pre.prepend(button);
  }
}

export class MessageView {
  constructor(data, mode = 'restored') {
    this.data = data;
    this.mode = mode;
    this.renderQueued = false;
    this.element = el('article', `msg msg-${data.role}`);
    this.element.setAttribute('data-testid', 'message');
    this.element.dataset.role = data.role;
    this.content = el('div', data.role === 'user' ? 'bubble' : 'content md');
    this.content.setAttribute('data-testid', 'message-content');
    this.footer = el('div', 'msg-footer');
    if (data.role === 'assistant') {
      this.reasoning = null;
      this.tools = el('div', 'tool-calls');
      this.toolViews = new Map();
      this.element.append(this.tools, this.content, this.footer);
    } else {
      this.element.append(this.content, this.footer);
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
    this.element.classList.toggle('model-mode', this.mode === 'model');
    if (data.role === 'user') this.renderUser();
    else this.renderAssistant();
    this.renderFooter();
  }

  renderUser() {
    const { data } = this;
    if (this.mode === 'model') {
      const text = data.model?.text ?? modelTextFromMasked(data.text, data.masked);
      this.content.replaceChildren(tokenizedFragment(text));
    } else {
      this.content.replaceChildren(maskedFragment(data.text, data.masked));
    }
  }

  renderAssistant() {
    const { data } = this;
    const model = this.mode === 'model' ? data.model : null;
    const reasoning = model ? model.reasoning : data.reasoning;
    const toolCalls = model ? model.toolCalls : data.toolCalls;
    const text = model ? model.text : data.text;
    const render = model ? renderModelMarkdown : renderMarkdown;

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
      this.reasoningBody.replaceChildren(render(reasoning));
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
    }
    for (const [callId, view] of this.toolViews) {
      if (!seen.has(callId)) {
        view.remove();
        this.toolViews.delete(callId);
      }
    }

    const fragment = render(text);
    addCodeCopyButtons(fragment);
    this.content.replaceChildren(fragment);
  }

  renderFooter() {
    const { data } = this;
    const parts = [];
    if (data.status === 'streaming' && !data.text) {
      const typing = el('span', 'typing');
      typing.setAttribute('aria-label', 'The model is replying');
      typing.append(el('span'), el('span'), el('span'));
      parts.push(typing);
    }
    if (data.status === 'pending') parts.push(el('span', 'note', 'Sending…'));
    const statusNote = STATUS_NOTES[data.status];
    if (statusNote) {
      const badge = el('span', `status-badge status-${data.status}`, statusNote);
      if (data.finishReason && data.status !== 'failed') badge.title = `finish reason: ${data.finishReason}`;
      parts.push(badge);
    }
    if (data.role === 'user' && data.masked.length > 0) {
      const note = el('span', 'privacy-note');
      const n = data.masked.length;
      note.append(`${n} ${n === 1 ? 'value' : 'values'} masked; the model saw `);
      data.masked.forEach((span, i) => {
        if (i > 0) note.append(', ');
        note.append(el('code', 'token-name', String(span.token ?? '')));
      });
      parts.push(note);
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
    if (data.role === 'assistant' && data.text && data.status !== 'streaming') {
      const copy = el('button', 'copy-message', 'Copy');
      copy.type = 'button';
      copy.setAttribute('aria-label', 'Copy reply');
      copy.addEventListener('click', () => {
        navigator.clipboard?.writeText(data.text).then(() => {
          copy.textContent = 'Copied';
          setTimeout(() => { copy.textContent = 'Copy'; }, 1200);
        }, () => {});
      });
      parts.push(copy);
    }
    this.footer.replaceChildren(...parts);
    this.footer.hidden = parts.length === 0;
  }
}
