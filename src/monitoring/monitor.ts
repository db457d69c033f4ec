/**
 * What the store remembers for monitoring: every status transition and health check of every
 * service, response-time samples, alerts, and API request metrics, all in bounded memory.
 *
 * It learns about services through XState's inspection hook (`inspect`), which sees every
 * snapshot and event of every actor of the system, so no service code has to report to it: a
 * transition recorded by a service machine, or a HEALTH_REPORT sent to one, is picked up here.
 */
import { monitorEventLoopDelay, type IntervalHistogram } from "node:perf_hooks"
import type { InspectionEvent } from "xstate"
import { scopeLabel, type Scope, type Status } from "../domain/service-definition.js"
import type { ServiceContext, Transition } from "../machines/service.js"
import { offeredToolCount } from "../runtime/service-views.js"
import { BoundedMap, LatencyWindow, Ring, SampleRing } from "./bounded.js"

/** How much is kept per service, and in all. */
export const LIMITS = {
  transitionsPerService: 1000,
  checksPerService: 1000,
  samplesPerService: 1000,
  services: 10_000,
  alerts: 1000
} as const

/**
 * A check's error, a transition's reason or an alert's message, at most (characters): it may quote
 * a hostile upstream's error, up to the size of a whole MCP message.
 */
export const TEXT_LIMIT = 4096
const cut = (text: string): string => (text.length <= TEXT_LIMIT ? text : text.slice(0, TEXT_LIMIT))

export interface CheckEntry {
  readonly at: number
  readonly ok: boolean
  readonly response_time_ms: number | null
  readonly error: string | null
}

export interface Alert {
  readonly alert_id: string
  readonly level: "info" | "warning" | "error"
  readonly title: string
  readonly message: string
  readonly service_name: string
  readonly scope: string
  readonly timestamp: string
  resolved: boolean
  resolved_at: string | null
}

/**
 * A service's last checks, in columns: times and response times (NaN: none) in a SampleRing, the
 * error of each failed check by its sequence number. One check per service every health-check
 * interval, kept until a thousand newer ones replace it: as objects they would all end in the old
 * generation.
 */
class CheckHistory {
  private readonly ring = new SampleRing(LIMITS.checksPerService)
  private readonly errors = new Map<number, string>()
  private pushed = 0

  push(at: number, responseTimeMs: number | null, error: string | null): void {
    const evicted = this.pushed - this.ring.capacity
    if (evicted >= 0) this.errors.delete(evicted)
    this.ring.push(at, responseTimeMs ?? Number.NaN)
    if (error !== null) this.errors.set(this.pushed, error)
    this.pushed += 1
  }

  get size(): number {
    return this.ring.size
  }

  /** Oldest first. */
  toArray(): CheckEntry[] {
    const size = this.ring.size
    const out = new Array<CheckEntry>(size)
    for (let i = 0; i < size; i++) {
      const slot = this.ring.slot(i)
      const ms = this.ring.valueOf(slot)
      const error = this.errors.get(this.pushed - size + i)
      out[i] = { at: this.ring.atOf(slot), ok: error === undefined, response_time_ms: Number.isNaN(ms) ? null : ms, error: error ?? null }
    }
    return out
  }
}

class ServiceHistory {
  readonly transitions = new Ring<Transition>(LIMITS.transitionsPerService)
  readonly checks = new CheckHistory()
  /** Response-time samples: health checks and tool calls. */
  readonly samples = new SampleRing(LIMITS.samplesPerService)
  /** An alert of it (not a held tool's) may be open on some replica: degraded or a tool changed since its alerts were last resolved. */
  alerted = false
}

/** How far the monitor has read a service actor's context: kept per actor, so it goes with the actor. */
interface Progress {
  lastSeen: Transition | undefined
  toolsVersion: number
  catalogVersion: number
  /** The service's OAuth state last told (src/runtime/upstream-oauth.ts). */
  auth?: ServiceContext["auth"]
  /** A replicated actor's last health check seen (its checks are read from its context). */
  lastCheckAt?: number | undefined
  /** The tool changes last told (docs/tool-pins.md), and the held tools last seen. */
  toolChanges?: ServiceContext["toolChanges"]
  heldTools?: ServiceContext["heldTools"]
}

