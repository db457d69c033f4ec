/**
 * The dashboard's script (GET /ui), type-checked with the DOM's types (src/ui/tsconfig.json) and
 * bundled by esbuild into dashboard.html's script slot (scripts/bundle-options.mjs, dashboardPage).
 * It reads the documented API only, over fetch with the key the page asked for; the live events
 * come from GET /events, and the page polls while that stream is down.
 */

// ---------- what the API answers, as the page reads it ----------

type Attrs = Readonly<Record<string, string | number | boolean | null | undefined>>

/** An answer's body: the contract's envelope, its other fields read by each caller. */
interface ApiBody {
  readonly success?: boolean
  readonly message?: string
  readonly error?: { readonly code?: string; readonly message?: string; readonly details?: Record<string, unknown> }
}

interface Service {
  name: string
  scope: string
  status: string
  tool_count?: number
  transport_type?: string
  last_state_change?: string | null
  last_error?: string | null
  auth?: { readonly state?: unknown } | null
  reconnect_attempts?: number
  consecutive_failures?: number
  next_retry_at?: string | null
}

interface JsonSchema {
  readonly type?: string | ReadonlyArray<string>
  readonly properties?: Record<string, JsonSchema>
  readonly default?: unknown
  readonly const?: unknown
  readonly enum?: ReadonlyArray<unknown>
  readonly examples?: ReadonlyArray<unknown>
  readonly anyOf?: ReadonlyArray<JsonSchema>
  readonly oneOf?: ReadonlyArray<JsonSchema>
}

interface Tool {
  readonly name: string
  readonly scope: string
  readonly description?: string
  readonly inputSchema?: JsonSchema
}

interface CallRecord {
  readonly id?: string
  readonly trace_id?: string | null
  /** The store's span of the call: one per call, where calls of one caller's trace share the trace id. */
  readonly span_id?: string | null
  readonly timestamp?: string
  readonly scope?: string
  readonly agent_id?: string | null
  readonly service_name: string
  readonly tool_name: string
  readonly outcome: string
  readonly error?: string | null
  readonly duration_ms?: number
}

interface Transition {
  readonly from: string | null
  readonly to: string
  readonly at: string
  readonly reason?: string | null
}

interface HealthHistory extends ApiBody {
  readonly transitions: ReadonlyArray<Transition>
  readonly checks: ReadonlyArray<{ readonly at: string; readonly ok: boolean; readonly error?: string | null }>
}

interface ServiceStatus extends ApiBody {
  readonly status: string
  readonly state_entered_at?: string
  readonly reconnect_attempts?: number
  readonly consecutive_failures?: number
  readonly next_retry_at?: string | null
  readonly last_error?: string | null
  readonly stderr_tail?: ReadonlyArray<string>
  readonly transitions: ReadonlyArray<Transition>
}

interface Alert {
  readonly level: string
  readonly title?: string
  readonly message?: string
  readonly scope?: string | null
  readonly timestamp?: string
  readonly resolved?: boolean
  readonly resolved_at?: string | null
}

/** The events of GET /events the page handles. */
interface StatusEvent {
  readonly scope: string
  readonly service_name: string
  readonly from: string | null
  readonly to: string
  readonly at?: string
  readonly reason?: string | null
}
interface ToolsChangedEvent {
  readonly scope: string
  readonly service_name: string
  readonly tool_count?: number
}
interface EventFields {
  readonly service_name?: string
  readonly scope?: string
  readonly from?: string | null
  readonly to?: string
  readonly tool_count?: number
  readonly tool_name?: string
  readonly outcome?: string
  readonly title?: string
  readonly state?: string
}

type Mode = "live" | "polling" | "offline" | "auth" | "connecting"

const STATUSES = ["initializing", "healthy", "warning", "reconnecting", "unreachable", "disconnecting", "disconnected"] as const
const COLORS: Readonly<Record<(typeof STATUSES)[number], string>> = {
  initializing: "#2563eb",
  healthy: "#16a34a",
  warning: "#d97706",
  reconnecting: "#0ea5e9",
  unreachable: "#dc2626",
  disconnecting: "#94a3b8",
  disconnected: "#6b7280"
}
const POLL_MS = 5000
const TICK_MS = 15000 // figures no event announces (latency, the hour's counts) are read again this often
const MAX_CALLS = 20
const KEY_STORAGE = "mcp-store.api-key"
// The API lives next to the page: drop the page's own segment, however it was spelled (the store
// serves the page at "/ui;x" and "/%75i" too), so that a mount under a prefix still works. Slashes
// are not doubled, which would make "//host/…" a URL of another host.
const BASE = location.pathname.replace(/\/[^/]*\/?$/, "").replace(/\/{2,}/g, "/")

/** The page's element of that id (the page is this script's own: a missing one is a bug). */
const $ = <T extends HTMLElement = HTMLElement>(id: string): T => {
  const node = document.getElementById(id)
  if (node === null) throw new Error(`mcp-store dashboard: no element #${id}`)
  return node as T
}
const input = (id: string) => $<HTMLInputElement | HTMLTextAreaElement | HTMLSelectElement>(id)

const state = {
  apiKey: null as string | null,
  authNeeded: false,
  services: [] as Service[], // Service objects of every scope
  tools: [] as Tool[], // Tool objects with an added `scope`
  calls: [] as CallRecord[], // recent call records, newest first
  events: null as AbortController | null, // the /events stream
  eventsLive: false,
  eventsTimer: undefined as number | undefined,
  eventsRetryMs: 1000,
  eventCount: 0,
  mode: "connecting" as Mode,
  pollTimer: undefined as number | undefined,
  selected: null as { scope: string; name: string } | null, // the service in the detail panel
  flaps: new Map<string, { count: number; change: string; at: number }>(), // service key -> transitions in the last hour
  busy: new Set<string>(), // service keys with an action under way
  toolsSignature: ""
}
try {
  state.apiKey = sessionStorage.getItem(KEY_STORAGE)
} catch {
  /* storage off */
}

// ---------- small helpers ----------
const el = <K extends keyof HTMLElementTagNameMap>(tag: K, attrs?: Attrs, ...children: Array<Node | string | null | undefined>): HTMLElementTagNameMap[K] => {
  const node = document.createElement(tag)
  for (const [k, v] of Object.entries(attrs ?? {})) {
    if (v === undefined || v === null || v === false) continue
    if (k === "class") node.className = String(v)
    else if (k === "text") node.textContent = String(v)
    else node.setAttribute(k, v === true ? "" : String(v))
  }
  for (const c of children) if (c !== null && c !== undefined) node.append(c)
  return node
}
const svg = (tag: string, attrs?: Attrs): SVGElement => {
  const node = document.createElementNS("http://www.w3.org/2000/svg", tag)
  for (const [k, v] of Object.entries(attrs ?? {})) node.setAttribute(k, String(v))
  return node
}
const fmtTime = (iso: string | null | undefined): string => {
  if (!iso) return ""
  const d = new Date(iso)
  return isNaN(d.getTime()) ? String(iso) : d.toLocaleTimeString([], { hour: "2-digit", minute: "2-digit", second: "2-digit" })
}
const fmtMs = (ms: unknown): string => (typeof ms === "number" ? (ms < 10 ? ms.toFixed(1) : Math.round(ms)) + " ms" : "")
const scopeLabel = (scope: string | undefined, agentId: string | null | undefined): string => (scope === "store" ? "store" : agentId || scope || "agent")
const scopeBadge = (scope: string) => el("span", { class: "scope" + (scope === "store" ? " store" : ""), text: scope === "store" ? "store" : "agent " + scope })
/**
 * `fn` once, `ms` after the first call of a burst; the calls meanwhile join that run. A debounce that
 * restarts its timer at each call never runs while the calls keep coming faster than `ms` (a
 * service whose status changes every half second kept its row's figures stale for as long).
 */
