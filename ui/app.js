// deputy's session inspector: one page over the same REST API, tokens and scopes as every
// other client. It talks to nothing but the server that served it (the Content-Security-Policy
// says so too), builds every element with textContent (no HTML from data), and keeps the token
// in sessionStorage: this tab only, never in the address or a cookie another site could send.

const TOKEN_KEY = 'deputy.token';
const PAGE = 100;
const EVENT_PAGE = 500;
const MAX_EVENT_PAGES = 40;

const main = document.getElementById('main');
const who = document.getElementById('who');
const forget = document.getElementById('forget');

/** The view being shown; a new one stops the old one's live stream. */
let current = { stop: () => {} };
/** Who the viewer is (`GET /v1/caller`): what the page offers to do. */
let viewer = null;

class ApiError extends Error {
  constructor(status, body) {
    super(body && body.message ? `${body.code}: ${body.message}` : `HTTP ${status}`);
    this.status = status;
    this.body = body;
  }
}

function token() {
  return sessionStorage.getItem(TOKEN_KEY);
}

function headers(extra = {}) {
  const all = { Accept: 'application/json', ...extra };
  const bearer = token();
  if (bearer) all.Authorization = `Bearer ${bearer}`;
  return all;
}

async function api(path, { method = 'GET', body, signal } = {}) {
  const init = { method, headers: headers(body === undefined ? {} : { 'Content-Type': 'application/json' }), signal };
  if (body !== undefined) init.body = JSON.stringify(body);
  const response = await fetch(path, init);
  const text = await response.text();
  let json = null;
  try {
    json = text ? JSON.parse(text) : null;
  } catch {
    json = { code: 'BAD_RESPONSE', message: text.slice(0, 200) };
  }
  if (!response.ok) throw new ApiError(response.status, json);
  return json;
}

/** An element: `attrs` are properties or attributes; children are nodes or text. */
function h(tag, attrs = {}, ...children) {
  const element = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs)) {
    if (value === undefined || value === null || value === false) continue;
    if (name === 'class') element.className = value;
    else if (name.startsWith('on')) element.addEventListener(name.slice(2), value);
    else if (name === 'dataset') Object.assign(element.dataset, value);
    else element.setAttribute(name, value === true ? '' : String(value));
  }
  for (const child of children.flat()) {
    if (child === undefined || child === null || child === false) continue;
    element.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return element;
}

function svg(tag, attrs = {}, ...children) {
  const element = document.createElementNS('http://www.w3.org/2000/svg', tag);
  for (const [name, value] of Object.entries(attrs)) element.setAttribute(name, String(value));
  for (const child of children) element.append(child instanceof Node ? child : document.createTextNode(String(child)));
  return element;
}

function show(...nodes) {
  main.replaceChildren(...nodes);
}

function bytes(text) {
  const size = new TextEncoder().encode(text).length;
  return size < 1024 ? `${size} B` : size < 1048576 ? `${(size / 1024).toFixed(1)} KiB` : `${(size / 1048576).toFixed(1)} MiB`;
}

function when(iso) {
  return iso ? new Date(iso).toLocaleString() : '';
}

function usd(value) {
  return value === undefined || value === null ? '' : `$${Number(value).toFixed(4)}`;
}

function statusBadge(status) {
  return h('span', { class: `status ${status}` }, status);
}

function sessionLink(id, text) {
  return h('a', { href: `#/s/${encodeURIComponent(id)}` }, text || id);
}

/** Shows `error`, or the token form when the server wants a token. */
function failed(error, retry) {
  if (error instanceof ApiError && error.status === 401) {
    askToken(retry, token() ? 'That token was refused.' : null);
    return;
  }
  show(h('p', { class: 'error', role: 'alert' }, error.message || String(error)));
}

