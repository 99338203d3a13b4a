/**
 * The frames that feed the open conversation, and what a connection change does to them:
 * `Chat`'s handlers (mixed into its prototype by chat.js).
 *
 * The rules these handlers keep: a reply frame at or below the last `seq` applied to its
 * message is a duplicate and is dropped; a resumed reply's first replayed frame replaces the
 * text shown; `message_accepted` and request errors are matched to what this connection sent
 * first-in, first-out; a lost connection fails the messages not yet accepted (their text and
 * documents go back to the composer) but not the replies, which go on at the server and are
 * resumed after the last `seq` seen once the socket is back.
 */

import { FINAL_STATUSES, applyDelta, newMessage } from './messages.js';
import { MessageTree } from './tree.js';

export function frameSeq(frame) {
  return Number.isInteger(frame.seq) ? frame.seq : null;
}

function resetReply(data) {
  data.text = '';
  data.reasoning = '';
  data.toolCalls = [];
  data.seq = 0;
}

/** A sentence for an error frame that has no message of its own to sit on. */
export function describeError(error) {
  return error.message ? `${error.message} (${error.code})` : `Error: ${error.code}`;
}

export const replyHandlers = {
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
  },

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
  },

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
  },

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
  },

  onDelta(frame) {
    const entry = this.liveFor(frame);
    if (!entry) return;
    applyDelta(entry.data, frame);
    this.refresh(entry.data);
  },

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
  },

  onError(frame) {
    const code = String(frame.code ?? 'internal');
    const error = { code, message: typeof frame.message === 'string' ? frame.message : '' };
    // A moderation block names its category (a short closed-shape name, docs/moderation.md).
    if (typeof frame.category === 'string' && /^[A-Za-z0-9][A-Za-z0-9_./-]{0,63}$/.test(frame.category)) {
      error.category = frame.category;
    }
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
        const blocked = code === 'blocked' || code === 'moderation_blocked';
        entry.data.status = blocked ? 'blocked' : 'incomplete';
        if (!blocked) entry.data.finishReason = 'error';
        if (code === 'moderation_blocked') entry.data.moderationCategory = error.category ?? 'policy';
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
      this.emit('restore-draft', { text: first.data.text, attachments: first.data.attachments });
    } else {
      this.emit('toast', { message: describeError(error) });
    }
  },

  // --- connection changes ---------------------------------------------------------------------

  /** The socket closed: in-flight sends are over; replies go on at the server. */
  onDisconnect() {
    for (const p of this.pending) {
      p.data.status = 'failed';
      p.data.error = { code: 'disconnected', message: 'The connection dropped before the server accepted this message' };
      this.refresh(p.data);
      this.emit('restore-draft', { text: p.data.text, attachments: p.data.attachments });
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
  },

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
  },

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
  },

  /** The open conversation was deleted (here or elsewhere). */
  forget(id) {
    for (const [messageId, entry] of this.live) {
      if (entry.conversationId === String(id)) this.live.delete(messageId);
    }
  },
};
