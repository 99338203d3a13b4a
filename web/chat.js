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
  FINAL_STATUSES, MessageView, knownValues, messageFromServer, newMessage,
} from './messages.js';
import { describeError, replyHandlers } from './replies.js';
import { MessageTree, linkInOrder } from './tree.js';

const POLL_INTERVAL_MS = 2000;
const POLL_LIMIT = 90;
const PINNED_SLACK_PX = 80;

export class Chat extends EventTarget {
  /**
   * Events: `state` (what the composer may do changed), `conversation-created` {id, title,
   * opened}, `title` {id, title}, `loaded` {id, conversation}, `reply-done` {conversationId},
   * `restore-draft` {text, attachments}, `toast` {message}, `missing` {id}. Frames go to
   * `handleFrame` (replies.js).
   */
  constructor({
    socket, scroller, list, emptyState, modelBanner, systemView, getModel, modelLabel,
  }) {
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
      modelLabel: modelLabel ?? (() => null),
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
      if (!live) {
        // The same message keeps its object (and so its view: an edit box open stays open).
        const known = previous.get(m.id);
        if (!known) return m;
        const { error, model, stoppedByYou } = known;
        return Object.assign(known, m, { error, model, stoppedByYou });
      }
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
    if ((!text.trim() && attachments.length === 0) || !this.canSend) return false;
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

// Frames and connection changes (replies.js).
Object.assign(Chat.prototype, replyHandlers);

export { describeError };
