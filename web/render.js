/**
 * Turning text into DOM, safely.
 *
 * The rule this module keeps: model output reaches the page only as a DOM fragment returned by
 * DOMPurify, and the user's own text only as text nodes. Nothing here assigns `innerHTML`.
 * Markdown is parsed by marked; any raw HTML the model writes is escaped so it shows as text
 * (a reply containing `<img onerror=...>` displays those characters and runs nothing), and the
 * escaped result is sanitized again regardless. Images are never loaded from model output: a
 * markdown image becomes a link, so a reply cannot make the browser fetch a URL by itself.
 * Privacy markers (masked spans, tokens, guard redactions) are added after sanitizing, on text
 * nodes only, so model output can never forge one.
 */

import { Marked } from './vendor/marked/marked.esm.js';
import DOMPurify from './vendor/dompurify/purify.es.mjs';

/** A token as the model sees it: `<KIND_N>` (see server/holdback/tokens.py). */
export const TOKEN_PATTERN = /<[A-Z][A-Z0-9_]*_[1-9][0-9]*>/g;

/** A guard redaction: `[redacted]` (a forbidden term) or `[redacted <kind>]` (a detector). */
export const REDACTION_PATTERN = /\[redacted(?: ([A-Za-z0-9_ -]{1,40}))?\]/g;

