/**
 * The open conversation and the stream of frames that feeds it.
 *
 * The rules this module keeps:
 * - A reply's text is accumulated from its deltas from `assistant_start` on; that live copy is
 *   authoritative for as long as this connection lasts, even when the user looks elsewhere,
 *   so switching conversations mid-stream never duplicates or loses text.
 * - After a reconnect nothing live is trusted: the open conversation is reloaded over HTTP (a
 *   reply that finished while we were away shows in full), and one still being written is
 *   polled until it settles.
 * - A message the server did not accept is marked "not sent" and its text goes back to the
 *   composer, so nothing the user typed is lost.
 * - The server answers one connection's frames in order, so `message_accepted` and request
 *   errors are matched to sent messages first-in, first-out.
 */

import { api } from './api.js';
import {
  FINAL_STATUSES, MessageView, applyDelta, messageFromServer, newMessage,
} from './messages.js';

const POLL_INTERVAL_MS = 2000;
const POLL_LIMIT = 90;
const PINNED_SLACK_PX = 80;

export class Chat extends EventTarget {
  /**
   * Events: `state` (what the composer may do changed), `conversation-created` {id, title,
   * opened}, `title` {id, title}, `reply-done` {conversationId}, `restore-draft` {text},
   * `toast` {message}, `missing` {id}.
   */
  constructor({ socket, scroller, list, emptyState, modelBanner }) {
    super();
    this.socket = socket;
    this.scroller = scroller;
    this.list = list;
    this.emptyState = emptyState;
    this.modelBanner = modelBanner;
    this.currentId = null;
    this.messages = [];
    this.views = new Map();
    this.live = new Map();
    this.pending = [];
    this.streamingByConv = new Map();
    this.awaitingReply = new Set();
    // Conversations this connection watches (`watch`): replies written elsewhere (another
    // tab, or the owner of a conversation shared with us) stream in too, as we may see them.
    this.watched = new Set();
    // Replies streaming in that another connection asked for: shown live, but not ours to stop.
    this.watchedStreams = new Set();
    // Conversations whose reply another connection (a tab, a window, a dropped socket) is
    // still receiving: the server would refuse a new message there as `busy`.
    this.streamingElsewhere = new Set();
    this.mode = 'restored';
    this.loading = false;
    this.loadSeq = 0;
    this.pollTimer = null;
    this.pollCount = 0;
    this.pinned = true;
    scroller.addEventListener('scroll', () => {
      this.pinned = scroller.scrollHeight - scroller.scrollTop - scroller.clientHeight < PINNED_SLACK_PX;
    }, { passive: true });
    new ResizeObserver(() => {
      if (this.pinned) this.scrollToBottom();
    }).observe(list);
  }

  // --- what the composer may do -------------------------------------------------------------

  get replyInFlight() {
    if (this.currentId === null) return false;
    const streaming = this.streamingByConv.get(this.currentId);
    return (streaming !== undefined && !this.watchedStreams.has(streaming))
      || this.awaitingReply.has(this.currentId);
  }

  get replyElsewhere() {
    if (this.currentId === null) return false;
    return this.streamingElsewhere.has(this.currentId)
      || this.watchedStreams.has(this.streamingByConv.get(this.currentId));
  }

  get sendPending() {
    return this.pending.some((p) => p.conversationId === this.currentId);
  }

  get canSend() {
    return this.socket.state === 'connected' && !this.loading && !this.sendPending
      && !this.replyInFlight && !this.replyElsewhere;
  }

  emitState() {
    this.dispatchEvent(new CustomEvent('state'));
  }

  emit(type, detail) {
    this.dispatchEvent(new CustomEvent(type, { detail }));
  }

  // --- opening conversations ----------------------------------------------------------------