/** Something that happened, for live listeners (the event stream). */
export type MonitorEvent =
  | { readonly type: "status"; readonly scope: string; readonly service_name: string; readonly transition: Transition }
  | { readonly type: "tools_changed"; readonly scope: string; readonly service_name: string; readonly tool_count: number }
  /** The service's resources, resource templates or prompts were listed again (src/http/gateway/endpoint.ts tells its clients). */
  | { readonly type: "catalog_changed"; readonly scope: string; readonly service_name: string }
  | { readonly type: "alert"; readonly alert: Alert }
  | { readonly type: "check"; readonly scope: string; readonly service_name: string; readonly check: CheckEntry }
  /** A service left its scope (its tools with it: the MCP endpoints' lists change). */
  | { readonly type: "removed"; readonly scope: string; readonly service_name: string }
  | { readonly type: "auth"; readonly scope: string; readonly service_name: string; readonly auth: NonNullable<ServiceContext["auth"]> }
  /** A tool's definition is not the pinned one (docs/tool-pins.md): held until accepted, or taken (`held` false). */
  | { readonly type: "tool_changed"; readonly scope: string; readonly service_name: string; readonly change: ServiceContext["toolChanges"][number] }

/** The title of the alert of a held tool (resolved when the service holds none, not by its health). */
export const TOOL_HELD_ALERT = "Tool held"

/**
 * Whether resolving a service's alerts resolves `alert`: one still open, of the service, and of a
 * held tool or not as `held` says (true: held tools' only; false: all but those; undefined: all).
 */
export const resolves = (alert: Alert, scope: string, name: string, held: boolean | undefined): boolean =>
  !alert.resolved && alert.scope === scope && alert.service_name === name && (held === undefined || held === alert.title.startsWith(`${TOOL_HELD_ALERT}:`))

/** Whether a context is a replicated actor's (replica mode, src/machines/replicated.ts). */
const isReplicated = (context: ServiceContext): boolean => (context as { role?: unknown }).role !== undefined

/**
 * Whether two transitions are the same one. By value: a replica that mirrors a service reads each
 * of its views from Redis, so the same transition is a new object in every view.
 */
const sameTransition = (a: Transition | undefined, b: Transition | undefined): boolean =>
  a === b || (a !== undefined && b !== undefined && a.at === b.at && a.from === b.from && a.to === b.to && a.reason === b.reason)

/** Whether a part of a context is unchanged: the same object, or (a mirror's view) an equal one. */
const sameValue = (a: unknown, b: unknown): boolean => a === b || (a !== undefined && b !== undefined && JSON.stringify(a) === JSON.stringify(b))

/** Where the transitions not yet read start in `all`, the last read being `lastSeen`. */
const unreadFrom = (all: ReadonlyArray<Transition>, lastSeen: Transition | undefined): number => {
  if (lastSeen === undefined) return 0
  for (let i = all.length - 1; i >= 0; i--) if (sameTransition(all[i], lastSeen)) return i + 1
  // Dropped by the context's cap (many transitions since): those after it in time are new.
  const after = all.findIndex((t) => t.at > lastSeen.at)
  return after < 0 ? all.length : after
}

/** `<scope>/<name>`: the key of a service across scopes. */
export const serviceKey = (scope: string, name: string) => `${scope}/${name}`

export class Monitor {
  private readonly histories = new BoundedMap<string, ServiceHistory>(LIMITS.services)
  private readonly alertRing = new Ring<Alert>(LIMITS.alerts)
  private readonly listeners = new Set<(e: MonitorEvent) => void>()
  private readonly progress = new WeakMap<object, Progress>()
  private alertCounter = 0
  /** API request latencies over the last minute. */
  readonly requests = new LatencyWindow(60)
  /** API requests since start. */
  requestsTotal = 0
  /** Open client sockets of the HTTP server. */
  httpConnections = 0
  /** Open event streams (`/events`, `/inspect/events`). */
  eventStreams = 0
  // Sampled every 100 ms: each sample is a wake-up of an otherwise idle process (at 20 ms, 50 a
  // second: more than a thousand services' health checks); a stall is still seen in the delays.
  private readonly loopDelay: IntervalHistogram = monitorEventLoopDelay({ resolution: 100 })

  constructor() {
    this.loopDelay.enable()
  }

