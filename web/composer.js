/**
 * The composer: the "Message" textarea with its Send and Stop buttons.
 *
 * The rule this module keeps: Enter sends and Shift+Enter starts a new line (Enter while an
 * input method is composing does neither); the text is cleared only once it has been handed
 * to the socket, so a message that cannot be sent stays where the user typed it. Stop is
 * shown and enabled only while a reply is in flight; Escape in the textarea does the same.
 */

const MAX_HEIGHT_PX = 240;

export class Composer extends EventTarget {
  /** Events: `submit` {text, accept()} and `stop`. */
  constructor({ form, textarea, sendButton, stopButton, hint }) {
    super();
    this.form = form;
    this.textarea = textarea;
    this.sendButton = sendButton;
    this.stopButton = stopButton;
    this.hint = hint;
    this.canSend = false;
    this.streaming = false;

    form.addEventListener('submit', (event) => {
      event.preventDefault();
      this.submit();
    });
    textarea.addEventListener('keydown', (event) => {
      if (event.key === 'Enter' && !event.shiftKey && !event.isComposing && event.keyCode !== 229) {
        event.preventDefault();
        this.submit();
      } else if (event.key === 'Escape' && this.streaming) {
        event.preventDefault();
        this.dispatchEvent(new CustomEvent('stop'));
      }
    });
    textarea.addEventListener('input', () => {
      this.autosize();
      this.update();
    });
    stopButton.addEventListener('click', () => this.dispatchEvent(new CustomEvent('stop')));
    this.update();
  }

  submit() {
    const text = this.textarea.value;
    if ((!text.trim() && !this.hasDocuments) || !this.canSend) return;
    let accepted = false;
    this.dispatchEvent(new CustomEvent('submit', { detail: { text, accept: () => { accepted = true; } } }));
    if (accepted) {
      this.textarea.value = '';
      this.autosize();
      this.update();
    }
  }

  /** Put text back (a message the server refused), unless the user already typed anew. */
  restore(text) {
    if (this.textarea.value.trim() !== '') return;
    this.textarea.value = text;
    this.autosize();
    this.update();
  }

  /** `showSend`: keep Send in view (disabled) beside Stop, for a reply resumed after a reload. */
  setState({ canSend, streaming, reason, showSend = false, hasDocuments = false }) {
    this.canSend = canSend;
    this.hasDocuments = hasDocuments; // documents alone may be sent, with no typed text
    this.streaming = streaming;
    this.showSend = showSend;
    this.hint.textContent = reason ?? '';
    this.update();
  }

  update() {
    const hasText = this.textarea.value.trim() !== '' || Boolean(this.hasDocuments);
    this.sendButton.disabled = !(this.canSend && hasText);
    this.sendButton.hidden = this.streaming && !this.showSend;
    this.stopButton.hidden = !this.streaming;
    this.stopButton.disabled = !this.streaming;
  }

  autosize() {
    this.textarea.style.height = 'auto';
    this.textarea.style.height = `${Math.min(this.textarea.scrollHeight, MAX_HEIGHT_PX)}px`;
  }

  focus() {
    this.textarea.focus();
  }
}
