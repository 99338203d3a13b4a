/**
 * The admin console (`/admin.html`): users, groups, API tokens, reveal policies, term lists,
 * the team's own detectors (pattern sets and people lists: `admin_detectors.js`), the audit.
 *
 * The rules this module keeps:
 * - Nothing of the console is shown until `GET /api/admin/users` answers 200: a member sees
 *   "Admins only", someone signed out a link to the sign-in page, and nothing else.
 * - Every string from the server is put into the page with `textContent` (through `el`),
 *   never as HTML; no inline script or style (the page runs under the server's CSP).
 * - Requests go to this origin only, with the session cookie; each change is followed by a
 *   reload of what it touched, so the page shows what the server holds, not what it hoped.
 * - A new API token's text is shown once, in its own box, and dropped from the page when the
 *   box is closed or another token is made; lists never hold one.
 * - A term list's terms are fetched only to edit that list, shown only in the edit box, and
 *   dropped from the page when the box is closed; the table shows their count, and notices
 *   name the list, never a term.
 */

import { ApiError } from '/api.js';
import { initDetectors } from '/admin_detectors.js';

const KINDS = ['email', 'phone', 'credit_card', 'iban', 'us_ssn', 'ip_address', 'secret'];
const LEVELS = ['plain', 'masked', 'label'];
// Made-up samples for the preview (documentation ranges and test numbers).
const SAMPLES = {
  email: 'ann.example@example.org',
  phone: '+1 415 555 0100',
  credit_card: '4111 1111 1111 1111',
  iban: 'DE89 3704 0044 0532 0130 00',
  us_ssn: '078-05-1120',
  ip_address: '192.0.2.44',
  secret: 'sk-example-0000000000000000',
};
const DEFAULT_SCOPE = 'default';

const $ = (id) => document.getElementById(id);

const state = {
  me: null,
  users: [],
  groups: [],
  tokens: [],
  policies: { levels: [], never_restore: [], available_levels: LEVELS },
  extraKinds: new Set(),
  termLists: [],
};

// --- HTTP -------------------------------------------------------------------------------------

async function request(method, path, body) {
  const init = { method, credentials: 'same-origin', headers: { Accept: 'application/json' } };
  if (body !== undefined) {
    init.headers['Content-Type'] = 'application/json';
    init.body = JSON.stringify(body);
  }
  let response;
  try {
    response = await fetch(path, init);
  } catch {
    throw new ApiError(0, 'The server could not be reached.');
  }
  const text = await response.text();
  let payload = null;
  if (text) {
    try {
      payload = JSON.parse(text);
    } catch {
      payload = null;
    }
  }
  if (!response.ok) {
    const message = (payload && (payload.message || payload.detail || payload.error))
      || `${method} ${path} failed with HTTP ${response.status}`;
    const error = new ApiError(response.status, String(message), payload?.code ?? null);
    if (typeof payload?.limit === 'number') error.limit = payload.limit;
    if (response.status === 401) signedOut();
    throw error;
  }
  return payload;
}

