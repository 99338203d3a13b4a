/**
 * One message on screen: its data and the element that shows it.
 *
 * The rule this module keeps: a message element is always rebuilt from its data (never patched
 * from a delta), so what is shown is exactly the accumulated, sanitized text. The data records
 * what the server said; the view picks the restored text (what the user sees) or the model's
 * text (with tokens) depending on the mode; how a reply ended is said in words
 * (message_data.js), and the buttons under it act through the conversation. Test hooks (`data-testid`, `data-role`,
 * `data-message-id`, `data-status`, `data-state`) are documented in docs/ui.md.
 */

import {
  knownValues, markRedactions, markRestored, markTokens, maskedFragment, maskedRanges,
  modelTextFromMasked, prettyArguments, renderMarkdown, renderModelMarkdown, tokenizedFragment,
} from './render.js';
import { icon } from './icons.js';
import {
  describeState, replyEnded, replyFailed, shiftSpans, splitComposed,
} from './message_data.js';

export { knownValues };
export {
  FINAL_STATUSES, applyDelta, describeState, messageFromServer, newMessage, replyEnded,
  replyFailed, splitComposed,
} from './message_data.js';

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