function askToken(then, problem) {
  const form = document.getElementById('token-form').content.firstElementChild.cloneNode(true);
  const message = form.querySelector('.error');
  if (problem) {
    message.textContent = problem;
    message.hidden = false;
  }
  form.addEventListener('submit', (event) => {
    event.preventDefault();
    sessionStorage.setItem(TOKEN_KEY, form.elements.token.value.trim());
    viewer = null;
    then();
  });
  show(form);
  form.elements.token.focus();
}

async function whoAmI() {
  if (!viewer) {
    viewer = await api('/v1/caller');
    who.textContent = `${viewer.subject} · ${viewer.scopes.join(', ') || 'no scopes'}`;
    forget.hidden = !token();
  }
  return viewer;
}

forget.addEventListener('click', () => {
  sessionStorage.removeItem(TOKEN_KEY);
  viewer = null;
  who.textContent = '';
  forget.hidden = true;
  route();
});

// ---- the session list ------------------------------------------------------------------

const filters = { search: '', status: '', owner: '', label: '', parent: '', archived: false };

async function showList() {
  const me = await whoAmI();
  const listed = { sessions: [], cursor: null, total: 0 };
  const body = h('tbody');
  const more = h('button', { class: 'quiet', hidden: true }, 'More');
  const summary = h('p', { class: 'muted' });

  // Every filter is the server's (applied before paging); typing waits for a pause.
  let typing = null;
  const input = (name, placeholder, type = 'text') =>
    h('input', {
      type,
      name,
      placeholder,
      value: filters[name],
      'aria-label': placeholder,
      oninput: (event) => {
        filters[name] = event.target.value;
        clearTimeout(typing);
        typing = setTimeout(reload, 250);
      },
    });
  const status = h(
    'select',
    { name: 'status', 'aria-label': 'status', onchange: (event) => { filters.status = event.target.value; reload(); } },
    ...['', 'idle', 'running', 'archived'].map((value) =>
      h('option', { value, selected: filters.status === value }, value || 'any status'),
    ),
  );
  const archived = h('input', {
    type: 'checkbox',
    name: 'archived',
    checked: filters.archived,
    onchange: (event) => {
      filters.archived = event.target.checked;
      reload();
    },
  });
  const parent = h('input', {
    type: 'text',
    name: 'parent',
    placeholder: 'children of (session id)',
    'aria-label': 'children of',
    value: filters.parent,
    onchange: (event) => {
      filters.parent = event.target.value.trim();
      reload();
    },
  });

  function render() {
    body.replaceChildren(
      ...listed.sessions.map((session) =>
        h(
          'tr',
          { class: 'row', dataset: { session: session.session_id }, onclick: () => { location.hash = `#/s/${encodeURIComponent(session.session_id)}`; } },
          h('td', {}, sessionLink(session.session_id, session.title || '(untitled)')),
          h('td', {}, statusBadge(session.status)),
          me.reads_all ? h('td', {}, session.owner) : null,
          h('td', {}, session.model),
          h('td', {}, String(session.turns)),
          h('td', {}, usd(session.cost_usd)),
          h('td', {}, Object.entries(session.labels).map(([k, v]) => `${k}=${v}`).join(' ')),
          h('td', {}, when(session.updated_at)),
        ),
      ),
    );
    summary.textContent = `${listed.sessions.length} shown of ${listed.total}`;
    more.hidden = !listed.cursor;
  }

  // A reload started while a page loads wins: the older answer is dropped.
  let generation = 0;
  async function load() {
    const mine = generation;
    const query = new URLSearchParams({ limit: String(PAGE) });
    if (filters.archived) query.set('include_archived', 'true');
    if (filters.parent) query.set('parent_id', filters.parent);
    if (filters.status) query.set('status', filters.status);
    if (filters.search.trim()) query.set('title', filters.search.trim());
    if (filters.label.trim()) query.set('label', filters.label.trim());
    if (me.reads_all && filters.owner.trim()) query.set('owner', filters.owner.trim());
    if (listed.cursor) query.set('cursor', listed.cursor);
    const page = await api(`/v1/sessions?${query}`);
    if (mine !== generation) return;
    listed.sessions.push(...page.sessions);
    listed.cursor = page.next_cursor || null;
    listed.total = page.total;
    render();
  }

  function reload() {
    generation += 1;
    listed.sessions = [];
    listed.cursor = null;
    load().catch((error) => failed(error, showList));
  }

  more.addEventListener('click', () => load().catch((error) => failed(error, showList)));
  await load();
  show(
    h('h1', {}, 'Sessions'),
    h(
      'div',
      { class: 'filters' },
      input('search', 'search titles', 'search'),
      status,
      me.reads_all ? input('owner', 'owner') : null,
      input('label', 'label (key or key=value)'),
      parent,
      h('label', {}, archived, ' archived too'),
    ),
    h(
      'table',
      {},
      h('thead', {}, h('tr', {}, ...['Title', 'Status', me.reads_all ? 'Owner' : null, 'Model', 'Turns', 'Cost', 'Labels', 'Updated'].filter(Boolean).map((name) => h('th', {}, name)))),
      body,
    ),
    summary,
    more,
  );
}

