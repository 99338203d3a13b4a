/**
 * Settings: the colour theme, the user's custom instructions, a conversation's system prompt,
 * and, in the model view, both as the model got them.
 *
 * The rules this module keeps: the theme is one word in localStorage (`holdback-theme`), never
 * anything of the user's; instructions and prompts are the user's own text, read and written
 * only through the API (`/api/me/instructions`, `PATCH /api/conversations/{id}`), never kept
 * in the page's storage, and emptied from the dialogs when they close, so no value lingers in
 * the DOM. A dialog closes only once the server has agreed; a refusal is shown in it. In the
 * model view the instructions are shown tokenized, exactly as the server says the model got
 * them, with every token marked.
 */

import { api } from './api.js';
import { tokenizedFragment } from './render.js';

const THEME_KEY = 'holdback-theme';
const darkQuery = window.matchMedia('(prefers-color-scheme: dark)');

/** `light`, `dark` or `system` (no choice stored). */
export function storedTheme() {
  try {
    const value = window.localStorage.getItem(THEME_KEY);
    return value === 'light' || value === 'dark' ? value : 'system';
  } catch {
    return 'system';
  }
}

/** Whether the page is dark now (the choice, else the system). */
export function isDark() {
  const theme = storedTheme();
  return theme === 'dark' || (theme === 'system' && darkQuery.matches);
}

export function setTheme(theme) {
  try {
    if (theme === 'light' || theme === 'dark') window.localStorage.setItem(THEME_KEY, theme);
    else window.localStorage.removeItem(THEME_KEY);
  } catch {
    // Storage refused: the choice holds for this page only.
  }
  if (theme === 'light' || theme === 'dark') document.documentElement.dataset.theme = theme;
  else delete document.documentElement.dataset.theme;
  window.dispatchEvent(new CustomEvent('holdback:theme'));
}

/** The "Dark mode" toggle button: pressed when the page is dark. */
export function bindThemeToggle(button) {
  const sync = () => button.setAttribute('aria-pressed', String(isDark()));
  button.addEventListener('click', () => setTheme(isDark() ? 'light' : 'dark'));
  window.addEventListener('holdback:theme', sync);
  darkQuery.addEventListener('change', sync);
  sync();
}

/** A `<dialog>` whose form saves through `save()` and closes only when it worked. */
class FormDialog extends EventTarget {
  constructor({ dialog, form, cancel, error }) {
    super();
    this.dialog = dialog;
    this.form = form;
    this.error = error;
    this.busy = false;
    cancel.addEventListener('click', () => this.close());
    dialog.addEventListener('close', () => this.cleared());
    form.addEventListener('submit', async (event) => {
      event.preventDefault();
      if (this.busy) return;
      this.busy = true;
      this.showError('');
      try {
        await this.save();
        this.close();
      } catch (err) {
        this.showError(`Could not save: ${err.message}`);
      } finally {
        this.busy = false;
      }
    });
  }

  showError(message) {
    this.error.textContent = message;
    this.error.hidden = !message;
  }

  open() {
    this.showError('');
    if (!this.dialog.open) this.dialog.showModal();
  }

  close() {
    if (this.dialog.open) this.dialog.close();
    this.cleared(); // at once: the dialog's own `close` event comes a task later
  }

  /** The dialog closed: what it showed leaves the page. */
  cleared() {}
}

export class SettingsDialog extends FormDialog {
  constructor(elements) {
    super(elements);
    this.text = elements.text;
    this.radios = [...elements.form.querySelectorAll('input[name="theme"]')];
    this.loaded = null;
    for (const radio of this.radios) radio.addEventListener('change', () => setTheme(radio.value));
  }

  async open() {
    const theme = storedTheme();
    for (const radio of this.radios) radio.checked = radio.value === theme;
    this.text.value = '';
    this.text.disabled = true;
    super.open();
    try {
      const answer = await api.getInstructions();
      this.loaded = typeof answer?.text === 'string' ? answer.text : '';
      this.text.value = this.loaded;
      this.text.disabled = false;
      this.text.focus();
    } catch (err) {
      this.loaded = null;
      this.showError(err.status === 404
        ? 'This server does not keep custom instructions.'
        : `Could not load your instructions: ${err.message}`);
    }
  }

  async save() {
    if (this.loaded === null || this.text.value === this.loaded) return;
    await api.putInstructions(this.text.value);
    this.dispatchEvent(new CustomEvent('saved'));
  }

  cleared() {
    this.text.value = '';
    this.loaded = null;
  }
}

export class SystemPromptDialog extends FormDialog {
  constructor(elements) {
    super(elements);
    this.text = elements.text;
    this.conversationId = null;
    this.loaded = '';
  }

  /** Edit the prompt of a conversation; `current` is its prompt as the owner reads it. */
  openFor(conversationId, current) {
    this.conversationId = conversationId;
    this.loaded = typeof current === 'string' ? current : '';
    this.text.value = this.loaded;
    this.open();
    this.text.focus();
  }

  async save() {
    if (this.conversationId === null || this.text.value === this.loaded) return;
    const id = this.conversationId;
    const text = this.text.value;
    await api.patchConversation(id, { system_prompt: text });
    this.dispatchEvent(new CustomEvent('saved', { detail: { id, text } }));
  }

  cleared() {
    this.text.value = '';
    this.loaded = '';
  }
}

/**
 * The model view's opening block: the custom instructions and the system prompt, tokenized,
 * as `GET /api/conversations/{id}?view=model` gives them (each reply's `system`).
 */
export class SystemView {
  constructor(element) {
    this.element = element;
  }

  /**
   * `conversation.system`: the system text the last reply was asked with (the instructions
   * and the prompt, as the model got them); without one, the conversation's prompt alone.
   */
  show(conversation) {
    const parts = [];
    const asked = conversation?.system;
    const blocks = typeof asked === 'string' && asked.trim() !== ''
      ? [['What the model was told (custom instructions and system prompt)', asked, 'system-text']]
      : [['System prompt', conversation?.system_prompt, 'system-prompt']];
    for (const [label, text, testid] of blocks) {
      if (typeof text !== 'string' || text.trim() === '') continue;
      const block = document.createElement('div');
      block.className = 'system-block';
      block.setAttribute('data-testid', testid);
      const head = document.createElement('strong');
      head.textContent = label;
      const body = document.createElement('div');
      body.className = 'system-text';
      body.append(tokenizedFragment(text));
      block.append(head, body);
      parts.push(block);
    }
    this.element.replaceChildren(...parts);
    this.element.hidden = parts.length === 0;
  }
}