const enc = encodeURIComponent;
const admin = {
  users: async () => (await request('GET', '/api/admin/users'))?.users ?? [],
  addUser: (name, password, role) => request('POST', '/api/admin/users', { name, password, role }),
  disable: (name) => request('POST', `/api/admin/users/${enc(name)}/disable`),
  enable: (name) => request('POST', `/api/admin/users/${enc(name)}/enable`),
  setRole: (name, role) => request('POST', `/api/admin/users/${enc(name)}/role`, { role }),
  setPassword: (name, password) =>
    request('POST', `/api/admin/users/${enc(name)}/password`, { password }),
  deleteUser: (name, heir) => request('DELETE', heir
    ? `/api/admin/users/${enc(name)}?conversations_to=${enc(heir)}`
    : `/api/admin/users/${enc(name)}?shred=1`),
  groups: async () => (await request('GET', '/api/admin/groups'))?.groups ?? [],
  addGroup: (name) => request('POST', '/api/admin/groups', { name }),
  renameGroup: (old, name) => request('PATCH', `/api/admin/groups/${enc(old)}`, { name }),
  deleteGroup: (name) => request('DELETE', `/api/admin/groups/${enc(name)}`),
  addMember: (group, user) =>
    request('POST', `/api/admin/groups/${enc(group)}/members/${enc(user)}`),
  removeMember: (group, user) =>
    request('DELETE', `/api/admin/groups/${enc(group)}/members/${enc(user)}`),
  tokens: async () => (await request('GET', '/api/admin/tokens'))?.tokens ?? [],
  addToken: (user, name) => request('POST', '/api/admin/tokens', name ? { user, name } : { user }),
  revokeToken: (id) => request('POST', `/api/admin/tokens/${enc(id)}/revoke`),
  policies: () => request('GET', '/api/admin/policies'),
  setLevel: (scope, kind, level) =>
    request('PUT', `/api/admin/policies/${enc(scope)}/${enc(kind)}`, { level }),
  clearLevel: (scope, kind) => request('DELETE', `/api/admin/policies/${enc(scope)}/${enc(kind)}`),
  neverRestore: (kind) => request('POST', '/api/admin/never-restore', { kind }),
  allowRestore: (kind) => request('DELETE', `/api/admin/never-restore/${enc(kind)}`),
  preview: (body) => request('POST', '/api/admin/policies/preview', body),
  termLists: async () => (await request('GET', '/api/admin/term-lists'))?.term_lists ?? [],
  termList: (name) => request('GET', `/api/admin/term-lists/${enc(name)}`),
  saveTermList: (name, kind, purpose, terms) =>
    request('PUT', `/api/admin/term-lists/${enc(name)}`, { kind, purpose, terms }),
  deleteTermList: (name) => request('DELETE', `/api/admin/term-lists/${enc(name)}`),
  audit: async (query) => (await request('GET', `/api/audit?${query}`))?.events ?? [],
};

// --- DOM helpers ------------------------------------------------------------------------------

/** An element with text children only: strings become text nodes, never markup. */
function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (value === null || value === undefined || value === false) continue;
    if (key === 'text') node.textContent = String(value);
    else if (key === 'onclick') node.addEventListener('click', value);
    else if (key === 'onchange') node.addEventListener('change', value);
    else if (key === 'onsubmit') node.addEventListener('submit', value);
    else if (key === 'className') node.className = value;
    else node.setAttribute(key, value === true ? '' : String(value));
  }
  for (const child of children) {
    if (child === null || child === undefined || child === false) continue;
    node.append(typeof child === 'string' ? document.createTextNode(child) : child);
  }
  return node;
}

/** Replace a node's children; null and false stand for nothing. */
const fill = (node, ...children) => node.replaceChildren(...children.filter((c) => c !== null && c !== false));

const button = (text, onclick, attrs = {}) =>
  el('button', { type: 'button', className: 'small', ...attrs, onclick }, text);

function when(iso) {
  if (!iso) return '';
  const moment = new Date(iso);
  return Number.isNaN(moment.getTime()) ? String(iso) : moment.toLocaleString();
}

function notice(text) {
  $('admin-error').hidden = true;
  $('admin-notice').textContent = text;
}

function failure(err, what) {
  if (err instanceof ApiError && err.status === 401) return;
  const box = $('admin-error');
  box.textContent = `${what}: ${err.message}${err.code ? ` (${err.code})` : ''}`;
  box.hidden = false;
}

/** Run a change, say what it did, reload what it touched; errors are shown, not thrown. */
async function change(what, work, done, ...reloads) {
  try {
    await work();
  } catch (err) {
    failure(err, `Could not ${what}`);
    return false;
  }
  notice(done);
  await reload(...reloads);
  return true;
}

// --- loading ----------------------------------------------------------------------------------

async function reload(...parts) {
  const wanted = new Set(parts.length ? parts : ['users', 'groups', 'tokens', 'policies']);
  try {
    const [users, groups, tokens, policies] = await Promise.all([
      wanted.has('users') ? admin.users() : state.users,
      wanted.has('groups') ? admin.groups() : state.groups,
      wanted.has('tokens') ? admin.tokens() : state.tokens,
      wanted.has('policies') ? admin.policies() : state.policies,
    ]);
    Object.assign(state, { users, groups, tokens, policies });
  } catch (err) {
    failure(err, 'Could not load');
    return;
  }
  if (wanted.has('users') || wanted.has('groups')) {
    renderUsers();
    renderGroups();
    renderTokenOwners();
    renderPreviewViewers();
  }
  if (wanted.has('tokens')) renderTokens();
  if (wanted.has('policies') || wanted.has('groups')) renderPolicies();
  if (wanted.has('terms')) await loadTerms();
}

