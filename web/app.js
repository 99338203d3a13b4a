/**
 * The chat page: wires the session, the socket, the conversation list, the open
 * conversation and the composer together.
 *
 * The rules this module keeps: the page asks the server who it is before showing anything, and
 * shows the login form whenever the server runs with password auth and nobody is signed in (at
 * start, after any 401, and when the socket is refused); the connection state on screen is
 * always the socket's own; and the address bar (`#/c/<id>`) names the open conversation, so a
 * reload comes back to it. Neither the address nor the tab's title ever carries a value: the
 * address holds the conversation's id only, and `document.title` is always "holdback" (a
 * title can hold values, restored for this viewer; it is shown in the page, where it belongs,
 * never in the tab, the history or a bookmark).
 */

import { api } from './api.js';
import { AttachmentTray } from './attachments.js';
import { Chat } from './chat.js';
import { Composer } from './composer.js';
import { ConversationList, UNTITLED } from './conversations.js';
import { ExportMenu, ModelPicker } from './header.js';
import { SearchBox } from './search.js';
import {
  SettingsDialog, SystemPromptDialog, SystemView, bindThemeToggle,
} from './settings.js';
import { ReconnectingSocket, socketUrl } from './ws.js';

const $ = (id) => document.getElementById(id);
const SESSION_CHECK_INTERVAL_MS = 10000;
const TOAST_MS = 6000;

let session = null;
let started = false;
let socket;
let chat;
let list;
let composer;
let models;
let exportMenu;
let attachments;
let search;
let settings;
let systemPrompt;
let systemPromptText = null; // the open conversation's prompt, as its owner reads it
let lastSessionCheck = 0;
let listReloadTimer = null;

// --- toasts -------------------------------------------------------------------------------------

function toast(message, kind = 'error') {
  const item = document.createElement('div');
  item.className = `toast toast-${kind}`;
  item.setAttribute('data-testid', 'toast');
  item.setAttribute('role', kind === 'error' ? 'alert' : 'status');
  const text = document.createElement('span');
  text.textContent = message;
  const close = document.createElement('button');
  close.type = 'button';
  close.className = 'link-button';
  close.textContent = 'Dismiss';
  close.addEventListener('click', () => item.remove());
  item.append(text, close);
  $('toasts').append(item);
  setTimeout(() => item.remove(), TOAST_MS);
}

// --- views: boot, login, app ----------------------------------------------------------------------

function show(view) {
  $('boot').hidden = view !== 'boot';
  $('login-view').hidden = view !== 'login';
  $('app').hidden = view !== 'app';
}

function showLogin(message) {
  if (socket) socket.stop();
  show('login');
  const error = $('login-error');
  error.hidden = !message;
  error.textContent = message ?? '';
  $('login-password').value = '';
  $('login-username').focus();
}

async function onLoginSubmit(event) {
  event.preventDefault();
  const username = $('login-username').value.trim();
  const password = $('login-password').value;
  const error = $('login-error');
  if (!username || !password) {
    error.textContent = 'Enter your username and password.';
    error.hidden = false;
    return;
  }
  const button = $('login-submit');
  button.disabled = true;
  try {
    await api.login(username, password);
    session = await api.session();
    if (session.auth === 'password' && !session.user) throw new Error('The server did not keep the session.');
    $('login-password').value = '';
    error.hidden = true;
    startApp();
  } catch (err) {
    error.textContent = err.status === 401 || err.status === 403
      ? 'Wrong username or password.' : `Could not sign in: ${err.message}`;
    error.hidden = false;
    $('login-password').select();
  } finally {
    button.disabled = false;
  }
}

async function boot() {
  show('boot');
  $('boot-message').textContent = 'Loading…';
  $('boot-retry').hidden = true;
  try {
    session = await api.session();
  } catch (err) {
    $('boot-message').textContent = `Could not reach the server: ${err.message}`;
    $('boot-retry').hidden = false;
    return;
  }
  if (session.auth === 'password' && !session.user) showLogin();
  else startApp();
}