  /** Show a conversation (or a new, empty chat for `null`), loading it over HTTP. */
  async open(id, { quiet = false } = {}) {
    const key = id == null ? null : String(id);
    const seq = ++this.loadSeq;
    clearTimeout(this.pollTimer);
    if (!quiet || key !== this.currentId) this.pollCount = 0;
    const switching = key !== this.currentId;
    this.currentId = key;
    if (key === null) {
      this.loading = false;
      this.setMessages(this.pending.filter((p) => p.conversationId === null).map((p) => p.data));
      this.emitState();
      return;
    }
    if (switching) {
      this.loading = true;
      this.setMessages([]);
      this.scroller.classList.add('loading');
      this.emitState();
    }
    let conversation;
    try {
      conversation = await api.getConversation(key);
    } catch (error) {
      if (seq !== this.loadSeq) return;
      this.loading = false;
      this.scroller.classList.remove('loading');
      if (error.status === 404) this.emit('missing', { id: key });
      else this.emit('toast', { message: `Could not load the conversation: ${error.message}` });
      this.emitState();
      return;
    }
    if (seq !== this.loadSeq) return;
    this.loading = false;
    this.scroller.classList.remove('loading');
    const messages = (conversation.messages ?? []).map(messageFromServer);
    const merged = messages.map((m) => this.live.get(m.id)?.data ?? m);
    const shown = new Set(merged.map((m) => m.id));
    for (const [messageId, entry] of this.live) {
      if (entry.conversationId === key && !shown.has(messageId)) merged.push(entry.data);
    }
    for (const p of this.pending) if (p.conversationId === key) merged.push(p.data);
    this.setMessages(merged);
    if (!this.watched.has(key) && this.socket.send({ type: 'watch', conversation_id: key })) {
      this.watched.add(key);
    }
    if (conversation.title !== undefined) this.emit('title', { id: key, title: conversation.title });
    if (this.mode === 'model') this.loadModelView();
    if (conversation.streaming === true && !this.streamingByConv.has(key)) {
      this.streamingElsewhere.add(key);
    } else {
      this.streamingElsewhere.delete(key);
    }
    this.pollIfUnsettled(key, merged, conversation.streaming === true);
    this.emitState();
  }

  /** A reply we are not receiving live is still being written: look again shortly. */
  pollIfUnsettled(key, messages, streaming = false) {
    const unsettled = (streaming && !this.streamingByConv.has(key))
      || messages.some((m) => m.role === 'assistant' && !FINAL_STATUSES.has(m.status)
        && !this.live.has(m.id));
    if (unsettled && this.pollCount >= POLL_LIMIT) {
      // Stop waiting; if the reply is somehow still going, the server answers `busy`.
      this.streamingElsewhere.delete(key);
      return;
    }
    if (!unsettled) return;
    this.pollCount += 1;
    this.pollTimer = setTimeout(() => {
      if (this.currentId === key) this.open(key, { quiet: true });
    }, POLL_INTERVAL_MS);
  }

  setMessages(messages) {
    const wasPinned = this.pinned;
    this.messages = messages;
    this.views = new Map(messages.map((m) => [m, this.views.get(m) ?? new MessageView(m, this.mode)]));
    for (const [data, view] of this.views) {
      view.mode = this.mode;
      view.data = data;
      view.renderNow();
    }
    this.list.replaceChildren(...[...this.views.values()].map((v) => v.element));
    this.updateEmptyState();
    if (wasPinned || messages.length === 0) {
      this.pinned = true;
      this.scrollToBottom();
    }
  }

  append(data) {
    this.messages.push(data);
    const view = new MessageView(data, this.mode);
    this.views.set(data, view);
    this.list.append(view.element);
    this.updateEmptyState();
    return view;
  }

  refresh(data) {
    this.views.get(data)?.refresh();
  }

  updateEmptyState() {
    this.emptyState.hidden = this.messages.length > 0 || this.loading;
  }

  scrollToBottom() {
    this.scroller.scrollTop = this.scroller.scrollHeight;
  }

  // --- sending --------------------------------------------------------------------------------

  /** Send a message in the open conversation; false if it could not go out now. */
  send(text) {
    if (!text.trim() || !this.canSend) return false;
    const conversationId = this.currentId;
    if (!this.socket.send({ type: 'user_message', conversation_id: conversationId, text })) {
      this.emit('toast', { message: 'Not connected: your message was not sent.' });
      return false;
    }
    const data = newMessage({ role: 'user', text, status: 'pending' });
    this.pending.push({ data, conversationId });
    this.pinned = true;
    this.append(data);
    this.emitState();
    return true;
  }

