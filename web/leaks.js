/**
 * Finding leaked token fragments in raw WebSocket frames (the leak demonstration).
 *
 * The rule this module keeps: a leak is any piece of a vault token that reached the browser:
 * a whole token, or a substring of a token at least two characters long that contains one of
 * the token's structural characters `<`, `>` or `_` (so `<EMA` and `L_1>` count, while a
 * plain word that happens to appear inside a token name does not). Leaks are searched in the
 * decoded reply text of a frame and reported as ranges of the raw frame text, so a page can
 * highlight the verbatim frame, whatever escapes the server's JSON encoder used.
 * Pure functions, no DOM.
 */

const STRUCTURAL = /[<>_]/;

/**
 * Ranges [start, end) of `text` covered by token fragments, merged and sorted.
 * `tokens` are the token texts (`<EMAIL_1>`); matching is exact (case-sensitive).
 */
export function findLeakRanges(text, tokens) {
  const usable = tokens.filter((t) => typeof t === 'string' && t.length >= 2);
  const maxLen = Math.max(0, ...usable.map((t) => t.length));
  const covered = [];
  for (let i = 0; i < text.length; i += 1) {
    for (let len = Math.min(maxLen, text.length - i); len >= 2; len -= 1) {
      const piece = text.slice(i, i + len);
      if (!STRUCTURAL.test(piece)) continue;
      if (usable.some((t) => t.includes(piece))) {
        covered.push([i, i + len]);
        break;
      }
    }
  }
  return mergeRanges(covered);
}

/** Merge overlapping ranges (two whole tokens side by side stay two leaks). */
export function mergeRanges(ranges) {
  const sorted = [...ranges].sort((a, b) => a[0] - b[0]);
  const merged = [];
  for (const [start, end] of sorted) {
    const last = merged[merged.length - 1];
    if (last && start < last[1]) last[1] = Math.max(last[1], end);
    else merged.push([start, end]);
  }
  return merged;
}

/** Ranges of `text` where any of `values` occurs whole (for showing restored values). */
export function findValueRanges(text, values) {
  const ranges = [];
  for (const value of values) {
    if (typeof value !== 'string' || value === '') continue;
    for (let at = text.indexOf(value); at !== -1; at = text.indexOf(value, at + value.length)) {
      ranges.push([at, at + value.length]);
    }
  }
  return mergeRanges(ranges);
}

const SIMPLE_ESCAPES = { '"': '"', '\\': '\\', '/': '/', b: '\b', f: '\f', n: '\n', r: '\r', t: '\t' };

/**
 * Decode the JSON string literal whose opening quote is at `raw[at]`. Returns
 * {value, starts, ends, next}: the decoded string, for each decoded UTF-16 unit the raw range
 * it came from, and the index just past the closing quote; null if the literal is malformed.
 */
export function decodeJsonString(raw, at) {
  if (raw[at] !== '"') return null;
  let value = '';
  const starts = [];
  const ends = [];
  let i = at + 1;
  while (i < raw.length) {
    const ch = raw[i];
    if (ch === '"') return { value, starts, ends, next: i + 1 };
    if (ch === '\\') {
      const esc = raw[i + 1];
      if (esc === 'u') {
        const hex = raw.slice(i + 2, i + 6);
        if (!/^[0-9a-fA-F]{4}$/.test(hex)) return null;
        value += String.fromCharCode(parseInt(hex, 16));
        starts.push(i);
        ends.push(i + 6);
        i += 6;
      } else if (esc in SIMPLE_ESCAPES) {
        value += SIMPLE_ESCAPES[esc];
        starts.push(i);
        ends.push(i + 2);
        i += 2;
      } else {
        return null;
      }
    } else {
      value += ch;
      starts.push(i);
      ends.push(i + 1);
      i += 1;
    }
  }
  return null;
}

/**
 * The value of every `"text": "..."` member in a raw JSON frame, with its raw mapping.
 * Keys are recognised as string literals followed by a colon.
 */
export function textMembers(raw) {
  const members = [];
  let lastKey = null;
  let i = 0;
  while (i < raw.length) {
    if (raw[i] !== '"') {
      i += 1;
      continue;
    }
    const literal = decodeJsonString(raw, i);
    if (!literal) return members;
    let j = literal.next;
    while (j < raw.length && /\s/.test(raw[j])) j += 1;
    if (raw[j] === ':') {
      lastKey = literal.value;
    } else {
      if (lastKey === 'text') members.push(literal);
      lastKey = null;
    }
    i = literal.next;
  }
  return members;
}

/**
 * Split a raw frame into segments {text, kind} where kind is "leak", "value" or null, for
 * highlighting. Only the reply text (`text` members) is searched. `leaks` counts leak segments.
 */
export function classifyFrame(raw, tokens, values = []) {
  const marks = [];
  for (const literal of textMembers(raw)) {
    const leakRanges = findLeakRanges(literal.value, tokens);
    const valueRanges = findValueRanges(literal.value, values)
      .filter(([s, e]) => !leakRanges.some(([ls, le]) => s < le && ls < e));
    const toRaw = ([s, e]) => [literal.starts[s], literal.ends[e - 1]];
    for (const r of leakRanges) marks.push([...toRaw(r), 'leak']);
    for (const r of valueRanges) marks.push([...toRaw(r), 'value']);
  }
  marks.sort((a, b) => a[0] - b[0]);
  const segments = [];
  let last = 0;
  let leaks = 0;
  for (const [start, end, kind] of marks) {
    if (start < last) continue;
    if (start > last) segments.push({ text: raw.slice(last, start), kind: null });
    segments.push({ text: raw.slice(start, end), kind });
    if (kind === 'leak') leaks += 1;
    last = end;
  }
  if (last < raw.length) segments.push({ text: raw.slice(last), kind: null });
  return { segments, leaks };
}