const coalesce = (fn: () => void, ms: number) => {
  let t: number | undefined
  return () => {
    if (t !== undefined) return
    t = setTimeout(() => {
      t = undefined
      fn()
    }, ms)
  }
}
/**
 * `run` one at a time: a call while a run is under way asks for one more run after it, shared by
 * every call until it starts, and gets that run's promise. So an answer never lands after a later
 * call's (the list read before a delete is not shown after the one read after it), and calls faster
 * than the store answers make one run in flight and one waiting, not a pile.
 */
const singleFlight = (run: () => Promise<void>): (() => Promise<void>) => {
  let last: Promise<void> = Promise.resolve()
  let waiting: Promise<void> | undefined
  return () => {
    if (waiting) return waiting
    const next = last.then(() => {
      waiting = undefined
      return run()
    })
    waiting = next
    last = next.catch(() => {})
    return next
  }
}
const scopePrefix = (scope: string) => (scope === "store" ? "/for_store" : "/for_agent/" + encodeURIComponent(scope))
const messageOf = (e: unknown): string => (e instanceof Error ? e.message : String(e))

class AuthError extends Error {}
/** A refused event stream, with the wait the server asked for. */
class StreamError extends Error {
  constructor(
    message: string,
    readonly retryMs = 0
  ) {
    super(message)
  }
}

/** A request to the API: its status and its JSON body (the caller names the fields it reads). */
async function api<T extends ApiBody = ApiBody>(path: string, init?: RequestInit): Promise<{ status: number; ok: boolean; body: T | null }> {
  const headers = new Headers(init?.headers)
  if (!headers.has("accept")) headers.set("accept", "application/json")
  if (state.apiKey) headers.set("authorization", "Bearer " + state.apiKey)
  const res = await fetch(BASE + path, { ...init, headers })
  let body: T | null = null
  const text = await res.text()
  try {
    body = text ? (JSON.parse(text) as T) : null
  } catch {
    body = { success: false, message: text } as T
  }
  if (res.status === 401) {
    needAuth(body?.message)
    throw new AuthError("unauthorized")
  }
  return { status: res.status, ok: res.ok, body }
}

// ---------- connection state ----------
const MODE_TEXT: Readonly<Record<Mode, string>> = {
  live: "Live",
  polling: "Polling every 5 s",
  offline: "Store unreachable, retrying",
  auth: "API key needed",
  connecting: "Connecting…"
}
function setMode(mode: Mode) {
  state.mode = mode
  const conn = $("conn")
  conn.dataset["mode"] = mode
  conn.textContent = MODE_TEXT[mode]
}
function touched() {
  $("updated").textContent = "Updated " + new Date().toLocaleTimeString()
}

function startPolling() {
  if (state.pollTimer !== undefined) return
  state.pollTimer = setInterval(() => {
    void refreshAll()
  }, POLL_MS)
}
function stopPolling() {
  clearInterval(state.pollTimer)
  state.pollTimer = undefined
}

// ---------- live events: GET /events read with fetch ----------
// EventSource cannot send an Authorization header; fetch can, and its body is a ReadableStream of
// Server-Sent Events, parsed here. One stream at a time; when it fails or ends, the page polls and
// the stream is tried again after a growing delay (1 s doubling to 30 s; back to 1 s once a stream has
// stayed up 30 s, so a server that accepts and ends streams at once is not asked again every second).
const EVENTS_MAX_LINE = 1 << 20 // a line longer than 1 MiB ends the stream (bounded memory)
const EVENTS_RETRY_MIN_MS = 1000,
  EVENTS_RETRY_MAX_MS = 30000,
  EVENTS_STABLE_MS = 30000

function openEvents() {
  if (state.events || state.authNeeded) return
  clearTimeout(state.eventsTimer)
  state.eventsTimer = undefined
  const ctrl = new AbortController()
  state.events = ctrl
  let connectedAt = 0
  const headers: Record<string, string> = { accept: "text/event-stream" }
  if (state.apiKey) headers["authorization"] = "Bearer " + state.apiKey
  fetch(BASE + "/events", { headers, signal: ctrl.signal, cache: "no-store" })
    .then(async (res) => {
      if (res.status === 401) {
        needAuth()
        return
      }
      if (!res.ok || !res.body) {
        const wait = Number(res.headers.get("retry-after"))
        throw new StreamError("GET /events: HTTP " + res.status, wait > 0 ? wait * 1000 : 0)
      }
      connectedAt = Date.now()
      state.eventsLive = true
      stopPolling()
      setMode("live")
      void refreshAll() // catch up on what happened while the stream was down
      await readEvents(res.body, ctrl.signal)
      throw new Error("GET /events: the stream ended")
    })
    .catch((e: unknown) => {
      if (state.events !== ctrl) return // closed on purpose (a new key, a new stream)
      state.events = null
      state.eventsLive = false
      if (ctrl.signal.aborted) return
      console.warn("mcp-store dashboard: live events:", messageOf(e))
      if (state.mode === "live" || state.mode === "connecting") setMode("polling")
      startPolling()
      // A stream that stayed up a while starts the backoff over; one that ends at once does not.
      if (connectedAt && Date.now() - connectedAt >= EVENTS_STABLE_MS) state.eventsRetryMs = EVENTS_RETRY_MIN_MS
      const delay = Math.max(e instanceof StreamError ? e.retryMs : 0, state.eventsRetryMs)
      state.eventsRetryMs = Math.min(EVENTS_RETRY_MAX_MS, state.eventsRetryMs * 2)
      state.eventsTimer = setTimeout(openEvents, delay * (0.8 + Math.random() * 0.4))
    })
}
function afterRefresh() {
  if (!state.authNeeded) openEvents()
}
function closeEvents() {
  state.eventsLive = false
  clearTimeout(state.eventsTimer)
  state.eventsTimer = undefined
  const ctrl = state.events
  state.events = null
  if (ctrl) ctrl.abort()
}

// The text/event-stream format: lines; "event:", "data:" (joined by "\n"), comments (":"), a blank line ends an event.
async function readEvents(body: ReadableStream<Uint8Array>, signal: AbortSignal) {
  const reader = body.getReader()
  const decoder = new TextDecoder()
  signal.addEventListener("abort", () => reader.cancel().catch(() => {}), { once: true })
  const EOL = /\r\n|\r|\n/g
  let buffer = "",
    type = "",
    data: string[] = [],
    size = 0
  for (;;) {
    const { value, done } = await reader.read()
    if (done && !buffer.endsWith("\r")) return // an unfinished line or event is dropped, as the format says
    if (!done) buffer += decoder.decode(value, { stream: true })
    let start = 0
    let m: RegExpExecArray | null
    EOL.lastIndex = 0
    while ((m = EOL.exec(buffer))) {
      if (!done && m[0] === "\r" && m.index === buffer.length - 1) break // maybe the first half of "\r\n"
      const line = buffer.slice(start, m.index)
      start = m.index + m[0].length
      if (line === "") {
        if (data.length) dispatchEvent(type || "message", data.join("\n"))
        type = ""
        data = []
        size = 0
        continue
      }
      if (line.startsWith(":")) continue
      const colon = line.indexOf(":")
      const field = colon < 0 ? line : line.slice(0, colon)
      let val = colon < 0 ? "" : line.slice(colon + 1)
      if (val.startsWith(" ")) val = val.slice(1)
      if (field === "event") type = val
      else if (field === "data") {
        size += val.length
        if (size > EVENTS_MAX_LINE) throw new Error("GET /events: an event over 1 MiB")
        data.push(val)
      }
    }
    if (done) return
    buffer = buffer.slice(start)
    if (buffer.length > EVENTS_MAX_LINE) throw new Error("GET /events: a line over 1 MiB")
  }
}

