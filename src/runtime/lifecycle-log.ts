/**
 * Lifecycle lines: every status change of a service is one log line at the level it deserves
 * (`WARN  store/ghost reconnecting: ... (attempt 1, next in 1 s)`, `INFO  agent-1/files healthy
 * (14 tools, 312 ms)`, `ERROR store/weather unreachable after 10 attempts: ...`), and so are tool
 * list changes and removals. The machines stay pure: this watches them from outside, through the
 * actor system's inspection hook (the same one the monitor uses), reading what a line needs (the
 * attempt, the next delay, the hint) from the snapshot's context.
 *
 * Cost: most snapshots (a health check answered) change nothing a line reports; they are told apart
 * by two reference comparisons, nothing is formatted for them.
 *
 * Flapping: a status change is never dropped, but a service that changes status more than
 * `FLAP_LINES` times in `FLAP_WINDOW_MS` (a process that dies right after each connection) would
 * fill the log: its further changes in that window are logged at debug level, after one WARN line
 * that says so, and when the window ends a summary line gives the count and the status it is in.
 * Retries that change no status (a reconnection attempt that failed again, an unreachable
 * service's slow retry) are debug lines.
 */
import type { InspectionEvent } from "xstate"
import { scopeLabel, type Scope } from "../domain/service-definition.js"
import type { ServiceContext, Transition } from "../machines/service.js"
import { log, type LogFields, type LogLevelName, writeLog } from "../logging/log.js"
import { offeredToolCount as offered } from "./service-views.js"

/** ", 3 resources, 2 templates, 4 prompts": what a service offers beside tools, when it offers any. */
const catalogCounts = (c: ServiceContext): string => {
  const parts: Array<string> = []
  const { resources, resourceTemplates, prompts } = c.catalog
  if (resources.length > 0) parts.push(`${resources.length} resources`)
  if (resourceTemplates.length > 0) parts.push(`${resourceTemplates.length} resource templates`)
  if (prompts.length > 0) parts.push(`${prompts.length} prompts`)
  return parts.map((p) => `, ${p}`).join("")
}

/** How many status lines a service may write in one window before its lines go to debug. */
export const FLAP_LINES = 10
/** The window of `FLAP_LINES`. */
export const FLAP_WINDOW_MS = 60_000

interface Progress {
  lastSeen: Transition | undefined
  toolsVersion: number
  tools: ServiceContext["tools"]
  catalogVersion: number
  catalog: ServiceContext["catalog"]
  attempts: number
  nextRetryAt: number | undefined
  /** Status lines written in the current window, and when it began. */
  windowStart: number
  lines: number
  /** Changes logged at debug in this window (flapping), and the timer of its summary. */
  folded: number
  summary: NodeJS.Timeout | undefined
  label: string
  status: string
}

const firstLine = (text: string): string => {
  const i = text.indexOf("\n")
  return i < 0 ? text : text.slice(0, i)
}

/** What a modern server said of a list's freshness (its `ttlMs`, which bounds the next refresh: src/machines/service.ts). */
const ttlNote = (ttlMs: number | undefined): string => (ttlMs === undefined ? "" : `; the server's ttlMs ${seconds(ttlMs)}`)

const seconds = (ms: number): string => (ms < 1000 ? `${Math.round(ms)} ms` : ms < 10_000 ? `${Math.round(ms / 100) / 10} s` : `${Math.round(ms / 1000)} s`)

const serviceLabel = (scope: Scope, name: string): string => `${scopeLabel(scope)}/${name}`

/** Watches the service actors of one store and logs their lifecycle. */
export class LifecycleLog {
  /** By actor (a restarted actor is a new one), and the latest of each service by label, to release it. */
  private readonly progress = new WeakMap<object, Progress>()
  private readonly byLabel = new Map<string, Progress>()
  private stopped = false

  constructor(private readonly now: () => number = Date.now) {}

  /** The inspection observer: give it every event of the store's actor system. */
  readonly inspect = (event: InspectionEvent): void => {
    if (this.stopped) return
    if (event.type === "@xstate.event") {
      if (event.event.type === "REMOVE_SERVICE") {
        const removed = event.event as unknown as { scope?: Scope; name: string }
        // The store root's event names the scope (the one it forwards to an agent does not).
        if (removed.scope !== undefined) this.removed(removed.scope, removed.name)
      }
      return
    }
    if (event.type !== "@xstate.snapshot") return
    const id = (event.actorRef as { id?: string }).id
    if (id === undefined || !id.startsWith("service:")) return
    const context = (event.snapshot as { context?: ServiceContext & { role?: string } }).context
    // Replica mode: the replica that runs a service writes its lines; one that shows another's only
    // follows them, so that taking the service over logs what happens from then on, not before.
    if (context?.transitions !== undefined) this.observe(event.actorRef, context, context.role === "mirror")
  }

  /** Stops logging and clears every summary timer (the store stops). */
  stop(): void {
    this.stopped = true
    for (const p of this.byLabel.values()) clearTimeout(p.summary)
    this.byLabel.clear()
  }

