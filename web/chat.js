/**
 * The open conversation and the stream of frames that feeds it.
 *
 * The rules this module keeps:
 * - A reply's text is accumulated from its deltas from `assistant_start` on; that live copy is
 *   authoritative for as long as this page holds it, even when the user looks elsewhere, so
 *   switching conversations mid-stream never duplicates or loses text.
 * - Reply frames carry `seq` (1, 2, ... per message). The last one applied is kept per
 *   message, and a frame at or below it is dropped, so a replayed or watched reply never
 *   doubles text. A reply still being written when the page loads is resumed from the start
 *   (`after_seq` 0, its shown text replaced by the replay); after a reconnect, from the last
 *   `seq` seen. A server that sends no `seq` is read as before: after a reconnect the open
 *   conversation is reloaded over HTTP and a reply still being written is polled.
 * - Every version of a message stays (tree.js): an edit or a regenerated reply is a sibling,
 *   and the page shows one branch, the server's `current_path`, or the one the user picked.
 * - A message the server did not accept is marked "not sent" and its text goes back to the
 *   composer, so nothing the user typed is lost.
 * - The server answers one connection's frames in order, so `message_accepted` and request
 *   errors are matched to sent messages first-in, first-out.
 */

import { api } from './api.js';
import {
  FINAL_STATUSES, MessageView, applyDelta, knownValues, messageFromServer, newMessage,
} from './messages.js';
import { MessageTree, linkInOrder } from './tree.js';

const POLL_INTERVAL_MS = 2000;
const POLL_LIMIT = 90;
const PINNED_SLACK_PX = 80;

function frameSeq(frame) {
  return Number.isInteger(frame.seq) ? frame.seq : null;
}

function resetReply(data) {
  data.text = '';
  data.reasoning = '';
  data.toolCalls = [];
  data.seq = 0;
}

