/**
 * Search over the user's conversations, in the sidebar.
 *
 * The rules this module keeps: the query goes only to this server (`GET /api/search?q=`),
 * never into the page's address, its title or its storage; results are the server's, restored
 * for this viewer, and shown as text (the snippet through `textContent`, the query's matches
 * marked on text nodes). A result links to its conversation by id only. Typing waits a moment
 * before asking, and an answer to an older query is dropped.
 */

import { api } from './api.js';

const DEBOUNCE_MS = 250;

export class SearchBox extends EventTarget {
  /** Events: `open` {conversationId, messageId}, `active` {active}. */
  constructor({ input, results, list, status, titleOf }) {
    super();
    this.input = input;
    this.results = results;
    this.list = list;
    this.status = status;
    this.titleOf = titleOf;
    this.timer = null;
    this.asked = 0;
    input.addEventListener('input', () => this.schedule());
    input.addEventListener('keydown', (event) => {
      if (event.key === 'Escape') { event.preventDefault(); this.clear(); }
    });
  }

  get active() {
    return this.input.value.trim() !== '';
  }

  schedule() {
    clearTimeout(this.timer);
    if (!this.active) {
      this.clear();
      return;
    }
    this.timer = setTimeout(() => this.run(), DEBOUNCE_MS);
  }

  clear() {
    clearTimeout(this.timer);
    this.asked += 1;
    this.input.value = '';
    this.list.replaceChildren();
    this.status.textContent = '';
    this.results.hidden = true;
    this.dispatchEvent(new CustomEvent('active', { detail: { active: false } }));
  }

  async run() {
    const query = this.input.value.trim();
    if (!query) return;
    const asked = ++this.asked;
    this.results.hidden = false;
    this.dispatchEvent(new CustomEvent('active', { detail: { active: true } }));
    this.status.textContent = 'Searching…';
    let answer;
    try {
      answer = await api.search(query);
    } catch (error) {
      if (asked !== this.asked) return;
      this.list.replaceChildren();
      this.status.textContent = error.status === 404
        ? 'This server cannot search yet.' : `Search failed: ${error.message}`;
      return;
    }
    if (asked !== this.asked) return;
    const results = Array.isArray(answer?.results) ? answer.results : [];
    this.status.textContent = results.length === 0
      ? 'No conversation matches.'
      : `${results.length} ${results.length === 1 ? 'match' : 'matches'}`;
    this.list.replaceChildren(...results.map((r) => this.item(r, query)));
  }

  item(result, query) {
    const conversationId = String(result.conversation_id ?? '');
    const messageId = result.message_id == null ? null : String(result.message_id);
    const li = document.createElement('li');
    li.className = 'conv search-result';
    li.setAttribute('data-testid', 'search-result');
    li.dataset.conversationId = conversationId;
    const link = document.createElement('a');
    link.className = 'conv-link search-link';
    link.href = `#/c/${encodeURIComponent(conversationId)}`;
    const title = document.createElement('span');
    title.className = 'search-title';
    title.textContent = this.titleOf(conversationId);
    const snippet = document.createElement('span');
    snippet.className = 'search-snippet';
    snippet.setAttribute('data-testid', 'search-snippet');
    snippet.append(...highlighted(String(result.snippet ?? ''), query));
    link.append(title, snippet);
    link.addEventListener('click', () => {
      this.dispatchEvent(new CustomEvent('open', { detail: { conversationId, messageId } }));
    });
    li.append(link);
    return li;
  }
}

/** Text nodes for `text`, each case-insensitive occurrence of `query` in a `<mark>`. */
export function highlighted(text, query) {
  const nodes = [];
  const lower = text.toLowerCase();
  const needle = query.toLowerCase();
  let last = 0;
  if (needle) {
    for (let at = lower.indexOf(needle); at !== -1; at = lower.indexOf(needle, at + needle.length)) {
      if (at > last) nodes.push(document.createTextNode(text.slice(last, at)));
      const mark = document.createElement('mark');
      mark.className = 'search-hit';
      mark.textContent = text.slice(at, at + needle.length);
      nodes.push(mark);
      last = at + needle.length;
    }
  }
  if (last < text.length) nodes.push(document.createTextNode(text.slice(last)));
  return nodes;
}
