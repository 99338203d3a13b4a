/**
 * The leak demonstration page: a scenario, a naive design and holdback, two WebSockets.
 *
 * The rule this module keeps: everything the page says about leaks is judged on the frames as
 * received (leaks.js, which shares no code with the server), and the frame logs show each frame
 * verbatim, built from text nodes; highlighting only wraps parts of that text. Frames are
 * captured the moment they arrive (what "Download run" saves) and shown at the chosen pace:
 * real-time (as they arrive), slow motion, or one at a time, with pause. The naive side's
 * reply is rendered as it would be shown, its tokens as plain text (no reassuring chips).
 */

import { judge, verbatimRanges } from './leaks.js';
import { renderMarkdown, tokenizedFragment } from './render.js';
import { socketUrl } from './ws.js';

const SLOW_MS = 700;
const $ = (id) => document.getElementById(id);
const byTestId = (id) => document.querySelector(`[data-testid="${id}"]`);

let data = null; // {pipelines, scenarios}
let run = null; // the current run: {scenario, started, frames: {side: [{pipeline, raw, t}]}}
let paused = false;

const scenario = () => data.scenarios.find((s) => s.id === $('scenario').value) ?? data.scenarios[0];
const pace = () => $('pace').value;
const title = (id) => data.pipelines.find((p) => p.id === id)?.title ?? id;

class Pane {
  constructor(side) {
    this.side = side;
    this.log = byTestId(`frame-log-${side}`);
    this.status = byTestId(`status-${side}`);
    this.reply = byTestId(`reply-${side}`);
    this.count = byTestId(`leak-count-${side}`);
    this.leakList = byTestId(`leak-list-${side}`);
    this.corruptionCount = byTestId(`corruption-count-${side}`);
    this.corruptionList = byTestId(`corruption-list-${side}`);
  }

  setStatus(state) {
    this.status.textContent = state;
    this.status.dataset.state = state;
  }

  reset(pipeline) {
    this.pipeline = pipeline;
    this.queue = [];
    this.shown = [];
    this.content = '';
    this.calls = new Map();
    this.errors = [];
    this.corrected = null;
    this.received = false;
    this.log.replaceChildren();
    this.reply.replaceChildren();
    this.judgeShown();
  }

  /** Open the socket and capture every frame; resolves when the socket closes. */
  start(s, record) {
    this.setStatus('connecting');
    return new Promise((resolve) => {
      let socket;
      try {
        socket = new WebSocket(socketUrl(`/demo/ws/${this.pipeline}`));
      } catch {
        this.setStatus('error');
        resolve();
        return;
      }
      socket.addEventListener('open', () => {
        this.setStatus('streaming');
        socket.send(JSON.stringify({ type: 'start', scenario: s.id }));
      });
      socket.addEventListener('message', (event) => {
        const raw = typeof event.data === 'string' ? event.data : '(binary frame)';
        record.push({ pipeline: this.pipeline, n: record.length + 1, t_ms: Math.round(performance.now() - run.started), raw });
        this.queue.push(raw);
        let frame = null;
        try {
          frame = JSON.parse(raw);
        } catch { /* shown as it came */ }
        if (frame?.type === 'assistant_done') {
          this.received = true;
          socket.close(1000);
        }
        tick();
      });
      socket.addEventListener('close', () => {
        if (!this.received) this.setStatus(this.status.dataset.state === 'connecting' ? 'refused' : 'closed early');
        resolve();
      });
    });
  }

  /** Show the next captured frame; false if none is waiting. */
  showNext() {
    const raw = this.queue.shift();
    if (raw === undefined) return false;
    this.shown.push(raw);
    let frame = null;
    try {
      frame = JSON.parse(raw);
    } catch { /* not JSON: logged only */ }
    if (frame?.type === 'assistant_delta' && typeof frame.text === 'string') {
      if (frame.channel === 'tool_call') {
        const call = this.calls.get(frame.call_id) ?? { name: String(frame.name ?? 'tool'), args: '' };
        call.args += frame.text;
        this.calls.set(frame.call_id, call);
      } else if ((frame.channel ?? 'content') === 'content') {
        this.content += frame.text;
      }
    } else if (frame?.type === 'assistant_replace' && typeof frame.text === 'string') {
      this.corrected = frame.text;
    } else if (frame?.type === 'error') {
      this.errors.push(String(frame.message ?? frame.code ?? 'error'));
    } else if (frame?.type === 'assistant_done') {
      this.setStatus(frame.status === 'complete' ? 'done' : String(frame.status ?? 'done'));
    }
    this.logFrame(raw, this.shown.length);
    this.renderReply();
    this.judgeShown();
    return true;
  }