// Each handler takes the event's JSON object as the store sends it for that event type.
const EVENT_HANDLERS: Readonly<Record<string, (d: object) => void>> = {
  status: (d) => onStatusEvent(d as StatusEvent),
  tool_changed: (d) => onToolChangedEvent(d as { readonly scope?: string; readonly service_name?: string }),
  tools_changed: (d) => onToolsChangedEvent(d as ToolsChangedEvent),
  tool_call: (d) => onToolCallEvent(d as CallRecord),
  alert: () => refreshAlerts().catch(noteError),
  approval: () => refreshApprovalsSoon(),
  // A service's upstream OAuth state changed (its status may not): its row's badge and Authorize button.
  auth: () => refreshServicesSoon()
}
function dispatchEvent(type: string, text: string) {
  const handler = EVENT_HANDLERS[type]
  if (!handler) return
  let d: unknown
  try {
    d = JSON.parse(text)
  } catch {
    return
  }
  if (!d || typeof d !== "object") return
  try {
    handler(d)
  } catch (e) {
    console.error("event " + type, e)
  }
  state.eventCount += 1
  showLastEvent(type, d as EventFields)
  touched()
}
function showLastEvent(type: string, d: EventFields) {
  const who = d.service_name ? d.service_name + (d.scope && d.scope !== "store" ? " (agent " + d.scope + ")" : "") : ""
  const what =
    type === "status"
      ? `${who}: ${d.from} → ${d.to}`
      : type === "tools_changed"
        ? `${who}: ${d.tool_count} tool(s)`
        : type === "tool_call"
          ? `${who} · ${d.tool_name}: ${d.outcome}`
          : type === "alert"
            ? `alert: ${d.title || ""}`
            : type === "auth"
              ? `${who}: OAuth ${d.state}`
              : type
  const node = $("last-event")
  node.textContent = `${state.eventCount} event(s); last ${what}`
  node.dataset["type"] = type
}

// ---------- auth ----------
function needAuth(message?: string) {
  const first = !state.authNeeded
  state.authNeeded = true
  closeEvents()
  stopPolling()
  const form = $("auth")
  form.hidden = false
  $("auth-msg").textContent = state.apiKey ? message || "The key was refused." : ""
  setMode("auth")
  if (first) $("api-key").focus()
}
function setKey(key: string | null) {
  state.apiKey = key || null
  try {
    if (key) sessionStorage.setItem(KEY_STORAGE, key)
    else sessionStorage.removeItem(KEY_STORAGE)
  } catch {
    /* storage off */
  }
  $("forget-key").hidden = !state.apiKey
}
$("auth").addEventListener("submit", async (ev) => {
  ev.preventDefault()
  setKey(input("api-key").value.trim())
  input("api-key").value = ""
  $("auth-msg").textContent = ""
  state.authNeeded = false
  closeEvents()
  await refreshAll(true)
  if (!state.authNeeded) {
    $("auth").hidden = true
    openEvents()
  }
})
$("forget-key").addEventListener("click", () => {
  setKey(null)
  closeEvents()
  void refreshAll(true).then(afterRefresh)
})
$("forget-key").hidden = !state.apiKey

// ---------- services ----------
const serviceKey = (scope: string, name: string) => scope + "\u0000" + name
const rows = new Map<string, HTMLTableRowElement>() // key -> <tr>

const refreshServices = singleFlight(async () => {
  const { body } = await api<ApiBody & { services?: Service[] }>("/for_store/list_services?scope=all")
  if (!body || !Array.isArray(body.services)) return
  state.services = body.services
  renderServices()
  refreshFlapsSoon()
  const sig = state.services
    .map((s) => serviceKey(s.scope, s.name) + ":" + s.tool_count + ":" + s.status)
    .sort()
    .join("|")
  if (sig !== state.toolsSignature) {
    state.toolsSignature = sig
    refreshTools().catch(noteError)
  }
})

function sortServices(list: ReadonlyArray<Service>): Service[] {
  return list
    .slice()
    .sort(
      (a, b) =>
        (a.scope === "store" ? 0 : 1) - (b.scope === "store" ? 0 : 1) || String(a.scope).localeCompare(String(b.scope)) || String(a.name).localeCompare(String(b.name))
    )
}

const isSelected = (scope: string | undefined, name: string | undefined) => !!state.selected && state.selected.scope === scope && state.selected.name === name
const FLAPPING = 6 // transitions in the last hour from which a service is shown as flapping
const isStore = (s: Service) => s.scope === "store"
const isOff = (status: string) => status === "disconnected" || status === "disconnecting"

type Action = "details" | "authorize" | "restart" | "enable" | "disconnect" | "refresh" | "delete"

function fillRow(tr: HTMLTableRowElement, s: Service) {
  const key = serviceKey(s.scope, s.name)
  const flap = state.flaps.get(key)
  const busy = state.busy.has(key)
  // Rebuilt only when something shown changed: a button is not replaced under the pointer.
  const selected = isSelected(s.scope, s.name)
  const auth = s.auth && typeof s.auth.state === "string" ? s.auth.state : null
  const sig = JSON.stringify([s.status, s.tool_count, s.transport_type, s.last_state_change, s.last_error, flap && flap.count, busy, selected, auth])
  if (tr.dataset["sig"] === sig) return
  tr.classList.toggle("selected", selected)
  tr.dataset["sig"] = sig
  const changed = tr.dataset["status"] !== undefined && tr.dataset["status"] !== s.status
  tr.dataset["name"] = s.name
  tr.dataset["scope"] = s.scope
  tr.dataset["status"] = s.status
  tr.dataset["flapping"] = String(!!flap && flap.count >= FLAPPING)
  const button = (action: Action, label: string, attrs?: Attrs) => {
    const b = el("button", { type: "button", "data-action": action, "aria-label": label + " " + s.name, text: label, disabled: busy, ...attrs })
    b.addEventListener("click", () => void onAction(action, s.scope, s.name))
    return b
  }
  const actions = [button("details", "Details")]
  // An upstream waiting for an OAuth authorization (or whose refresh failed): start it from here.
  if (auth === "needs_authorization" || auth === "refresh_failed" || auth === "authorizing") actions.push(button("authorize", "Authorize"))
  if (isStore(s)) {
    actions.push(button("restart", "Restart"))
    actions.push(isOff(s.status) ? button("enable", "Enable") : button("disconnect", "Disconnect"))
    actions.push(button("refresh", "Refresh tools"))
  }
  actions.push(button("delete", "Delete", { class: "danger" }))
  tr.replaceChildren(
    el("td", { "data-status": s.status }, el("span", { class: "badge status", "data-testid": "service-status", text: s.status })),
    el(
      "td",
      {},
      el("strong", { text: s.name }),
      auth
        ? el("span", { class: "oauth", "data-testid": "service-auth", "data-auth": auth, title: "upstream OAuth: " + auth, text: "OAuth: " + auth.replace(/_/g, " ") })
        : null
    ),
    el("td", {}, scopeBadge(s.scope)),
    el("td", { class: "num", text: String(s.tool_count ?? 0) }),
    el("td", { class: "mono", text: s.transport_type || "" }),
    el("td", { title: s.last_state_change || "", text: fmtTime(s.last_state_change) }),
    el(
      "td",
      { class: "num", "data-testid": "service-flaps" },
      flap ? String(flap.count) : "…",
      flap && flap.count >= FLAPPING ? el("span", { class: "flap", "data-testid": "flapping", title: `${flap.count} transitions in the last hour`, text: "flapping" }) : null
    ),
    el("td", { class: "err", title: s.last_error || "", text: s.last_error || "" }),
    el("td", { class: "acts" }, ...actions)
  )
  tr.setAttribute("aria-label", `${s.name} (${isStore(s) ? "store" : "agent " + s.scope}): ${s.status}`)
  if (changed) {
    tr.classList.remove("flash")
    void tr.offsetWidth
    tr.classList.add("flash")
  }
}
const refillRow = (scope: string, name: string) => {
  const s = state.services.find((x) => x.scope === scope && x.name === name)
  const tr = rows.get(serviceKey(scope, name))
  if (s && tr) fillRow(tr, s)
}

