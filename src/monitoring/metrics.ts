/**
 * Prometheus metrics (`GET /metrics`, text format) with prom-client: services per status and
 * scope, tool calls by service, tool and outcome, call and health-check durations, reconnections,
 * API requests and their latency, and the process figures prom-client collects by default. Each
 * server has its own registry, so several servers in one process (tests) do not collide.
 */
import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from "prom-client"
import { STATUSES, agentScope, STORE_SCOPE } from "../domain/service.js"
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
  // prom-client samples the event loop every 10 ms by default: 100 wake-ups a second of an idle store.
  collectDefaultMetrics({ register: registry, prefix: "mcpstore_process_", eventLoopMonitoringPrecision: 100 })
  new Gauge({
    name: "mcpstore_services",
    help: "Services per status and scope",
    labelNames: ["status", "scope"],
    registers: [registry],
    collect() {
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
  const offRecords = store.records.onRecord((r) => {
    const scope = r.scope === "store" ? "store" : (r.agent_id ?? "")
    calls.inc({ scope, service: r.service_name, tool: r.tool_name, outcome: r.outcome })
    callSeconds.observe({ service: r.service_name, outcome: r.outcome }, r.duration_ms / 1000)
  })
  const offMonitor = monitor.subscribe((e) => {
    if (e.type === "check") {
      if (e.check.ok && e.check.response_time_ms !== null) {
        checkSeconds.observe({ scope: e.scope, service: e.service_name }, e.check.response_time_ms / 1000)
      } else if (!e.check.ok) checkFailures.inc({ scope: e.scope, service: e.service_name })
    } else if (e.type === "status") {
      transitions.inc({ to: e.transition.to })
      if (e.transition.to === "reconnecting") reconnections.inc({ scope: e.scope, service: e.service_name })
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