  /** Ask the server to stop the reply in the open conversation. */
  cancel() {
    if (!this.replyInFlight) return false;
    return this.socket.send({ type: 'cancel', conversation_id: this.currentId });
  }

  // --- frames ---------------------------------------------------------------------------------

  handleFrame(frame) {
    switch (frame.type) {
      case 'message_accepted': this.onAccepted(frame); break;
      case 'assistant_start': this.onStart(frame); break;
      case 'assistant_delta': this.onDelta(frame); break;
      case 'assistant_done': this.onDone(frame); break;
      case 'error': this.onError(frame); break;
      default: break;
    }
    this.emitState();
  }

  onAccepted(frame) {
    const conversationId = String(frame.conversation_id);
    const sent = this.pending.shift();
    if (frame.title !== undefined) this.emit('title', { id: conversationId, title: frame.title });
    if (!sent) return;
    sent.data.id = String(frame.message_id);
    sent.data.masked = Array.isArray(frame.masked) ? frame.masked : [];
    sent.data.status = 'complete';
    this.awaitingReply.add(conversationId);
    if (sent.conversationId === null) {
      const opened = this.currentId === null && this.messages.includes(sent.data);
      if (opened) this.currentId = conversationId;
      this.emit('conversation-created', { id: conversationId, title: frame.title ?? '', opened });
    }
    this.refresh(sent.data);
  }

  onStart(frame) {
    const conversationId = String(frame.conversation_id);
    const messageId = String(frame.message_id);
    const data = newMessage({ id: messageId, role: 'assistant', status: 'streaming' });
    if (!this.awaitingReply.has(conversationId)) this.watchedStreams.add(messageId);
    this.live.set(messageId, { conversationId, data });
    this.streamingByConv.set(conversationId, messageId);
    this.awaitingReply.delete(conversationId);
    if (conversationId !== this.currentId || this.loading) return;
    // A snapshot loaded just before this frame may already hold the message: the live copy wins.
    const index = this.messages.findIndex((m) => m.id === messageId);
    if (index >= 0) {
      const messages = [...this.messages];
      messages[index] = data;
      this.setMessages(messages);
    } else {
      this.append(data);
    }
  }

  onDelta(frame) {
    const entry = this.live.get(String(frame.message_id));
    if (!entry) return;
    applyDelta(entry.data, frame);
    this.refresh(entry.data);
  }

  onDone(frame) {
    const messageId = String(frame.message_id);
    const entry = this.live.get(messageId);
    const conversationId = String(frame.conversation_id);
    if (this.streamingByConv.get(conversationId) === messageId) this.streamingByConv.delete(conversationId);
    this.watchedStreams.delete(messageId);
    this.awaitingReply.delete(conversationId);
    if (entry) {
      entry.data.status = typeof frame.status === 'string' ? frame.status : 'complete';
      entry.data.finishReason = frame.finish_reason ?? null;
      this.refresh(entry.data);
    }
    if (conversationId === this.currentId && this.mode === 'model') this.loadModelView();
    this.emit('reply-done', { conversationId });
  }