  logFrame(raw, number) {
    const li = document.createElement('li');
    li.dataset.frame = String(number);
    li.value = number;
    const s = run.scenario;
    const marks = [
      ...verbatimRanges(raw, s.secrets).map((r) => [...r, 'leak']),
      ...verbatimRanges(raw, s.values).map((r) => [...r, 'value']),
    ].sort((a, b) => a[0] - b[0]);
    let last = 0;
    for (const [start, end, kind] of marks) {
      if (start < last) continue;
      li.append(document.createTextNode(raw.slice(last, start)));
      const mark = document.createElement('mark');
      mark.className = kind;
      mark.title = kind === 'leak' ? 'a secret, verbatim' : 'the user\'s own value, restored';
      mark.textContent = raw.slice(start, end);
      li.append(mark);
      last = end;
    }
    li.append(document.createTextNode(raw.slice(last)));
    const atBottom = this.log.scrollTop + this.log.clientHeight >= this.log.scrollHeight - 8;
    this.log.append(li);
    if (atBottom) this.log.scrollTop = this.log.scrollHeight; // never pulls a reader away
  }

  renderReply() {
    const parts = [];
    const body = document.createElement('div');
    body.className = 'reply-text';
    body.append(renderMarkdown(this.content));
    parts.push(body);
    for (const call of this.calls.values()) {
      const box = document.createElement('div');
      box.className = 'tool-call';
      const head = document.createElement('div');
      head.className = 'tool-head';
      head.textContent = `tool call: ${call.name}`;
      const pre = document.createElement('pre');
      pre.textContent = call.args;
      box.append(head, pre);
      parts.push(box);
    }
    if (this.corrected !== null) {
      const note = document.createElement('div');
      note.className = 'corrected';
      const head = document.createElement('div');
      head.className = 'tool-head';
      head.textContent = 'corrected after the stream ended (the text above was already shown):';
      note.append(head, renderMarkdown(this.corrected));
      parts.push(note);
    }
    for (const message of this.errors) {
      const box = document.createElement('div');
      box.className = 'reply-error';
      box.textContent = `Error: ${message}`;
      parts.push(box);
    }
    this.reply.replaceChildren(...parts);
  }

  judgeShown() {
    const s = run?.scenario;
    const { leaks, corruption } = s ? judge(this.shown, s.secrets, s.tokens) : { leaks: [], corruption: [] };
    this.verdict = { leaks, corruption };
    this.count.textContent = String(leaks.length);
    this.count.classList.toggle('nonzero', leaks.length > 0);
    this.corruptionCount.textContent = String(corruption.length);
    this.leakList.replaceChildren(...leaks.map((f) => this.findingItem(f, true)));
    this.corruptionList.replaceChildren(...corruption.map((f) => this.findingItem(f, false)));
    for (const li of this.log.children) {
      li.classList.toggle('has-leak', leaks.some((f) => String(f.frame) === li.dataset.frame));
      li.classList.toggle('has-corruption', corruption.some((f) => String(f.frame) === li.dataset.frame));
    }
  }

  findingItem(f, leak) {
    const li = document.createElement('li');
    const button = document.createElement('button');
    button.type = 'button';
    button.className = leak ? 'finding leak' : 'finding corruption';
    button.dataset.frame = String(f.frame);
    button.textContent = `frame ${f.frame}, offset ${f.offset}: ${f.text} (${f.form}, ${f.field})`;
    button.addEventListener('click', () => {
      const target = this.log.querySelector(`li[data-frame="${f.frame}"]`);
      if (!target) return;
      target.scrollIntoView({ block: 'center', behavior: 'smooth' });
      target.classList.remove('flash');
      void target.offsetWidth; // restart the flash
      target.classList.add('flash');
    });
    li.append(button);
    return li;
  }
}

const panes = { naive: new Pane('naive'), holdback: new Pane('holdback') };
let slowTimer = null;

/** Show frames as the pace allows: all waiting (real-time), or none (slow and step: timer/click). */
function tick() {
  if (paused || pace() !== 'realtime') return;
  for (const pane of Object.values(panes)) while (pane.showNext());
  finishIfDone();
}

function stepAll() {
  let any = false;
  for (const pane of Object.values(panes)) any = pane.showNext() || any;
  finishIfDone();
  return any;
}

function finishIfDone() {
  if (!run || run.finished) return;
  const done = Object.values(panes).every((p) => p.received && p.queue.length === 0);
  if (!done) return;
  run.finished = true;
  clearInterval(slowTimer);
  $('script-status').textContent = 'Done. Download the run to check it yourself, or run it again.';
  $('run').disabled = false;
  $('download').disabled = false;
  $('step').disabled = true;
  $('pause').disabled = true;
}

