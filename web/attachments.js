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

const REASONS = {
  413: 'is larger than this server accepts',
  415: 'is of a type this server cannot read (try text, Markdown, CSV, JSON, code, PDF or DOCX)',
  422: 'could not be read (damaged, encrypted or empty?)',
};

/** A sentence for an upload the server refused. */
export function uploadError(name, error) {
  const byCode = {
    body_too_large: REASONS[413],
    file_too_large: REASONS[413],
    too_large: REASONS[413],
    unsupported_type: REASONS[415],
    unsupported_media_type: REASONS[415],
    unreadable: REASONS[422],
    unreadable_file: REASONS[422],
  };
  const reason = byCode[error.code] ?? REASONS[error.status];
  if (reason) return `“${name}” ${reason}${error.message && error.status !== 413 ? `: ${error.message}` : ''}.`;
  if (error.status === 404) return 'This server does not take documents yet.';
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