// ---- one session -----------------------------------------------------------------------

/** Reads a session's journal from the start, page by page (bounded). */
async function journal(id) {
  const events = [];
  let after = null;
  for (let page = 0; page < MAX_EVENT_PAGES; page += 1) {
    const query = new URLSearchParams({ limit: String(EVENT_PAGE) });
    if (after !== null) query.set('after_seq', String(after));
    const read = await api(`/v1/sessions/${encodeURIComponent(id)}/events?${query}`);
    if (read.events.length === 0) break;
    events.push(...read.events);
    after = read.next_seq;
  }
  return events;
}

/** The journal folded into turns: what the transcript and the usage chart show. */
function turnsOf(events) {
  const turns = new Map();
  const turnOf = (number) => {
    if (!turns.has(number)) {
      turns.set(number, { number, items: [], input: 0, output: 0, cost: 0, end: null, provisional: false });
    }
    return turns.get(number);
  };
  const tools = new Map();
  for (const stored of events) {
    const event = stored.event;
    const turn = turnOf(stored.turn);
    if (stored.provisional) turn.provisional = true;
    const last = turn.items[turn.items.length - 1];
    switch (event.type) {
      case 'prompt_received':
        turn.items.push({ kind: 'prompt', text: event.prompt });
        break;
      case 'text_delta':
        if (last && last.kind === 'answer') last.text += event.text;
        else turn.items.push({ kind: 'answer', text: event.text });
        break;
      case 'reasoning_delta':
        if (last && last.kind === 'reasoning') last.text += event.text;
        else turn.items.push({ kind: 'reasoning', text: event.text });
        break;
      case 'response_restarted':
        turn.items.push({ kind: 'note', text: `response restarted: ${event.reason}` });
        break;
      case 'tool_call_requested': {
        const call = { kind: 'tool', id: event.id, name: event.name, input: JSON.stringify(event.input, null, 2), result: null, error: false };
        tools.set(event.id, call);
        turn.items.push(call);
        break;
      }
      case 'tool_result': {
        const call = tools.get(event.id);
        if (call) {
          call.result = event.content;
          call.error = event.is_error;
        }
        break;
      }
      case 'usage':
        turn.input += (event.usage.input_tokens || 0) + (event.usage.cache_read_input_tokens || 0) + (event.usage.cache_creation_input_tokens || 0);
        turn.output += event.usage.output_tokens || 0;
        turn.cost += event.cost_usd ? Number(event.cost_usd) : 0;
        break;
      case 'compaction_completed':
        turn.items.push({ kind: 'note', text: `compacted: ${event.tokens_before} → ${event.tokens_after} tokens${event.summarized ? ' (summarized)' : ''}` });
        break;
      case 'pruned':
        turn.items.push({ kind: 'note', text: `pruned ${event.results} tool results (${event.tokens_freed} tokens)` });
        break;
      case 'compaction_failed':
        turn.items.push({ kind: 'note', text: `compaction failed: ${event.error}` });
        break;
      case 'inbox_delivered':
        turn.items.push({ kind: 'note', text: `${event.messages.length} message(s) delivered from the inbox` });
        break;
      case 'approvals_answered':
        turn.items.push({ kind: 'note', text: `approvals answered: ${event.answered} (${event.denied} denied)` });
        break;
      case 'turn_completed':
        turn.end = event.stop_reason;
        break;
      case 'turn_failed':
        turn.end = `failed: ${event.error}`;
        break;
      case 'turn_cancelled':
        turn.end = 'cancelled';
        break;
      case 'forked':
        turn.items.push({ kind: 'note', text: `forked from ${event.from_session_id} at turn ${event.at_turn}` });
        break;
      case 'rewound':
        turn.items.push({ kind: 'note', text: `rewound to turn ${event.to_turn}` });
        break;
      case 'archived':
        turn.items.push({ kind: 'note', text: 'archived' });
        break;
      default:
        break;
    }
  }
  return [...turns.values()].filter((turn) => turn.items.length > 0 || turn.end || turn.input > 0);
}