  /** The XState inspection observer: pass it as `inspect` to the store's root actor. */
  readonly inspect = (event: InspectionEvent): void => {
    if (event.type === "@xstate.event" && event.event.type === "REMOVE_SERVICE") {
      // The store root's event names the scope (the one it forwards to an agent does not).
      const removed = event.event as unknown as { scope?: Scope; name: string }
      if (removed.scope !== undefined) {
        const scope = scopeLabel(removed.scope)
        this.serviceRemoved(scope, removed.name)
        // Its resources and prompts leave the scope once the root has processed the removal.
        queueMicrotask(() => this.emit({ type: "catalog_changed", scope, service_name: removed.name }))
      }
      return
    }
    const id = (event.actorRef as { id?: string }).id
    if (id === undefined || !id.startsWith("service:")) return
    if (event.type === "@xstate.snapshot") {
      const context = (event.snapshot as { context?: ServiceContext }).context
      if (context?.transitions) this.observeContext(event.actorRef, context)
    } else if (event.type === "@xstate.event" && event.event.type === "HEALTH_REPORT") {
      const context = (event.actorRef.getSnapshot() as { context?: ServiceContext }).context
      // A replicated actor's checks are read from its context (they run in its child, or on another replica).
      if (!context || isReplicated(context)) return
      const e = event.event as unknown as { ok: boolean; responseTimeMs?: number; error?: string }
      this.check(scopeLabel(context.scope), context.name, Date.now(), e.ok, e.responseTimeMs, e.error)
    }
  }

  private check(scope: string, name: string, at: number, ok: boolean, responseTimeMs: number | undefined, error: string | undefined): void {
    const history = this.history(scope, name)
    const check: CheckEntry = {
      at,
      ok,
      response_time_ms: responseTimeMs === undefined ? null : Math.round(responseTimeMs * 100) / 100,
      error: ok ? null : cut(error ?? "health check failed")
    }
    history.checks.push(at, check.response_time_ms, check.error)
    if (ok && responseTimeMs !== undefined) history.samples.push(at, responseTimeMs)
    if (this.listeners.size > 0) this.emit({ type: "check", scope, service_name: name, check })
  }

  private observeContext(actor: object, context: ServiceContext): void {
    const all = context.transitions
    let progress = this.progress.get(actor)
    // A replicated actor (replica mode) shows each health check in its context: one entry per new check.
    if (isReplicated(context) && context.lastHealthCheckAt !== undefined && progress?.lastCheckAt !== context.lastHealthCheckAt) {
      if (progress) progress.lastCheckAt = context.lastHealthCheckAt
      else this.progress.set(actor, (progress = { lastSeen: undefined, toolsVersion: 0, catalogVersion: 0, lastCheckAt: context.lastHealthCheckAt }))
      const ok = context.consecutiveFailures === 0
      this.check(scopeLabel(context.scope), context.name, context.lastHealthCheckAt, ok, ok ? context.responseTimeMs : undefined, context.lastError)
    }
    // Most snapshots (a check answered, a timer) change neither: nothing to look up.
    if (
      progress &&
      sameTransition(progress.lastSeen, all[all.length - 1]) &&
      progress.toolsVersion === context.toolsVersion &&
      progress.catalogVersion === context.catalogVersion &&
      progress.auth === context.auth &&
      progress.toolChanges === context.toolChanges &&
      progress.heldTools === context.heldTools
    ) {
      return
    }
    const scope = scopeLabel(context.scope)
    const history = this.history(scope, context.name)
    if (!progress) this.progress.set(actor, (progress = { lastSeen: undefined, toolsVersion: 0, catalogVersion: 0 }))
    for (const seen of all.slice(unreadFrom(all, progress.lastSeen))) {
      const t = seen.reason.length <= TEXT_LIMIT ? seen : { ...seen, reason: cut(seen.reason) }
      history.transitions.push(t)
      this.onTransition(scope, context.name, t, history)
    }
    progress.lastSeen = all[all.length - 1]
    if (context.toolsVersion !== progress.toolsVersion) {
      progress.toolsVersion = context.toolsVersion
      // The tools it offers agents (hidden ones and those its allow-list leaves out not counted), as tool_count.
      this.emit({ type: "tools_changed", scope, service_name: context.name, tool_count: offeredToolCount(context) })
    }
    if (context.catalogVersion !== progress.catalogVersion) {
      progress.catalogVersion = context.catalogVersion
      this.emit({ type: "catalog_changed", scope, service_name: context.name })
    }
    if (!sameValue(context.auth, progress.auth)) {
      progress.auth = context.auth
      if (context.auth !== undefined) this.emit({ type: "auth", scope, service_name: context.name, auth: context.auth })
    }
    this.observePins(progress, scope, context)
  }

