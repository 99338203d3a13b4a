/**
 * The chat WebSocket, kept alive.
 *
 * The rule this module keeps: a dropped connection is retried with exponential backoff and
 * jitter (so a restarted server is not hit by every tab at once), and the state is always one
 * of four words the page can show: `connecting` (first attempt), `connected`, `reconnecting`
 * (lost, retrying) or `offline` (the browser is offline, retries keep failing, or the socket was
 * stopped). Frames are JSON text; anything else is reported, never guessed at.
 */

export const STATES = ['connecting', 'connected', 'reconnecting', 'offline'];

/**
 * Delay before retry number `attempt` (0-based): "equal jitter", a random point in the upper
 * half of min(cap, base * 2^attempt).
 */
export function backoffDelay(attempt, { base = 500, cap = 15000, random = Math.random } = {}) {
  const ceiling = Math.min(cap, base * 2 ** Math.min(attempt, 30));
  return Math.round(ceiling / 2 + random() * (ceiling / 2));
}

/** The chat socket URL for the page's own origin. */
export function socketUrl(path = '/ws', loc = window.location) {
  const scheme = loc.protocol === 'https:' ? 'wss:' : 'ws:';
  return `${scheme}//${loc.host}${path}`;
}

export class ReconnectingSocket extends EventTarget {
  /**
   * Events: `state` {state, retryAt}, `open` {reconnected}, `frame` {frame, raw},
   * `bad-frame` {raw}, `close` {code, wasOpen}.
   */
  constructor(url, { base = 500, cap = 15000, offlineAfter = 5 } = {}) {
    super();
    this.url = url;
    this.base = base;
    this.cap = cap;
    this.offlineAfter = offlineAfter;
    this.socket = null;
    this.state = 'connecting';
    this.failures = 0;
    this.everOpened = false;
    this.timer = null;
    this.retryAt = null;
    this.running = false;
    this.onOnline = () => {
      if (this.socket?.readyState === WebSocket.OPEN) this.setState('connected');
      else this.retryNow();
    };
    this.onOffline = () => this.setState('offline');
    this.onVisible = () => {
      if (document.visibilityState === 'visible' && this.timer !== null) this.retryNow();
    };
  }

  start() {
    if (this.running) return;
    this.running = true;
    window.addEventListener('online', this.onOnline);
    window.addEventListener('offline', this.onOffline);
    document.addEventListener('visibilitychange', this.onVisible);
    this.connect();
  }

  /** Close for good (logout, unauthorized). The state becomes `offline`. */
  stop() {
    this.running = false;
    window.removeEventListener('online', this.onOnline);
    window.removeEventListener('offline', this.onOffline);
    document.removeEventListener('visibilitychange', this.onVisible);
    clearTimeout(this.timer);
    this.timer = null;
    const socket = this.socket;
    this.socket = null;
    if (socket) socket.close(1000, 'client stopped');
    this.setState('offline');
  }

  /** Skip the remaining backoff and try now. */
  retryNow() {
    if (!this.running || this.socket) return;
    clearTimeout(this.timer);
    this.timer = null;
    this.connect();
  }

  /** Send a frame; false (and nothing sent) unless the socket is open. */
  send(frame) {
    if (!this.socket || this.socket.readyState !== WebSocket.OPEN) return false;
    this.socket.send(JSON.stringify(frame));
    return true;
  }

  setState(state) {
    const changed = state !== this.state;
    this.state = state;
    if (changed || state === 'reconnecting' || state === 'offline') {
      this.dispatchEvent(new CustomEvent('state', { detail: { state, retryAt: this.retryAt } }));
    }
  }

  connect() {
    this.timer = null;
    this.retryAt = null;
    if (navigator.onLine === false) {
      this.setState('offline');
    } else {
      this.setState(this.everOpened || this.failures > 0 ? this.retryingState() : 'connecting');
    }
    let socket;
    try {
      socket = new WebSocket(this.url);
    } catch {
      this.scheduleRetry();
      return;
    }
    this.socket = socket;
    let opened = false;
    socket.addEventListener('open', () => {
      if (this.socket !== socket) return;
      opened = true;
      const reconnected = this.everOpened;
      this.everOpened = true;
      this.failures = 0;
      this.setState('connected');
      this.dispatchEvent(new CustomEvent('open', { detail: { reconnected } }));
    });
    socket.addEventListener('message', (event) => {
      if (this.socket !== socket) return;
      if (typeof event.data !== 'string') {
        this.dispatchEvent(new CustomEvent('bad-frame', { detail: { raw: null } }));
        return;
      }
      let frame;
      try {
        frame = JSON.parse(event.data);
      } catch {
        frame = null;
      }
      if (frame === null || typeof frame !== 'object' || Array.isArray(frame)) {
        this.dispatchEvent(new CustomEvent('bad-frame', { detail: { raw: event.data } }));
        return;
      }
      this.dispatchEvent(new CustomEvent('frame', { detail: { frame, raw: event.data } }));
    });
    socket.addEventListener('close', (event) => {
      if (this.socket !== socket) return;
      this.socket = null;
      if (!opened) this.failures += 1;
      this.dispatchEvent(new CustomEvent('close', { detail: { code: event.code, wasOpen: opened } }));
      if (this.running) this.scheduleRetry();
    });
  }

  retryingState() {
    if (navigator.onLine === false || this.failures >= this.offlineAfter) return 'offline';
    return 'reconnecting';
  }

  scheduleRetry() {
    const delay = backoffDelay(this.failures, { base: this.base, cap: this.cap });
    this.retryAt = Date.now() + delay;
    this.timer = setTimeout(() => this.connect(), delay);
    this.setState(this.retryingState());
  }
}
