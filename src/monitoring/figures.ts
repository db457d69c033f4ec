/**
 * The figures of the 14 monitoring endpoints (docs/api.md, Monitoring), computed from what the
 * store really has: service actors' snapshots, tool-call records and their aggregates, the
 * monitor's histories and request metrics, and the operating system. Nothing here is a constant.
 * Figures keyed by service name or agent id are null-prototype records (src/domain/dict.ts).
 */
import { cpus, freemem, loadavg, totalmem } from "node:os"
import { dict } from "../domain/dict.js"
import { STATUSES, agentScope, STORE_SCOPE, type Scope, type Status } from "../domain/service-definition.js"
import { statusOf } from "../machines/service.js"
import { isFailedOutcome as isFailure, OUTCOMES, type Outcome, type ToolRecord } from "../records/tool-records.js"
import { ServiceNotFound } from "../domain/errors.js"
import type { Store } from "../runtime/store.js"
import type { Monitor } from "./monitor.js"
import { diskOf, processCpuPercent } from "./system.js"
import { quantile } from "./bounded.js"

const round = (n: number) => Math.round(n * 100) / 100
const recordScope = (r: ToolRecord) => (r.scope === "store" ? "store" : (r.agent_id ?? ""))

/** Narrowing by `agent_id` (a scope: an agent id, or "store") and `service_name`. */
export interface Narrowing {
  readonly agent_id?: string | undefined
  readonly service_name?: string | undefined
}

const matches = (n: Narrowing, scope: string, service: string) =>
  (n.agent_id === undefined || n.agent_id === scope) && (n.service_name === undefined || n.service_name === service)

const emptyDistribution = (): Record<Status, number> => Object.fromEntries(STATUSES.map((s) => [s, 0])) as Record<Status, number>

/** Where the figures come from: the store, and the monitor that watches it. */
export interface Sources {
  readonly store: Store
  readonly monitor: Monitor
}

const scopes = (store: Store): Scope[] => [STORE_SCOPE, ...store.agentIds().map(agentScope)]

/** The snapshots of a scope's services that `n` keeps (its `service_name`). */
const scopeSnapshots = (store: Store, scope: Scope, n: Narrowing) =>
  Object.entries(store.serviceActors(scope))
    .filter(([name]) => n.service_name === undefined || n.service_name === name)
    .map(([, a]) => a.getSnapshot())

/** The scopes `n` keeps (its `agent_id`: "store" or an agent id). */
const narrowedScopes = (store: Store, n: Narrowing): Scope[] =>
  scopes(store).filter((s) => n.agent_id === undefined || n.agent_id === (s.kind === "store" ? "store" : s.agentId))

export const agentsSummary = (store: Store, n: Narrowing = {}) => {
  const kept = narrowedScopes(store, n)
  const all = kept.flatMap((scope) => scopeSnapshots(store, scope, n))
  const storeServices = kept.some((s) => s.kind === "store") ? scopeSnapshots(store, STORE_SCOPE, n) : []
  const agentIds = kept.flatMap((s) => (s.kind === "agent" ? [s.agentId] : []))
  // Each agent's last call, in one pass over the records kept (newest last), not one per agent.
  const lastCalls = new Map<string, string>()
  const wanted = new Set(agentIds)
  const recent = store.records.inMemory()
  for (let i = recent.length - 1; i >= 0 && lastCalls.size < wanted.size; i--) {
    const r = recent[i]!
    const scope = recordScope(r)
    if (wanted.has(scope) && !lastCalls.has(scope) && (n.service_name === undefined || r.service_name === n.service_name)) lastCalls.set(scope, r.timestamp)
  }
  const agents = agentIds.map((agentId) => {
    const snapshots = scopeSnapshots(store, agentScope(agentId), n)
    const healthy = snapshots.filter((s) => statusOf(s) === "healthy" || statusOf(s) === "warning").length
    const lastCall = lastCalls.get(agentId)
    const lastChange = Math.max(0, ...snapshots.map((s) => s.context.stateEnteredAt))
    const last = Math.max(lastCall ? Date.parse(lastCall) : 0, lastChange)
    return {
      agent_id: agentId,
      service_count: snapshots.length,
      tool_count: snapshots.reduce((n, s) => n + s.context.tools.length, 0),
      healthy_services: healthy,
      unhealthy_services: snapshots.length - healthy,
      total_tool_executions:
        n.service_name === undefined
          ? store.records.summary([agentId]).total_executions
          : (store.records.summary([agentId]).by_service[n.service_name]?.count ?? 0),
      last_activity: last > 0 ? new Date(last).toISOString() : null
    }
  })
  const inactive = (s: Status) => s === "disconnected" || s === "unreachable"
  return {
    total_agents: agents.length,
    active_agents: agentIds.filter((id) => scopeSnapshots(store, agentScope(id), n).some((s) => !inactive(statusOf(s)))).length,
    total_services: all.length,
    total_tools: all.reduce((n, s) => n + s.context.tools.length, 0),
    store_services: storeServices.length,
    store_tools: storeServices.reduce((n, s) => n + s.context.tools.length, 0),
    agents
  }
}