export class Chat extends EventTarget {
  /**
   * Events: `state` (what the composer may do changed), `conversation-created` {id, title,
   * opened}, `title` {id, title}, `loaded` {id, conversation}, `reply-done` {conversationId},
   * `restore-draft` {text}, `toast` {message}, `missing` {id}.
   */
  constructor({ socket, scroller, list, emptyState, modelBanner, systemView, getModel }) {
    super();
    this.socket = socket;
    this.scroller = scroller;
    this.list = list;
    this.emptyState = emptyState;
    this.modelBanner = modelBanner;
    this.systemView = systemView ?? null;
    this.getModel = getModel ?? (() => null);
    this.currentId = null;
    this.tree = new MessageTree();
    this.messages = [];
    this.views = new Map();
    this.values = [];
    this.live = new Map();
    this.pending = [];
    this.streamingByConv = new Map();
    // Conversations where this page asked for a reply that has not started: the parent it
    // will follow.
    this.awaitingReply = new Map();
    // Conversations this connection watches (`watch`): replies written elsewhere (another
    // tab, or the owner of a conversation shared with us) stream in too, as we may see them.
    this.watched = new Set();
    // Replies streaming in that another connection asked for: shown live, but not ours to stop.
    this.watchedStreams = new Set();
    // Conversations whose reply another connection is still receiving (server without `seq`).
    this.streamingElsewhere = new Set();
    this.resumable = false; // the server numbers reply frames (and so can resume them)
    this.treeAware = false; // the open conversation came with `current_path`
    this.writable = true;
    this.mode = 'restored';
    this.loading = false;
    this.loadSeq = 0;
    this.pollTimer = null;
    this.pollCount = 0;
    this.pinned = true;
    this.viewContext = {
      values: () => this.values,
      siblings: (data) => (data.id === null ? null : this.tree.siblings(data)),
      canAct: () => this.canSend,
      writable: () => this.writable,
      act: (action, data, arg) => this.act(action, data, arg),
    };
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

  /** The reply in flight was started before this page loaded (and resumed here). */
  get replyResumed() {
    const entry = this.live.get(this.streamingByConv.get(this.currentId));
    return Boolean(entry?.resumed);
  }

  get sendPending() {
    return this.pending.some((p) => p.conversationId === this.currentId);
  }

  get canSend() {
    return this.socket.state === 'connected' && !this.loading && !this.sendPending
      && !this.replyInFlight && !this.replyElsewhere;
  }

  /** The message this page's next one follows: the end of the branch shown. */
  get leaf() {
    for (let i = this.messages.length - 1; i >= 0; i -= 1) {
      if (this.messages[i].id !== null) return this.messages[i];
    }
    return null;
  }

  emitState() {
    this.dispatchEvent(new CustomEvent('state'));
  }

  emit(type, detail) {
    this.dispatchEvent(new CustomEvent(type, { detail }));
  }

  // --- opening conversations ----------------------------------------------------------------

  /** Show a conversation (or a new, empty chat for `null`), loading it over HTTP. */
  async open(id, { quiet = false, watch = true } = {}) {
    const key = id == null ? null : String(id);
    const seq = ++this.loadSeq;
    clearTimeout(this.pollTimer);
    if (!quiet || key !== this.currentId) this.pollCount = 0;
    const switching = key !== this.currentId;
    this.currentId = key;
    if (key === null) {
      this.loading = false;
      this.treeAware = false;
      this.writable = true;
      this.tree = new MessageTree();
      this.setSystem(null);
      this.setMessages(this.pending.filter((p) => p.conversationId === null).map((p) => p.data));
      this.emitState();
      return;
    }
    if (switching) {
      this.loading = true;
      this.tree = new MessageTree();
      this.setSystem(null);
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
    this.show(key, conversation);
    // `resume` watches the conversation too: a `watch` as well would replay the reply twice.
    this.resumeStreaming(key);
    if (watch) this.watch(key);
    if (conversation.title !== undefined) this.emit('title', { id: key, title: conversation.title });
    this.emit('loaded', { id: key, conversation });
    if (this.mode === 'model') this.loadModelView();
    const streamingHere = this.streamingByConv.has(key);
    if (conversation.streaming === true && !streamingHere) this.streamingElsewhere.add(key);
    else this.streamingElsewhere.delete(key);
    this.pollIfUnsettled(key, this.messages, conversation.streaming === true);
    this.emitState();
  }

  /** Lay out a conversation from its HTTP view, live copies and unsent messages winning. */
  show(key, conversation) {
    this.treeAware = Array.isArray(conversation.current_path);
    if (this.treeAware) this.resumable = true;
    this.writable = conversation.access !== 'read';
    const fromServer = linkInOrder((conversation.messages ?? []).map(messageFromServer));
    const previous = this.tree;
    const tree = new MessageTree(fromServer.map((m) => {
      const live = this.live.get(m.id)?.data;
      if (!live) return m;
      // The live copy's text wins; what only the store knows is taken from it.
      live.parentId ??= m.parentId;
      live.modelId ??= m.modelId;
      live.createdAt ??= m.createdAt;
      return live;
    }));
    for (const [messageId, entry] of this.live) {
      if (entry.conversationId === key && !tree.get(messageId)) tree.add(entry.data);
    }
    for (const [parent, child] of previous.chosen) tree.chosen.set(parent, child);
    this.tree = tree;
    let path = tree.pathFrom(this.treeAware ? conversation.current_path : null);
    // A branch the user picked here, or a live reply, may be newer than the server's.
    const shownLeaf = this.messages.length > 0 ? this.leaf : null;
    if (shownLeaf && tree.get(shownLeaf.id) && !path.includes(tree.get(shownLeaf.id))) {
      path = tree.branchThrough(tree.get(shownLeaf.id));
    }
    const last = path[path.length - 1];
    for (const [, entry] of this.live) {
      if (entry.conversationId !== key || path.includes(entry.data)) continue;
      if (last === undefined || entry.data.parentId === null || entry.data.parentId === last.id) {
        path.push(entry.data);
      }
    }
    for (const p of this.pending) if (p.conversationId === key) path.push(p.data);
    this.setSystem(conversation);
    this.setMessages(path);
  }

  /**
   * Watch a conversation (replies written elsewhere stream in too), unless this connection
   * already has its reply in flight: the server would send that reply to it twice, once as
   * asked for and once as watched. It is watched once that reply is done.
   */
  watch(key) {
    if (this.watched.has(key) || this.streamingByConv.has(key) || this.awaitingReply.has(key)) return;
    if (this.pending.some((p) => p.conversationId === key || p.conversationId === null)) return;
    if (this.socket.send({ type: 'watch', conversation_id: key })) this.watched.add(key);
  }

  /** A reply the server is still writing, seen over HTTP: take it up live (`resume`). */
  resumeStreaming(key) {
    if (!this.resumable) return;
    for (const data of this.tree.nodes.values()) {
      if (data.role !== 'assistant' || data.status !== 'streaming' || this.live.has(data.id)) continue;
      const sent = this.socket.send({
        type: 'resume', conversation_id: key, message_id: data.id, after_seq: 0,
      });
      if (!sent) continue;
      this.watched.add(key);
      this.live.set(data.id, { conversationId: key, data, replaceOnReplay: true, resumed: true });
      this.streamingByConv.set(key, data.id);
    }
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
    this.values = knownValues([...this.tree.nodes.values(), ...messages]
      .filter((m) => m.role === 'user'));
    this.views = new Map(messages.map((m) => [
      m, this.views.get(m) ?? new MessageView(m, this.mode, this.viewContext),
    ]));
    messages.forEach((data, i) => {
      const view = this.views.get(data);
      view.mode = this.mode;
      view.data = data;
      view.element.classList.toggle('msg-continuation',
        data.role === 'assistant' && i > 0 && messages[i - 1].role === 'assistant');
      view.renderNow();
    });
    this.list.replaceChildren(...[...this.views.values()].map((v) => v.element));
    this.updateEmptyState();
    if (wasPinned || messages.length === 0) {
      this.pinned = true;
      this.scrollToBottom();
    }
  }

  /** Re-render every message (values known, what may be done, or the versions changed). */
  rerender() {
    this.values = knownValues([...this.tree.nodes.values(), ...this.messages]
      .filter((m) => m.role === 'user'));
    for (const view of this.views.values()) view.refresh();
  }

  append(data) {
    this.messages.push(data);
    this.tree.add(data);
    const view = new MessageView(data, this.mode, this.viewContext);
    const previous = this.messages[this.messages.length - 2];
    view.element.classList.toggle('msg-continuation',
      data.role === 'assistant' && previous?.role === 'assistant');
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

  withModel(frame) {
    const model = this.getModel();
    return model ? { ...frame, model } : frame;
  }

  /** Send a message in the open conversation; false if it could not go out now. */
  send(text, { attachments = [] } = {}) {
    if (!text.trim() || !this.canSend) return false;
    const conversationId = this.currentId;
    const parent = conversationId === null ? null : this.leaf;
    if (conversationId !== null) this.watch(conversationId);
    const frame = { type: 'user_message', conversation_id: conversationId, text };
    if (this.treeAware && parent) frame.parent_id = parent.id;
    if (attachments.length > 0) frame.attachments = attachments.map((a) => a.id);
    if (!this.socket.send(this.withModel(frame))) {
      this.emit('toast', { message: 'Not connected: your message was not sent.' });
      return false;
    }
    const data = newMessage({
      role: 'user', text, status: 'pending', parentId: parent?.id ?? null, attachments,
    });
    this.pending.push({ data, conversationId, kind: 'message' });
    this.pinned = true;
    this.append(data);
    this.emitState();
    return true;
  }

  /** A button under a message: versions, regenerate or retry, continue, edit. */
  act(action, data, arg) {
    if (action === 'branch') return this.switchBranch(data, arg);
    if (!this.canSend || data.id === null) return false;
    const conversationId = this.currentId;
    this.watch(conversationId);
    if (action === 'regenerate' || action === 'continue') {
      const frame = { type: action, conversation_id: conversationId, message_id: data.id };
      if (!this.socket.send(this.withModel(frame))) return false;
      const parentId = action === 'continue' ? data.id : data.parentId;
      this.awaitingReply.set(conversationId, { parentId });
      if (action === 'regenerate') {
        // The new version takes this one's place on the branch shown.
        const at = this.messages.indexOf(data);
        if (at >= 0) this.setMessages(this.messages.slice(0, at));
      }
      this.pinned = true;
      this.emitState();
      return true;
    }
    if (action === 'edit') {
      const text = String(arg ?? '');
      if (!text.trim()) return false;
      const frame = { type: 'edit', conversation_id: conversationId, message_id: data.id, text };
      if (!this.socket.send(this.withModel(frame))) return false;
      const edited = newMessage({ role: 'user', text, status: 'pending', parentId: data.parentId });
      this.pending.push({ data: edited, conversationId, kind: 'edit' });
      const at = this.messages.indexOf(data);
      this.setMessages([...(at >= 0 ? this.messages.slice(0, at) : this.messages), edited]);
      this.pinned = true;
      this.emitState();
      return true;
    }
    return false;
  }

  /** Show the previous (-1) or next (+1) version of a message, and the branch under it. */
  switchBranch(data, step) {
    if (this.replyInFlight || this.sendPending) return false;
    const siblings = this.tree.siblings(data);
    const target = siblings?.list[siblings.index + step];
    if (!target) return false;
    const path = this.tree.branchThrough(target);
    this.setMessages(path);
    const leaf = path[path.length - 1];
    if (this.treeAware && leaf?.id) {
      const key = this.currentId;
      api.patchConversation(key, { current_leaf: leaf.id }).catch((error) => {
        if (key === this.currentId) this.emit('toast', { message: `Could not keep this version: ${error.message}` });
      });
    }
    if (this.mode === 'model') this.loadModelView();
    this.emitState();
    return true;
  }

  /** Ask the server to stop the reply in the open conversation. */
  cancel() {
    if (!this.replyInFlight) return false;
    const sent = this.socket.send({ type: 'cancel', conversation_id: this.currentId });
    const streaming = this.live.get(this.streamingByConv.get(this.currentId));
    if (sent && streaming) streaming.data.stoppedByYou = true;
    return sent;
  }

  // --- frames ---------------------------------------------------------------------------------

  handleFrame(frame) {
    if (frameSeq(frame) !== null) this.resumable = true;
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
    if (frame.parent_id !== undefined) sent.data.parentId = frame.parent_id === null ? null : String(frame.parent_id);
    this.awaitingReply.set(conversationId, { parentId: sent.data.id });
    if (sent.conversationId === null) {
      const opened = this.currentId === null && this.messages.includes(sent.data);
      if (opened) this.currentId = conversationId;
      this.emit('conversation-created', { id: conversationId, title: frame.title ?? '', opened });
    }
    if (conversationId === this.currentId) {
      this.tree.add(sent.data);
      this.tree.remember(this.messages.filter((m) => m.id !== null));
      this.rerender();
    }
    this.refresh(sent.data);
  }

  /** The live entry a reply frame belongs to; null for a duplicate (seq already applied). */
  liveFor(frame) {
    const entry = this.live.get(String(frame.message_id));
    if (!entry) return null;
    const seq = frameSeq(frame);
    if (seq !== null && seq <= entry.data.seq && !entry.replaceOnReplay) return null;
    if (entry.replaceOnReplay && seq !== null) {
      entry.replaceOnReplay = false;
      resetReply(entry.data);
    }
    if (seq !== null) entry.data.seq = seq;
    entry.data.connectionLost = false;
    return entry;
  }

  onStart(frame) {
    const conversationId = String(frame.conversation_id);
    const messageId = String(frame.message_id);
    if (this.live.has(messageId)) {
      const entry = this.liveFor(frame);
      if (entry) {
        entry.data.status = 'streaming';
        this.streamingByConv.set(conversationId, messageId);
        this.refresh(entry.data);
      }
      return;
    }
    const request = this.awaitingReply.get(conversationId);
    const parentId = frame.parent_id != null ? String(frame.parent_id) : request?.parentId ?? null;
    const data = newMessage({
      id: messageId, role: 'assistant', status: 'streaming', parentId, seq: frameSeq(frame) ?? 0,
      modelId: typeof frame.model === 'string' ? frame.model : null,
    });
    if (!request) this.watchedStreams.add(messageId);
    this.live.set(messageId, { conversationId, data, replaceOnReplay: false });
    this.streamingByConv.set(conversationId, messageId);
    this.awaitingReply.delete(conversationId);
    this.streamingElsewhere.delete(conversationId);
    if (conversationId !== this.currentId || this.loading) return;
    // A snapshot loaded just before this frame may already hold the message: the live copy wins.
    const index = this.messages.findIndex((m) => m.id === messageId);
    if (index >= 0) {
      const messages = [...this.messages];
      messages[index] = data;
      this.tree.add(data);
      this.setMessages(messages);
      return;
    }
    const leaf = this.leaf;
    if (request || leaf === null || parentId === null || parentId === leaf.id) {
      this.tree.add(data);
      if (request && parentId !== null && leaf?.id !== parentId) {
        const parent = this.tree.get(parentId);
        if (parent) {
          this.setMessages([...this.tree.pathTo(parentId), data]);
          this.tree.remember(this.messages);
          return;
        }
      }
      this.append(data);
      this.tree.remember(this.messages.filter((m) => m.id !== null));
      this.rerender();
    } else {
      // Another branch's reply (written elsewhere): a new version to page to, not shown.
      this.tree.add(data);
      this.rerender();
    }
  }

  onDelta(frame) {
    const entry = this.liveFor(frame);
    if (!entry) return;
    applyDelta(entry.data, frame);
    this.refresh(entry.data);
  }

  onDone(frame) {
    const messageId = String(frame.message_id);
    const conversationId = String(frame.conversation_id);
    const known = this.live.get(messageId);
    const entry = this.liveFor(frame);
    if (known && !entry && FINAL_STATUSES.has(known.data.status)) return; // a replayed end
    if (this.streamingByConv.get(conversationId) === messageId) this.streamingByConv.delete(conversationId);
    this.watchedStreams.delete(messageId);
    if (!this.awaitingReply.get(conversationId) || known) this.awaitingReply.delete(conversationId);
    if (entry) {
      entry.data.status = typeof frame.status === 'string' ? frame.status : 'complete';
      entry.data.finishReason = frame.finish_reason ?? null;
      if (frame.ended_by === 'user' || frame.ended_by === 'server') entry.data.endedBy = frame.ended_by;
      this.refresh(entry.data);
    }
    if (conversationId === this.currentId) {
      if (this.mode === 'model') this.loadModelView();
      // The server's tree now holds this reply: take its ids and versions.
      // No `watch` now: nothing may follow a reply's end unasked (the next request watches).
      if (this.treeAware || this.resumable) this.open(conversationId, { quiet: true, watch: false });
      else this.rerender();
    }
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
      entry.replaceOnReplay = false;
      if (entry.data.status === 'streaming') {
        entry.data.status = code === 'blocked' ? 'blocked' : 'incomplete';
        if (code !== 'blocked') entry.data.finishReason = 'error';
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
      if (lastUser && lastUser === this.leaf) {
        lastUser.error = error;
        this.refresh(lastUser);
      } else {
        this.emit('toast', { message: describeError(error) });
        if (conversationId === this.currentId) this.open(conversationId, { quiet: true });
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

  /** The socket closed: in-flight sends are over; replies go on at the server. */
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
        data.connectionLost = true;
        this.refresh(data);
      }
    }
    if (!this.resumable) this.streamingByConv.clear();
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
    this.tree = new MessageTree();
    this.values = [];
    this.live.clear();
    this.pending = [];
    this.streamingByConv.clear();
    this.awaitingReply.clear();
    this.streamingElsewhere.clear();
    this.watched.clear();
    this.watchedStreams.clear();
    this.mode = 'restored';
    this.setSystem(null);
    this.setMessages([]);
    this.emitState();
  }

  /** The socket is open again: take up replies where they were, and reload what is shown. */
  onReconnect() {
    this.watched.clear(); // a new connection watches nothing yet
    if (this.resumable) {
      for (const [messageId, entry] of this.live) {
        if (entry.data.status !== 'streaming') {
          this.live.delete(messageId);
          continue;
        }
        const sent = this.socket.send({
          type: 'resume', conversation_id: entry.conversationId, message_id: messageId,
          after_seq: entry.replaceOnReplay ? 0 : entry.data.seq,
        });
        if (sent) this.watched.add(entry.conversationId);
        this.streamingByConv.set(entry.conversationId, messageId);
      }
    } else {
      this.live.clear();
      this.streamingByConv.clear();
      this.views = new Map();
    }
    if (this.currentId !== null) this.open(this.currentId, { quiet: true });
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
    else this.setSystem(null);
  }

  /** The instructions the model got (model view only), from the conversation's HTTP view. */
  setSystem(conversation) {
    if (!this.systemView) return;
    this.systemView.show(this.mode === 'model' ? conversation : null);
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
    if (key !== this.currentId || this.mode !== 'model') return;
    const raw = new Map((conversation.messages ?? []).map((m) => [String(m.id), m]));
    const byId = new Map([...raw].map(([id, m]) => [id, messageFromServer(m)]));
    for (const data of this.messages) {
      const model = data.id === null ? null : byId.get(data.id);
      data.model = model
        ? { text: model.text, reasoning: model.reasoning, toolCalls: model.toolCalls }
        : null;
      this.views.get(data)?.renderNow();
    }
    // The system text the last reply shown was asked with: instructions and prompt, tokenized.
    const asked = [...this.messages].reverse()
      .map((m) => (m.id === null ? undefined : raw.get(m.id)?.system))
      .find((text) => typeof text === 'string' && text !== '');
    this.setSystem({ ...conversation, system: asked });
  }

  /** The socket's state: while it is not connected, a reply streaming here says so. */
  onConnectionState(state) {
    const lost = state !== 'connected';
    for (const { data } of this.live.values()) {
      if (data.status !== 'streaming' || data.connectionLost === lost) continue;
      data.connectionLost = lost;
      this.refresh(data);
    }
  }
}

/** A sentence for an error frame that has no message of its own to sit on. */
export function describeError(error) {
  return error.message ? `${error.message} (${error.code})` : `Error: ${error.code}`;
}