function applyPace() {
  clearInterval(slowTimer);
  $('step').disabled = !run || run.finished || !(pace() === 'step' || paused);
  if (!run || run.finished || paused) return;
  if (pace() === 'slow') slowTimer = setInterval(stepAll, SLOW_MS);
  else if (pace() === 'realtime') tick();
}

function showScenario() {
  const s = scenario();
  byTestId('scenario-title').textContent = s.title;
  byTestId('scenario-failure').textContent = s.failure;
  byTestId('upstream-sent').replaceChildren(tokenizedFragment(s.upstream_sent));
  const stream = byTestId('model-stream');
  stream.replaceChildren();
  for (const step of s.steps) {
    const chip = document.createElement('span');
    chip.className = `chunk chunk-${step.kind}`;
    if (step.kind === 'text' || step.kind === 'tool_args') chip.append(tokenizedFragment(step.text));
    else if (step.kind === 'error') chip.textContent = `upstream error body: ${step.text}`;
    else if (step.kind === 'tool_start') chip.textContent = `tool call ${step.name}(`;
    else if (step.kind === 'tool_end') chip.textContent = ')';
    else if (step.kind === 'cut') chip.textContent = 'connection cut';
    else chip.textContent = `end (${step.name ?? 'stop'})`;
    stream.append(chip);
  }
  byTestId('secrets').textContent = s.secrets.join(' · ');
}

async function start() {
  const s = scenario();
  const naive = $('naive-pipeline').value;
  run = { scenario: s, naive, started: performance.now(), finished: false, frames: { naive: [], holdback: [] } };
  paused = false;
  $('pause').textContent = 'Pause';
  $('run').disabled = true;
  $('download').disabled = true;
  $('pause').disabled = false;
  $('script-status').textContent = 'Running…';
  byTestId('title-naive').textContent = title(naive);
  byTestId('panel-title-naive').textContent = title(naive);
  panes.naive.reset(naive);
  panes.holdback.reset('holdback');
  applyPace();
  await Promise.all([panes.naive.start(s, run.frames.naive), panes.holdback.start(s, run.frames.holdback)]);
  if (!panes.naive.received || !panes.holdback.received) {
    run.finished = true;
    clearInterval(slowTimer);
    $('script-status').textContent = 'A socket closed before its reply ended.';
    $('run').disabled = false;
  }
}

function download() {
  if (!run) return;
  const s = run.scenario;
  const lines = [{ kind: 'scenario', ...s, pipelines: [run.naive, 'holdback'] }];
  for (const side of ['naive', 'holdback']) {
    for (const f of run.frames[side]) lines.push({ kind: 'frame', ...f });
  }
  for (const side of ['naive', 'holdback']) {
    const verdict = judge(run.frames[side].map((f) => f.raw), s.secrets, s.tokens);
    lines.push({ kind: 'verdict', pipeline: panes[side].pipeline, judged_by: 'web/leaks.js', ...verdict });
  }
  const blob = new Blob([lines.map((l) => JSON.stringify(l)).join('\n') + '\n'], { type: 'application/x-ndjson' });
  const a = document.createElement('a');
  a.href = URL.createObjectURL(blob);
  a.download = `holdback-demo-${s.id}-${run.naive}.jsonl`;
  document.body.append(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(a.href), 10_000);
}

async function load() {
  $('script-status').textContent = 'Loading the scenarios…';
  $('script-retry').hidden = true;
  try {
    const response = await fetch('/demo/scenarios', { headers: { Accept: 'application/json' } });
    if (!response.ok) throw new Error(`HTTP ${response.status}`);
    data = await response.json();
    if (!Array.isArray(data.scenarios) || !Array.isArray(data.pipelines)) throw new Error('unexpected reply');
  } catch (error) {
    $('script-status').textContent = `Could not load the scenarios (${error.message}).`;
    $('script-retry').hidden = false;
    return;
  }
  const option = (value, text) => Object.assign(document.createElement('option'), { value, textContent: text });
  $('scenario').replaceChildren(...data.scenarios.map((s) => option(s.id, s.title)));
  $('naive-pipeline').replaceChildren(...data.pipelines.filter((p) => p.id !== 'holdback').map((p) => option(p.id, p.title)));
  for (const id of ['scenario', 'naive-pipeline', 'run']) $(id).disabled = false;
  $('script-status').textContent = 'Ready.';
  showScenario();
}

$('scenario').addEventListener('change', showScenario);
$('pace').addEventListener('change', applyPace);
$('run').addEventListener('click', start);
$('step').addEventListener('click', stepAll);
$('download').addEventListener('click', download);
$('pause').addEventListener('click', () => {
  paused = !paused;
  $('pause').textContent = paused ? 'Resume' : 'Pause';
  applyPace();
});
$('script-retry').addEventListener('click', load);
load();
