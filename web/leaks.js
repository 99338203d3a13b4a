/**
 * The leak demonstration's judge in the browser: what in the raw frames the viewer must not see.
 *
 * The rule this module keeps: it judges the frames exactly as received, and shares no code with
 * the server's pipelines or with the server's own judge (server/holdback/app/demo_oracle.py).
 * It is a second, separate implementation of the one definition in docs/demo.md, so the page's
 * counts and `holdback demo --verify`'s table agree only if both are right.
 *
 * A leak is a secret (a value the model made up, a forbidden term, what an error body quoted)
 * found whole in what a frame shows: a stream's text joined across its frames (per channel and
 * per tool call), or any other string in the frame. It is looked for verbatim, then with JSON
 * escapes decoded, then HTML character references, then markdown escapes and emphasis marks
 * taken out, then ignoring case, white space and invisible characters. Each secret counts once,
 * at the first frame that shows it. Corruption (a piece of a vault token on screen) is counted
 * apart. No DOM is touched except an inert DOMParser document, for character references.
 */

import { KIND_SOURCE } from '/syntax.js';

const SIMPLE = { '"': '"', '\\': '\\', '/': '/', b: '\b', f: '\f', n: '\n', r: '\r', t: '\t' };
const JSON_ESCAPE = /\\(u[0-9a-fA-F]{4}|["\\/bfnrt])/g;
const MD_ESCAPE = /\\([!-/:-@[-`{-~])/g;
const MD_MARKS = /[*_`~]/g;
const INVISIBLE = /[\s\u00ad\u200b-\u200f\u2060\ufeff]+/g;
// A token's kind comes from the one token syntax (`/syntax.js`); a fragment is a token's
// tail (`AIL_1>`) or head (`<EMAI`) left on a frame.
const FRAGMENT = new RegExp(`<?${KIND_SOURCE}_[0-9]+>|<${KIND_SOURCE}`, 'g');

export function jsonUnescape(text) {
  return text.replace(JSON_ESCAPE, (_, esc) => (esc[0] === 'u' ? String.fromCharCode(parseInt(esc.slice(1), 16)) : SIMPLE[esc]));
}

let parser = null;
/** Decode HTML character references once (tags stay text), as an HTML parser reads text. */
export function decodeEntities(text) {
  if (!text.includes('&')) return text;
  parser ??= new DOMParser();
  const doc = parser.parseFromString(`<!doctype html><body>${text.replaceAll('<', '&lt;')}`, 'text/html');
  return doc.body.textContent ?? '';
}

const markdown = (text) => text.replace(MD_ESCAPE, '$1').replace(MD_MARKS, '');
const normalized = (text) => text.replace(INVISIBLE, '').toLowerCase();

/** The forms a viewer could read `text` in, each decoding more than the one before. */
export function views(text) {
  const json = jsonUnescape(text);
  const entities = decodeEntities(json);
  const md = markdown(entities);
  return [['verbatim', text], ['json escape', json], ['html entity', entities], ['markdown', md], ['normalized', normalized(md)]];
}

function secretForm(secret, form) {
  if (form === 'markdown') return markdown(secret);
  if (form === 'normalized') return normalized(markdown(secret));
  return secret;
}

function find(text, secret, before) {
  const now = views(text);
  const prior = views(before);
  for (let i = 0; i < now.length; i += 1) {
    const at = now[i][1].indexOf(secretForm(secret, now[i][0]));
    if (at !== -1) return { form: now[i][0], offset: Math.max(at - prior[i][1].length, 0) };
  }
  return null;
}

function* strings(value, path = '') {
  if (typeof value === 'string') yield [path, value];
  else if (Array.isArray(value)) {
    for (let i = 0; i < value.length; i += 1) yield* strings(value[i], `${path}[${i}]`);
  } else if (value !== null && typeof value === 'object') {
    for (const [key, item] of Object.entries(value)) yield* strings(item, path ? `${path}.${key}` : key);
  }
}

/**
 * Judge a run: `rawFrames` as received (strings). Returns {leaks, corruption}, each a list of
 * {frame (1-based), offset, field, form, text}.
 */
export function judge(rawFrames, secrets, tokens) {
  const usable = tokens.filter((t) => typeof t === 'string' && t.length >= 2);
  const leaks = [];
  const corruption = [];
  const seen = new Set();
  const streams = new Map();
  rawFrames.forEach((raw, index) => {
    const number = index + 1;
    let frame;
    try {
      frame = JSON.parse(raw);
    } catch {
      frame = raw;
    }
    const places = [];
    for (const [path, value] of strings(frame)) {
      if (path === 'text' && frame?.type === 'assistant_delta') {
        const key = `${frame.channel}:${frame.call_id ?? ''}`;
        const before = streams.get(key) ?? '';
        streams.set(key, before + value);
        places.push(['text', before + value, before]);
      } else {
        places.push([path, value, '']);
      }
      for (const m of value.matchAll(FRAGMENT)) {
        const piece = m[0];
        if (piece.length >= 2 && usable.some((t) => t.includes(piece) || piece.includes(t))) {
          corruption.push({ frame: number, offset: m.index, field: path, form: 'verbatim', text: piece });
        }
      }
    }
    for (const secret of secrets) {
      if (seen.has(secret)) continue;
      for (const [path, text, before] of places) {
        const found = find(text, secret, before);
        if (found) {
          seen.add(secret);
          leaks.push({ frame: number, offset: found.offset, field: path, form: found.form, text: secret });
          break;
        }
      }
    }
  });
  return { leaks, corruption };
}

/** Ranges [start, end) of `raw` where any of `needles` occurs verbatim (for highlighting). */
export function verbatimRanges(raw, needles) {
  const ranges = [];
  for (const needle of needles) {
    if (!needle) continue;
    for (let at = raw.indexOf(needle); at !== -1; at = raw.indexOf(needle, at + needle.length)) {
      ranges.push([at, at + needle.length]);
    }
  }
  ranges.sort((a, b) => a[0] - b[0]);
  const merged = [];
  for (const [s, e] of ranges) {
    const last = merged[merged.length - 1];
    if (last && s < last[1]) last[1] = Math.max(last[1], e);
    else merged.push([s, e]);
  }
  return merged;
}