// --- users ------------------------------------------------------------------------------------

function renderUsers() {
  const body = $('users-body');
  body.replaceChildren(...state.users.map(userRow));
}

function userRow(user) {
  const name = String(user.name);
  const row = el('tr', { 'data-testid': 'user-row', 'data-user': name });
  const self = state.me && name === state.me;
  const actions = el('td', { className: 'admin-actions' });
  const showActions = () => {
    fill(actions,
      button(user.role === 'admin' ? 'Make member' : 'Make admin', () => change(
        'change the role', () => admin.setRole(name, user.role === 'admin' ? 'member' : 'admin'),
        `${name} is now ${user.role === 'admin' ? 'a member' : 'an admin'}.`, 'users',
      ), { 'aria-label': `${user.role === 'admin' ? 'Make member' : 'Make admin'} ${name}` }),
      self ? null : button(user.disabled ? 'Enable' : 'Disable', () => change(
        user.disabled ? 'enable the user' : 'disable the user',
        () => (user.disabled ? admin.enable(name) : admin.disable(name)),
        `${name} is ${user.disabled ? 'enabled' : 'disabled'}.`, 'users', 'tokens',
      ), { 'aria-label': `${user.disabled ? 'Enable' : 'Disable'} ${name}` }),
      button('Reset password', showPassword, { 'aria-label': `Reset password of ${name}` }),
      self ? null : button('Delete', showDelete, { className: 'small danger-text', 'aria-label': `Delete ${name}` }),
    );
  };
  const showPassword = () => {
    const input = el('input', {
      type: 'password', 'aria-label': `New password for ${name}`, autocomplete: 'new-password', minlength: 8,
    });
    fill(actions,
      input,
      button('Set password', () => change(
        'set the password', () => admin.setPassword(name, input.value),
        `${name}'s password is set; their sessions ended.`, 'users',
      )),
      button('Cancel', showActions),
    );
    input.focus();
  };
  const showDelete = () => {
    const heirs = state.users.filter((u) => u.role === 'admin' && u.name !== name && !u.disabled);
    const heir = el('select', { 'aria-label': `Admin to receive ${name}'s conversations` },
      ...heirs.map((u) => el('option', { value: u.name, text: u.name })));
    const give = el('input', { type: 'radio', name: `fate-${user.id}`, value: 'give', checked: heirs.length > 0, disabled: heirs.length === 0 });
    const shred = el('input', { type: 'radio', name: `fate-${user.id}`, value: 'shred', checked: heirs.length === 0 });
    fill(actions, el('div', { className: 'admin-confirm', role: 'group', 'aria-label': `Delete ${name}?` },
      el('span', { className: 'admin-confirm-q', text: `Delete ${name}?` }),
      el('label', {}, give, ' Give conversations to ', heir),
      el('label', {}, shred, ' Shred conversations (values gone for good)'),
      button('Confirm delete', () => change(
        'delete the user', () => admin.deleteUser(name, give.checked ? heir.value : null),
        `${name} is deleted.`, 'users', 'groups', 'tokens',
      ), { className: 'small danger', 'aria-label': 'Confirm delete' }),
      button('Cancel', showActions),
    ));
  };
  showActions();
  row.append(
    el('td', { className: 'admin-name', text: name }),
    el('td', { 'data-testid': 'user-role', text: user.role }),
    el('td', { 'data-testid': 'user-state', className: user.disabled ? 'state-off' : 'state-on', text: user.disabled ? 'disabled' : 'active' }),
    el('td', { text: (user.groups ?? []).join(', ') }),
    el('td', { text: when(user.created_at) }),
    actions,
  );
  return row;
}