function transcript(turns) {
  return turns.map((turn) =>
    h(
      'section',
      { class: `turn${turn.provisional ? ' provisional' : ''}`, dataset: { turn: turn.number } },
      h('div', { class: 'label' }, turn.number === 0 ? 'session' : `turn ${turn.number}`, turn.end ? ` · ${turn.end}` : '', turn.provisional ? ' · running' : ''),
      ...turn.items.map((item) => {
        switch (item.kind) {
          case 'prompt':
            return h('div', { class: 'prompt' }, item.text);
          case 'answer':
            return h('div', { class: 'answer' }, item.text);
          case 'reasoning':
            return h('details', { class: 'reasoning' }, h('summary', {}, `reasoning (${bytes(item.text)})`), h('pre', {}, item.text));
          case 'tool':
            return h(
              'details',
              { class: `tool${item.error ? ' error' : ''}` },
              h('summary', {}, `${item.name} · arguments ${bytes(item.input)}`, item.result === null ? ' · running' : ` · result ${bytes(item.result)}${item.error ? ' · error' : ''}`),
              h('pre', {}, item.input),
              item.result === null ? null : h('pre', {}, item.result),
            );
          default:
            return h('div', { class: 'note' }, item.text);
        }
      }),
    ),
  );
}

/** Tokens (input and output) and cost per turn, as bars. */
function usageChart(turns) {
  const counted = turns.filter((turn) => turn.number > 0 && (turn.input || turn.output));
  if (counted.length === 0) return h('p', { class: 'muted' }, 'No model calls yet.');
  const width = 24;
  const height = 120;
  const most = Math.max(...counted.map((turn) => turn.input + turn.output));
  const chart = svg('svg', { class: 'chart', width: counted.length * width + 10, height: height + 30, role: 'img', 'aria-label': 'tokens per turn' });
  counted.forEach((turn, index) => {
    const x = 5 + index * width;
    const input = (turn.input / most) * height;
    const output = (turn.output / most) * height;
    const bar = svg('g', {});
    bar.append(
      svg('title', {}, `turn ${turn.number}: ${turn.input} in, ${turn.output} out${turn.cost ? `, ${usd(turn.cost)}` : ''}`),
      svg('rect', { class: 'input', x, y: height - input - output, width: width - 6, height: Math.max(input, 0.5) }),
      svg('rect', { class: 'output', x, y: height - output, width: width - 6, height: Math.max(output, 0.5) }),
      svg('text', { x, y: height + 14 }, String(turn.number)),
    );
    chart.append(bar);
  });
  const total = counted.reduce((sum, turn) => sum + turn.cost, 0);
  return h('div', {}, chart, h('p', { class: 'muted' }, 'input (blue) and output (green) tokens per turn', total ? ` · ${usd(total)} in all` : ''));
}