  /**
   * Tool changes (docs/tool-pins.md): each change a list saw for the first time is an event and an
   * alert (raised where the service runs); the alerts of held tools are resolved once it holds none.
   * The changes a context already showed when first observed (a replica that starts) are not told again.
   */
  private observePins(progress: Progress, scope: string, context: ServiceContext): void {
    const changes = context.toolChanges
    if (progress.toolChanges === undefined) progress.toolChanges = changes
    else if (!sameValue(progress.toolChanges, changes)) {
      progress.toolChanges = changes
      if (changes.length > 0) this.history(scope, context.name).alerted = true
      const raising = this.alertsHere === undefined || this.alertsHere(scope, context.name)
      for (const change of changes) {
        this.emit({ type: "tool_changed", scope, service_name: context.name, change })
        if (!raising) continue
        const what = change.change === "new" ? "a new tool" : `its definition changed (${change.changed_fields.join(", ")})`
        if (change.held) this.raise("warning", scope, context.name, TOOL_HELD_ALERT, `Tool '${change.tool}': ${what}; held until an operator accepts it (accept_tool_changes)`)
        else this.raise("info", scope, context.name, "Tool changed", `Tool '${change.tool}': ${what}; taken (pin mode warn)`)
      }
    }
    const hadHeld = (progress.heldTools?.length ?? 0) > 0
    progress.heldTools = context.heldTools
    if (hadHeld && context.heldTools.length === 0 && (this.alertsHere === undefined || this.alertsHere(scope, context.name))) this.resolve(scope, context.name, true)
  }

  private onTransition(scope: string, name: string, t: Transition, history: ServiceHistory): void {
    this.emit({ type: "status", scope, service_name: name, transition: t })
    // Seen by every replica: the one that runs the service next knows to resolve what another raised.
    if (t.to === "warning" || t.to === "unreachable") history.alerted = true
    // Replica mode: the alerts of a service are raised by the replica that runs it (src/monitoring/shared-alerts.ts).
    if (this.alertsHere !== undefined && !this.alertsHere(scope, name)) return
    if (t.to === "warning") this.raise("warning", scope, name, "Service degraded", t.reason)
    else if (t.to === "unreachable") this.raise("error", scope, name, "Service unreachable", t.reason)
    else if (t.to === "healthy") this.resolve(scope, name, false)
  }

  private raise(level: Alert["level"], scope: string, name: string, title: string, message: string): void {
    const alert: Alert = {
      alert_id: `alert-${Date.now().toString(36)}-${(this.alertCounter++).toString(36)}`,
      level,
      title: `${title}: ${name}`,
      message: cut(message),
      service_name: name,
      scope,
      timestamp: new Date().toISOString(),
      resolved: false,
      resolved_at: null
    }
    this.alertRing.push(alert)
    this.emit({ type: "alert", alert })
  }

  /** Resolves a service's open alerts: those of held tools only (`held` true), all but those (false), or all (undefined). */
  private resolve(scope: string, name: string, held?: boolean): void {
    const now = new Date().toISOString()
    for (const a of this.alertRing.toArray()) {
      if (resolves(a, scope, name, held)) {
        a.resolved = true
        a.resolved_at = now
        this.emit({ type: "alert", alert: a })
      }
    }
    const history = this.histories.get(serviceKey(scope, name))
    this.resolvedHere?.(scope, name, held, now, history?.alerted === true)
    if (history !== undefined && held !== true) history.alerted = false
  }

  private history(scope: string, name: string): ServiceHistory {
    const key = serviceKey(scope, name)
    let h = this.histories.get(key)
    if (!h) this.histories.set(key, (h = new ServiceHistory()))
    return h
  }

  /** A service was deleted: its open alerts are resolved (nothing will ever make it healthy again), its history dropped. */
  serviceRemoved(scope: string, name: string): void {
    this.resolve(scope, name)
    this.histories.delete(serviceKey(scope, name))
    this.emit({ type: "removed", scope, service_name: name })
  }

