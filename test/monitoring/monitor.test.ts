// The monitor as a replica that mirrors a service sees it (every view freshly parsed: new objects
// each time: its transitions, tool changes and OAuth state told once), hostile upstream texts kept bounded, histories of deleted and long-lived services,
// the metrics of checks and transitions counted where a service runs only, and two figures.
import type { InspectionEvent } from "xstate"
import { afterEach, describe, expect, it } from "vitest"
import { STORE_SCOPE, agentScope, type Scope, type Status } from "../../src/domain/service-definition.js"
import type { Transition } from "../../src/machines/service.js"
import { createMetrics } from "../../src/monitoring/metrics.js"
import { agentsSummary, systemPerformance } from "../../src/monitoring/figures.js"
import { LIMITS, Monitor, TEXT_LIMIT, type MonitorEvent } from "../../src/monitoring/monitor.js"
import type { Store } from "../../src/runtime/store.js"
import type { ToolRecord } from "../../src/records/tool-records.js"

/** A replicated service actor (replica mode) as the inspection hook sees it. */
class ReplicatedService {
  transitions: Transition[] = []
  lastHealthCheckAt: number | undefined
  consecutiveFailures = 0
  lastError: string | undefined
  toolChanges: unknown[] = []
  auth: object | undefined
  private status: Status | null = null
  readonly actorRef: { id: string }

  constructor(
    readonly scope: Scope,
    readonly name: string,
    readonly role: "owner" | "mirror" = "mirror"
  ) {
    this.actorRef = { id: `service:${name}` }
  }

  enter(to: Status, reason: string, at = Date.now()): void {
    this.transitions = [...this.transitions.slice(-19), { from: this.status, to, at, reason }]
    this.status = to
  }

  /** A view as a mirror gets it: parsed from the owner's JSON, so every object is new. */
  view(): InspectionEvent {
    const context = JSON.parse(
      JSON.stringify({
        scope: this.scope,
        name: this.name,
        role: this.role,
        transitions: this.transitions,
        toolsVersion: 0,
        catalogVersion: 0,
        toolChanges: this.toolChanges,
        heldTools: [],
        auth: this.auth,
        lastHealthCheckAt: this.lastHealthCheckAt,
        consecutiveFailures: this.consecutiveFailures,
        lastError: this.lastError
      })
    )
    return { type: "@xstate.snapshot", actorRef: this.actorRef, snapshot: { context } } as unknown as InspectionEvent
  }
}

let monitor: Monitor | undefined
afterEach(() => {
  monitor?.stop()
  monitor = undefined
})

describe("Monitor: a mirrored service", () => {
  it("handles each transition once however many views show it, also when more than the context keeps came between two views", () => {
    monitor = new Monitor()
    const events: MonitorEvent[] = []
    monitor.subscribe((e) => events.push(e))
    const svc = new ReplicatedService(STORE_SCOPE, "svc")
    svc.enter("initializing", "added", 1_000)
    svc.enter("healthy", "connected", 1_001)
    monitor.inspect(svc.view())
    // The owner publishes a view after each health check: nothing new in them.
    for (let i = 0; i < 5; i++) {
      svc.lastHealthCheckAt = 2_000 + i
      monitor.inspect(svc.view())
    }
    svc.enter("warning", "slow", 3_000)
    monitor.inspect(svc.view())
    monitor.inspect(svc.view())
    const statuses = () => events.flatMap((e) => (e.type === "status" ? [`${e.transition.from}>${e.transition.to}`] : []))
    expect(statuses()).toEqual(["null>initializing", "initializing>healthy", "healthy>warning"])
    expect(events.filter((e) => e.type === "check")).toHaveLength(5)
    // 25 transitions before the next view: the last one seen is no longer in the context (20 kept).
    for (let i = 0; i < 25; i++) svc.enter(i % 2 === 0 ? "healthy" : "warning", `flap ${i}`, 4_000 + i)
    monitor.inspect(svc.view())
    monitor.inspect(svc.view())
    const h = monitor.healthHistory("store", "svc", 1e6)
    expect(h.transitions.map((t) => t.reason)).toEqual(["added", "connected", "slow", ...Array.from({ length: 20 }, (_, i) => `flap ${i + 5}`)])
    expect(statuses()).toHaveLength(23)
    // One alert per warning entered, however often its transition was shown.
    expect(monitor.alerts().filter((a) => a.level === "warning")).toHaveLength(1 + 10)
  })
})

describe("Monitor: a mirrored service's tool changes and OAuth state", () => {
  it("are told once, not again with each view", () => {
    monitor = new Monitor()
    const events: MonitorEvent[] = []
    monitor.subscribe((e) => events.push(e))
    const svc = new ReplicatedService(STORE_SCOPE, "svc")
    svc.enter("healthy", "connected", 1_000)
    monitor.inspect(svc.view())
    svc.toolChanges = [{ tool: "t", change: "changed", held: false, changed_fields: ["description"], diff: {} }]
    svc.auth = { status: "authorized" }
    for (let i = 0; i < 3; i++) {
      svc.lastHealthCheckAt = 2_000 + i
      monitor.inspect(svc.view())
    }
    expect(events.filter((e) => e.type === "tool_changed")).toHaveLength(1)
    expect(events.filter((e) => e.type === "auth")).toHaveLength(1)
  })
})