// ---------- transitions of the last hour (flapping) ----------
// From /monitoring/service_health_history?hours=1, fetched only for services whose last change is
// within the hour (the others have none), again when that change moves or after a minute, four at a
// time and at most 100 a round: bounded work however many services the store has.
const HOUR_MS = 3600000
const refreshFlaps = singleFlight(async () => {
  const now = Date.now()
  const todo: Service[] = []
  const live = new Set<string>()
  for (const s of state.services) {
    const key = serviceKey(s.scope, s.name)
    live.add(key)
    const change = s.last_state_change || ""
    const old = state.flaps.get(key)
    if (!change || now - Date.parse(change) > HOUR_MS) {
      if (!old || old.count !== 0) {
        state.flaps.set(key, { count: 0, change, at: now })
        refillRow(s.scope, s.name)
      }
    } else if (!old || old.change !== change || now - old.at > 60000) todo.push(s)
  }
  for (const key of state.flaps.keys()) if (!live.has(key)) state.flaps.delete(key)
  const queue = todo.slice(0, 100)
  const worker = async () => {
    for (let s = queue.shift(); s; s = queue.shift()) {
      const h = await healthHistory(s.scope, s.name, 1)
      if (h) {
        state.flaps.set(serviceKey(s.scope, s.name), { count: h.transitions.length, change: s.last_state_change || "", at: Date.now() })
        refillRow(s.scope, s.name)
      }
    }
  }
  await Promise.all([worker(), worker(), worker(), worker()])
})
const refreshFlapsSoon = coalesce(() => refreshFlaps().catch(noteError), 300)

const scopeQuery = (scope: string, name: string) => "service_name=" + encodeURIComponent(name) + "&agent_id=" + encodeURIComponent(scope)
async function healthHistory(scope: string, name: string, hours: number): Promise<HealthHistory | null> {
  const { body } = await api<HealthHistory>("/monitoring/service_health_history?" + scopeQuery(scope, name) + "&hours=" + hours)
  return body && body.success && Array.isArray(body.transitions) ? body : null
}

// ---------- actions ----------
function showOutcome(stateName: string, text: string, action: string, name: string) {
  const out = $("action-result")
  out.dataset["state"] = stateName
  out.dataset["action"] = action || ""
  out.dataset["service"] = name || ""
  out.textContent = text
}
// The API's message, and for a refused request its code and the fields it names.
function apiMessage(status: number, body: ApiBody | null): string {
  const b = body ?? {}
  const err = b.error ?? {}
  let text = b.message || err.message || (status >= 400 ? "HTTP " + status : "done")
  if (b.success === false && err.code) text = `${err.code}: ${text}`
  const fields = err.details && Array.isArray(err.details["fields"]) ? (err.details["fields"] as ReadonlyArray<unknown>) : []
  for (const f of fields) if (f && typeof f === "object") text += `\n  ${(f as { field?: unknown }).field}: ${(f as { problem?: unknown }).problem}`
  return text
}

function confirmDelete(scope: string, name: string): Promise<boolean> {
  const dialog = $<HTMLDialogElement>("confirm")
  $("confirm-text").textContent =
    `Delete the service "${name}" (${scope === "store" ? "store" : "agent " + scope})? ` + "It is removed from the services file and stopped; its local process ends."
  return new Promise((resolve) => {
    const done = (yes: boolean) => () => {
      cleanup()
      dialog.close()
      resolve(yes)
    }
    const ok = done(true),
      cancel = done(false)
    const onCancel = (ev: Event) => {
      ev.preventDefault()
      cancel()
    }
    const cleanup = () => {
      $("confirm-ok").removeEventListener("click", ok)
      $("confirm-cancel").removeEventListener("click", cancel)
      dialog.removeEventListener("cancel", onCancel)
    }
    $("confirm-ok").addEventListener("click", ok)
    $("confirm-cancel").addEventListener("click", cancel)
    dialog.addEventListener("cancel", onCancel) // Escape
    dialog.showModal()
    $("confirm-cancel").focus()
  })
}

const postJson = (body: unknown): RequestInit => ({ method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body) })

/** What an action answers: every field any action's answer may have that the page reads. */
interface ActionBody extends ApiBody {
  readonly results?: ReadonlyArray<{ readonly service_name: string; readonly tool_count: number; readonly changed?: boolean }>
  readonly authorization_url?: string
}
type Request = Promise<{ status: number; ok: boolean; body: ActionBody | null }>
const ACTIONS: Readonly<Record<Exclude<Action, "details">, (scope: string, name: string) => [string, Request]>> = {
  restart: (_scope, name) => ["Restart", api("/for_store/restart_service", postJson({ service_name: name }))],
  disconnect: (_scope, name) => ["Disconnect", api("/for_store/disconnect_service", postJson({ service_name: name, reason: "disconnected from the dashboard" }))],
  enable: (_scope, name) => ["Enable", api("/for_store/restart_service", postJson({ service_name: name }))],
  refresh: (_scope, name) => ["Refresh tools", api("/for_store/refresh_tools", postJson({ service_name: name }))],
  authorize: (scope, name) => ["Authorize", api(scopePrefix(scope) + "/authorize_service", postJson({ service_name: name }))],
  delete: (scope, name) => ["Delete", api(scopePrefix(scope) + "/delete_service/" + encodeURIComponent(name), { method: "DELETE" })]
}

// The authorization server's page (an upstream's words: only an http(s) URL is opened), in a new
// tab, and as a link beside the outcome in case the browser blocked the tab.
function openAuthorization(url: unknown) {
  let target: URL
  try {
    target = new URL(String(url))
  } catch {
    return
  }
  if (target.protocol !== "https:" && target.protocol !== "http:") return
  $("action-result").append(" ", el("a", { href: target.href, target: "_blank", rel: "noopener noreferrer", "data-testid": "authorize-link", text: "Open the authorization page" }))
  window.open(target.href, "_blank", "noopener")
}

async function onAction(action: Action, scope: string, name: string) {
  if (action === "details") {
    selectService(scope, name)
    return
  }
  const key = serviceKey(scope, name)
  if (state.busy.has(key)) return
  if (action === "delete" && !(await confirmDelete(scope, name))) {
    showOutcome("idle", `Delete ${name}: cancelled.`, action, name)
    return
  }
  state.busy.add(key)
  refillRow(scope, name)
  const [label, request] = ACTIONS[action](scope, name)
  showOutcome("pending", `${label} ${name}…`, action, name)
  try {
    const { status, body } = await request
    let text = apiMessage(status, body)
    if (action === "refresh" && body && Array.isArray(body.results)) {
      text += body.results.map((r) => `\n  ${r.service_name}: ${r.tool_count} tool(s)${r.changed ? ", changed" : ""}`).join("")
    }
    showOutcome(status < 400 && body && body.success !== false ? "ok" : "error", `${label} ${name}: ${text}`, action, name)
    if (action === "authorize" && status < 400 && body) openAuthorization(body.authorization_url)
    if (action === "delete" && status < 400 && state.selected && serviceKey(state.selected.scope, state.selected.name) === key) closeDetail()
  } catch (e) {
    showOutcome("error", `${label} ${name}: ` + (e instanceof AuthError ? "an API key is needed: enter it above." : "the request failed: " + messageOf(e)), action, name)
  } finally {
    state.busy.delete(key)
    // The page shows the state the API now reports, not what the action was meant to do.
    await refreshServices().catch(noteError)
    refillRow(scope, name)
    if (action === "refresh") refreshToolsSoon()
    refreshDetailSoon()
    refreshChartSoon()
  }
}

// ---------- detail panel ----------
function selectService(scope: string, name: string) {
  const previous = state.selected
  state.selected = { scope, name }
  if (previous) refillRow(previous.scope, previous.name)
  refillRow(scope, name)
  const panel = $("detail")
  panel.hidden = false
  panel.dataset["name"] = name
  panel.dataset["scope"] = scope
  panel.dataset["loaded"] = "false"
  $("detail-h").textContent = "Service " + name
  $("detail-sub").textContent = scope === "store" ? "store" : "agent " + scope
  refreshDetail().catch(noteError)
  panel.scrollIntoView({ block: "nearest" })
}
function closeDetail() {
  const previous = state.selected
  state.selected = null
  $("detail").hidden = true
  if (previous) refillRow(previous.scope, previous.name)
}
$("detail-close").addEventListener("click", closeDetail)

