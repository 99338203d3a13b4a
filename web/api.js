/**
 * The HTTP API, as small fetch wrappers.
 *
 * The rule this module keeps: every call either returns the parsed JSON body or throws an
 * ApiError carrying the HTTP status and the server's message; a 401 also tells the page (a
 * `holdback:unauthorized` event on window) so it can show the login form. Requests go to the
 * page's own origin only, with the session cookie.
 */

export class ApiError extends Error {
  constructor(status, message, code = null) {
    super(message);
    this.name = 'ApiError';
    this.status = status;
    this.code = code;
  }
}

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
  let payload = null;
  const text = await response.text();
  if (text) {
    try {
      payload = JSON.parse(text);
    } catch {
      payload = null;
    }
  }
  if (!response.ok) {
    if (response.status === 401) window.dispatchEvent(new CustomEvent('holdback:unauthorized'));
    const message = (payload && (payload.message || payload.detail || payload.error))
      || `${method} ${path} failed with HTTP ${response.status}`;
    throw new ApiError(response.status, String(message), payload?.code ?? null);
  }
  return payload;
}

/** POST one file as multipart (field `file`) to /api/uploads; same errors as `request`. */
async function upload(file) {
  const body = new FormData();
  body.append('file', file, file.name);
  let response;
  try {
    response = await fetch('/api/uploads', {
      method: 'POST', credentials: 'same-origin', headers: { Accept: 'application/json' }, body,
    });
  } catch {
    throw new ApiError(0, 'The server could not be reached.');
  }
  let payload = null;
  try {
    payload = await response.json();
  } catch {
    payload = null;
  }
  if (!response.ok) {
    if (response.status === 401) window.dispatchEvent(new CustomEvent('holdback:unauthorized'));
    const message = payload?.message || `the upload failed with HTTP ${response.status}`;
    throw new ApiError(response.status, String(message), payload?.code ?? null);
  }
  return payload;
}

const conversationPath = (id) => `/api/conversations/${encodeURIComponent(id)}`;

export const api = {
  /** {auth: "none"|"password", user: {id, name}|null} */
  session: () => request('GET', '/api/session'),
  login: (username, password) => request('POST', '/api/login', { username, password }),
  logout: () => request('POST', '/api/logout'),
  /** Newest first. */
  listConversations: async () => (await request('GET', '/api/conversations'))?.conversations ?? [],
  createConversation: (title) => request('POST', '/api/conversations', title ? { title } : {}),
  /** `view` is "restored" (default) or "model" (the tokenized text the model saw). */
  getConversation: (id, view = 'restored') =>
    request('GET', view === 'model' ? `${conversationPath(id)}?view=model` : conversationPath(id)),
  renameConversation: (id, title) => request('PATCH', conversationPath(id), { title }),
  /** Any of {title, model, system_prompt, current_leaf}. */
  patchConversation: (id, fields) => request('PATCH', conversationPath(id), fields),
  /** {models: [{id, label}], default}; null when the server has no such route. */
  models: async () => {
    try {
      return await request('GET', '/api/models');
    } catch (error) {
      if (error.status === 404 || error.status === 405) return null;
      throw error;
    }
  },
  getInstructions: () => request('GET', '/api/me/instructions'),
  putInstructions: (text) => request('PUT', '/api/me/instructions', { text }),
  /** {results: [{conversation_id, message_id, snippet}]} */
  search: (q) => request('GET', `/api/search?q=${encodeURIComponent(q)}`),
  exportPath: (id, format) => `${conversationPath(id)}/export?format=${encodeURIComponent(format)}`,
  upload: (file) => upload(file),
  deleteUpload: (id) => request('DELETE', `/api/uploads/${encodeURIComponent(id)}`),
  deleteConversation: (id) => request('DELETE', conversationPath(id)),
};