  private observe(actor: object, c: ServiceContext, quiet = false): void {
    const all = c.transitions
    let p = this.progress.get(actor)
    const last = all[all.length - 1]
    if (
      p !== undefined &&
      p.lastSeen === last &&
      p.toolsVersion === c.toolsVersion &&
      p.catalogVersion === c.catalogVersion &&
      p.attempts === c.reconnectAttempts &&
      p.nextRetryAt === c.nextRetryAt
    ) {
      return
    }
    if (p === undefined) {
      p = {
        lastSeen: undefined,
        toolsVersion: 0,
        tools: [],
        catalogVersion: 0,
        catalog: c.catalog,
        attempts: 0,
        nextRetryAt: undefined,
        windowStart: this.now(),
        lines: 0,
        folded: 0,
        summary: undefined,
        label: serviceLabel(c.scope, c.name),
        status: "initializing"
      }
      this.progress.set(actor, p)
      const replaced = this.byLabel.get(p.label)
      if (replaced !== undefined) clearTimeout(replaced.summary)
      this.byLabel.set(p.label, p)
    }
    const from = quiet ? all.length : p.lastSeen === undefined ? 0 : all.indexOf(p.lastSeen) + 1
    const fresh = all.slice(from)
    for (let i = 0; i < fresh.length; i++) {
      const t = fresh[i] as Transition
      const previous = i > 0 ? fresh[i - 1] : p.lastSeen
      this.transition(p, c, t, previous, i === fresh.length - 1)
    }
    if (fresh.length === 0 && !quiet) this.retries(p, c)
    p.lastSeen = last
    if (quiet && last !== undefined) p.status = last.to
    if (c.toolsVersion !== p.toolsVersion) {
      // The first list comes with the healthy line; later ones are changes (or failed refreshes).
      if (p.toolsVersion > 0 && fresh.length === 0 && !quiet) this.toolsChanged(p, c)
      p.toolsVersion = c.toolsVersion
      p.tools = c.tools
    }
    if (c.catalogVersion !== p.catalogVersion) {
      if (p.catalogVersion > 0 && fresh.length === 0 && !quiet) this.catalogChanged(p, c)
      p.catalogVersion = c.catalogVersion
      p.catalog = c.catalog
    }
    p.attempts = c.reconnectAttempts
    p.nextRetryAt = c.nextRetryAt
  }

  private transition(p: Progress, c: ServiceContext, t: Transition, previous: Transition | undefined, latest: boolean): void {
    p.status = t.to
    const label = p.label
    const reason = firstLine(t.reason)
    const fields: Record<string, unknown> = { event: "status", service: label, from: t.from, to: t.to, reason: t.reason }
    const hint = latest && c.hint !== undefined ? ` (hint: ${c.hint})` : ""
    if (latest && c.hint !== undefined) fields.hint = c.hint
    let level: LogLevelName
    let message: string
    switch (t.to) {
      case "initializing":
        level = t.from === null ? "debug" : "info"
        message = t.from === null ? `${label} connecting` : `${label} connecting again: ${reason}`
        break
      case "healthy": {
        level = "info"
        const since = previous === undefined ? undefined : t.at - previous.at
        if (t.from === "warning") message = `${label} healthy again: ${reason}`
        else if (t.from === "initializing") message = `${label} healthy (${offered(c)} tools${catalogCounts(c)}${since === undefined ? "" : `, ${seconds(since)}`})`
        else message = `${label} healthy again (${offered(c)} tools${catalogCounts(c)}${since === undefined ? "" : `, down ${seconds(since)}`})`
        fields.tools = offered(c)
        fields.resources = c.catalog.resources.length
        fields.prompts = c.catalog.prompts.length
        if (since !== undefined) fields.duration_ms = since
        break
      }
      case "warning":
        level = "warning"
        message = `${label} warning: ${reason}`
        break
      case "reconnecting": {
        level = "warning"
        const next = latest ? `, next in ${seconds(c.nextDelayMs)}` : ""
        message = `${label} reconnecting: ${reason} (attempt ${c.reconnectAttempts + 1}${next})${hint}`
        fields.attempt = c.reconnectAttempts + 1
        if (latest) fields.next_retry_ms = Math.round(c.nextDelayMs)
        break
      }
      case "unreachable": {
        level = "error"
        const after = t.from === "reconnecting" ? ` after ${c.reconnectAttempts} attempts` : c.permanentFailure ? " (permanent failure)" : ""
        const retry = !c.settings.enable_reconnection ? "; reconnection is off" : `; next try in ${seconds(c.settings.unreachable_retry_seconds * 1000)}`
        message = `${label} unreachable${after}: ${reason}${hint}${latest ? retry : ""}`
        fields.attempts = c.reconnectAttempts
        fields.permanent = c.permanentFailure
        break
      }
      default:
        level = "info"
        message = `${label} ${t.to}: ${reason}`
    }
    this.statusLine(p, level, message, fields)
  }

