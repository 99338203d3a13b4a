/**
 * Code blocks: syntax highlighting, and marking text that highlighting split into pieces.
 *
 * The rule this module keeps: highlighting changes how code looks, never what it says. The
 * vendored highlight.js (web/vendor/highlight, BSD-3-Clause) turns the code's text into an
 * HTML string; that string reaches the DOM only through a DOMPurify instance of its own that
 * keeps nothing but `<span>` elements with highlight.js's classes (`hljs-*`, and its `name_`
 * modifiers), and the result is used only if its text is exactly the code's text. Otherwise
 * the block stays as plain text. Highlighting runs on the sanitized markdown, before privacy
 * markers are added; the markers are then placed with `wrapAcross`, which treats a code
 * element's text as one string, so a redaction or a restored value split over several
 * highlighted spans still becomes one marker, never a lookalike the model could forge.
 * Only fenced blocks that name a language highlight.js knows are highlighted (no guessing:
 * auto-detection would run the whole grammar set on each streamed frame).
 */

import hljs from './vendor/highlight/highlight.min.js';
import DOMPurify from './vendor/dompurify/purify.es.mjs';

const LANGUAGE_CLASS = /^language-([A-Za-z0-9_+#.-]{1,40})$/;
const HIGHLIGHT_CLASS = /^(?:hljs-[a-z][a-z0-9-]*|[a-z][a-z0-9]*_+)$/;
const MAX_CODE_CHARS = 40000;
const CACHE_SIZE = 64;

hljs.configure({ ignoreUnescapedHTML: true, throwUnescapedHTML: false });

const purifier = DOMPurify(window);
purifier.addHook('uponSanitizeAttribute', (node, data) => {
  if (data.attrName !== 'class') return;
  const classes = data.attrValue.split(/\s+/).filter(Boolean);
  if (!classes.every((c) => HIGHLIGHT_CLASS.test(c))) data.keepAttr = false;
});
const PURIFY_CONFIG = {
  ALLOWED_TAGS: ['span'],
  ALLOWED_ATTR: ['class'],
  ALLOW_DATA_ATTR: false,
  ALLOW_ARIA_ATTR: false,
  RETURN_DOM_FRAGMENT: true,
};

// A streamed reply is re-rendered on every frame; only its last block changes, so the
// highlighted form of each (language, text) is kept for a while and cloned.
const cache = new Map();

/** The language a `<code>` element's fence names, if highlight.js knows it. */
export function codeLanguage(code) {
  for (const name of code.classList) {
    const m = name.match(LANGUAGE_CLASS);
    if (m && hljs.getLanguage(m[1])) return m[1];
  }
  return null;
}

/** The highlighted form of `text` as a fragment, or null if it cannot be trusted. */
function highlighted(text, language) {
  const key = `${language}\u0000${text}`;
  let fragment = cache.get(key);
  if (fragment === undefined) {
    fragment = null;
    try {
      const html = hljs.highlight(text, { language, ignoreIllegals: true }).value;
      const clean = purifier.sanitize(html, PURIFY_CONFIG);
      if (clean.textContent === text) fragment = clean;
    } catch {
      fragment = null;
    }
    cache.set(key, fragment);
    if (cache.size > CACHE_SIZE) cache.delete(cache.keys().next().value);
  } else {
    cache.delete(key);
    cache.set(key, fragment);
  }
  return fragment === null ? null : fragment.cloneNode(true);
}

/** Highlight every `pre > code` under `root` whose fence names a known language. */
export function highlightCodeBlocks(root) {
  let count = 0;
  for (const code of root.querySelectorAll('pre > code')) {
    const language = codeLanguage(code);
    const text = code.textContent;
    if (language === null || text.length > MAX_CODE_CHARS || text === '') continue;
    const fragment = highlighted(text, language);
    if (fragment === null) continue;
    code.replaceChildren(fragment);
    code.classList.add('hljs');
    code.dataset.language = language;
    count += 1;
  }
  return count;
}

/**
 * Wrap every match of `pattern` in the text of `element` (all its text nodes read as one
 * string) in an element made by `wrap(match, doc)`, whose text is the match unless `wrap`
 * gave it one. Matches that touch text inside `skipSelector` are left alone. A match that
 * crosses highlighted spans takes its text out of them: the marker is one element.
 */
export function wrapAcross(element, pattern, wrap, skipSelector) {
  const doc = element.ownerDocument ?? document;
  const walker = doc.createTreeWalker(element, NodeFilter.SHOW_TEXT);
  const nodes = [];
  let text = '';
  for (let node = walker.nextNode(); node; node = walker.nextNode()) {
    const skipped = skipSelector ? node.parentElement?.closest(skipSelector) : null;
    nodes.push({ node, start: text.length, skip: Boolean(skipped && element.contains(skipped)) });
    text += node.data;
  }
  const re = new RegExp(pattern.source, pattern.flags.includes('g') ? pattern.flags : `${pattern.flags}g`);
  const matches = [];
  for (let m = re.exec(text); m; m = re.exec(text)) {
    if (m[0].length === 0) { re.lastIndex += 1; continue; }
    const end = m.index + m[0].length;
    const touched = nodes.filter((n) => n.start < end && n.start + n.node.data.length > m.index);
    if (touched.some((n) => n.skip)) continue;
    matches.push({ m, start: m.index, end, touched });
  }
  // Last first: a change never moves the text nodes and offsets an earlier match uses.
  for (const { m, start, end, touched } of matches.reverse()) {
    const first = touched[0];
    const last = touched[touched.length - 1];
    const range = doc.createRange();
    range.setStart(first.node, start - first.start);
    range.setEnd(last.node, end - last.start);
    range.deleteContents();
    const marker = wrap(m, doc);
    if (!marker.hasChildNodes()) marker.textContent = m[0];
    range.insertNode(marker);
  }
  return matches.length;
}