const orNone = <T>(v: T | null | undefined | "", f?: (v: T) => string): string => (v === null || v === undefined || v === "" ? "—" : f ? f(v) : String(v))
const fmtWhen = (iso: string | null | undefined): string => {
  if (!iso) return "—"
  const d = new Date(iso)
  if (isNaN(d.getTime())) return String(iso)
  const secs = Math.round((d.getTime() - Date.now()) / 1000)
  return d.toLocaleTimeString() + (secs > 0 ? ` (in ${secs} s)` : "")
}
interface ResponseTimes extends ApiBody {
  readonly services?: ReadonlyArray<{ readonly service_name: string; readonly scope: string; readonly p50_ms?: number | null; readonly p95_ms?: number | null; readonly samples: number }>
}
interface ErrorRates extends ApiBody {
  readonly total_calls: number
  readonly failed_calls: number
  readonly error_rate: number
}
/** A tool held by its pin (get_service_info's `held_tools`): what changed, old and new text. */
interface HeldTool {
  readonly name: string
  readonly original_name: string
  readonly change: "changed" | "new"
  readonly changed_fields: ReadonlyArray<string>
  readonly diff: Readonly<Record<string, { readonly before: string | null; readonly after: string | null }>>
}
interface ServiceInfo extends ApiBody {
  readonly held_tools?: ReadonlyArray<HeldTool>
}

/** The held tools of the selected service, each with its diff and an Accept button (the text is the upstream's: never markup). */
function renderHeld(scope: string, name: string, held: ReadonlyArray<HeldTool>) {
  const list = $("d-held")
  list.dataset["count"] = String(held.length)
  if (!held.length) {
    list.replaceChildren(el("li", { class: "empty", text: "None." }))
    return
  }
  list.replaceChildren(
    ...held.map((t) => {
      const diff = el("pre", { class: "diff", "data-testid": "held-diff" })
      for (const [field, d] of Object.entries(t.diff)) {
        diff.append(field + ":\n", el("span", { class: "del", text: "- " + (d.before ?? "(absent)") + "\n" }), el("span", { class: "ins", text: "+ " + (d.after ?? "(absent)") + "\n" }))
      }
      if (!Object.keys(t.diff).length) diff.append("(the texts are too long to show)")
      const accept = el("button", { type: "button", "data-testid": "accept-tool", "data-tool": t.original_name, text: "Accept" })
      accept.addEventListener("click", () => acceptHeld(scope, name, t.original_name).catch(noteError))
      return el(
        "li",
        { "data-testid": "held-tool", "data-tool": t.original_name },
        el("span", { class: "tool", text: t.name }),
        " ",
        el("span", { class: "sub", text: (t.change === "new" ? "new tool" : "changed") + ": " + t.changed_fields.join(", ") }),
        diff,
        accept
      )
    })
  )
}

/** Accepts one held tool (accept_tool_changes), then shows what the API reports. */
async function acceptHeld(scope: string, name: string, tool: string) {
  showOutcome("pending", `Accept ${tool} of ${name}…`, "accept", name)
  try {
    const { status, body } = await api<ActionBody>(scopePrefix(scope) + "/accept_tool_changes", postJson({ service_name: name, tools: [tool] }))
    showOutcome(status < 400 && body && body.success !== false ? "ok" : "error", `Accept ${tool} of ${name}: ` + apiMessage(status, body), "accept", name)
  } catch (e) {
    showOutcome("error", `Accept ${tool} of ${name}: ` + (e instanceof AuthError ? "an API key is needed: enter it above." : "the request failed: " + messageOf(e)), "accept", name)
  } finally {
    refreshDetailSoon()
    refreshServicesSoon()
    refreshToolsSoon()
  }
}

/** A pinned tool changed: the service's row and tools, and its held tools when it is the one shown. */
function onToolChangedEvent(d: { readonly scope?: string; readonly service_name?: string }) {
  refreshServicesSoon()
  refreshToolsSoon()
  if (state.selected && state.selected.scope === d.scope && state.selected.name === d.service_name) refreshDetailSoon()
}

const refreshDetail = singleFlight(async () => {
  const sel = state.selected
  if (!sel) return
  const { scope, name } = sel
  const q = scopeQuery(scope, name)
  const [statusRes, history, times, rates, info] = await Promise.all([
    scope === "store" ? api<ServiceStatus>("/for_store/service_status/" + encodeURIComponent(name)) : Promise.resolve(null),
    healthHistory(scope, name, 1),
    api<ResponseTimes>("/monitoring/services_response_time?" + q),
    api<ErrorRates>("/monitoring/error_rate_stats?minutes=60&" + q),
    api<ServiceInfo>(scopePrefix(scope) + "/get_service_info?name=" + encodeURIComponent(name))
  ])
  if (!state.selected || state.selected.scope !== scope || state.selected.name !== name) return
  const listed = state.services.find((x) => x.scope === scope && x.name === name)
  const st = statusRes && statusRes.body && statusRes.body.success ? statusRes.body : null
  const d = st ?? listed
  if (!d) {
    $("detail").dataset["loaded"] = "gone"
    $("d-status").textContent = "no such service (deleted?)"
    return
  }
  $("d-status").textContent = d.status
  renderHeld(scope, name, info.body && info.body.success && Array.isArray(info.body.held_tools) ? info.body.held_tools : [])
  $("d-since").textContent = fmtWhen(st ? st.state_entered_at : listed?.last_state_change)
  $("d-reconnects").textContent = String(d.reconnect_attempts ?? 0)
  $("d-failures").textContent = String(d.consecutive_failures ?? 0)
  $("d-next-retry").textContent = fmtWhen(d.next_retry_at)
  $("d-last-error").textContent = orNone(d.last_error)
  const tail = st && Array.isArray(st.stderr_tail) ? st.stderr_tail : null
  $("d-stderr").textContent = tail === null ? "(kept for store services only)" : tail.length ? tail.join("\n") : "(nothing on stderr)"
  const hourly = history ? history.transitions : []
  // The last errors: failed health checks and moves to a failing status, with their reasons; newest first.
  const FAILING = new Set(["warning", "reconnecting", "unreachable"])
  const errors = [
    ...(history ? history.checks : []).filter((c) => !c.ok && c.error).map((c) => ({ at: c.at, text: "health check: " + c.error })),
    ...hourly.filter((x) => FAILING.has(x.to) && x.reason).map((x) => ({ at: x.at, text: `${x.from || "—"} → ${x.to}: ${x.reason}` }))
  ]
    .sort((a, b) => String(b.at).localeCompare(String(a.at)))
    .slice(0, 5)
  $("d-recent-errors").replaceChildren(
    ...errors.map((e) => el("li", { "data-testid": "recent-error" }, el("span", { class: "when", title: e.at, text: fmtTime(e.at) }), el("span", { class: "msg", text: e.text })))
  )
  if (!errors.length) $("d-recent-errors").append(el("li", { class: "empty", text: "None." }))
  $("d-flaps").textContent = String(hourly.length) + (hourly.length >= FLAPPING ? " (flapping)" : "")
  const t = times.body && Array.isArray(times.body.services) ? times.body.services.find((x) => x.service_name === name && x.scope === scope) : undefined
  $("d-p50").textContent = orNone(t?.p50_ms, fmtMs)
  $("d-p95").textContent = orNone(t?.p95_ms, fmtMs)
  $("d-samples").textContent = String(t ? t.samples : 0)
  const r = rates.body && rates.body.success ? rates.body : null
  $("d-calls").textContent = r ? `${r.total_calls} (${(r.total_calls / 60).toFixed(2)}/min)` : "—"
  $("d-errors").textContent = r ? `${r.failed_calls} (${(r.failed_calls / 60).toFixed(2)}/min)` : "—"
  $("d-error-rate").textContent = r ? (r.error_rate * 100).toFixed(1) + " %" : "—"
  $("d-calls").dataset["count"] = r ? String(r.total_calls) : ""
  $("d-errors").dataset["count"] = r ? String(r.failed_calls) : ""
  $("d-flaps").dataset["count"] = String(hourly.length)
  $("d-reconnects").dataset["count"] = String(d.reconnect_attempts ?? 0)
  // The store's last 20 transitions, else those of the last hour; newest first.
  const list = (st ? st.transitions : hourly).slice().reverse()
  $("d-transitions").replaceChildren(
    ...list.map((x) =>
      el(
        "tr",
        { "data-testid": "transition-row" },
        el("td", { title: x.at || "", text: fmtTime(x.at) }),
        el("td", {}, x.from ? el("span", { class: "badge", "data-s": x.from, text: x.from }) : "—"),
        el("td", {}, el("span", { class: "badge", "data-s": x.to, text: x.to })),
        el("td", { class: "reason", title: x.reason || "", text: x.reason || "" })
      )
    )
  )
  if (!list.length) $("d-transitions").append(el("tr", {}, el("td", { colspan: 4, class: "empty", text: "No transitions." })))
  $("d-transitions").dataset["count"] = String(list.length)
  $("detail").dataset["loaded"] = "true"
  $("detail").dataset["status"] = d.status
})
const refreshDetailSoon = coalesce(() => refreshDetail().catch(noteError), 300)