/** The socket was refused: if that is because we are signed out, say so. */
async function checkSessionAfterRefusal() {
  if (Date.now() - lastSessionCheck < SESSION_CHECK_INTERVAL_MS) return;
  lastSessionCheck = Date.now();
  try {
    const current = await api.session();
    if (current.auth === 'password' && !current.user) showLogin('Your session has ended. Please sign in again.');
  } catch {
    // The server is unreachable; the socket keeps retrying and says so.
  }
}

// --- routing ------------------------------------------------------------------------------------------

function routeId() {
  const match = window.location.hash.match(/^#\/c\/(.+)$/);
  return match ? decodeURIComponent(match[1]) : null;
}

function showTitle(title) {
  $('conversation-title').textContent = title;
  document.title = 'holdback';
}

function setTitle(id) {
  showTitle(id === null ? UNTITLED : list.titleOf(id));
}

function openRoute() {
  const id = routeId();
  list.setActive(id);
  setTitle(id);
  $('model-view').disabled = id === null;
  $('system-prompt-open').disabled = id === null;
  exportMenu.show(id);
  if (id !== chat.currentId) {
    systemPromptText = null;
    models.show(id, null);
    $('model-select').disabled = false;
  }
  closeSidebar();
  chat.open(id);
  syncComposer();
}

function goTo(id) {
  const hash = id === null ? '#/' : `#/c/${encodeURIComponent(id)}`;
  if (window.location.hash === hash) openRoute();
  else window.location.hash = hash;
}

// --- sidebar on narrow screens ----------------------------------------------------------------------

function openSidebar() {
  $('app').classList.add('sidebar-open');
  $('scrim').hidden = false;
  $('sidebar-toggle').setAttribute('aria-expanded', 'true');
}

function closeSidebar() {
  $('app').classList.remove('sidebar-open');
  $('scrim').hidden = true;
  $('sidebar-toggle').setAttribute('aria-expanded', 'false');
}

// --- state shown around the conversation ----------------------------------------------------------

function syncComposer() {
  let reason = '';
  if (socket.state !== 'connected') reason = 'Waiting for the connection…';
  else if (chat.loading) reason = 'Loading…';
  else if (chat.sendPending) reason = 'Sending…';
  else if (chat.replyInFlight && chat.replyResumed) reason = 'This reply is still being written… press Esc or Stop to stop it.';
  else if (chat.replyInFlight) reason = 'Replying… press Esc or Stop to stop.';
  else if (chat.replyElsewhere) reason = 'A reply is still being written in another tab or window…';
  else if (attachments.busy) reason = 'Reading the document…';
  composer.setState({
    canSend: chat.canSend && !attachments.busy,
    streaming: chat.replyInFlight,
    reason,
    showSend: chat.replyInFlight && chat.replyResumed,
    hasDocuments: attachments.items.length > 0,
  });
  $('messages').setAttribute('aria-busy', String(chat.replyInFlight));
  for (const item of list.items) list.setStreaming(item.id, chat.streamingByConv.has(item.id));
}

function showConnection(state) {
  chat.onConnectionState(state);
  $('connection-state').textContent = state;
  $('connection').dataset.state = state;
  $('reconnect').hidden = !(state === 'reconnecting' || state === 'offline') || !socket.running;
  syncComposer();
}

function scheduleListReload() {
  clearTimeout(listReloadTimer);
  listReloadTimer = setTimeout(() => {
    list.reload().then(() => setTitle(chat.currentId), (err) => {
      if (err.status !== 401) toast(`Could not load conversations: ${err.message}`);
    });
  }, 300);
}

// --- start ------------------------------------------------------------------------------------------

function createApp() {
  socket = new ReconnectingSocket(socketUrl('/ws'));
  list = new ConversationList($('conversation-list'));
  models = new ModelPicker({ wrapper: $('model-picker'), select: $('model-select') });
  exportMenu = new ExportMenu({
    button: $('export-open'), items: $('export-items'), markdown: $('export-md'), json: $('export-json'),
  });
  attachments = new AttachmentTray({ tray: $('attachment-tray'), button: $('attach'), input: $('attach-input') });
  chat = new Chat({
    socket,
    scroller: $('scroller'),
    list: $('messages'),
    emptyState: $('empty-state'),
    modelBanner: $('model-banner'),
    systemView: new SystemView($('system-view')),
    getModel: () => models.current(),
    modelLabel: (id) => (models.models.length > 0 ? models.label(id) : null),
  });
  search = new SearchBox({
    input: $('search'),
    results: $('search-results'),
    list: $('search-list'),
    status: $('search-status'),
    titleOf: (id) => list.titleOf(id),
  });
  settings = new SettingsDialog({
    dialog: $('settings'), form: $('settings-form'), cancel: $('settings-cancel'),
    error: $('settings-error'), text: $('instructions'),
  });
  systemPrompt = new SystemPromptDialog({
    dialog: $('system-prompt'), form: $('system-prompt-form'), cancel: $('system-prompt-cancel'),
    error: $('system-prompt-error'), text: $('system-prompt-text'),
  });
  composer = new Composer({
    form: $('composer'),
    textarea: $('message-input'),
    sendButton: $('send'),
    stopButton: $('stop'),
    hint: $('composer-reason'),
  });

  socket.addEventListener('state', (e) => showConnection(e.detail.state));
  socket.addEventListener('frame', (e) => chat.handleFrame(e.detail.frame));
  socket.addEventListener('bad-frame', () => toast('The server sent a frame this page cannot read.'));
  socket.addEventListener('open', (e) => {
    if (e.detail.reconnected) {
      chat.onReconnect();
      scheduleListReload();
    }
  });
  socket.addEventListener('close', (e) => {
    if (e.detail.wasOpen) chat.onDisconnect();
    else checkSessionAfterRefusal();
  });

  chat.addEventListener('state', syncComposer);
  chat.addEventListener('toast', (e) => toast(e.detail.message));
  chat.addEventListener('restore-draft', (e) => {
    composer.restore(e.detail.text);
    attachments.restore(e.detail.attachments);
  });
  chat.addEventListener('title', (e) => {
    list.setTitle(e.detail.id, e.detail.title);
    if (e.detail.id === chat.currentId) showTitle(e.detail.title || list.titleOf(e.detail.id));
  });
  chat.addEventListener('conversation-created', (e) => {
    list.upsert(e.detail.id, e.detail.title);
    if (e.detail.opened) {
      window.history.replaceState(null, '', `#/c/${encodeURIComponent(e.detail.id)}`);
      list.setActive(e.detail.id);
      setTitle(e.detail.id);
      $('model-view').disabled = false;
      $('system-prompt-open').disabled = false;
      exportMenu.show(e.detail.id);
      models.created(e.detail.id);
    }
  });
  chat.addEventListener('loaded', (e) => {
    if (e.detail.id !== chat.currentId) return;
    const { conversation } = e.detail;
    models.show(e.detail.id, conversation.model);
    systemPromptText = typeof conversation.system_prompt === 'string' ? conversation.system_prompt : null;
    const owner = conversation.access === undefined || conversation.access === 'owner';
    $('system-prompt-open').disabled = !owner;
    $('model-select').disabled = !owner; // the model is the owner's to change
    $('system-prompt-open').classList.toggle('has-prompt', Boolean(systemPromptText));
  });
  chat.addEventListener('reply-done', scheduleListReload);
  chat.addEventListener('missing', () => {
    toast('That conversation does not exist (it may have been deleted).');
    scheduleListReload();
    goTo(null);
  });

  list.addEventListener('error', (e) => toast(e.detail.message));
  list.addEventListener('renamed', (e) => {
    if (e.detail.id === chat.currentId) setTitle(chat.currentId);
  });
  list.addEventListener('deleted', (e) => {
    chat.forget(e.detail.id);
    if (e.detail.id === chat.currentId) goTo(null);
  });

  composer.addEventListener('submit', (e) => {
    if (attachments.busy) return;
    const docs = attachments.items;
    if (chat.send(e.detail.text, { attachments: docs })) {
      attachments.take();
      e.detail.accept();
    }
  });
  attachments.addEventListener('change', syncComposer);
  attachments.addEventListener('error', (e) => toast(e.detail.message));
  models.addEventListener('error', (e) => toast(e.detail.message));
  search.addEventListener('active', (e) => {
    $('conversation-list').hidden = e.detail.active;
  });
  search.addEventListener('open', () => closeSidebar());
  bindThemeToggle($('theme-toggle'));
  $('settings-open').addEventListener('click', () => settings.open());
  settings.addEventListener('saved', () => {
    toast('Custom instructions saved: they apply to your next messages.', 'info');
    if (chat.mode === 'model') chat.loadModelView();
  });
  $('system-prompt-open').addEventListener('click', () => {
    if (chat.currentId !== null) systemPrompt.openFor(chat.currentId, systemPromptText);
  });
  systemPrompt.addEventListener('saved', (e) => {
    if (e.detail.id !== chat.currentId) return;
    systemPromptText = e.detail.text;
    $('system-prompt-open').classList.toggle('has-prompt', Boolean(systemPromptText));
    toast('System prompt saved for this conversation.', 'info');
    if (chat.mode === 'model') chat.loadModelView();
  });
  composer.addEventListener('stop', () => chat.cancel());

  $('new-chat').addEventListener('click', () => {
    goTo(null);
    composer.focus();
  });
  $('model-view').addEventListener('change', (e) => chat.setMode(e.target.checked ? 'model' : 'restored'));
  $('reconnect').addEventListener('click', () => socket.retryNow());
  $('sidebar-toggle').addEventListener('click', () => {
    if ($('app').classList.contains('sidebar-open')) closeSidebar();
    else openSidebar();
  });
  $('scrim').addEventListener('click', closeSidebar);
  document.addEventListener('keydown', (e) => {
    if (e.key === 'Escape' && $('app').classList.contains('sidebar-open')) closeSidebar();
  });
  $('logout').addEventListener('click', async () => {
    try {
      await api.logout();
    } catch (err) {
      toast(`Could not sign out: ${err.message}`);
      return;
    }
    session = { ...session, user: null };
    $('admin-link').hidden = true;
    // Nothing of the last user stays behind: not the open conversation's id in the URL, not
    // the list, not the messages (their values were restored for that user only).
    window.history.replaceState(null, '', window.location.pathname + window.location.search);
    chat.reset();
    search.clear();
    settings.close();
    systemPrompt.close();
    attachments.take();
    systemPromptText = null;
    list.setItems([]);
    list.setActive(null);
    showTitle(UNTITLED);
    showLogin();
  });
  window.addEventListener('hashchange', openRoute);
}

/**
 * The "Admin" link, for admins only: the session says so when it names a role; otherwise the
 * admin API is asked (200 for an admin, 403 for a member). The link only leads to the console,
 * which checks again; a failed probe hides it.
 */
async function showAdminLink() {
  const link = $('admin-link');
  link.hidden = true;
  const role = session?.user?.role;
  if (role !== undefined) {
    link.hidden = role !== 'admin';
    return;
  }
  const asked = session;
  try {
    const response = await fetch('/api/admin/users', {
      method: 'GET', credentials: 'same-origin', headers: { Accept: 'application/json' },
    });
    if (asked === session) link.hidden = !response.ok;
  } catch {
    // Unreachable: no link; the socket says the server is gone.
  }
}

async function startApp() {
  if (!started) {
    createApp();
    started = true;
  }
  show('app');
  const signedIn = session.auth === 'password' && session.user;
  $('account').hidden = !signedIn;
  $('user-name').textContent = signedIn ? String(session.user.name ?? '') : '';
  showAdminLink();
  models.load();
  socket.start();
  showConnection(socket.state);
  try {
    await list.reload();
  } catch (err) {
    if (err.status !== 401) toast(`Could not load conversations: ${err.message}`);
  }
  openRoute();
  composer.focus();
}

window.addEventListener('holdback:unauthorized', () => {
  if (session?.auth !== 'none') showLogin('Please sign in.');
});
$('login-form').addEventListener('submit', onLoginSubmit);
$('boot-retry').addEventListener('click', boot);
boot();