$('user-add').addEventListener('submit', async (event) => {
  event.preventDefault();
  const name = $('user-add-name').value.trim();
  const password = $('user-add-password').value;
  const ok = await change('add the user', () => admin.addUser(name, password, $('user-add-role').value),
    `${name} is added.`, 'users');
  if (ok) {
    $('user-add-name').value = '';
    $('user-add-password').value = '';
  }
});

// --- groups -----------------------------------------------------------------------------------

function renderGroups() {
  $('groups-body').replaceChildren(...state.groups.map(groupRow));
}

function groupRow(group) {
  const name = String(group.name);
  const members = group.members ?? [];
  const row = el('tr', { 'data-testid': 'group-row', 'data-group': name });
  const title = el('td', { className: 'admin-name' });
  const actions = el('td', { className: 'admin-actions' });
  const memberList = el('ul', { className: 'chips', 'aria-label': `Members of ${name}` },
    ...members.map((member) => el('li', { className: 'chip', 'data-testid': 'group-member', 'data-user': member },
      el('span', { text: member }),
      button('×', () => change(
        'remove the member', () => admin.removeMember(name, member),
        `${member} is no longer in ${name}.`, 'groups', 'users',
      ), { className: 'chip-remove', 'aria-label': `Remove ${member} from ${name}`, title: `Remove ${member} from ${name}` }),
    )));
  const candidates = state.users.filter((u) => !members.includes(u.name));
  const pick = el('select', { 'aria-label': `User to add to ${name}` },
    ...candidates.map((u) => el('option', { value: u.name, text: u.name })));
  const adding = el('div', { className: 'admin-inline' }, pick,
    button('Add member', () => change(
      'add the member', () => admin.addMember(name, pick.value),
      `${pick.value} is in ${name}.`, 'groups', 'users',
    ), { 'aria-label': `Add member to ${name}`, disabled: candidates.length === 0 }));
  const showTitle = () => {
    title.replaceChildren(document.createTextNode(name));
    fill(actions,
      button('Rename', showRename, { 'aria-label': `Rename ${name}` }),
      button('Delete', showDelete, { className: 'small danger-text', 'aria-label': `Delete group ${name}` }),
    );
  };
  const showRename = () => {
    const input = el('input', { type: 'text', value: name, 'aria-label': `New name for ${name}` });
    title.replaceChildren(input);
    fill(actions,
      button('Save', () => change(
        'rename the group', () => admin.renameGroup(name, input.value.trim()),
        `${name} is now ${input.value.trim()}.`, 'groups', 'users', 'policies',
      )),
      button('Cancel', showTitle),
    );
    input.focus();
  };
  const showDelete = () => {
    fill(actions,
      el('span', { className: 'admin-confirm-q', text: `Delete ${name}, its memberships, shares and levels?` }),
      button('Confirm delete', () => change(
        'delete the group', () => admin.deleteGroup(name), `${name} is deleted.`, 'groups', 'users', 'policies',
      ), { className: 'small danger', 'aria-label': 'Confirm delete' }),
      button('Cancel', showTitle),
    );
  };
  showTitle();
  row.append(title, el('td', {}, memberList, adding), actions);
  return row;
}

$('group-add').addEventListener('submit', async (event) => {
  event.preventDefault();
  const name = $('group-add-name').value.trim();
  if (await change('create the group', () => admin.addGroup(name), `${name} is created.`, 'groups', 'policies')) {
    $('group-add-name').value = '';
  }
});

// --- API tokens -------------------------------------------------------------------------------

function renderTokenOwners() {
  const select = $('token-add-user');
  const chosen = select.value;
  select.replaceChildren(...state.users.filter((u) => !u.disabled)
    .map((u) => el('option', { value: u.name, text: u.name, selected: u.name === chosen })));
}

