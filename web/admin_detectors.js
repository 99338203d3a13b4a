/**
 * The admin console's team detectors: pattern sets (TOML) and people lists (CSV), each viewed,
 * added (typed, pasted or read from a file chosen here), edited and deleted.
 *
 * The rules this module keeps (those of the console, `admin.js`):
 * - A definition is fetched only to edit it, shown only in its edit box, and dropped from the
 *   page when the box is closed; tables show names, labels and counts, and notices name the set
 *   or list, never a person or an identifier. People's names are the admins' own data: they see
 *   them in the box, and nothing here logs them.
 * - The server judges a definition with the loaders its files go through; a refusal is shown
 *   in the box as the server words it (the entry or line and the reason), and the box keeps
 *   the text so it can be fixed. A stored entry that no longer loads is shown with its reason.
 * - Every string from the server goes in with `textContent`; no inline script or style.
 */

import { ApiError } from '/api.js';

const $ = (id) => document.getElementById(id);
const enc = encodeURIComponent;

// Per source: its route, its listing's key, its text field, and how the page words it.
const SOURCES = {
  patterns: {
    route: '/api/admin/pattern-sets', listing: 'pattern_sets', field: 'toml', noun: 'pattern set',
    cli: 'holdback patterns import FILE',
  },
  people: {
    route: '/api/admin/people-lists', listing: 'people_lists', field: 'csv', noun: 'people list',
    cli: 'holdback people import FILE',
  },
};

function counts(source, entry) {
  const n = (source === 'patterns' ? entry.entries : entry.people) ?? 0;
  if (source === 'patterns') return `${n} ${n === 1 ? 'entry' : 'entries'}`;
  return `${n} ${n === 1 ? 'person' : 'people'}`;
}