async function showSession(id) {
  const me = await whoAmI();
  const path = `/v1/sessions/${encodeURIComponent(id)}`;
  let view = await api(path);
  const events = await journal(id);
  const controller = new AbortController();
  current = { stop: () => controller.abort() };

  const head = h('div');
  const pending = h('div');
  const family = h('div');
  const inbox = h('div');
  const chart = h('div');
  const log = h('div', { class: 'transcript' });
  const problem = h('p', { class: 'error', role: 'alert', hidden: true });

  const act = async (request) => {
    problem.hidden = true;
    try {
      await request();
      view = await api(path);
      renderState();
    } catch (error) {
      problem.textContent = error.message;
      problem.hidden = false;
    }
  };

  function renderState() {
    // Empty lists are left out of the answer.
    const state = { children: [], escalations: [], inbox_parked: [], pending: [], labels: {}, ...view.state };
    const mine = state.owner === me.subject;
    const acts = me.acts && (mine || me.acts_on_all) && state.status !== 'archived';
    head.replaceChildren(
      h('h1', {}, state.title || '(untitled)', ' ', statusBadge(state.status)),
      h(
        'div',
        { class: 'meta' },
        h('span', {}, state.model),
        h('span', {}, `owner ${state.owner}`),
        h('span', {}, `${state.turns} turns`),
        state.running_turn ? h('span', {}, `turn ${state.running_turn} running`) : null,
        h('span', {}, `created ${when(state.created_at)}`),
        view.billing && view.billing.cost_usd != null ? h('span', {}, `cost ${usd(view.billing.cost_usd)}`) : null,
        ...Object.entries(state.labels).map(([k, v]) => h('span', {}, `${k}=${v}`)),
      ),
      acts
        ? h(
            'div',
            { class: 'actions' },
            state.status === 'running' ? h('button', { onclick: () => act(() => api(`${path}/interrupt`, { method: 'POST' })) }, 'Interrupt') : null,
            h('button', { class: 'danger', onclick: () => { if (confirm('Archive this session? It takes no more turns.')) act(() => api(path, { method: 'DELETE' })); } }, 'Archive'),
          )
        : h('p', { class: 'muted' }, 'Read only.'),
      problem,
    );

    const approvals = state.pending.filter((call) => call.kind === 'approval');
    pending.replaceChildren(
      ...(state.pending.length === 0
        ? []
        : [
            h('h2', {}, 'Waiting for the caller'),
            h(
              'ul',
              { class: 'plain' },
              ...state.pending.map((call) =>
                h(
                  'li',
                  { dataset: { call: call.tool_use_id } },
                  h('strong', {}, call.name),
                  ` (${call.kind}) `,
                  h('details', {}, h('summary', {}, `arguments ${bytes(JSON.stringify(call.arguments))}`), h('pre', {}, JSON.stringify(call.arguments, null, 2))),
                  call.kind === 'approval' && acts
                    ? h(
                        'span',
                        { class: 'actions' },
                        ...['allow', 'deny'].map((decision) =>
                          h(
                            'button',
                            {
                              onclick: () =>
                                act(() =>
                                  api(`${path}/turns`, {
                                    method: 'POST',
                                    body: {
                                      approvals: approvals.map((other) => ({
                                        tool_use_id: other.tool_use_id,
                                        decision: other.tool_use_id === call.tool_use_id ? decision : 'deny',
                                      })),
                                      wait_ms: 0,
                                    },
                                  }),
                                ),
                            },
                            decision === 'allow' ? (approvals.length > 1 ? 'Allow this, deny the rest' : 'Allow') : 'Deny',
                          ),
                        ),
                      )
                    : null,
                ),
              ),
            ),
          ]),
    );

    // The place in the delegation tree is flattened into the state: `parent_id`, `root_id`.
    family.replaceChildren(
      ...(state.parent_id || state.children.length || state.escalations.length
        ? [
            h('h2', {}, 'Delegation'),
            state.parent_id ? h('p', {}, 'parent ', sessionLink(state.parent_id), state.root_id && state.root_id !== state.parent_id ? [' · root ', sessionLink(state.root_id)] : null) : null,
            state.children.length
              ? h('ul', { class: 'plain' }, ...state.children.map((child) => h('li', {}, sessionLink(child.session_id, child.name || child.session_id), ' ', statusBadge(child.status), ` ${child.total_tokens} tokens`)))
              : null,
            state.escalations.length
              ? h('ul', { class: 'plain' }, ...state.escalations.map((escalation) => h('li', {}, 'waiting below: ', sessionLink(escalation.session_id))))
              : null,
          ]
        : []),
    );

    inbox.replaceChildren(
      ...(state.inbox.waiting || state.inbox_parked.length
        ? [
            h('h2', {}, 'Inbox'),
            h('p', {}, `${state.inbox.waiting} waiting`, state.inbox.oldest_at ? ` since ${when(state.inbox.oldest_at)}` : ''),
            state.inbox_parked.length
              ? h('details', {}, h('summary', {}, `${state.inbox_parked.length} parked`), h('pre', {}, JSON.stringify(state.inbox_parked, null, 2)))
              : null,
          ]
        : []),
    );
  }

  function renderJournal() {
    const turns = turnsOf(events);
    chart.replaceChildren(h('h2', {}, 'Usage'), usageChart(turns));
    log.replaceChildren(h('h2', {}, 'Transcript'), ...transcript(turns));
  }

  renderState();
  renderJournal();
  show(head, pending, family, inbox, chart, log);

  // Live: the journal from the last event seen, as it is written.
  follow(id, events.length ? events[events.length - 1].seq : null, controller.signal, async (stored) => {
    const at = events.findIndex((known) => known.seq === stored.seq);
    if (at >= 0) events[at] = stored;
    else events.push(stored);
    renderJournal();
    if (['turn_started', 'turn_completed', 'turn_failed', 'turn_cancelled', 'archived', 'inbox_delivered'].includes(stored.event.type)) {
      view = await api(path);
      renderState();
    }
  });
}