// ---------- add a service ----------
const lines = (text: string) =>
  text
    .split(/\r?\n/)
    .map((x) => x.trim())
    .filter(Boolean)
function showAdd(stateName: string, text: string, meta?: string) {
  const pre = $("add-result")
  pre.dataset["state"] = stateName
  pre.textContent = text
  $("add-meta").textContent = meta || ""
}
$("add-form").addEventListener("submit", async (ev) => {
  ev.preventDefault()
  const def: { name: string; url?: string; transport?: string; command?: string; args?: string[]; env?: Record<string, string> } = { name: input("add-name").value.trim() }
  const url = input("add-url").value.trim(),
    command = input("add-command").value.trim()
  // Sent as typed: the API checks the definition and names what is wrong (one of url/command, the name's form).
  if (url) def.url = url
  if (url && input("add-transport").value) def.transport = input("add-transport").value
  if (command) def.command = command
  const args = lines(input("add-args").value)
  if (args.length) def.args = args
  const envLines = lines(input("add-env").value)
  if (envLines.length) {
    const env: Record<string, string> = {}
    for (const l of envLines) {
      const eq = l.indexOf("=")
      if (eq <= 0) {
        showAdd("error", `Environment line "${l}" is not NAME=value.`)
        return
      }
      env[l.slice(0, eq)] = l.slice(eq + 1)
    }
    def.env = env
  }
  const agent = input("add-agent").value.trim()
  const button = $<HTMLButtonElement>("add-button")
  button.disabled = true
  showAdd("pending", "", "Adding…")
  try {
    const { status, body } = await api((agent ? scopePrefix(agent) : "/for_store") + "/add_service", postJson(def))
    const ok = status < 400 && !!body && body.success !== false
    showAdd(ok ? "ok" : "error", apiMessage(status, body), "HTTP " + status)
    if (ok) {
      for (const id of ["add-name", "add-url", "add-command", "add-args", "add-env"]) input(id).value = ""
    }
  } catch (e) {
    showAdd("error", e instanceof AuthError ? "An API key is needed: enter it above." : "The request failed: " + messageOf(e))
  } finally {
    button.disabled = false
    refreshServices().catch(noteError)
  }
})

function renderServices() {
  const body = $("services-body")
  const seen = new Set<string>()
  for (const s of sortServices(state.services)) {
    const key = serviceKey(s.scope, s.name)
    seen.add(key)
    let tr = rows.get(key)
    if (!tr) {
      tr = el("tr", { "data-testid": "service-row" })
      rows.set(key, tr)
    }
    fillRow(tr, s)
    body.append(tr) // moves existing rows into sorted order
  }
  for (const [key, tr] of rows)
    if (!seen.has(key)) {
      tr.remove()
      rows.delete(key)
    }
  $("services-empty").hidden = state.services.length > 0
  const scopes = new Set(state.services.map((s) => s.scope))
  const tools = state.services.reduce((n, s) => n + (s.tool_count || 0), 0)
  $("services-sub").textContent = `${state.services.length} service(s) in ${scopes.size} scope(s), ${tools} tool(s)`
  renderToolsFilter()
}

const refreshServicesSoon = coalesce(() => refreshServices().catch(noteError), 800)
const refreshChartSoon = coalesce(() => refreshChart().catch(noteError), 250)

function onStatusEvent(d: StatusEvent) {
  const s = state.services.find((x) => x.scope === d.scope && x.name === d.service_name)
  if (s) {
    s.status = d.to
    if (d.at) s.last_state_change = d.at
    const tr = rows.get(serviceKey(d.scope, d.service_name))
    if (tr) {
      fillRow(tr, s)
      if (d.reason) tr.title = `${d.from} → ${d.to}: ${d.reason}`
    }
  }
  refreshServicesSoon() // picks up new services, last_error, tool counts
  refreshChartSoon()
  if (isSelected(d.scope, d.service_name)) refreshDetailSoon()
}

// ---------- tools ----------
const refreshTools = singleFlight(async () => {
  const scopes = ["store", ...new Set(state.services.filter((s) => s.scope !== "store").map((s) => s.scope))]
  const lists = await Promise.all(
    scopes.map(async (scope): Promise<Tool[]> => {
      try {
        const { body } = await api<ApiBody & { tools?: ReadonlyArray<Omit<Tool, "scope">> }>(scopePrefix(scope) + "/list_tools")
        return (body && Array.isArray(body.tools) ? body.tools : []).map((t) => ({ ...t, scope }))
      } catch (e) {
        if (e instanceof AuthError) throw e
        return []
      }
    })
  )
  state.tools = lists.flat()
  renderTools()
})
const refreshToolsSoon = coalesce(() => refreshTools().catch(noteError), 300)

function onToolsChangedEvent(d: ToolsChangedEvent) {
  const s = state.services.find((x) => x.scope === d.scope && x.name === d.service_name)
  if (s && typeof d.tool_count === "number") {
    s.tool_count = d.tool_count
    const tr = rows.get(serviceKey(d.scope, d.service_name))
    if (tr) fillRow(tr, s)
  }
  refreshToolsSoon()
}

const toolValue = (t: Tool) => t.scope + "/" + t.name // agent ids never contain "/"
const findTool = (value: string) => state.tools.find((t) => toolValue(t) === value)

function renderToolsFilter() {
  const sel = $<HTMLSelectElement>("tools-filter")
  const current = sel.value || ""
  const scopes = ["store", ...[...new Set(state.services.map((s) => s.scope))].filter((s) => s !== "store").sort()]
  sel.replaceChildren(el("option", { value: "", text: "All scopes" }), ...scopes.map((s) => el("option", { value: s, text: s === "store" ? "Store" : "Agent " + s })))
  sel.value = scopes.includes(current) ? current : ""
}
$("tools-filter").addEventListener("change", renderTools)