  /** A status line, within the service's budget (see the module's comment on flapping). */
  private statusLine(p: Progress, level: LogLevelName, message: string, fields: LogFields): void {
    const now = this.now()
    if (now - p.windowStart >= FLAP_WINDOW_MS && p.summary === undefined) {
      p.windowStart = now
      p.lines = 0
    }
    if (level === "debug" || p.lines < FLAP_LINES) {
      if (level !== "debug") p.lines += 1
      writeLog(level, message, fields)
      return
    }
    if (p.folded === 0) {
      log.warn(`${p.label} is flapping: ${FLAP_LINES} status changes within ${seconds(FLAP_WINDOW_MS)}; its next changes are logged at debug level until the minute is over`, {
        event: "flapping",
        service: p.label
      })
      const left = Math.max(0, FLAP_WINDOW_MS - (now - p.windowStart))
      p.summary = setTimeout(() => this.summarize(p), left)
      p.summary.unref()
    }
    p.folded += 1
    writeLog("debug", message, fields)
  }

  private summarize(p: Progress): void {
    p.summary = undefined
    if (this.stopped) return
    const folded = p.folded
    p.folded = 0
    p.windowStart = this.now()
    p.lines = 0
    log.warn(`${p.label} flapped: ${folded} more status change${folded === 1 ? "" : "s"} in the last minute (logged at debug); now ${p.status}`, {
      event: "flapping_summary",
      service: p.label,
      changes: folded,
      status: p.status
    })
  }

  /** Retries that change no status: debug lines. */
  private retries(p: Progress, c: ServiceContext): void {
    if (c.status === "reconnecting" && c.reconnectAttempts > p.attempts) {
      log.debug(`${p.label} reconnection attempt ${c.reconnectAttempts} failed: ${firstLine(c.lastError ?? "")} (next in ${seconds(c.nextDelayMs)})`, {
        event: "retry",
        service: p.label,
        attempt: c.reconnectAttempts,
        error: c.lastError
      })
    } else if (c.status === "unreachable" && c.nextRetryAt !== undefined && c.nextRetryAt !== p.nextRetryAt) {
      log.debug(`${p.label} still unreachable: ${firstLine(c.lastError ?? "")}`, { event: "retry", service: p.label, error: c.lastError })
    }
  }

  private toolsChanged(p: Progress, c: ServiceContext): void {
    if (c.tools === p.tools) {
      // A failed refresh counts as a refresh too (toolsVersion), with the same list.
      if (c.lastError?.startsWith("tool list refresh failed") === true) {
        log.warn(`${p.label} ${firstLine(c.lastError)}`, { event: "tools_refresh_failed", service: p.label, error: c.lastError })
      }
      return
    }
    const before = new Set(p.tools.map((t) => t.name))
    const after = new Set(c.tools.map((t) => t.name))
    const added = [...after].filter((n) => !before.has(n))
    const removed = [...before].filter((n) => !after.has(n))
    if (added.length === 0 && removed.length === 0) {
      log.debug(`${p.label} tools refreshed: ${c.tools.length} tools, names unchanged${ttlNote(c.toolsTtlMs)}`, {
        event: "tools",
        service: p.label,
        tools: c.tools.length,
        ...(c.toolsTtlMs !== undefined ? { ttl_ms: c.toolsTtlMs } : {})
      })
      return
    }
    const shown = [...added.map((n) => `+${n}`), ...removed.map((n) => `-${n}`)]
    const list = shown.slice(0, 10).join(" ") + (shown.length > 10 ? ` ... (${shown.length - 10} more)` : "")
    log.info(`${p.label} tools changed: ${p.tools.length} -> ${c.tools.length} (${list})`, {
      event: "tools",
      service: p.label,
      tools: c.tools.length,
      added: added.slice(0, 100),
      removed: removed.slice(0, 100)
    })
  }

  /** A refresh of resources and prompts: a warning when it failed, an info line when the counts changed. */
  private catalogChanged(p: Progress, c: ServiceContext): void {
    if (c.catalog === p.catalog) {
      if (c.lastError?.startsWith("resource and prompt list") === true) {
        log.warn(`${p.label} ${firstLine(c.lastError)}`, { event: "catalog_refresh_failed", service: p.label, error: c.lastError })
      }
      return
    }
    const before = `${p.catalog.resources.length}/${p.catalog.resourceTemplates.length}/${p.catalog.prompts.length}`
    const after = `${c.catalog.resources.length}/${c.catalog.resourceTemplates.length}/${c.catalog.prompts.length}`
    const fields = { event: "catalog", service: p.label, resources: c.catalog.resources.length, resource_templates: c.catalog.resourceTemplates.length, prompts: c.catalog.prompts.length }
    if (before === after) {
      log.debug(`${p.label} resources and prompts refreshed (resources/templates/prompts ${after})${ttlNote(c.catalogTtlMs)}`, {
        ...fields,
        ...(c.catalogTtlMs !== undefined ? { ttl_ms: c.catalogTtlMs } : {})
      })
    }
    else log.info(`${p.label} resources and prompts changed: resources/templates/prompts ${before} -> ${after}`, fields)
  }

  private removed(scope: Scope, name: string): void {
    const label = serviceLabel(scope, name)
    const p = this.byLabel.get(label)
    if (p !== undefined) clearTimeout(p.summary)
    this.byLabel.delete(label)
    log.info(`${label} removed`, { event: "removed", service: label })
  }
}