function renderTokens() {
  $('tokens-body').replaceChildren(...state.tokens.map((token) => {
    const actions = el('td', { className: 'admin-actions' });
    const label = `${token.name} (${token.owner})`;
    const showRevoke = () => fill(actions, token.active
      ? button('Revoke', () => fill(actions,
        el('span', { className: 'admin-confirm-q', text: 'Revoke for good?' }),
        button('Confirm revoke', () => change(
          'revoke the token', () => admin.revokeToken(token.id), `The token ${label} is revoked.`, 'tokens',
        ), { className: 'small danger', 'aria-label': 'Confirm revoke' }),
        button('Cancel', showRevoke),
      ), { 'aria-label': `Revoke ${label}` })
      : null);
    showRevoke();
    return el('tr', { 'data-testid': 'token-row', 'data-token-id': token.id },
      el('td', { text: token.name }),
      el('td', { text: token.owner ?? '' }),
      el('td', { text: when(token.created_at) }),
      el('td', { text: token.last_used_at ? when(token.last_used_at) : 'never' }),
      el('td', {
        'data-testid': 'token-status',
        className: token.active ? 'state-on' : 'state-off',
        text: token.active ? 'active' : (token.revoked_at ? 'revoked' : 'inactive'),
      }),
      actions);
  }));
}

function hideSecret() {
  $('token-secret').textContent = '';
  $('token-secret-box').hidden = true;
}

$('token-add').addEventListener('submit', async (event) => {
  event.preventDefault();
  hideSecret();
  let made;
  const ok = await change('create the token', async () => {
    made = await admin.addToken($('token-add-user').value, $('token-add-name').value.trim());
  }, 'The token is created.', 'tokens');
  if (ok && made?.token) {
    $('token-secret').textContent = String(made.token);
    $('token-secret-box').hidden = false;
    $('token-add-name').value = '';
  }
});

$('token-copy').addEventListener('click', async () => {
  const text = $('token-secret').textContent;
  try {
    await navigator.clipboard.writeText(text);
    notice('The token is copied.');
  } catch {
    // No clipboard (an insecure origin, or refused): select it for the user to copy.
    const range = document.createRange();
    range.selectNodeContents($('token-secret'));
    const selection = window.getSelection();
    selection.removeAllRanges();
    selection.addRange(range);
    notice('Press Ctrl+C (or ⌘C) to copy the selected token.');
  }
});
$('token-secret-done').addEventListener('click', hideSecret);

// --- policies ---------------------------------------------------------------------------------

function kinds() {
  const found = new Set(KINDS);
  for (const level of state.policies.levels ?? []) found.add(level.kind);
  for (const kind of state.policies.never_restore ?? []) found.add(kind);
  for (const kind of state.extraKinds) found.add(kind);
  return [...found];
}

const scopeLabel = (scope) => (scope === DEFAULT_SCOPE ? 'organisation default' : `group ${scope}`);

function renderPolicies() {
  const levels = state.policies.available_levels?.length ? state.policies.available_levels : LEVELS;
  const scopes = [DEFAULT_SCOPE, ...state.groups.map((g) => g.name).filter((n) => n !== DEFAULT_SCOPE)];
  const set = new Map((state.policies.levels ?? []).map((l) => [`${l.scope}\u0000${l.kind}`, l.level]));
  const never = new Set(state.policies.never_restore ?? []);
  $('policy-head').replaceChildren(
    el('th', { text: 'Kind' }),
    ...scopes.map((s) => el('th', { text: s === DEFAULT_SCOPE ? 'Organisation default' : s })),
    el('th', { text: 'Never restored' }),
  );
  $('policy-body').replaceChildren(...kinds().map((kind) => el('tr', { 'data-testid': 'policy-row', 'data-kind': kind },
    el('th', { scope: 'row', text: kind }),
    ...scopes.map((scope) => {
      const current = set.get(`${scope}\u0000${kind}`) ?? '';
      const select = el('select', {
        'aria-label': `${kind} level for ${scopeLabel(scope)}`,
        'data-testid': 'policy-level', 'data-scope': scope, 'data-kind': kind,
      },
      el('option', { value: '', text: scope === DEFAULT_SCOPE ? '(built-in)' : '(default)', selected: current === '' }),
      ...levels.map((level) => el('option', { value: level, text: level, selected: current === level })));
      select.addEventListener('change', () => {
        const level = select.value;
        change('set the level', () => (level ? admin.setLevel(scope, kind, level) : admin.clearLevel(scope, kind)),
          level ? `${kind} is ${level} for the ${scopeLabel(scope)}.` : `${kind} has no level of its own for the ${scopeLabel(scope)}.`,
          'policies');
      });
      return el('td', {}, select);
    }),
    el('td', {}, (() => {
      const box = el('input', { type: 'checkbox', 'aria-label': `Never restore ${kind}`, checked: never.has(kind) });
      box.addEventListener('change', () => change('change never-restore',
        () => (box.checked ? admin.neverRestore(kind) : admin.allowRestore(kind)),
        box.checked ? `${kind} is never restored, not even for the owner.` : `${kind} is restored again.`,
        'policies'));
      return box;
    })()),
  )));
  renderSamples();
}