function renderTools() {
  // The call form's select: every tool, grouped by scope; keep the current choice.
  const select = $<HTMLSelectElement>("tool-select")
  const previous = select.value
  const groups = new Map<string, Tool[]>()
  for (const t of state.tools) {
    const group = groups.get(t.scope)
    if (group) group.push(t)
    else groups.set(t.scope, [t])
  }
  const opts: HTMLElement[] = [el("option", { value: "", text: state.tools.length ? "Choose a tool…" : "No tools available yet" })]
  for (const [scope, tools] of groups) {
    const g = el("optgroup", { label: scope === "store" ? "Store" : "Agent " + scope })
    for (const t of tools.slice().sort((a, b) => a.name.localeCompare(b.name))) g.append(el("option", { value: toolValue(t), text: t.name }))
    opts.push(g)
  }
  select.replaceChildren(...opts)
  if (previous && findTool(previous)) select.value = previous
  else if (previous) {
    select.value = ""
    onToolChosen()
  } else select.value = ""

  // The tools card: filtered by scope.
  const filter = $<HTMLSelectElement>("tools-filter").value
  const shown = state.tools.filter((t) => !filter || t.scope === filter)
  const list = $("tools-list")
  list.replaceChildren(
    ...shown.map((t) => {
      const props = Object.keys(t.inputSchema?.properties ?? {})
      const use = el("button", { type: "button", class: "link", "aria-label": "Use " + t.name + " in the call form", text: "Use" })
      use.addEventListener("click", () => {
        select.value = toolValue(t)
        onToolChosen()
        $("args-input").focus()
      })
      return el(
        "li",
        { class: "tool-item", "data-testid": "tool-item", "data-name": t.name, "data-scope": t.scope },
        el(
          "div",
          { class: "what" },
          el("div", { class: "name mono", text: t.name }),
          el("div", { class: "desc", text: (t.description || "No description.") + (props.length ? "  ·  args: " + props.join(", ") : "") })
        ),
        scopeBadge(t.scope),
        use
      )
    })
  )
  if (!shown.length) list.append(el("li", { class: "empty", text: "No tools." }))
  $("tools-sub").textContent = `${shown.length} tool(s)`
}

// Example arguments from a JSON schema: defaults, else the first enum value, else a value of the type.
function sample(schema: JsonSchema | null | undefined, depth: number): unknown {
  if (!schema || typeof schema !== "object") return null
  if ("default" in schema) return schema.default
  if ("const" in schema) return schema.const
  if (Array.isArray(schema.enum) && schema.enum.length) return schema.enum[0]
  if (Array.isArray(schema.examples) && schema.examples.length) return schema.examples[0]
  const type = Array.isArray(schema.type) ? schema.type.find((x: string) => x !== "null") : schema.type
  const alt = schema.anyOf ?? schema.oneOf
  if (!type && Array.isArray(alt) && alt.length) return sample(alt.find((x: JsonSchema) => x && x.type !== "null") ?? alt[0], depth)
  switch (type) {
    case "number":
    case "integer":
      return 0
    case "boolean":
      return false
    case "string":
      return ""
    case "array":
      return []
    case "object": {
      const out: Record<string, unknown> = {}
      if (depth < 3) for (const [k, v] of Object.entries(schema.properties ?? {})) out[k] = sample(v, depth + 1)
      return out
    }
    default:
      return schema.properties ? sample({ ...schema, type: "object" }, depth) : null
  }
}

function onToolChosen() {
  const t = findTool(input("tool-select").value)
  $("tool-desc").textContent = t ? t.description || "" : ""
  const args = t ? sample({ type: "object", ...t.inputSchema }, 0) : {}
  input("args-input").value = JSON.stringify(args && typeof args === "object" ? args : {}, null, 2)
}
$("tool-select").addEventListener("change", onToolChosen)

// ---------- call ----------
function showResult(stateName: string, text: string, meta?: string) {
  const pre = $("call-result")
  pre.dataset["state"] = stateName
  pre.textContent = text
  $("call-meta").textContent = meta || ""
}

interface CallBody extends ApiBody {
  readonly result?: unknown
  readonly is_error?: boolean
  readonly duration_ms?: number
  readonly trace_id?: string
}
$("call-form").addEventListener("submit", async (ev) => {
  ev.preventDefault()
  const t = findTool(input("tool-select").value)
  if (!t) {
    showResult("error", "Choose a tool first.")
    return
  }
  let args: unknown
  try {
    args = JSON.parse(input("args-input").value.trim() || "{}")
  } catch (e) {
    showResult("error", "The arguments are not valid JSON: " + messageOf(e))
    return
  }
  if (!args || typeof args !== "object" || Array.isArray(args)) {
    showResult("error", "The arguments must be a JSON object.")
    return
  }
  const button = $<HTMLButtonElement>("call-button")
  button.disabled = true
  button.textContent = "Calling…"
  showResult("pending", "", "Calling " + t.name + "…")
  try {
    const { status, body } = await api<CallBody>(scopePrefix(t.scope) + "/call_tool", {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ tool_name: t.name, args })
    })
    const b: CallBody = body ?? {}
    const meta = [`HTTP ${status}`, fmtMs(b.duration_ms), b.trace_id ? "trace " + b.trace_id : ""].filter(Boolean).join(" · ")
    if (b.success === true) {
      showResult("ok", JSON.stringify(b.result, null, 2), meta)
    } else if (b.is_error) {
      showResult("error", "The tool reported an error:\n" + (b.message || "") + "\n\n" + JSON.stringify(b.result, null, 2), meta)
    } else {
      const err = b.error ?? {}
      showResult(
        "error",
        `${err.code || "ERROR"}: ${b.message || err.message || "request failed"}` + (err.details && Object.keys(err.details).length ? "\n\n" + JSON.stringify(err.details, null, 2) : ""),
        meta
      )
    }
  } catch (e) {
    showResult("error", e instanceof AuthError ? "An API key is needed: enter it above." : "The request failed: " + messageOf(e))
  } finally {
    button.disabled = false
    button.textContent = "Call"
    refreshCallsSoon() // the tool_call event usually wins; this covers polling mode
  }
})

// ---------- recent calls ----------
const callKey = (c: CallRecord) => c.span_id || c.trace_id || c.id || String(c.timestamp) + c.service_name + c.tool_name
function mergeCalls(list: ReadonlyArray<CallRecord>) {
  const seen = new Set<string>()
  state.calls = list
    .filter((c) => {
      const k = callKey(c)
      if (seen.has(k)) return false
      seen.add(k)
      return true
    })
    .sort((a, b) => String(b.timestamp).localeCompare(String(a.timestamp)))
    .slice(0, MAX_CALLS)
  renderCalls()
}
const refreshCalls = singleFlight(async () => {
  const { body } = await api<ApiBody & { calls?: CallRecord[] }>("/monitoring/tool_call_history?limit=" + MAX_CALLS)
  if (body && Array.isArray(body.calls)) mergeCalls(body.calls)
})
const refreshCallsSoon = coalesce(() => refreshCalls().catch(noteError), 400)
function onToolCallEvent(d: CallRecord) {
  mergeCalls([d, ...state.calls])
  if (isSelected(d.scope, d.service_name)) refreshDetailSoon()
}

function renderCalls() {
  const list = $("calls-list")
  list.replaceChildren(
    ...state.calls.map((c) => {
      const scope = scopeLabel(c.scope, c.agent_id)
      return el(
        "li",
        { class: "call-item", "data-testid": "call-row", "data-tool": c.tool_name, "data-service": c.service_name, "data-outcome": c.outcome, "data-scope": scope },
        el("span", { class: "badge", "data-s": c.outcome, text: c.outcome }),
        el(
          "span",
          {},
          el("span", { class: "tool mono", text: c.service_name + " · " + c.tool_name }),
          " ",
          scopeBadge(scope),
          c.error ? el("span", { class: "sr-only", text: " error: " + c.error }) : null
        ),
        el("span", { class: "when", title: c.timestamp || "" }, el("span", { class: "dur", text: fmtMs(c.duration_ms) }), "  ", fmtTime(c.timestamp))
      )
    })
  )
  if (!state.calls.length) list.append(el("li", { class: "empty", text: "No tool calls yet." }))
}

