/**
 * Documents attached to the next message: the composer's tray of chips.
 *
 * The rules this module keeps: a file goes only to this server (`POST /api/uploads`), which
 * reads it, masks its values and answers with an id, its name, size and masked values; the
 * message then names the ids (`attachments`), never the text. A chip shows the name and how
 * many values were masked (each token once, with the tokens on hover, like a message's
 * footer); a refusal says why in words (too large, a type the server does not read, a file it
 * could not read) and the file is not attached. Nothing is sent while an upload is running.
 */

import { api } from './api.js';

const TOO_LARGE = 'is larger than this server accepts';
const REASONS = {
  upload_too_large: TOO_LARGE,
  body_too_large: TOO_LARGE,
  upload_too_long: 'holds more text than this server accepts',
  unsupported_type: 'is of a type this server cannot read (try text, Markdown, CSV, JSON, code, PDF or DOCX)',
  unreadable_file: 'could not be read (damaged, or not text)',
  encrypted_file: 'is password-protected, so it cannot be read',
  empty_file: 'holds no text (empty, or a scan of images)',
  too_many_uploads: 'cannot be added: too many documents wait to be sent already',
  upload_busy: 'cannot be read just now: the server is busy; try again in a moment',
};
const BY_STATUS = { 413: TOO_LARGE, 415: REASONS.unsupported_type };

/** A sentence for an upload the server refused (docs/protocol.md, Documents). */
export function uploadError(name, error) {
  const reason = REASONS[error.code] ?? BY_STATUS[error.status];
  if (reason) return `“${name}” ${reason}.`;
  if (error.status === 404) return 'This server does not take documents.';
  return `“${name}” could not be attached: ${error.message}`;
}

export function formatSize(bytes) {
  if (!Number.isFinite(bytes)) return '';
  if (bytes < 1024) return `${bytes} B`;
  if (bytes < 1024 * 1024) return `${(bytes / 1024).toFixed(bytes < 10240 ? 1 : 0)} KB`;
  return `${(bytes / (1024 * 1024)).toFixed(1)} MB`;
}

export class AttachmentTray extends EventTarget {
  /** Events: `change`, `error` {message}. */
  constructor({ tray, button, input }) {
    super();
    this.tray = tray;
    this.button = button;
    this.input = input;
    this.items = []; // {id, name, size, masked}
    this.uploading = 0;
    button.addEventListener('click', () => input.click());
    input.addEventListener('change', () => {
      const files = [...input.files];
      input.value = '';
      for (const file of files) this.add(file);
    });
    this.render();
  }

  get busy() {
    return this.uploading > 0;
  }

  async add(file) {
    this.uploading += 1;
    this.render();
    try {
      const answer = await api.upload(file);
      this.items.push({
        id: String(answer.id),
        name: typeof answer.name === 'string' ? answer.name : file.name,
        size: Number.isFinite(answer.size) ? answer.size : file.size,
        masked: Array.isArray(answer.masked) ? answer.masked : [],
      });
    } catch (error) {
      this.dispatchEvent(new CustomEvent('error', { detail: { message: uploadError(file.name, error) } }));
    } finally {
      this.uploading -= 1;
      this.render();
    }
  }

  remove(id) {
    this.items = this.items.filter((a) => a.id !== id);
    this.render();
    api.deleteUpload(id).catch(() => {}); // unused uploads expire anyway
  }

  /** Documents of a message the server refused: back in the tray, to send again. */
  restore(items) {
    const known = new Set(this.items.map((a) => a.id));
    this.items.push(...(items ?? []).filter((a) => a && !known.has(a.id)));
    this.render();
  }

  /** The documents for the message being sent; the tray is emptied once it went out. */
  take() {
    const items = this.items;
    this.items = [];
    this.render();
    return items;
  }

  render() {
    const chips = this.items.map((a) => {
      const chip = document.createElement('span');
      chip.className = 'attachment-chip';
      chip.setAttribute('data-testid', 'attachment');
      const name = document.createElement('span');
      name.className = 'attachment-name';
      name.textContent = a.name;
      const size = document.createElement('span');
      size.className = 'attachment-size';
      size.textContent = formatSize(a.size);
      chip.append(name, size);
      const tokens = [...new Set(a.masked.map((m) => String(m.token ?? '')).filter(Boolean))];
      if (tokens.length > 0) {
        const masked = document.createElement('mark');
        masked.className = 'masked attachment-masked';
        masked.setAttribute('data-testid', 'attachment-masked');
        masked.tabIndex = 0;
        masked.textContent = `${tokens.length} ${tokens.length === 1 ? 'value' : 'values'} masked`;
        masked.dataset.token = tokens.join(', ');
        masked.title = `the model sees ${tokens.join(', ')}`;
        chip.append(masked);
      }
      const remove = document.createElement('button');
      remove.type = 'button';
      remove.className = 'attachment-remove';
      remove.setAttribute('aria-label', `Remove ${a.name}`);
      remove.textContent = '×';
      remove.addEventListener('click', () => this.remove(a.id));
      chip.append(remove);
      return chip;
    });
    if (this.uploading > 0) {
      const note = document.createElement('span');
      note.className = 'attachment-uploading muted';
      note.setAttribute('role', 'status');
      note.textContent = 'Reading the document…';
      chips.push(note);
    }
    this.tray.replaceChildren(...chips);
    this.tray.hidden = chips.length === 0;
    this.dispatchEvent(new CustomEvent('change'));
  }
}
