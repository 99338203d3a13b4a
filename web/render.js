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
 * nodes only, so model output can never forge one. A link to another origin shows where it
 * goes, next to it, in text.
 *
 * What is shown is what the guard screened (docs/threat-model.md): the server screens reply
 * text as this renderer shows it. The projection module server/holdback/stream/projection.py
 * and this renderer must agree. The projection decodes one level of HTML character references,
 * drops markdown backslash escapes before ASCII punctuation, and ignores the emphasis, code and
 * strike markers (`*`, `_` unless between two alphanumerics, `` ` ``, `~`). So marked runs
 * with nothing that decodes or rewrites more than that:
 * - gfm on (tables, strike, task lists, URL autolinks), breaks off, pedantic off, no
 *   extensions; marked 18 has no smartypants/typographer and no email mangling at all;
 * - character references are left to the HTML parser, which decodes them once (marked itself
 *   decodes numeric ones in plain text, also once); in code they are shown as written;
 * - backslash escapes in link destinations and titles are dropped before ASCII punctuation
 *   only (marked's default drops them before any Unicode punctuation or symbol);
 * - a link's `href` is the destination as written, not run through `encodeURI` (the browser's
 *   URL parser percent-encodes it when the link is followed; nothing is ever percent-decoded),
 *   so the destination shown beside a link is exactly the text the guard screened;
 * - bare email addresses (`a@b.example`, `<a@b.example>`) stay text, never `mailto:` links, so
 *   a restored address never sits in an `href`.
 * The token and guard-label syntax is the server's own, served as `/syntax.js`
 * (server/holdback/app/syntax.py, generated from server/holdback/tokens.py).
 */

import { Lexer, Marked, Tokenizer } from './vendor/marked/marked.esm.js';
import DOMPurify from './vendor/dompurify/purify.es.mjs';
import {
  REDACTION_SOURCE, TOKEN_SOURCE, URL_LABEL_SOURCE, pattern,
} from '/syntax.js';
import { highlightCodeBlocks, wrapAcross } from './code.js';

/** A token as the model sees it: `<KIND_N>` (server/holdback/tokens.py, via /syntax.js). */
export const TOKEN_PATTERN = pattern(TOKEN_SOURCE);

/** A guard redaction: `[redacted]` (a forbidden term) or `[redacted <kind>]` (a detector). */
export const REDACTION_PATTERN = pattern(REDACTION_SOURCE);

/** A token inside a URL, written as its kind instead of its value: `[email]`. */
export const URL_LABEL_PATTERN = pattern(URL_LABEL_SOURCE);

const ALLOWED_TAGS = [
  'a', 'p', 'br', 'hr', 'h1', 'h2', 'h3', 'h4', 'h5', 'h6', 'strong', 'em', 'del', 's',
  'code', 'pre', 'blockquote', 'ul', 'ol', 'li', 'table', 'thead', 'tbody', 'tr', 'th', 'td',
  'input', 'sup', 'sub', 'kbd',
];
const ALLOWED_ATTR = ['href', 'title', 'align', 'start', 'type', 'checked', 'disabled', 'class'];
const CODE_CLASS = /^language-[A-Za-z0-9_+#.-]{1,40}$/;
// Backslash escapes marked drops in link destinations and titles: before ASCII punctuation
// only, as the server's projection does (CommonMark's own rule).
const ASCII_PUNCTUATION_ESCAPE = /\\([!-/:-@[-`{-~])/g;
const DESTINATION_MAX = 80;
// Characters a destination shows percent-encoded, so it reads as what it is: controls,
// format characters (bidi overrides, zero-width), line and paragraph separators, odd spaces.
const UNSHOWABLE = /[\p{C}\p{Zl}\p{Zp}\u00a0\u1680\u2000-\u200a\u202f\u205f\u3000]/gu;

/** HTML-escape text for the markdown renderer's output (which is sanitized afterwards). */
export function escapeHtml(text) {
  return String(text)
    .replaceAll('&', '&amp;')
    .replaceAll('<', '&lt;')
    .replaceAll('>', '&gt;')
    .replaceAll('"', '&quot;')
    .replaceAll("'", '&#39;');
}

