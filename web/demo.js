/**
 * The leak demonstration page: one scripted reply, two pipelines, two WebSockets.
 *
 * The rule this module keeps: the frame logs show every received frame verbatim (one list item
 * per frame, built from text nodes), and highlighting only wraps parts of that verbatim text,
 * so what is counted as a leak is exactly what crossed the wire. The rendered replies go
 * through the same sanitizing renderer as the chat.
 */

import { classifyFrame } from './leaks.js';
import { markTokens, renderMarkdown } from './render.js';
import { socketUrl } from './ws.js';

const PIPELINES = ['naive', 'holdback'];
const $ = (id) => document.getElementById(id);
const byTestId = (id) => document.querySelector(`[data-testid="${id}"]`);

let script = null;

async function loadScript() {
  $('script-status').textContent = 'Loading the script…';
  $('script-retry').hidden = true;
  try {
    const response = await fetch('/demo/script', { headers: { Accept: 'application/json' } });
    if (!response.ok) throw new Error(`HTTP ${response.status}`);
    const body = await response.json();
    if (!Array.isArray(body.tokens) || !Array.isArray(body.values)) throw new Error('unexpected reply');
    script = { tokens: body.tokens.map(String), values: body.values.map(String) };
  } catch (error) {
    $('script-status').textContent = `Could not load the demo script (${error.message}).`;
    $('script-retry').hidden = false;
    return;
  }
  $('script-status').textContent = 'Ready.';
  $('run').disabled = false;
  const rows = script.tokens.map((token, i) => {
    const tr = document.createElement('tr');
    const t = document.createElement('td');
    const code = document.createElement('code');
    code.textContent = token;
    t.append(code);
    const v = document.createElement('td');
    v.textContent = script.values[i] ?? '';
    tr.append(t, v);
    return tr;
  });
  $('legend-rows').replaceChildren(...rows);
  $('legend').hidden = rows.length === 0;
}

class Pane {
  constructor(name) {
    this.name = name;
    this.log = byTestId(`frame-log-${name}`);
    this.counter = byTestId(`leak-count-${name}`);
    this.status = byTestId(`status-${name}`);
    this.reply = byTestId(`reply-${name}`);
    this.socket = null;
  }

  setStatus(state) {
    this.status.textContent = state;
    this.status.dataset.state = state;
  }

  /** Run the pipeline once; resolves when its socket is closed. */
  run() {
    this.log.replaceChildren();
    this.reply.replaceChildren();
    this.counter.textContent = '0';
    this.counter.classList.remove('nonzero');
    this.leaks = 0;
    this.text = '';
    this.renderQueued = false;
    this.setStatus('connecting');
    return new Promise((resolve) => {
      let socket;
      try {
        socket = new WebSocket(socketUrl(`/demo/ws/${this.name}`));
      } catch {
        this.setStatus('error');
        resolve();
        return;
      }
      this.socket = socket;
      let finished = false;
      socket.addEventListener('open', () => {
        this.setStatus('streaming');
        socket.send(JSON.stringify({ type: 'start' }));
      });
      socket.addEventListener('message', (event) => {
        const raw = typeof event.data === 'string' ? event.data : '(binary frame)';
        this.logFrame(raw);
        let frame = null;
        try {
          frame = JSON.parse(raw);
        } catch {
          return;
        }
        if (frame?.type === 'assistant_delta' && (frame.channel ?? 'content') === 'content') {
          this.text += typeof frame.text === 'string' ? frame.text : '';
          this.renderReply();
        } else if (frame?.type === 'assistant_done') {
          finished = true;
          this.setStatus(frame.status === 'complete' || !frame.status ? 'done' : String(frame.status));
          socket.close(1000);
        } else if (frame?.type === 'error') {
          finished = true;
          this.setStatus('error');
        }
      });
      socket.addEventListener('close', () => {
        if (!finished) this.setStatus(this.status.dataset.state === 'connecting' ? 'refused' : 'closed early');
        this.socket = null;
        resolve();
      });
    });
  }

  logFrame(raw) {
    const { segments, leaks } = classifyFrame(raw, script?.tokens ?? [], script?.values ?? []);
    const li = document.createElement('li');
    for (const segment of segments) {
      if (segment.kind === null) {
        li.append(document.createTextNode(segment.text));
      } else {
        const mark = document.createElement('mark');
        mark.className = segment.kind;
        mark.title = segment.kind === 'leak' ? 'a token fragment reached the browser' : 'a restored value';
        mark.textContent = segment.text;
        li.append(mark);
      }
    }
    if (leaks > 0) li.classList.add('has-leak');
    this.log.append(li);
    this.leaks += leaks;
    this.counter.textContent = String(this.leaks);
    this.counter.classList.toggle('nonzero', this.leaks > 0);
    this.log.scrollTop = this.log.scrollHeight;
  }

  renderReply() {
    if (this.renderQueued) return;
    this.renderQueued = true;
    requestAnimationFrame(() => {
      this.renderQueued = false;
      const fragment = renderMarkdown(this.text);
      markTokens(fragment);
      this.reply.replaceChildren(fragment);
    });
  }
}

const panes = PIPELINES.map((name) => new Pane(name));

$('run').addEventListener('click', async () => {
  $('run').disabled = true;
  $('script-status').textContent = 'Running…';
  await Promise.all(panes.map((pane) => pane.run()));
  $('script-status').textContent = 'Done. Run it again to replay.';
  $('run').disabled = false;
});
$('script-retry').addEventListener('click', loadScript);
loadScript();