describe("Monitor: an upstream's texts", () => {
  it("a check's error, a transition's reason and an alert's message are kept to TEXT_LIMIT characters", () => {
    monitor = new Monitor()
    const events: MonitorEvent[] = []
    monitor.subscribe((e) => events.push(e))
    const huge = "x".repeat(1_000_000)
    const svc = new ReplicatedService(agentScope("a1"), "svc", "owner")
    svc.enter("healthy", "connected")
    monitor.inspect(svc.view())
    svc.lastHealthCheckAt = Date.now()
    svc.consecutiveFailures = 1
    svc.lastError = huge
    svc.enter("unreachable", huge)
    monitor.inspect(svc.view())
    const h = monitor.healthHistory("a1", "svc", 1)
    expect(h.checks.at(-1)!.error).toHaveLength(TEXT_LIMIT)
    expect(h.transitions.at(-1)!.reason).toHaveLength(TEXT_LIMIT)
    expect(monitor.alerts()[0]!.message).toHaveLength(TEXT_LIMIT)
    const told = events.flatMap((e) => (e.type === "status" ? [e.transition.reason.length] : []))
    expect(told.at(-1)).toBe(TEXT_LIMIT)
  })
})

describe("Monitor: services' histories", () => {
  const removal = (name: string) =>
    ({ type: "@xstate.event", actorRef: { id: "store" }, event: { type: "REMOVE_SERVICE", scope: STORE_SCOPE, name } }) as unknown as InspectionEvent

  it("a deleted service's history is dropped", () => {
    monitor = new Monitor()
    const svc = new ReplicatedService(STORE_SCOPE, "gone", "owner")
    svc.enter("healthy", "connected")
    monitor.inspect(svc.view())
    expect(monitor.healthHistory("store", "gone", 1).found).toBe(true)
    monitor.inspect(removal("gone"))
    expect(monitor.healthHistory("store", "gone", 1).found).toBe(false)
    expect(monitor.sizes().services).toBe(0)
  })

  it("a service in use is not pushed out by many others, the least recently used goes first", () => {
    monitor = new Monitor()
    const busy = new ReplicatedService(STORE_SCOPE, "busy", "owner")
    busy.enter("healthy", "connected")
    monitor.inspect(busy.view())
    monitor.recordCall("store", "idle", 5)
    for (let i = 0; i < LIMITS.services + 10; i++) {
      monitor.recordCall("agent", `short-lived-${i}`, 1)
      if (i % 1_000 === 0) monitor.recordCall("store", "busy", 3)
    }
    // Kept all along: its transition is still there (a history made again would have none).
    expect(monitor.healthHistory("store", "busy", 1).transitions.map((t) => t.reason)).toEqual(["connected"])
    expect(monitor.healthHistory("store", "idle", 1).found).toBe(false)
    expect(monitor.sizes().services).toBe(LIMITS.services)
  })
})

/** The little of a store the metrics and figures read here. */
const fakeStore = (fields: Partial<Record<string, unknown>> = {}): Store =>
  ({
    startedAt: Date.now(),
    agentIds: () => [],
    serviceActors: () => ({}),
    records: { onOwnRecord: () => () => undefined, inMemory: () => [], summary: () => ({ total_executions: 0, by_service: {} }) },
    ...fields
  }) as unknown as Store

describe("metrics of checks and transitions in replica mode", () => {
  it("are counted by the replica that runs the service only", async () => {
    monitor = new Monitor()
    monitor.alertsHere = (_scope, name) => name === "mine"
    const metrics = createMetrics(fakeStore(), monitor)
    try {
      for (const name of ["mine", "theirs"]) {
        const svc = new ReplicatedService(STORE_SCOPE, name)
        svc.enter("healthy", "connected")
        svc.enter("reconnecting", "lost")
        svc.lastHealthCheckAt = Date.now()
        svc.consecutiveFailures = 1
        monitor.inspect(svc.view())
      }
      const text = (name: string) => metrics.registry.getSingleMetricAsString(name)
      expect(await text("mcpstore_health_check_failures_total")).toContain('service="mine"} 1')
      expect(await text("mcpstore_health_check_failures_total")).not.toContain("theirs")
      expect(await text("mcpstore_reconnections_total")).not.toContain("theirs")
      expect(await text("mcpstore_status_transitions_total")).toContain('to="reconnecting"} 1')
    } finally {
      metrics.close()
    }
  })
})

describe("figures", () => {
  it("requests_per_second: over the uptime while it is under a minute", async () => {
    monitor = new Monitor()
    for (let i = 0; i < 100; i++) monitor.recordRequest(1)
    const figures = await systemPerformance({ store: fakeStore({ startedAt: Date.now() - 10_000 }), monitor })
    expect(figures.requests_per_second).toBeGreaterThan(9)
    expect(figures.requests_per_second).toBeLessThanOrEqual(10)
  })

  it("agents_summary reads the records kept once, not once per agent", () => {
    const agents = Array.from({ length: 50 }, (_, i) => `agent-${i}`)
    const records = Array.from({ length: 20_000 }, (_, i) => ({ scope: "agent", agent_id: i < 10 ? agents[i] : "busy", service_name: "s", timestamp: new Date(1_000 + i).toISOString() }))
    let reads = 0
    const counted = new Proxy(records, {
      get(target, key, receiver) {
        if (typeof key === "string" && /^\d+$/.test(key)) reads += 1
        return Reflect.get(target, key, receiver) as unknown
      }
    }) as unknown as ToolRecord[]
    const store = fakeStore({ agentIds: () => agents, records: { inMemory: () => counted, summary: () => ({ total_executions: 0, by_service: {} }) } })
    const summary = agentsSummary(store)
    expect(summary.agents.find((a) => a.agent_id === "agent-3")!.last_activity).toBe(new Date(1_003).toISOString())
    expect(summary.agents.find((a) => a.agent_id === "agent-30")!.last_activity).toBeNull()
    expect(reads).toBeLessThanOrEqual(records.length)
  })
})