$('kind-add').addEventListener('submit', (event) => {
  event.preventDefault();
  const kind = $('kind-add-name').value.trim();
  if (!/^[a-z0-9][a-z0-9_-]{0,199}$/.test(kind)) {
    failure(new Error("a kind is lower-case letters, digits, '_' and '-'"), 'Could not add the kind');
    return;
  }
  state.extraKinds.add(kind);
  $('kind-add-name').value = '';
  renderPolicies();
});

function renderPreviewViewers() {
  const select = $('preview-viewer');
  const chosen = select.value;
  select.replaceChildren(
    el('option', { value: ':default', text: 'Someone in no group (organisation default)' }),
    ...state.groups.map((g) => el('option', { value: `group:${g.name}`, text: `A member of ${g.name}` })),
    el('option', { value: ':owner', text: 'The conversation\u2019s owner' }),
  );
  if ([...select.options].some((o) => o.value === chosen)) select.value = chosen;
}

/** One sample input per kind, kept across re-renders. */
const sampleInputs = new Map();
function renderSamples() {
  const body = $('preview-body');
  const rows = kinds().map((kind) => {
    if (!sampleInputs.has(kind)) {
      sampleInputs.set(kind, el('input', { type: 'text', value: SAMPLES[kind] ?? '', 'aria-label': `Sample ${kind}`, autocomplete: 'off', spellcheck: 'false' }));
    }
    return el('tr', { 'data-testid': 'preview-row', 'data-kind': kind },
      el('td', { text: kind }),
      el('td', {}, sampleInputs.get(kind)),
      el('td', { 'data-testid': 'preview-level' }),
      el('td', { 'data-testid': 'preview-shown', className: 'preview-shown' }));
  });
  body.replaceChildren(...rows);
}

$('preview-form').addEventListener('submit', async (event) => {
  event.preventDefault();
  const viewer = $('preview-viewer').value;
  const values = kinds().map((kind) => ({ kind, value: sampleInputs.get(kind)?.value ?? '' }))
    .filter((v) => v.value !== '');
  const body = { values };
  if (viewer === ':owner') body.owner = true;
  else if (viewer.startsWith('group:')) body.groups = [viewer.slice('group:'.length)];
  else body.groups = [];
  let answer;
  try {
    answer = await admin.preview(body);
  } catch (err) {
    failure(err, 'Could not preview');
    return;
  }
  const rows = new Map([...$('preview-body').children].map((row) => [row.dataset.kind, row]));
  for (const row of rows.values()) {
    row.querySelector('[data-testid="preview-level"]').textContent = '';
    row.querySelector('[data-testid="preview-shown"]').textContent = '';
  }
  for (const item of answer?.values ?? []) {
    const row = rows.get(item.kind);
    if (!row) continue;
    row.querySelector('[data-testid="preview-level"]').textContent = String(item.level ?? '');
    row.querySelector('[data-testid="preview-shown"]').textContent = String(item.shown ?? '');
  }
  notice('The preview shows each sample as that viewer would see it.');
});

// --- term lists -------------------------------------------------------------------------------

/** The list being edited (its name), or null while the box makes a new one. */
let editing = null;
let kindTouched = false;

/** The textarea's terms: one per line, trimmed, blank lines and repeats dropped. */
function termsOf(text) {
  const seen = new Set();
  for (const line of text.split(/\r\n|\r|\n/)) {
    const term = line.trim();
    if (term) seen.add(term);
  }
  return [...seen];
}