/**
 * HTML-escape text but keep its character references (`&lt;`, `&#64;`), which the HTML parser
 * then decodes once: the one level of decoding the server's projection applies too. This is
 * what marked does for text and link destinations.
 */
export function escapeKeepingReferences(text) {
  return String(text).replace(
    /[<>"']|&(?!(?:#\d{1,7}|#[Xx][a-fA-F0-9]{1,6}|\w+);)/g,
    (ch) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' })[ch],
  );
}

/** A string `encodeURI` accepts (no lone surrogates); marked drops links that are not. */
function wellFormed(text) {
  try {
    encodeURI(text);
    return true;
  } catch {
    return false;
  }
}

// marked reads this rule from its (module-wide) inline grammars when it unescapes a link's
// destination or title, or a definition's: narrow it to ASCII punctuation, in every grammar.
// The vendored file stays unmodified; tests/browser/test_render_links.py checks the effect.
for (const grammar of Object.values(Lexer.rules.inline)) {
  grammar.anyPunctuation = ASCII_PUNCTUATION_ESCAPE;
}

/** An email autolink (`a@b.example`, `<a@b.example>`) as the plain text it was. */
function emailAsText(token) {
  if (!token || !String(token.href).startsWith('mailto:') || token.text === token.href) return token;
  return { type: 'text', raw: token.raw, text: token.raw };
}

const markdown = new Marked({ gfm: true, breaks: false, pedantic: false, async: false });
markdown.use({
  tokenizer: {
    url(src) {
      return emailAsText(Tokenizer.prototype.url.call(this, src));
    },
    autolink(src) {
      return emailAsText(Tokenizer.prototype.autolink.call(this, src));
    },
  },
  renderer: {
    // Raw HTML in model output is shown, not interpreted.
    html({ text }) {
      return escapeHtml(text);
    },
    // The destination as written (see the top of this module); an autolink's text and
    // destination are both shown exactly as written, without reference decoding.
    link({ href, title, tokens, text, autolink }) {
      const body = autolink ? escapeHtml(text) : this.parser.parseInline(tokens);
      if (!wellFormed(href)) return body;
      const dest = autolink ? escapeHtml(href) : escapeKeepingReferences(href);
      const titled = title ? ` title="${escapeKeepingReferences(title)}"` : '';
      return `<a href="${dest}"${titled}>${body}</a>`;
    },
    // An image would be fetched as soon as it renders: offer it as a link instead.
    image({ href, title, tokens, text }) {
      const alt = tokens ? this.parser.parseInline(tokens, this.parser.textRenderer) : text;
      const label = escapeKeepingReferences(`image: ${alt || 'untitled'}`);
      if (!wellFormed(href)) return label;
      const titled = title ? ` title="${escapeKeepingReferences(title)}"` : '';
      return `<a href="${escapeKeepingReferences(href)}"${titled}>${label}</a>`;
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
    node.setAttribute('referrerpolicy', 'no-referrer');
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

/**
 * Markdown text -> sanitized DocumentFragment, with code highlighted (code.js) and link
 * destinations and redactions shown.
 */
export function renderMarkdown(text) {
  const fragment = sanitize(markdown.parse(String(text ?? '')));
  highlightCodeBlocks(fragment);
  showLinkDestinations(fragment);
  markRedactions(fragment);
  markWithheld(fragment);
  return fragment;
}

// A sentence the team's policy moderator withheld (docs/moderation.md): the server writes
// `[withheld by policy: <category>]` in its place; the category is a short closed-shape name.
const WITHHELD_PATTERN = /\[withheld by policy: (?<category>[A-Za-z0-9][A-Za-z0-9_./-]{0,63})\]/g;

/** Mark withheld sentences: `<span class="redaction withheld" data-category>`. */
export function markWithheld(root) {
  return wrapMatches(root, WITHHELD_PATTERN, (m, doc) => {
    const span = doc.createElement('span');
    span.className = 'redaction withheld';
    span.dataset.category = m.groups.category;
    span.title = `withheld by this team's policy (${m.groups.category}): the sentence was not shown`;
    span.textContent = `[withheld by policy: ${m.groups.category}]`;
    return span;
  }, '.redaction, .token');
}

/** Markdown as the model saw it: like renderMarkdown, with tokens marked too. */
export function renderModelMarkdown(text) {
  const fragment = renderMarkdown(text);
  markTokens(fragment);
  return fragment;
}

/**
 * A link destination for display: exactly as written, with invisible or look-alike characters
 * percent-encoded (an encoding, never a decoding) and cut after `max` characters.
 */
export function destinationText(href, max = DESTINATION_MAX) {
  const visible = String(href).replace(UNSHOWABLE, (ch) => encodeURIComponent(ch));
  const chars = [...visible];
  return chars.length > max ? `${chars.slice(0, max - 1).join('')}…` : visible;
}

/** Whether a link points outside this page's origin (unparseable ones count as outside). */
export function isOtherOrigin(href, base = document.baseURI) {
  try {
    const url = new URL(href, base);
    return url.origin !== new URL(base).origin;
  } catch {
    return true;
  }
}

/**
 * After every link to another origin whose text is not already its destination, a
 * `<span class="link-dest" data-testid="link-destination">` showing ` (destination)`; the whole
 * destination is its title. Same-origin links (and links without an href) get none.
 */
export function showLinkDestinations(root, base = document.baseURI) {
  const doc = root.ownerDocument ?? document;
  let count = 0;
  for (const a of root.querySelectorAll('a[href]')) {
    const href = a.getAttribute('href');
    if (!isOtherOrigin(href, base)) continue;
    const text = a.textContent.trim();
    if (text === href || `http://${text}` === href) continue; // an autolink shows it already
    const dest = doc.createElement('span');
    dest.className = 'link-dest';
    dest.setAttribute('data-testid', 'link-destination');
    dest.title = `this link goes to ${destinationText(href, Infinity)}`;
    dest.textContent = ` (${destinationText(href)})`;
    a.after(dest);
    count += 1;
  }
  return count;
}

/**
 * Wrap every match of `pattern` inside the text nodes under `root` in an element made by
 * `wrap(match)` (its text is the match, unless `wrap` gave it one). Matches never span text
 * nodes, except in highlighted code, whose text is read as one string (`code.js`); text
 * inside `skipSelector` is skipped, and with `withinSelector` only text inside it is
 * considered.
 */
export function wrapMatches(root, pattern, wrap, skipSelector, withinSelector) {
  const doc = root.ownerDocument ?? document;
  let count = 0;
  if (!withinSelector) {
    for (const code of root.querySelectorAll('code.hljs')) {
      if (skipSelector && code.closest(skipSelector)) continue;
      count += wrapAcross(code, pattern, wrap, skipSelector);
    }
  }
  const walker = doc.createTreeWalker(root, NodeFilter.SHOW_TEXT);
  const nodes = [];
  for (let node = walker.nextNode(); node; node = walker.nextNode()) {
    if (skipSelector && node.parentElement?.closest(skipSelector)) continue;
    if (withinSelector && !node.parentElement?.closest(withinSelector)) continue;
    if (!withinSelector && node.parentElement?.closest('code.hljs')) continue;
    nodes.push(node);
  }
  for (const node of nodes) {
    const text = node.data;
    const re = new RegExp(pattern.source, pattern.flags.includes('g') ? pattern.flags : `${pattern.flags}g`);
    let last = 0;
    const parts = [];
    for (let m = re.exec(text); m; m = re.exec(text)) {
      if (m[0].length === 0) { re.lastIndex += 1; continue; }
      if (m.index > last) parts.push(doc.createTextNode(text.slice(last, m.index)));
      const el = wrap(m, doc);
      if (!el.hasChildNodes()) el.textContent = m[0];
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

// The guard writes its redactions by detector kind (`[redacted credit_card]`, docs/protocol.md);
// the page shows them in words. Only the marker's text changes: it is made from the kind, a
// closed set of names, so it can never show more than the guard's own label did.
const REDACTION_WORDS = {
  email: 'email address',
  phone: 'phone number',
  credit_card: 'card number',
  us_ssn: 'social security number',
  iban: 'IBAN',
  ip_address: 'IP address',
  secret: 'secret',
  jwt: 'access token',
  password: 'password',
  value: 'value',
};

/** A redaction's kind in words: `credit_card` -> `card number`; others with spaces. */
export function redactionWords(kind) {
  return REDACTION_WORDS[kind] ?? String(kind).replaceAll('_', ' ').trim();
}

/** How a redaction reads on the page: `[redacted card number]`, `[redacted]`. */
export function redactionLabel(kind) {
  return kind ? `[redacted ${redactionWords(kind)}]` : '[redacted]';
}

/**
 * Mark the output guard's redactions: `<span class="redaction">`, with `data-kind` for
 * `[redacted <kind>]`; inside links and their destinations also the kind labels that stand for
 * a value in a URL (`[email]`), with the class `url-label` too.
 */
export function markRedactions(root) {
  const marked = wrapMatches(root, REDACTION_PATTERN, (m, doc) => {
    const span = doc.createElement('span');
    span.className = 'redaction';
    const kind = m.groups?.kind;
    if (kind) span.dataset.kind = kind;
    span.title = kind === 'token'
      ? 'removed by the output guard: a placeholder the model made up, or one cut off, which stands for nothing here'
      : kind
        ? `removed by the output guard: the model wrote a ${redactionWords(kind)} of its own`
        : 'removed by the output guard: a forbidden term';
    span.textContent = redactionLabel(kind);
    return span;
  }, '.redaction, .token');
  return marked + wrapMatches(root, URL_LABEL_PATTERN, (m, doc) => {
    const span = doc.createElement('span');
    span.className = 'redaction url-label';
    span.dataset.kind = m.groups.kind;
    span.title = `a value of kind "${m.groups.kind}" stood here: a link never carries your values`;
    return span;
  }, '.redaction, .token', 'a, .link-dest');
}

const MAX_RESTORED_VALUES = 500;

/** `text` as a regular expression that matches it literally. */
function literal(text) {
  return text.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
}

/**
 * The distinct values of a conversation's masked spans, `[{value, kind}]`, longest first:
 * what this viewer's page already shows in the user's own messages.
 */
export function knownValues(messages) {
  const seen = new Map();
  for (const message of messages) {
    const text = String(message.text ?? '');
    for (const r of maskedRanges(text, message.masked)) {
      const value = text.slice(r.start, r.end);
      const key = value.toLowerCase();
      if ([...value.trim()].length < 2 || seen.has(key)) continue;
      seen.set(key, { value, kind: r.kind });
    }
  }
  return [...seen.values()].sort((a, b) => b.value.length - a.value.length)
    .slice(0, MAX_RESTORED_VALUES);
}

/**
 * Mark, in a reply restored for this viewer, the values the page already shows in the
 * user's own messages (`knownValues`): `<mark class="restored" data-kind="...">`. The
 * server sends no spans for replies, so the page finds them itself, in text nodes only;
 * the marker's title names the kind, never the value or its token.
 */
export function markRestored(root, values) {
  const usable = (Array.isArray(values) ? values : []).filter((v) => v && typeof v.value === 'string');
  if (usable.length === 0) return 0;
  const kinds = new Map(usable.map((v) => [v.value.toLowerCase(), v.kind]));
  const re = new RegExp(usable.map((v) => literal(v.value)).join('|'), 'giu');
  return wrapMatches(root, re, (m, doc) => {
    const mark = doc.createElement('mark');
    mark.className = 'restored';
    const kind = kinds.get(m[0].toLowerCase()) ?? '';
    if (kind) mark.dataset.kind = kind;
    mark.title = kind
      ? `your ${redactionWords(kind)}, restored for you: the model saw a token instead`
      : 'your value, restored for you: the model saw a token instead';
    return mark;
  }, '.redaction, .token, .restored, .link-dest');
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