  /** A tool call's duration counts as a response-time sample of its service. */
  recordCall(scope: string, name: string, durationMs: number): void {
    this.history(scope, name).samples.push(Date.now(), durationMs)
  }

  /** Transitions and checks of a service within the last `hours`. */
  healthHistory(scope: string, name: string, hours: number) {
    const h = this.histories.get(serviceKey(scope, name))
    const since = Date.now() - hours * 3_600_000
    return {
      found: h !== undefined,
      transitions: (h?.transitions.toArray() ?? []).filter((t) => t.at >= since),
      checks: (h?.checks.toArray() ?? []).filter((c) => c.at >= since)
    }
  }

  /** Response-time figures per known service. */
  responseTimes(): Array<{ scope: string; service_name: string; samples: ReadonlyArray<number>; last: number | null }> {
    return [...this.histories].map(([key, h]) => {
      const slash = key.indexOf("/")
      return { scope: key.slice(0, slash), service_name: key.slice(slash + 1), samples: h.samples.values(), last: h.samples.lastValue() ?? null }
    })
  }

  /** Replica mode: whether this replica raises and resolves the alerts of a service (it runs it). Undefined: every service. */
  alertsHere: ((scope: string, name: string) => boolean) | undefined = undefined

  /**
   * Whether this replica runs a service (`alertsHere`; always outside replica mode): its checks and
   * transitions are counted in the metrics here only, as its tool calls are.
   */
  runsHere(scope: string, name: string): boolean {
    return this.alertsHere === undefined || this.alertsHere(scope, name)
  }

  /**
   * Replica mode: told of each resolution of a service's alerts here, whether or not this replica
   * keeps an alert it resolves (another replica may have raised it): `held` as `resolve` takes it;
   * `alerted`: a degradation or a tool change was seen since the last resolution (an alert may be open).
   */
  resolvedHere: ((scope: string, name: string, held: boolean | undefined, at: string, alerted: boolean) => void) | undefined = undefined

  /** Tells the live listeners of an alert raised or resolved by another replica (not kept here). */
  relayAlert(alert: Alert): void {
    this.emit({ type: "alert", alert })
  }

  /**
   * Where `alerts()` reads from instead of this process's ring: in a cluster, every replica's
   * alerts (src/monitoring/shared-alerts.ts `SharedAlerts.attach`).
   */
  alertsFrom: (() => ReadonlyArray<Alert>) | undefined = undefined

  /** Alerts, newest first. */
  alerts(): ReadonlyArray<Alert> {
    return this.alertsFrom?.() ?? this.alertRing.toArray().reverse()
  }

  /** Records an API request's latency. */
  recordRequest(ms: number): void {
    this.requestsTotal += 1
    this.requests.record(ms)
  }

  /** Event-loop delay (p99, ms) since the last call, then starts a new measurement. */
  eventLoopLagMs(): number {
    const p99 = this.loopDelay.count > 0 ? this.loopDelay.percentile(99) / 1e6 : 0
    this.loopDelay.reset()
    return Math.round(p99 * 100) / 100
  }

  /** Sizes of what is kept (for the bounded-memory test). */
  sizes() {
    let transitions = 0
    let checks = 0
    let samples = 0
    for (const h of this.histories.values()) {
      transitions += h.transitions.size
      checks += h.checks.size
      samples += h.samples.size
    }
    return { services: this.histories.size, transitions, checks, samples, alerts: this.alertRing.size }
  }

  /** Listens to status changes, tool list changes and alerts. Returns an unsubscribe. */
  subscribe(listener: (e: MonitorEvent) => void): () => void {
    this.listeners.add(listener)
    return () => this.listeners.delete(listener)
  }

  get subscriberCount(): number {
    return this.listeners.size
  }

  private emit(e: MonitorEvent): void {
    for (const l of this.listeners) {
      try {
        l(e)
      } catch {
        // a listener's failure is its own
      }
    }
  }

  /** Releases the event-loop monitor. */
  stop(): void {
    this.loopDelay.disable()
    this.listeners.clear()
  }
}

/** Statuses counted, all seven keys present. */
export type Distribution = Record<Status, number>