export const statusDistribution = (store: Store, n: Narrowing = {}) => {
  const distribution = emptyDistribution()
  const by_scope = dict<Record<Status, number>>()
  let total = 0
  for (const scope of narrowedScopes(store, n)) {
    const d = emptyDistribution()
    for (const snapshot of scopeSnapshots(store, scope, n)) {
      const s = statusOf(snapshot)
      d[s] += 1
      distribution[s] += 1
      total += 1
    }
    by_scope[scope.kind === "store" ? "store" : scope.agentId] = d
  }
  return { total_services: total, distribution, by_scope }
}

export const toolsUsage = (store: Store, limit: number, n: Narrowing) => {
  const groups = new Map<string, { scope: string; service: string; tool: string; durations: number[]; ok: number; last: string }>()
  for (const r of store.records.inMemory()) {
    const scope = recordScope(r)
    if (!matches(n, scope, r.service_name)) continue
    const key = `${scope}\u0000${r.service_name}\u0000${r.tool_name}`
    let g = groups.get(key)
    if (!g) groups.set(key, (g = { scope, service: r.service_name, tool: r.tool_name, durations: [], ok: 0, last: r.timestamp }))
    g.durations.push(r.duration_ms)
    if (r.outcome === "success") g.ok += 1
    if (r.timestamp > g.last) g.last = r.timestamp
  }
  const tools = [...groups.values()]
    .map((g) => ({
      tool_name: g.tool,
      service_name: g.service,
      scope: g.scope,
      call_count: g.durations.length,
      success_count: g.ok,
      error_count: g.durations.length - g.ok,
      success_rate: round(g.ok / g.durations.length),
      avg_duration_ms: round(g.durations.reduce((a, b) => a + b, 0) / g.durations.length),
      p95_duration_ms: round(quantile(g.durations, 0.95)),
      last_called_at: g.last
    }))
    .sort((a, b) => b.call_count - a.call_count || (a.last_called_at < b.last_called_at ? 1 : -1))
  return { tools: tools.slice(0, limit), total_tools: tools.length }
}

export const systemPerformance = async ({ store, monitor }: Sources) => {
  const latency = monitor.requests.summary()
  const mem = process.memoryUsage()
  // Over the window, or the time since the start if shorter (at least a second: no division by nearly 0).
  const window = Math.min(monitor.requests.seconds, Math.max(1, (Date.now() - store.startedAt) / 1000))
  return {
    requests_total: monitor.requestsTotal,
    requests_per_second: round(latency.count / window),
    latency_ms: { p50: latency.p50, p95: latency.p95, p99: latency.p99 },
    event_loop_lag_ms: monitor.eventLoopLagMs(),
    cpu_percentage: await processCpuPercent(),
    memory_rss: mem.rss,
    heap_used: mem.heapUsed,
    uptime_seconds: round((Date.now() - store.startedAt) / 1000)
  }
}

export const responseTimes = ({ store, monitor }: Sources, n: Narrowing) => ({
  services: monitor
    .responseTimes()
    .filter((s) => matches(n, s.scope, s.service_name))
    .map((s) => ({
      service_name: s.service_name,
      scope: s.scope,
      last_ms: s.last === null ? null : round(s.last),
      avg_ms: s.samples.length === 0 ? null : round(s.samples.reduce((a, b) => a + b, 0) / s.samples.length),
      p50_ms: s.samples.length === 0 ? null : round(quantile(s.samples, 0.5)),
      p95_ms: s.samples.length === 0 ? null : round(quantile(s.samples, 0.95)),
      samples: s.samples.length
    }))
})