/** Follows a session's events (`?follow=true`, Server-Sent Events over fetch so the token
 *  goes in a header), reconnecting from the last seq until `signal` aborts. */
async function follow(id, after, signal, onEvent) {
  let last = after;
  while (!signal.aborted) {
    try {
      const query = new URLSearchParams({ follow: 'true', provisional: 'true', limit: String(EVENT_PAGE) });
      if (last !== null) query.set('after_seq', String(last));
      const response = await fetch(`/v1/sessions/${encodeURIComponent(id)}/events?${query}`, { headers: headers({ Accept: 'text/event-stream' }), signal });
      if (!response.ok) return;
      const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
      let buffer = '';
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buffer += value;
        let end;
        while ((end = buffer.indexOf('\n\n')) >= 0) {
          const block = buffer.slice(0, end);
          buffer = buffer.slice(end + 2);
          const data = block.split('\n').filter((line) => line.startsWith('data:')).map((line) => line.slice(5).trimStart()).join('\n');
          if (!data) continue;
          const stored = JSON.parse(data);
          if (!stored.provisional && stored.seq !== undefined) last = Math.max(last ?? -1, stored.seq);
          await onEvent(stored);
          if (stored.event.type === 'archived') return;
        }
      }
    } catch (error) {
      if (signal.aborted) return;
    }
    await new Promise((resolve) => setTimeout(resolve, 1000));
  }
}

// ---- routing ---------------------------------------------------------------------------

async function route() {
  current.stop();
  current = { stop: () => {} };
  const match = location.hash.match(/^#\/s\/([^/?#]+)/);
  const page = match ? () => showSession(decodeURIComponent(match[1])) : showList;
  try {
    await page();
  } catch (error) {
    failed(error, route);
  }
}

window.addEventListener('hashchange', route);
route();