const termCount = (n) => `${n} term${n === 1 ? '' : 's'}`;

function showTermCount() {
  $('term-count').textContent = termCount(termsOf($('term-terms').value).length);
}

async function loadTerms() {
  try {
    state.termLists = await admin.termLists();
  } catch (err) {
    failure(err, 'Could not load the term lists');
    return;
  }
  renderTerms();
}

function renderTerms() {
  $('terms-empty').hidden = state.termLists.length > 0;
  $('terms-body').replaceChildren(...state.termLists.map(termRow));
}

function termRow(list) {
  const name = String(list.name);
  const actions = el('td', { className: 'admin-actions' });
  const showActions = () => fill(actions,
    button('Edit', () => openTermForm(name), { 'aria-label': `Edit ${name}` }),
    button('Delete', showDelete, { className: 'small danger-text', 'aria-label': `Delete list ${name}` }),
  );
  const showDelete = () => fill(actions,
    el('span', { className: 'admin-confirm-q', text: `Delete ${name}? New messages no longer use it.` }),
    button('Confirm delete', async () => {
      if (await change('delete the list', () => admin.deleteTermList(name), `The list ${name} is deleted.`, 'terms')
        && editing === name) closeTermForm();
    }, { className: 'small danger', 'aria-label': 'Confirm delete' }),
    button('Cancel', showActions),
  );
  showActions();
  return el('tr', { 'data-testid': 'term-row', 'data-list': name },
    el('td', { className: 'admin-name', text: name }),
    el('td', { 'data-testid': 'term-kind', text: list.kind ?? '' }),
    el('td', { 'data-testid': 'term-purpose', text: list.purpose ?? '' }),
    el('td', { 'data-testid': 'term-terms', text: String(list.terms ?? '') }),
    el('td', { text: when(list.updated_at), title: list.updated_at ?? '' }),
    actions);
}

/** Open the box: empty for a new list, or with `name`'s terms (fetched now) to edit it. */
async function openTermForm(name = null) {
  let list = null;
  if (name !== null) {
    try {
      list = await admin.termList(name);
    } catch (err) {
      failure(err, `Could not open the list ${name}`);
      return;
    }
  }
  editing = name;
  kindTouched = name !== null;
  $('term-form-title').textContent = name === null ? 'New list' : `Edit ${name}`;
  $('term-name').value = name ?? '';
  $('term-name').readOnly = name !== null;
  $('term-kind').value = list?.kind ?? '';
  $('term-purpose').value = list?.purpose === 'forbidden' ? 'forbidden' : 'sensitive';
  $('term-terms').value = (list?.terms ?? []).map(String).join('\n');
  $('term-save').textContent = name === null ? 'Create list' : 'Save list';
  showTermCount();
  $('term-form').hidden = false;
  (name === null ? $('term-name') : $('term-terms')).focus();
}

function closeTermForm() {
  editing = null;
  $('term-form').hidden = true;
  $('term-name').value = '';
  $('term-kind').value = '';
  $('term-terms').value = ''; // the terms leave the page with the box
  showTermCount();
}

$('term-new').addEventListener('click', () => openTermForm());
$('term-cancel').addEventListener('click', closeTermForm);
$('term-terms').addEventListener('input', showTermCount);
$('term-kind').addEventListener('input', () => { kindTouched = true; });
$('term-name').addEventListener('input', () => {
  // A new list's kind follows its name until it is typed in.
  if (!kindTouched && editing === null) $('term-kind').value = $('term-name').value.trim();
});

$('term-form').addEventListener('submit', async (event) => {
  event.preventDefault();
  const name = $('term-name').value.trim();
  const kind = $('term-kind').value.trim();
  const purpose = $('term-purpose').value;
  const terms = termsOf($('term-terms').value);
  if (terms.length === 0) {
    failure(new Error('a list needs at least one term (one per line)'), 'Could not save the list');
    return;
  }
  try {
    await admin.saveTermList(name, kind, purpose, terms);
  } catch (err) {
    if (err instanceof ApiError && err.status === 413) {
      const limit = err.limit ? ` of ${err.limit} bytes` : '';
      failure(new ApiError(413, `${err.message}: this list is over the server's limit${limit} `
        + `for one request; use holdback terms set ${name || 'NAME'} FILE for large lists`, err.code),
      'Could not save the list');
    } else {
      failure(err, 'Could not save the list');
    }
    return;
  }
  closeTermForm();
  notice(`The list ${name} is saved (${termCount(terms.length)}); new messages use it now.`);
  await reload('terms');
});