// ---------- approvals ----------
/** A call waiting for an approval, as GET /for_store/approvals lists it (README, Approvals). */
interface ApprovalItem {
  readonly approval_id: string
  readonly scope: string
  readonly agent_id: string | null
  readonly tool_name: string
  readonly arguments: unknown
  readonly arguments_truncated?: boolean
  readonly arguments_digest: string
  readonly caller: string
  readonly expires_at: string
}
/** The approval a URL elicitation pointed here (`#approval=<id>`), shown first and outlined. */
const approvalInHash = (): string | null => /^#approval=(apr_[A-Za-z0-9_-]{1,60})$/.exec(location.hash)?.[1] ?? null
let approvalNote = ""
const refreshApprovals = singleFlight(async () => {
  const { status, body } = await api<ApiBody & { approvals?: ApprovalItem[] }>("/for_store/approvals")
  if (status === 403) {
    renderApprovals([], "This key does not see approvals: an admin key decides them.")
    return
  }
  if (body && Array.isArray(body.approvals)) renderApprovals(body.approvals, approvalNote)
})
const refreshApprovalsSoon = coalesce(() => refreshApprovals().catch(noteError), 150)
function renderApprovals(items: ReadonlyArray<ApprovalItem>, note: string) {
  const focus = approvalInHash()
  const ordered = [...items].sort((a, b) => Number(b.approval_id === focus) - Number(a.approval_id === focus))
  const list = $("approvals-list")
  list.replaceChildren(
    ...ordered.map((a) => {
      const decide = (decision: "approve" | "deny", label: string) => {
        const b = el("button", { type: "button", class: decision === "deny" ? "danger" : "solid", "data-testid": "approval-" + decision, text: label })
        b.addEventListener("click", () => void decideApproval(a, decision, b))
        return b
      }
      return el(
        "li",
        { class: "approval-item" + (a.approval_id === focus ? " focus" : ""), "data-testid": "approval-row", "data-approval": a.approval_id, "data-tool": a.tool_name },
        el("span", {}, el("span", { class: "tool mono", text: a.tool_name }), " ", scopeBadge(scopeLabel(a.scope, a.agent_id))),
        el("span", { class: "decide" }, decide("approve", "Approve"), decide("deny", "Deny")),
        el("span", { class: "msg", text: `called by ${a.caller}; waits until ${fmtTime(a.expires_at)}` }),
        el("pre", { class: "mono", "data-testid": "approval-arguments", text: JSON.stringify(a.arguments, null, 2) + (a.arguments_truncated ? "\n(cut: too long to show whole)" : "") }),
        el("span", { class: "digest mono", title: a.arguments_digest, text: "arguments sha256 " + a.arguments_digest.slice(0, 16) + "…" })
      )
    })
  )
  if (!items.length) list.append(el("li", { class: "empty", text: note || "No call waits for an approval." }))
  $("approvals-sub").textContent = items.length ? `${items.length} waiting; each bound to its tool and arguments` : note
  if (focus !== null) list.querySelector(".focus")?.scrollIntoView({ block: "nearest" })
}
/** Decides one approval, bound to the arguments shown (their digest goes with the decision). */
async function decideApproval(a: ApprovalItem, decision: "approve" | "deny", button: HTMLButtonElement) {
  button.disabled = true
  try {
    const { ok, body } = await api(`/for_store/approvals/${encodeURIComponent(a.approval_id)}`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ decision, arguments_digest: a.arguments_digest })
    })
    approvalNote = ok ? body?.message || "" : `Not decided: ${body?.message || "the store refused"}`
  } finally {
    await refreshApprovals().catch(noteError)
  }
}
window.addEventListener("hashchange", () => refreshApprovalsSoon())

// ---------- alerts ----------
const refreshAlerts = singleFlight(async () => {
  const { body } = await api<ApiBody & { alerts?: ReadonlyArray<Alert> }>("/monitoring/alerts?limit=20")
  if (!body || !Array.isArray(body.alerts)) return
  const alerts: ReadonlyArray<Alert> = body.alerts
  const list = $("alerts-list")
  list.replaceChildren(
    ...alerts.map((a) =>
      el(
        "li",
        { class: "alert-item" + (a.resolved ? " resolved" : ""), "data-testid": "alert-row", "data-level": a.level, "data-resolved": String(!!a.resolved) },
        el("span", { class: "badge", "data-s": a.resolved ? "resolved" : a.level, text: a.resolved ? "resolved" : a.level }),
        el("span", { class: "title" }, a.title || "", " ", a.scope ? scopeBadge(a.scope) : null),
        el("span", { class: "when", title: a.timestamp || "", text: fmtTime(a.timestamp) }),
        el("span", { class: "msg", text: (a.message || "") + (a.resolved && a.resolved_at ? ` (resolved ${fmtTime(a.resolved_at)})` : "") })
      )
    )
  )
  if (!alerts.length) list.append(el("li", { class: "empty", text: "No alerts. All quiet." }))
  const open = alerts.filter((a) => !a.resolved).length
  $("alerts-sub").textContent = open ? `${open} open` : ""
})

// ---------- status chart ----------
type Distribution = Partial<Record<string, number>>
const refreshChart = singleFlight(async () => {
  const { body } = await api<ApiBody & { distribution?: Distribution; total_services?: number }>("/monitoring/services_status_distribution")
  if (body && body.distribution) renderChart(body.distribution, body.total_services)
})
function renderChart(dist: Distribution, total: number | undefined) {
  // Horizontal bars, one row per status: label, bar scaled to the largest count, count.
  const W = 400,
    row = 26,
    labelW = 96,
    countW = 34,
    pad = 4
  const H = STATUSES.length * row + pad * 2,
    barMax = W - labelW - countW
  const max = Math.max(1, ...STATUSES.map((s) => dist[s] || 0))
  const summary = STATUSES.map((s) => `${s} ${dist[s] || 0}`).join(", ")
  const root = svg("svg", { viewBox: `0 0 ${W} ${H}`, role: "img", "aria-label": "Services per status: " + summary })
  const title = svg("title", {})
  title.textContent = "Services per status: " + summary
  root.append(title)
  STATUSES.forEach((s, i) => {
    const count = dist[s] || 0
    const y = pad + i * row,
      bh = row - 10,
      by = y + 5
    const w = count ? Math.max(4, barMax * (count / max)) : 0
    const g = svg("g", { "data-testid": "status-bar", "data-status": s, "data-count": count })
    const l = svg("text", { x: labelW - 10, y: y + row / 2 + 4, "text-anchor": "end" })
    l.textContent = s
    g.append(l)
    g.append(svg("rect", { x: labelW, y: by, width: barMax, height: bh, rx: 4, fill: COLORS[s], "fill-opacity": 0.1 }))
    if (w) g.append(svg("rect", { x: labelW, y: by, width: w, height: bh, rx: 4, fill: COLORS[s] }))
    const c = svg("text", { x: labelW + barMax + 8, y: y + row / 2 + 4, class: "count" })
    c.textContent = String(count)
    g.append(c)
    const tip = svg("title", {})
    tip.textContent = `${s}: ${count}`
    g.append(tip)
    root.append(g)
  })
  $("status-chart").replaceChildren(root)
  $("chart-sub").textContent = `${total ?? STATUSES.reduce((n, s) => n + (dist[s] || 0), 0)} service(s), every scope`
}

// ---------- refresh loop ----------
function noteError(e: unknown) {
  if (e instanceof AuthError) return
  console.warn("mcp-store dashboard:", e)
  setMode("offline")
  startPolling()
}
let refreshing = false
async function refreshAll(force?: boolean) {
  if (refreshing && !force) return
  refreshing = true
  try {
    await Promise.all([refreshServices(), refreshCalls(), refreshAlerts(), refreshChart(), refreshDetail(), refreshApprovals()])
    if (state.authNeeded && state.apiKey) {
      $("auth-msg").textContent = "Key accepted."
    }
    if (state.eventsLive) stopPolling()
    if (state.mode !== (state.eventsLive ? "live" : "polling")) setMode(state.eventsLive ? "live" : "polling")
    touched()
  } catch (e) {
    noteError(e)
  } finally {
    refreshing = false
  }
}

renderChart({}, 0)
renderToolsFilter()
renderTools()
renderCalls()
// While live, nothing polls: the detail panel's figures and the hourly counts, which change without an
// event (latency samples, transitions leaving the hour), are read again on a slow tick.
setInterval(() => {
  if (state.authNeeded || state.mode !== "live") return
  refreshDetail().catch(noteError)
  refreshFlaps().catch(noteError)
}, TICK_MS)
void refreshAll(true).then(afterRefresh)
