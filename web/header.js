/**
 * The conversation header's controls: the model picker and the export menu.
 *
 * The rules this module keeps: the models offered are the server's (`GET /api/models`); the
 * picker shows the open conversation's model, and a change is kept per conversation
 * (`PATCH /api/conversations/{id}` with `{model}`) and only shown once the server agreed; a
 * new chat's choice goes with its first message. Without the route (an older server) the
 * picker stays hidden and messages name no model. Export links are the server's export route
 * for the open conversation: the file is made and named by the server, so nothing of the
 * conversation is put into a URL or a file name here.
 */

import { api } from './api.js';

export class ModelPicker extends EventTarget {
  /** Events: `error` {message}. */
  constructor({ wrapper, select }) {
    super();
    this.wrapper = wrapper;
    this.select = select;
    this.models = [];
    this.defaultId = null;
    this.conversationId = null;
    this.conversationModel = null;
    this.draftModel = null; // a new chat's choice, before it exists
    select.addEventListener('change', () => this.changed());
  }

  async load() {
    let answer = null;
    try {
      answer = await api.models();
    } catch {
      answer = null;
    }
    const models = Array.isArray(answer?.models) ? answer.models : [];
    this.models = models
      .filter((m) => m && typeof m.id === 'string')
      .map((m) => ({ id: m.id, label: typeof m.label === 'string' && m.label ? m.label : m.id }));
    this.defaultId = typeof answer?.default === 'string' ? answer.default : this.models[0]?.id ?? null;
    this.select.replaceChildren(...this.models.map((m) => {
      const option = document.createElement('option');
      option.value = m.id;
      option.textContent = m.label;
      return option;
    }));
    this.wrapper.hidden = this.models.length === 0;
    this.render();
  }

  /** The model a message sent now should name (null: let the server decide). */
  current() {
    if (this.models.length === 0) return null;
    if (this.conversationId === null) return this.draftModel ?? this.defaultId;
    return this.conversationModel ?? this.defaultId;
  }

  label(id) {
    return this.models.find((m) => m.id === id)?.label ?? id;
  }

  /** The open conversation changed (null: a new chat) and its model, if the server said. */
  show(conversationId, model) {
    this.conversationId = conversationId;
    this.conversationModel = typeof model === 'string' ? model : null;
    if (conversationId === null) this.draftModel = null;
    this.render();
  }

  /** A new chat became a conversation: its model is the one it was started with. */
  created(conversationId) {
    this.conversationModel = this.draftModel ?? this.conversationModel;
    this.conversationId = conversationId;
    this.draftModel = null;
  }

  render() {
    const id = this.current();
    if (id !== null) {
      if (!this.models.some((m) => m.id === id)) {
        // A model the server no longer offers: still shown, as what this conversation used.
        const option = document.createElement('option');
        option.value = id;
        option.textContent = `${id} (not offered)`;
        option.disabled = true;
        this.select.append(option);
      }
      this.select.value = id;
    }
    this.select.title = id === null ? '' : `Model: ${this.label(id)}`;
  }

  async changed() {
    const id = this.select.value;
    if (this.conversationId === null) {
      this.draftModel = id;
      this.render();
      return;
    }
    const conversationId = this.conversationId;
    this.select.disabled = true;
    try {
      await api.patchConversation(conversationId, { model: id });
      if (conversationId === this.conversationId) this.conversationModel = id;
    } catch (error) {
      this.dispatchEvent(new CustomEvent('error', { detail: { message: `Could not switch the model: ${error.message}` } }));
    } finally {
      this.select.disabled = false;
      this.render();
    }
  }
}

export class ExportMenu {
  constructor({ button, items, markdown, json }) {
    this.button = button;
    this.items = items;
    this.markdown = markdown;
    this.json = json;
    button.addEventListener('click', () => (items.hidden ? this.openMenu() : this.closeMenu()));
    for (const link of [markdown, json]) link.addEventListener('click', () => this.closeMenu());
    document.addEventListener('click', (event) => {
      if (!items.hidden && !button.parentElement.contains(event.target)) this.closeMenu();
    });
    items.addEventListener('keydown', (event) => {
      if (event.key === 'Escape') { this.closeMenu(); button.focus(); }
    });
    this.show(null);
  }

  show(conversationId) {
    const none = conversationId === null;
    this.button.disabled = none;
    this.markdown.href = none ? '#' : api.exportPath(conversationId, 'md');
    this.json.href = none ? '#' : api.exportPath(conversationId, 'json');
    if (none) this.closeMenu();
  }

  openMenu() {
    this.items.hidden = false;
    this.button.setAttribute('aria-expanded', 'true');
    this.markdown.focus();
  }

  closeMenu() {
    this.items.hidden = true;
    this.button.setAttribute('aria-expanded', 'false');
  }
}
