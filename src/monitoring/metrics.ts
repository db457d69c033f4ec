/**
 * Prometheus metrics (`GET /metrics`, text format) with prom-client: services per status and
 * scope, tool calls by service, tool and outcome, call and health-check durations, reconnections,
 * API requests and their latency, and the process figures prom-client collects by default. Each
 * server has its own registry, so several servers in one process (tests) do not collide.
 *
 * The series of a service or an agent that was deleted are removed (prom-client's `remove`) at the
 * next scrape: the series kept are bounded by the services that exist, not by every name ever seen.
 */
import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from "prom-client"
import { STATUSES, agentScope, STORE_SCOPE } from "../domain/service-definition.js"
import { statusOf } from "../machines/service.js"
import type { Store } from "../runtime/store.js"
import type { Monitor } from "./monitor.js"

/** The metrics of one server. `close()` releases its subscriptions. */
export interface Metrics {
  readonly registry: Registry
  /** Records one API request. */
  observeRequest(method: string, status: number, seconds: number): void
  close(): void
}

export const createMetrics = (store: Store, monitor: Monitor): Metrics => {
  const registry = new Registry()
  /** Every labelled series of a service, by metric and labels: removed once the service is gone (`prune`). */
  const series = new Map<string, { readonly metric: { remove(labels: Record<string, string>): void }; readonly labels: Record<string, string>; readonly scope: string | undefined; readonly service: string }>()
  const track = (name: string, metric: { remove(labels: Record<string, string>): void }, labels: Record<string, string>, scope: string | undefined, service: string) => {
    const key = `${name}\0${Object.values(labels).join("\0")}`
    if (!series.has(key)) series.set(key, { metric, labels, scope, service })
  }
  /** Removes the series of services (and agents) that no longer exist. */
  const prune = () => {
    if (series.size === 0) return
    const live = new Set<string>()
    const names = new Set<string>()
    for (const scope of [STORE_SCOPE, ...store.agentIds().map(agentScope)]) {
      const label = scope.kind === "store" ? "store" : scope.agentId
      for (const name of Object.keys(store.serviceActors(scope))) {
        live.add(`${label}\0${name}`)
        names.add(name)
      }
    }
    for (const [key, s] of series) {
      const alive = s.scope === undefined ? names.has(s.service) : live.has(`${s.scope}\0${s.service}`)
      if (!alive) {
        s.metric.remove(s.labels)
        series.delete(key)
      }
    }
  }
  // prom-client samples the event loop every 10 ms by default: 100 wake-ups a second of an idle store.
  collectDefaultMetrics({ register: registry, prefix: "mcpstore_process_", eventLoopMonitoringPrecision: 100 })
  new Gauge({
    name: "mcpstore_services",
    help: "Services per status and scope",
    labelNames: ["status", "scope"],
    registers: [registry],
    collect() {
      // The first metric registered, so collected first: the series of deleted services go before any is read.
      prune()
      this.reset()
      for (const scope of [STORE_SCOPE, ...store.agentIds().map(agentScope)]) {
        const label = scope.kind === "store" ? "store" : scope.agentId
        const counts = Object.fromEntries(STATUSES.map((s) => [s, 0]))
        for (const a of Object.values(store.serviceActors(scope))) counts[statusOf(a.getSnapshot())]! += 1
        for (const [status, n] of Object.entries(counts)) this.set({ status, scope: label }, n)
      }
    }
  })
  new Gauge({
    name: "mcpstore_tools",
    help: "Tools of connected and disconnected services",
    registers: [registry],
    collect() {
      this.set(store.allServiceActors().reduce((n, a) => n + a.getSnapshot().context.tools.length, 0))
    }
  })
  const calls = new Counter({
    name: "mcpstore_tool_calls_total",
    help: "Tool calls by scope, service, tool and outcome",
    labelNames: ["scope", "service", "tool", "outcome"],
    registers: [registry]
  })
  const callSeconds = new Histogram({
    name: "mcpstore_tool_call_duration_seconds",
    help: "Tool call duration",
    labelNames: ["service", "outcome"],
    buckets: [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60],
    registers: [registry]
  })
  const checkSeconds = new Histogram({
    name: "mcpstore_health_check_duration_seconds",
    help: "Health check (MCP ping) round-trip time",
    labelNames: ["scope", "service"],
    buckets: [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 3, 5],
    registers: [registry]
  })
  const checkFailures = new Counter({
    name: "mcpstore_health_check_failures_total",
    help: "Failed health checks",
    labelNames: ["scope", "service"],
    registers: [registry]
  })
  const reconnections = new Counter({
    name: "mcpstore_reconnections_total",
    help: "Times a service entered reconnecting",
    labelNames: ["scope", "service"],
    registers: [registry]
  })
  const transitions = new Counter({
    name: "mcpstore_status_transitions_total",
    help: "Status transitions by target status",
    labelNames: ["to"],
    registers: [registry]
  })
  const requests = new Counter({
    name: "mcpstore_http_requests_total",
    help: "API requests by method and status",
    labelNames: ["method", "status"],
    registers: [registry]
  })
  const requestSeconds = new Histogram({
    name: "mcpstore_http_request_duration_seconds",
    help: "API request latency",
    buckets: [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 5, 30],
    registers: [registry]
  })
  // This replica's calls only: Prometheus scrapes each replica and sums them.
  const offRecords = store.records.onOwnRecord((r) => {
    const scope = r.scope === "store" ? "store" : (r.agent_id ?? "")
    const callLabels = { scope, service: r.service_name, tool: r.tool_name, outcome: r.outcome }
    calls.inc(callLabels)
    track("calls", calls, callLabels, scope, r.service_name)
    const durationLabels = { service: r.service_name, outcome: r.outcome }
    callSeconds.observe(durationLabels, r.duration_ms / 1000)
    track("callSeconds", callSeconds, durationLabels, undefined, r.service_name)
  })
  // Every replica sees each service's checks and transitions: counted by the one that runs it only.
  const offMonitor = monitor.subscribe((e) => {
    if ((e.type === "check" || e.type === "status") && !monitor.runsHere(e.scope, e.service_name)) return
    if (e.type === "check") {
      const labels = { scope: e.scope, service: e.service_name }
      if (e.check.ok && e.check.response_time_ms !== null) {
        checkSeconds.observe(labels, e.check.response_time_ms / 1000)
        track("checkSeconds", checkSeconds, labels, e.scope, e.service_name)
      } else if (!e.check.ok) {
        checkFailures.inc(labels)
        track("checkFailures", checkFailures, labels, e.scope, e.service_name)
      }
    } else if (e.type === "status") {
      transitions.inc({ to: e.transition.to })
      if (e.transition.to === "reconnecting") {
        const labels = { scope: e.scope, service: e.service_name }
        reconnections.inc(labels)
        track("reconnections", reconnections, labels, e.scope, e.service_name)
      }
    }
  })
  return {
    registry,
    observeRequest: (method, status, seconds) => {
      requests.inc({ method, status: String(status) })
      requestSeconds.observe(seconds)
    },
    close: () => {
      offRecords()
      offMonitor()
      registry.clear()
    }
  }
}