  onError(frame) {
    const code = String(frame.code ?? 'internal');
    const error = { code, message: typeof frame.message === 'string' ? frame.message : '' };
    const conversationId = frame.conversation_id == null ? null : String(frame.conversation_id);
    const entry = frame.message_id == null ? null : this.live.get(String(frame.message_id));
    const first = this.pending[0];
    const matchesPending = first !== undefined && (conversationId === null
      || first.conversationId === null || first.conversationId === conversationId);
    if (code === 'not_found' && conversationId !== null && this.watched.has(conversationId)
      && !(first && first.conversationId === conversationId)) {
      this.watched.delete(conversationId); // no longer ours to watch; the page says so on reload
      return;
    }

    if (entry) {
      entry.data.error = error;
      if (entry.data.status === 'streaming') {
        entry.data.status = code === 'blocked' ? 'blocked' : 'incomplete';
        if (this.streamingByConv.get(entry.conversationId) === entry.data.id) {
          this.streamingByConv.delete(entry.conversationId);
        }
        this.watchedStreams.delete(entry.data.id);
      }
      this.refresh(entry.data);
    } else if (conversationId !== null && this.awaitingReply.has(conversationId)
      && !(first && first.conversationId === conversationId)) {
      this.awaitingReply.delete(conversationId);
      const lastUser = conversationId === this.currentId
        ? [...this.messages].reverse().find((m) => m.role === 'user') : null;
      if (lastUser) {
        lastUser.error = error;
        this.refresh(lastUser);
      } else {
        this.emit('toast', { message: describeError(error) });
      }
    } else if (matchesPending) {
      this.pending.shift();
      first.data.status = 'failed';
      first.data.error = error;
      this.refresh(first.data);
      this.emit('restore-draft', { text: first.data.text });
    } else {
      this.emit('toast', { message: describeError(error) });
    }
  }

  // --- connection changes ---------------------------------------------------------------------

  /** The socket closed: in-flight sends and streams are over. */
  onDisconnect() {
    for (const p of this.pending) {
      p.data.status = 'failed';
      p.data.error = { code: 'disconnected', message: 'The connection dropped before the server accepted this message' };
      this.refresh(p.data);
      this.emit('restore-draft', { text: p.data.text });
    }
    this.pending = [];
    for (const { data } of this.live.values()) {
      if (data.status === 'streaming') {
        data.error = { code: 'disconnected', message: 'The connection dropped; this reply reloads when it is back' };
        this.refresh(data);
      }
    }
    this.streamingByConv.clear();
    this.watchedStreams.clear();
    this.awaitingReply.clear();
    this.emitState();
  }

  /** Signed out: forget everything shown and held for the last user (values included). */
  reset() {
    clearTimeout(this.pollTimer);
    this.loadSeq += 1;
    this.currentId = null;
    this.views = new Map();
    this.live.clear();
    this.pending = [];
    this.streamingByConv.clear();
    this.awaitingReply.clear();
    this.streamingElsewhere.clear();
    this.watched.clear();
    this.watchedStreams.clear();
    this.mode = 'restored';
    this.setMessages([]);
    this.emitState();
  }

  /** The socket is open again: reload what is on screen from the server. */
  onReconnect() {
    this.live.clear();
    this.watched.clear(); // a new connection watches nothing yet
    if (this.currentId !== null) {
      this.views = new Map();
      this.open(this.currentId, { quiet: true });
    }
  }

  /** The open conversation was deleted (here or elsewhere). */
  forget(id) {
    for (const [messageId, entry] of this.live) {
      if (entry.conversationId === String(id)) this.live.delete(messageId);
    }
  }

  // --- model view -----------------------------------------------------------------------------

  setMode(mode) {
    this.mode = mode;
    this.modelBanner.hidden = mode !== 'model';
    this.scroller.classList.toggle('model-view', mode === 'model');
    for (const view of this.views.values()) view.setMode(mode);
    if (mode === 'model') this.loadModelView();
  }

  async loadModelView() {
    const key = this.currentId;
    if (key === null) return;
    let conversation;
    try {
      conversation = await api.getConversation(key, 'model');
    } catch (error) {
      this.emit('toast', { message: `Could not load the model view: ${error.message}` });
      return;
    }
    if (key !== this.currentId) return;
    const byId = new Map((conversation.messages ?? []).map((m) => [String(m.id), messageFromServer(m)]));
    for (const data of this.messages) {
      const model = data.id === null ? null : byId.get(data.id);
      data.model = model
        ? { text: model.text, reasoning: model.reasoning, toolCalls: model.toolCalls }
        : null;
      this.views.get(data)?.renderNow();
    }
  }
}

/** A sentence for an error frame that has no message of its own to sit on. */
export function describeError(error) {
  return error.message ? `${error.message} (${error.code})` : `Error: ${error.code}`;
}