// --- audit ------------------------------------------------------------------------------------

function auditQuery() {
  const query = new URLSearchParams();
  const user = $('audit-user').value.trim();
  const conversation = $('audit-conversation').value.trim();
  if (user) query.set('user', user);
  if (conversation) query.set('conversation', conversation);
  for (const [id, key] of [['audit-since', 'since'], ['audit-until', 'until']]) {
    const value = $(id).value; // local time, as the browser shows it
    if (value) {
      const moment = new Date(value);
      if (!Number.isNaN(moment.getTime())) query.set(key, moment.toISOString());
    }
  }
  return query;
}

async function loadAudit() {
  const query = auditQuery();
  const csv = new URLSearchParams(query);
  csv.set('format', 'csv');
  $('audit-csv').href = `/api/audit?${csv}`;
  let events;
  try {
    events = await admin.audit(query.toString());
  } catch (err) {
    failure(err, 'Could not load the audit');
    return;
  }
  $('audit-empty').hidden = events.length > 0;
  $('audit-body').replaceChildren(...events.map((e) => el('tr', { 'data-testid': 'audit-row', 'data-event': e.event },
    el('td', { text: when(e.time), title: e.time }),
    el('td', { text: e.event }),
    el('td', { text: e.user ?? e.user_id ?? '' }),
    el('td', { text: e.target ?? '' }),
    el('td', { text: e.kind ?? '' }),
    el('td', { text: e.level ?? '' }),
    el('td', { text: e.token ?? '' }),
    el('td', { className: 'mono', text: e.conversation_id ?? '' }),
  )));
}

$('audit-filter').addEventListener('submit', (event) => {
  event.preventDefault();
  loadAudit();
});

// --- team detectors (admin_detectors.js) ----------------------------------------------------

const detectors = initDetectors({ request, el, fill, button, when, notice, failure });

// --- tabs and the gate ------------------------------------------------------------------------

function showTab(name) {
  for (const tab of document.querySelectorAll('[role="tab"]')) {
    const on = tab.dataset.panel === name;
    tab.setAttribute('aria-selected', String(on));
    tab.tabIndex = on ? 0 : -1;
    $(`panel-${tab.dataset.panel}`).hidden = !on;
  }
  if (name === 'audit') loadAudit();
  if (name === 'terms') loadTerms();
  if (name === 'detectors') detectors.load();
}

for (const tab of document.querySelectorAll('[role="tab"]')) {
  tab.addEventListener('click', () => showTab(tab.dataset.panel));
}

function gate(message, link) {
  $('console').hidden = true;
  // Nothing the console showed stays in the page.
  for (const id of ['users-body', 'groups-body', 'tokens-body', 'policy-body', 'preview-body', 'terms-body', 'audit-body']) {
    $(id).replaceChildren();
  }
  hideSecret();
  closeTermForm();
  detectors.clear();
  $('gate-message').textContent = message;
  $('gate-link').hidden = !link;
  $('gate').hidden = false;
}

function signedOut() {
  gate('Sign in first: this page is for admins.', true);
}

async function start() {
  let session;
  try {
    session = await request('GET', '/api/session');
  } catch (err) {
    gate(`Could not reach the server: ${err.message}`, true);
    return;
  }
  if (session?.auth === 'password' && !session.user) {
    signedOut();
    return;
  }
  state.me = session?.user?.name ?? null;
  try {
    state.users = await admin.users();
  } catch (err) {
    if (err.status === 403) gate('Admins only.', true);
    else if (err.status !== 401) gate(`Could not open the console: ${err.message}`, true);
    return;
  }
  $('admin-name').textContent = state.me ?? 'the local user';
  $('gate').hidden = true;
  $('console').hidden = false;
  showTab('users');
  await reload();
}

start();
