/**
 * The conversation list in the sidebar.
 *
 * The rule this module keeps: the list shows what the server has, newest first, under the
 * headings Today, This week (the six days before today) and Older, by when each was last
 * updated, in the browser's own time zone; a rename or delete changes the screen only after
 * the server agreed, and a failure leaves the item as it was with a message. Deleting asks
 * for an inline confirmation first, because it also deletes the conversation's vault and
 * cannot be undone.
 */

import { api } from './api.js';
import { icon, iconButton } from './icons.js';

export const UNTITLED = 'New chat';

const DAY_MS = 24 * 60 * 60 * 1000;

/** `today`, `week` or `older` for an ISO time (server times are UTC unless they say so). */
export function dateGroup(iso, now = new Date()) {
  const when = parseTime(iso);
  if (when === null) return 'older';
  const startOfToday = new Date(now.getFullYear(), now.getMonth(), now.getDate()).getTime();
  if (when.getTime() >= startOfToday) return 'today';
  if (when.getTime() >= startOfToday - 6 * DAY_MS) return 'week';
  return 'older';
}

export function parseTime(iso) {
  if (typeof iso !== 'string' || iso === '') return null;
  const zoned = /([zZ]|[+-]\d\d:?\d\d)$/.test(iso) ? iso : `${iso}Z`;
  const when = new Date(zoned);
  return Number.isNaN(when.getTime()) ? null : when;
}

/** A short date for the list: the time today, the weekday this week, else the date. */
export function shortDate(iso, now = new Date()) {
  const when = parseTime(iso);
  if (when === null) return '';
  const group = dateGroup(iso, now);
  if (group === 'today') return when.toLocaleTimeString([], { hour: '2-digit', minute: '2-digit' });
  if (group === 'week') return when.toLocaleDateString([], { weekday: 'short' });
  const sameYear = when.getFullYear() === now.getFullYear();
  return when.toLocaleDateString([], sameYear
    ? { day: 'numeric', month: 'short' } : { day: 'numeric', month: 'short', year: 'numeric' });
}

const GROUP_TITLES = { today: 'Today', week: 'This week', older: 'Older' };

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
    this.items = items.map((c) => ({
      id: String(c.id),
      title: c.title ?? '',
      updatedAt: c.updated_at ?? c.created_at ?? null,
      shared: c.shared === true,
      owner: typeof c.owner === 'string' ? c.owner : null,
    }));
    this.render();
  }

  /** Add or update one conversation, moving it to the top (it is the newest). */
  upsert(id, title) {
    const key = String(id);
    const existing = this.items.find((c) => c.id === key);
    this.items = this.items.filter((c) => c.id !== key);
    this.items.unshift({
      ...existing,
      id: key,
      title: title ?? existing?.title ?? '',
      updatedAt: new Date().toISOString(),
    });
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
    for (const li of this.list.querySelectorAll('[data-testid="conversation"]')) {
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
    return [...this.list.querySelectorAll('[data-testid="conversation"]')]
      .find((li) => li.dataset.conversationId === String(id)) ?? null;
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
    const rows = [];
    let group = null;
    const now = new Date();
    for (const c of this.items) {
      const g = dateGroup(c.updatedAt, now);
      if (g !== group) {
        group = g;
        const head = document.createElement('li');
        head.className = 'conv-group';
        head.setAttribute('role', 'presentation');
        head.setAttribute('data-testid', 'conversation-group');
        head.dataset.group = g;
        head.textContent = GROUP_TITLES[g];
        rows.push(head);
      }
      rows.push(this.renderItem(c, now));
    }
    this.list.replaceChildren(...rows);
    this.setActive(this.activeId);
    if (focusedId) this.itemElement(focusedId)?.querySelector('.conv-link')?.focus();
    this.list.closest('nav')?.classList.toggle('is-empty', this.items.length === 0);
  }

  renderItem(conversation, now = new Date()) {
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

    const date = document.createElement('time');
    date.className = 'conv-date';
    date.setAttribute('data-testid', 'conversation-date');
    date.dateTime = parseTime(conversation.updatedAt)?.toISOString() ?? '';
    date.textContent = shortDate(conversation.updatedAt, now);

    const actions = document.createElement('div');
    actions.className = 'conv-actions';
    const rename = iconButton('pencil', 'Rename');
    const remove = iconButton('trash', 'Delete');
    rename.addEventListener('click', () => this.startRename(li, conversation));
    remove.addEventListener('click', () => this.confirmDelete(li, conversation));
    actions.append(rename, remove);
    li.append(link, date, actions);
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
