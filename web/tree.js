/**
 * A conversation's messages as a tree, and the branch the page shows.
 *
 * The rule this module keeps: every version of a message stays (an edit or a regenerated
 * reply is a sibling, never a replacement), and the branch shown is a path from a root to a
 * leaf, each message's parent right before it. Siblings are ordered as the server lists them
 * (oldest first), and a message without a known parent follows the one listed before it, so a
 * server that sends no `parent_id` reads as one straight line. Pure data, no DOM.
 */

export class MessageTree {
  constructor(messages = []) {
    this.nodes = new Map();
    this.order = [];
    this.chosen = new Map(); // parent id (or '') -> the child last shown under it
    for (const m of messages) this.add(m);
  }

  /** Add a message (by its id; messages without one are not part of the tree yet). */
  add(data) {
    if (data.id === null || data.id === undefined) return;
    if (!this.nodes.has(data.id)) this.order.push(data.id);
    this.nodes.set(data.id, data);
  }

  get(id) {
    return id == null ? undefined : this.nodes.get(String(id));
  }

  /** The parent's id a message hangs from ('' for a root). */
  parentKey(data) {
    return data.parentId == null ? '' : String(data.parentId);
  }

  /** The messages under `parentId` (null for the roots), oldest first. */
  children(parentId) {
    const key = parentId == null ? '' : String(parentId);
    return this.order.map((id) => this.nodes.get(id)).filter((m) => this.parentKey(m) === key);
  }

  /** `{index, count, list}` of a message among its siblings of the same role. */
  siblings(data) {
    const list = this.children(data.parentId).filter((m) => m.role === data.role);
    const index = list.findIndex((m) => m.id === data.id);
    return index < 0 ? null : { index, count: list.length, list };
  }

  /** The path from a root down to `id`, or [] if it is not in the tree. */
  pathTo(id) {
    const path = [];
    const seen = new Set();
    for (let node = this.get(id); node && !seen.has(node.id); node = this.get(node.parentId)) {
      seen.add(node.id);
      path.unshift(node);
    }
    return path;
  }

  /** From `data` down to a leaf: each time the child last shown there, else the newest. */
  descend(data) {
    const path = [data];
    const seen = new Set([data.id]);
    for (let node = data; ;) {
      const kids = this.children(node.id);
      if (kids.length === 0) break;
      const picked = kids.find((k) => k.id === this.chosen.get(node.id)) ?? kids[kids.length - 1];
      if (seen.has(picked.id)) break;
      seen.add(picked.id);
      path.push(picked);
      node = picked;
    }
    return path;
  }

  /** Remember the branch a path takes, so coming back to a fork shows it again. */
  remember(path) {
    for (const m of path) this.chosen.set(this.parentKey(m), m.id);
  }

  /** The branch through `data`: its ancestors, itself, then down to a leaf. */
  branchThrough(data) {
    const path = [...this.pathTo(data.parentId), ...this.descend(data)];
    this.remember(path);
    return path;
  }

  /**
   * The path a server named (`current_path`), as messages; ids it does not know are dropped.
   * Without one, every message in order (a server from before the tree).
   */
  pathFrom(ids) {
    if (!Array.isArray(ids)) return this.order.map((id) => this.nodes.get(id));
    const path = ids.map((id) => this.get(id)).filter(Boolean);
    this.remember(path);
    return path;
  }
}

/**
 * Fill in missing parents: a message the server sent without `parent_id` follows the one
 * before it, so trees from servers that do not send one are a single line.
 */
export function linkInOrder(messages) {
  if (messages.some((m) => m.parentId !== null)) return messages;
  for (let i = 1; i < messages.length; i += 1) messages[i].parentId = messages[i - 1].id;
  return messages;
}