/** The two sections, wired to the console's helpers; returns `load` and `clear`. */
export function initDetectors({ request, el, fill, button, when, notice, failure }) {
  const sections = Object.fromEntries(Object.keys(SOURCES).map((source) => [source, {
    editing: null, // the name being edited, or null while the box makes a new one
    entries: [],
  }]));

  const formError = (source, message) => {
    const box = $(`${source}-form-error`);
    box.textContent = message ?? '';
    box.hidden = !message;
  };

  async function load(source) {
    const { route, listing } = SOURCES[source];
    let answer;
    try {
      answer = await request('GET', route);
    } catch (err) {
      failure(err, `Could not load the ${SOURCES[source].noun}s`);
      return;
    }
    sections[source].entries = answer?.[listing] ?? [];
    render(source, answer?.file ?? null);
  }

  function render(source, file) {
    const { noun } = SOURCES[source];
    const entries = sections[source].entries;
    const fileNote = $(`${source}-file-note`);
    fileNote.hidden = !file;
    if (file) {
      fileNote.textContent = file.error
        ? `The server's --${source} file cannot be used: ${file.error}`
        : `The server's --${source} file adds ${counts(source, file)}${source === 'patterns' && file.labels?.length ? ` (${file.labels.join(', ')})` : ''}; it is edited where it lives.`;
    }
    $(`${source}-empty`).hidden = entries.length > 0;
    $(`${source}-body`).replaceChildren(...entries.map((entry) => row(source, noun, entry)));
  }

  function row(source, noun, entry) {
    const name = String(entry.name);
    const actions = el('td', { className: 'admin-actions' });
    const showActions = () => fill(actions,
      button('Edit', () => openForm(source, name), { 'aria-label': `Edit ${noun} ${name}` }),
      button('Delete', showDelete, { className: 'small danger-text', 'aria-label': `Delete ${noun} ${name}` }),
    );
    const showDelete = () => fill(actions,
      el('span', { className: 'admin-confirm-q', text: `Delete ${name}? New messages no longer use it.` }),
      button('Confirm delete', async () => {
        try {
          await request('DELETE', `${SOURCES[source].route}/${enc(name)}`);
        } catch (err) {
          failure(err, `Could not delete the ${noun}`);
          return;
        }
        if (sections[source].editing === name) closeForm(source);
        notice(`The ${noun} ${name} is deleted.`);
        await load(source);
      }, { className: 'small danger', 'aria-label': 'Confirm delete' }),
      button('Cancel', showActions),
    );
    showActions();
    const cells = source === 'patterns'
      ? [el('td', { 'data-testid': 'detector-labels', text: (entry.labels ?? []).join(', ') })]
      : [];
    return el('tr', { 'data-testid': `${source}-row`, 'data-name': name },
      el('td', { className: 'admin-name', text: name }),
      ...cells,
      entry.error
        ? el('td', { 'data-testid': 'detector-count', className: 'danger-text', text: `cannot be used: ${entry.error}` })
        : el('td', { 'data-testid': 'detector-count', text: counts(source, entry) }),
      el('td', { text: when(entry.updated_at), title: entry.updated_at ?? '' }),
      actions);
  }

  async function openForm(source, name = null) {
    const { route, field, noun } = SOURCES[source];
    let shown = null;
    if (name !== null) {
      try {
        shown = await request('GET', `${route}/${enc(name)}`);
      } catch (err) {
        failure(err, `Could not open the ${noun} ${name}`);
        return;
      }
    }
    sections[source].editing = name;
    $(`${source}-form-title`).textContent = name === null ? `New ${noun}` : `Edit ${name}`;
    $(`${source}-name`).value = name ?? '';
    $(`${source}-name`).readOnly = name !== null;
    $(`${source}-text`).value = shown?.[field] ?? '';
    $(`${source}-upload`).value = '';
    $(`${source}-save`).textContent = name === null ? `Create ${noun}` : `Save ${noun}`;
    formError(source, null);
    $(`${source}-form`).hidden = false;
    (name === null ? $(`${source}-name`) : $(`${source}-text`)).focus();
  }

  function closeForm(source) {
    sections[source].editing = null;
    $(`${source}-form`).hidden = true;
    $(`${source}-name`).value = '';
    $(`${source}-text`).value = ''; // the definition leaves the page with the box
    $(`${source}-upload`).value = '';
    formError(source, null);
  }

  async function save(source) {
    const { route, field, noun, cli } = SOURCES[source];
    const name = $(`${source}-name`).value.trim();
    const text = $(`${source}-text`).value;
    if (!name) {
      formError(source, `A ${noun} needs a name.`);
      return;
    }
    let saved;
    try {
      saved = await request('PUT', `${route}/${enc(name)}`, { [field]: text });
    } catch (err) {
      let message = err.message;
      if (err instanceof ApiError && err.status === 413) {
        message = `${err.message}: this ${noun} is over the server's limit for one request; use ${cli} --name ${name}`;
      }
      formError(source, message); // the loader's reason, beside the text to fix
      failure(new ApiError(err.status ?? 0, message, err.code ?? null), `Could not save the ${noun}`);
      return;
    }
    closeForm(source);
    notice(`The ${noun} ${name} is saved (${counts(source, saved ?? {})}); new messages use it now.`);
    await load(source);
  }

  for (const source of Object.keys(SOURCES)) {
    $(`${source}-new`).addEventListener('click', () => openForm(source));
    $(`${source}-cancel`).addEventListener('click', () => closeForm(source));
    $(`${source}-form`).addEventListener('submit', (event) => {
      event.preventDefault();
      save(source);
    });
    $(`${source}-upload`).addEventListener('change', async () => {
      const file = $(`${source}-upload`).files?.[0];
      if (!file) return;
      try {
        $(`${source}-text`).value = await file.text();
      } catch {
        formError(source, 'The file could not be read.');
        return;
      }
      if (!$(`${source}-name`).value.trim() && sections[source].editing === null) {
        $(`${source}-name`).value = file.name.replace(/\.[^.]*$/, '');
      }
      formError(source, null);
    });
  }

  return {
    load: () => Promise.all(Object.keys(SOURCES).map(load)),
    clear: () => {
      for (const source of Object.keys(SOURCES)) {
        closeForm(source);
        $(`${source}-body`).replaceChildren();
      }
    },
  };
}