const ALLOWED_TAGS = [
  'a', 'p', 'br', 'hr', 'h1', 'h2', 'h3', 'h4', 'h5', 'h6', 'strong', 'em', 'del', 's',
  'code', 'pre', 'blockquote', 'ul', 'ol', 'li', 'table', 'thead', 'tbody', 'tr', 'th', 'td',
  'input', 'sup', 'sub', 'kbd',
];
const ALLOWED_ATTR = ['href', 'title', 'align', 'start', 'type', 'checked', 'disabled', 'class'];
const CODE_CLASS = /^language-[A-Za-z0-9_+#.-]{1,40}$/;

/** HTML-escape text for the markdown renderer's output (which is sanitized afterwards). */
export function escapeHtml(text) {
  return String(text)
    .replaceAll('&', '&amp;')
    .replaceAll('<', '&lt;')
    .replaceAll('>', '&gt;')
    .replaceAll('"', '&quot;')
    .replaceAll("'", '&#39;');
}

const markdown = new Marked({ gfm: true, breaks: false, async: false });
markdown.use({
  renderer: {
    // Raw HTML in model output is shown, not interpreted.
    html({ text }) {
      return escapeHtml(text);
    },
    // An image would be fetched as soon as it renders: offer it as a link instead.
    image({ href, text }) {
      const label = `image: ${text || href}`;
      return `<a href="${escapeHtml(href)}">${escapeHtml(label)}</a>`;
    },
  },
});

const purifier = DOMPurify(window);
purifier.addHook('uponSanitizeAttribute', (node, data) => {
  // Classes come from marked's code fences only; anything else could impersonate a marker.
  if (data.attrName === 'class' && !CODE_CLASS.test(data.attrValue)) data.keepAttr = false;
  if (data.attrName === 'type' && node.nodeName === 'INPUT' && data.attrValue !== 'checkbox') {
    data.keepAttr = false;
  }
});
purifier.addHook('afterSanitizeAttributes', (node) => {
  if (node.nodeName === 'A' && node.hasAttribute('href')) {
    node.setAttribute('target', '_blank');
    node.setAttribute('rel', 'noopener noreferrer');
  }
  if (node.nodeName === 'INPUT') {
    if (node.getAttribute('type') !== 'checkbox') node.remove();
    else node.setAttribute('disabled', '');
  }
});

const PURIFY_CONFIG = {
  ALLOWED_TAGS,
  ALLOWED_ATTR,
  ALLOW_DATA_ATTR: false,
  ALLOW_ARIA_ATTR: false,
  RETURN_DOM_FRAGMENT: true,
};

/** Sanitize an HTML string into a DocumentFragment. The only door from HTML strings to DOM. */
export function sanitize(html) {
  return purifier.sanitize(html, PURIFY_CONFIG);
}

/** Markdown text -> sanitized DocumentFragment, with guard redactions marked. */
export function renderMarkdown(text) {
  const fragment = sanitize(markdown.parse(String(text ?? '')));
  markRedactions(fragment);
  return fragment;
}

/** Markdown as the model saw it: like renderMarkdown, with tokens marked too. */
export function renderModelMarkdown(text) {
  const fragment = renderMarkdown(text);
  markTokens(fragment);
  return fragment;
}

/**
 * Wrap every match of `pattern` inside the text nodes under `root` in an element made by
 * `wrap(match)`. Matches never span text nodes, and text already inside a wrapper is skipped.
 */
export function wrapMatches(root, pattern, wrap, skipSelector) {
  const doc = root.ownerDocument ?? document;
  const walker = doc.createTreeWalker(root, NodeFilter.SHOW_TEXT);
  const nodes = [];
  for (let node = walker.nextNode(); node; node = walker.nextNode()) {
    if (skipSelector && node.parentElement?.closest(skipSelector)) continue;
    nodes.push(node);
  }
  let count = 0;
  for (const node of nodes) {
    const text = node.data;
    const re = new RegExp(pattern.source, pattern.flags.includes('g') ? pattern.flags : `${pattern.flags}g`);
    let last = 0;
    const parts = [];
    for (let m = re.exec(text); m; m = re.exec(text)) {
      if (m[0].length === 0) { re.lastIndex += 1; continue; }
      if (m.index > last) parts.push(doc.createTextNode(text.slice(last, m.index)));
      const el = wrap(m, doc);
      el.textContent = m[0];
      parts.push(el);
      last = m.index + m[0].length;
      count += 1;
    }
    if (parts.length === 0) continue;
    if (last < text.length) parts.push(doc.createTextNode(text.slice(last)));
    node.replaceWith(...parts);
  }
  return count;
}

/** Mark the output guard's redactions: `<span class="redaction">`. */
export function markRedactions(root) {
  return wrapMatches(root, REDACTION_PATTERN, (m, doc) => {
    const span = doc.createElement('span');
    span.className = 'redaction';
    if (m[1]) span.dataset.kind = m[1];
    span.title = m[1]
      ? `removed by the output guard: the model wrote a value of kind "${m[1]}"`
      : 'removed by the output guard: a forbidden term';
    return span;
  }, '.redaction, .token');
}

/** Mark vault tokens (`<EMAIL_1>`) in text the model saw: `<mark class="token">`. */
export function markTokens(root) {
  return wrapMatches(root, TOKEN_PATTERN, (m, doc) => {
    const mark = doc.createElement('mark');
    mark.className = 'token';
    mark.title = 'a token: the model saw this instead of your value';
    return mark;
  }, '.redaction, .token');
}

/**
 * UTF-16 offsets for code-point offsets. The server counts offsets in Unicode code points
 * (Python string indices); JavaScript strings count UTF-16 units. Result has length cps+1.
 */
export function codePointOffsets(text) {
  const offsets = [0];
  let unit = 0;
  for (const ch of text) {
    unit += ch.length;
    offsets.push(unit);
  }
  return offsets;
}

/**
 * Keep only the usable masked spans, in order, converted to UTF-16 offsets. Spans that fall
 * outside the text or overlap an earlier one are dropped rather than trusted.
 */
export function maskedRanges(text, masked) {
  const offsets = codePointOffsets(text);
  const limit = offsets.length - 1;
  const spans = (Array.isArray(masked) ? masked : [])
    .filter((s) => s && Number.isInteger(s.start) && Number.isInteger(s.end)
      && s.start >= 0 && s.end > s.start && s.end <= limit)
    .sort((a, b) => a.start - b.start);
  const ranges = [];
  let lastEnd = 0;
  for (const s of spans) {
    if (s.start < lastEnd) continue;
    ranges.push({
      start: offsets[s.start], end: offsets[s.end],
      kind: String(s.kind ?? ''), token: String(s.token ?? ''),
    });
    lastEnd = s.end;
  }
  return ranges;
}

/** The user's text as text nodes, each masked span in `<mark class="masked">`. */
export function maskedFragment(text, masked, doc = document) {
  const fragment = doc.createDocumentFragment();
  let last = 0;
  for (const r of maskedRanges(text, masked)) {
    if (r.start > last) fragment.append(doc.createTextNode(text.slice(last, r.start)));
    const mark = doc.createElement('mark');
    mark.className = 'masked';
    mark.dataset.kind = r.kind;
    mark.dataset.token = r.token;
    mark.title = `the model saw ${r.token}`;
    mark.tabIndex = 0;
    mark.textContent = text.slice(r.start, r.end);
    fragment.append(mark);
    last = r.end;
  }
  if (last < text.length) fragment.append(doc.createTextNode(text.slice(last)));
  return fragment;
}

/** The text the model saw for a user message, rebuilt from its masked spans. */
export function modelTextFromMasked(text, masked) {
  let out = '';
  let last = 0;
  for (const r of maskedRanges(text, masked)) {
    out += text.slice(last, r.start) + r.token;
    last = r.end;
  }
  return out + text.slice(last);
}

/** Plain text (a user's message as the model saw it) with tokens marked. */
export function tokenizedFragment(text, doc = document) {
  const fragment = doc.createDocumentFragment();
  fragment.append(doc.createTextNode(text));
  markTokens(fragment);
  return fragment;
}

/** Tool-call arguments for display: pretty JSON when they parse, the raw text otherwise. */
export function prettyArguments(args) {
  if (args !== null && typeof args === 'object') return JSON.stringify(args, null, 2);
  const text = String(args ?? '');
  if (text.trim() === '') return '';
  try {
    return JSON.stringify(JSON.parse(text), null, 2);
  } catch {
    return text;
  }
}
