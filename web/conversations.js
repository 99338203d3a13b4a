/**
 * The conversation list in the sidebar.
 *
 * The rule this module keeps: the list shows what the server has, newest first; a rename or
 * delete changes the screen only after the server agreed, and a failure leaves the item as it
 * was with a message. Deleting asks for an inline confirmation first, because it also deletes
 * the conversation's vault and cannot be undone.
 */

import { api } from './api.js';
import { icon, iconButton } from './icons.js';

export const UNTITLED = 'New chat';

export class ConversationList extends EventTarget {
  /** Events: `deleted` {id}, `renamed` {id, title}, `error` {message}. */
  constructor(listElement) {
    super();
    this.list = listElement;
    this.items = [];
    this.activeId = null;
    this.streaming = new Set();
  }

  async reload() {
    this.setItems(await api.listConversations());
  }

  setItems(items) {
    this.items = items.map((c) => ({ id: String(c.id), title: c.title ?? '' }));
    this.render();
  }

  /** Add or update one conversation, moving it to the top (it is the newest). */
  upsert(id, title) {
    const key = String(id);
    const existing = this.items.find((c) => c.id === key);
    this.items = this.items.filter((c) => c.id !== key);
    this.items.unshift({ id: key, title: title ?? existing?.title ?? '' });
    this.render();
  }

  /** Update a title in place (no reordering); unknown ids are ignored. */
  setTitle(id, title) {
    const item = this.items.find((c) => c.id === String(id));
    if (!item || typeof title !== 'string' || item.title === title) return;
    item.title = title;
    const link = this.itemElement(id)?.querySelector('.conv-link');
    if (link) {
      link.textContent = title || UNTITLED;
      link.title = title || UNTITLED;
    }
  }

  titleOf(id) {
    return this.items.find((c) => c.id === String(id))?.title || UNTITLED;
  }

  has(id) {
    return this.items.some((c) => c.id === String(id));
  }

  setActive(id) {
    this.activeId = id == null ? null : String(id);
    for (const li of this.list.children) {
      const active = li.dataset.conversationId === this.activeId;
      li.classList.toggle('active', active);
      const link = li.querySelector('.conv-link');
      if (active) link?.setAttribute('aria-current', 'page');
      else link?.removeAttribute('aria-current');
    }
  }

  setStreaming(id, streaming) {
    if (streaming) this.streaming.add(String(id));
    else this.streaming.delete(String(id));
    const li = this.itemElement(id);
    li?.classList.toggle('streaming', streaming);
  }

  itemElement(id) {
    return [...this.list.children].find((li) => li.dataset.conversationId === String(id)) ?? null;
  }

  /** A rename or delete confirmation is open: re-rendering now would throw it away. */
  get editing() {
    return this.list.querySelector('.conv-title-input, .conv-confirm') !== null;
  }

  render() {
    if (this.editing) {
      this.renderDeferred = true;
      return;
    }
    this.renderDeferred = false;
    const focusedId = document.activeElement?.closest?.('[data-testid="conversation"]')
      ?.dataset.conversationId;
    this.list.replaceChildren(...this.items.map((c) => this.renderItem(c)));
    this.setActive(this.activeId);
    if (focusedId) this.itemElement(focusedId)?.querySelector('.conv-link')?.focus();
    this.list.closest('nav')?.classList.toggle('is-empty', this.items.length === 0);
  }

  renderItem(conversation) {
    const li = document.createElement('li');
    li.className = 'conv';
    li.setAttribute('data-testid', 'conversation');
    li.dataset.conversationId = conversation.id;
    li.classList.toggle('streaming', this.streaming.has(conversation.id));

    const link = document.createElement('a');
    link.className = 'conv-link';
    link.href = `#/c/${encodeURIComponent(conversation.id)}`;
    link.textContent = conversation.title || UNTITLED;
    link.title = conversation.title || UNTITLED;

    const actions = document.createElement('div');
    actions.className = 'conv-actions';
    const rename = iconButton('pencil', 'Rename');
    const remove = iconButton('trash', 'Delete');
    rename.addEventListener('click', () => this.startRename(li, conversation));
    remove.addEventListener('click', () => this.confirmDelete(li, conversation));
    actions.append(rename, remove);
    li.append(link, actions);
    return li;
  }

  startRename(li, conversation) {
    const link = li.querySelector('.conv-link');
    const input = document.createElement('input');
    input.className = 'conv-title-input';
    input.type = 'text';
    input.maxLength = 200;
    input.value = conversation.title;
    input.setAttribute('aria-label', 'Conversation title');
    let done = false;
    const finish = async (save) => {
      if (done) return;
      done = true;
      const title = input.value.trim();
      if (!save || title === '' || title === conversation.title) {
        input.replaceWith(link);
        link.focus();
        return;
      }
      input.disabled = true;
      try {
        await api.renameConversation(conversation.id, title);
        conversation.title = title;
        link.textContent = title;
        link.title = title;
        this.dispatchEvent(new CustomEvent('renamed', { detail: { id: conversation.id, title } }));
      } catch (error) {
        this.fail(`Could not rename: ${error.message}`);
      }
      input.replaceWith(link);
      link.focus();
      if (this.renderDeferred) this.render();
    };
    input.addEventListener('keydown', (event) => {
      if (event.key === 'Enter') { event.preventDefault(); finish(true); }
      if (event.key === 'Escape') { event.preventDefault(); finish(false); }
    });
    input.addEventListener('blur', () => finish(true));
    link.replaceWith(input);
    input.focus();
    input.select();
  }

  confirmDelete(li, conversation) {
    const actions = li.querySelector('.conv-actions');
    const confirmBox = document.createElement('div');
    confirmBox.className = 'conv-confirm';
    const label = document.createElement('span');
    label.textContent = 'Delete?';
    const yes = document.createElement('button');
    yes.type = 'button';
    yes.className = 'danger small';
    yes.setAttribute('aria-label', 'Confirm delete');
    yes.append(icon('trash', 14), ' Delete');
    const no = document.createElement('button');
    no.type = 'button';
    no.className = 'small';
    no.textContent = 'Cancel';
    const restore = () => {
      confirmBox.replaceWith(actions);
      li.classList.remove('confirming');
      actions.querySelector('[aria-label="Delete"]')?.focus();
      if (this.renderDeferred) this.render();
    };
    no.addEventListener('click', restore);
    confirmBox.addEventListener('keydown', (event) => {
      if (event.key === 'Escape') { event.preventDefault(); restore(); }
    });
    yes.addEventListener('click', async () => {
      yes.disabled = true;
      no.disabled = true;
      try {
        await api.deleteConversation(conversation.id);
      } catch (error) {
        if (error.status !== 404) {
          this.fail(`Could not delete: ${error.message}`);
          restore();
          yes.disabled = false;
          no.disabled = false;
          return;
        }
      }
      this.items = this.items.filter((c) => c.id !== conversation.id);
      li.remove();
      this.render();
      this.dispatchEvent(new CustomEvent('deleted', { detail: { id: conversation.id } }));
    });
    confirmBox.append(label, yes, no);
    li.classList.add('confirming');
    actions.replaceWith(confirmBox);
    yes.focus();
  }

  fail(message) {
    this.dispatchEvent(new CustomEvent('error', { detail: { message } }));
  }
}