export const errorRates = (store: Store, minutes: number, n: Narrowing) => {
  const since = Date.now() - minutes * 60_000
  const by_outcome = Object.fromEntries(OUTCOMES.map((o) => [o, 0])) as Record<Outcome, number>
  const by_service = dict<{ calls: number; errors: number; error_rate: number }>()
  let total = 0
  let failed = 0
  for (const r of store.records.inMemory()) {
    if (Date.parse(r.timestamp) < since || !matches(n, recordScope(r), r.service_name)) continue
    total += 1
    by_outcome[r.outcome] += 1
    const s = (by_service[r.service_name] ??= { calls: 0, errors: 0, error_rate: 0 })
    s.calls += 1
    if (isFailure(r.outcome)) {
      failed += 1
      s.errors += 1
    }
  }
  for (const s of Object.values(by_service)) s.error_rate = round(s.errors / s.calls)
  return { minutes, total_calls: total, failed_calls: failed, error_rate: total === 0 ? 0 : round(failed / total), by_outcome, by_service }
}

export const healthHistory = ({ store, monitor }: Sources, serviceName: string, agentId: string | undefined, hours: number) => {
  const scope = agentId ?? "store"
  const known = (agentId === undefined ? store.serviceActor(STORE_SCOPE, serviceName) : store.serviceActor(agentScope(agentId), serviceName)) !== undefined
  const h = monitor.healthHistory(scope, serviceName, hours)
  if (!known && !h.found) throw ServiceNotFound.of(serviceName, scope)
  return {
    service_name: serviceName,
    scope,
    hours,
    transitions: h.transitions.map((t) => ({ from: t.from, to: t.to, at: new Date(t.at).toISOString(), reason: t.reason })),
    checks: h.checks.map((c) => ({ ...c, at: new Date(c.at).toISOString() }))
  }
}

export const callHistory = (store: Store, limit: number, n: Narrowing) => {
  const recent = store.records.inMemory()
  const calls: ToolRecord[] = []
  for (let i = recent.length - 1; i >= 0 && calls.length < limit; i--) {
    if (matches(n, recordScope(recent[i]!), recent[i]!.service_name)) calls.push(recent[i]!)
  }
  return { calls }
}

export const realtimeStatus = ({ store, monitor }: Sources) => {
  const services = emptyDistribution()
  for (const a of store.allServiceActors()) services[statusOf(a.getSnapshot())] += 1
  const since = Date.now() - 60_000
  let calls = 0
  let errors = 0
  const recent = store.records.inMemory()
  for (let i = recent.length - 1; i >= 0; i--) {
    const r = recent[i]!
    if (Date.parse(r.timestamp) < since) break
    calls += 1
    if (isFailure(r.outcome)) errors += 1
  }
  return {
    timestamp: new Date().toISOString(),
    services,
    in_flight_calls: store.inFlightCalls,
    calls_last_minute: calls,
    errors_last_minute: errors,
    active_connections: monitor.httpConnections
  }
}

export const activeConnections = ({ store, monitor }: Sources) => {
  const connected = store.allServiceActors().filter((a) => {
    const s = statusOf(a.getSnapshot())
    return s === "healthy" || s === "warning"
  }).length
  return {
    http_connections: monitor.httpConnections,
    upstream_sessions: connected,
    stdio_processes: store.connections.processCount(),
    event_subscribers: monitor.eventStreams
  }
}

export const resourceUsage = async (store: Store) => {
  const [cpu, disk] = await Promise.all([processCpuPercent(), diskOf(store.file.path)])
  const mem = process.memoryUsage()
  return {
    process: { rss: mem.rss, heap_used: mem.heapUsed, heap_total: mem.heapTotal, cpu_percentage: cpu },
    system: { memory_total: totalmem(), memory_free: freemem(), load_average: loadavg().map(round), cpus: cpus().length },
    disk
  }
}

export const alertList = ({ store, monitor }: Sources, limit: number, includeResolved: boolean, n: Narrowing) => {
  const all = monitor.alerts().filter((a) => (includeResolved || !a.resolved) && matches(n, a.scope, a.service_name))
  return { alerts: all.slice(0, limit), total: all.length, unresolved: all.filter((a) => !a.resolved).length }
}
