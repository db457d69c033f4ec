// Memory stays bounded however long the store runs: a Monitor fed 50,000 inspection events (shaped
// like XState's: each hot service's history and checks several times past their limits, the services
// and alerts limits passed too) and 100,000 call and request measurements keeps at most LIMITS of everything;
// LatencyWindow's percentiles are close to the exact ones and forget what is over a minute old;
// Ring keeps the newest, BoundedMap the most recently used; ToolRecords keeps a bounded list of records in memory
// (20,000 appended, 100 times its limit).
import { mkdtempSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import type { InspectionEvent } from "xstate"
import { afterEach, describe, expect, it } from "vitest"
import { STORE_SCOPE, agentScope, type Scope, type Status } from "../../src/domain/service-definition.js"
import type { Transition } from "../../src/machines/service.js"
import { BoundedMap, LatencyWindow, Ring, SampleRing, quantile } from "../../src/monitoring/bounded.js"
import { LIMITS, Monitor, type MonitorEvent } from "../../src/monitoring/monitor.js"
import { ToolRecords, type Outcome } from "../../src/records/tool-records.js"

/** The part of a service actor's context the monitor reads. */
interface FakeContext {
  scope: Scope
  name: string
  transitions: Transition[]
  toolsVersion: number
  tools: unknown[]
}

/**
 * A stand-in for a service actor as the inspection hook sees it: an `id` like the real system id,
 * a `getSnapshot()`, and a context whose `transitions` keeps the last 20 like the service machine.
 */
class FakeService {
  readonly context: FakeContext
  readonly actorRef: { id: string; getSnapshot: () => { context: FakeContext } }
  private status: Status | null = null

  constructor(scope: Scope, name: string) {
    this.context = { scope, name, transitions: [], toolsVersion: 0, tools: [] }
    const id = scope.kind === "store" ? `service:store:${name}` : `service:agent:${scope.agentId}:${name}`
    this.actorRef = { id, getSnapshot: () => ({ context: this.context }) }
  }

  /** A status change, as the machine's `enterStatus` records it: a new array with the last 20. */
  enter(to: Status, reason: string, at = Date.now()): InspectionEvent {
    const t: Transition = { from: this.status, to, at, reason }
    this.status = to
    this.context.transitions = [...this.context.transitions.slice(-19), t]
    return this.snapshotEvent()
  }

  /** A snapshot with no new transition (most snapshots of a real actor). */
  snapshotEvent(): InspectionEvent {
    const snapshot = { context: { ...this.context } }
    return { type: "@xstate.snapshot", rootId: "store", actorRef: this.actorRef, sourceRef: undefined, snapshot, event: { type: "xstate.init" } } as unknown as InspectionEvent
  }

  /** A HEALTH_REPORT sent to the actor, as the inspection hook sees it before it is processed. */
  report(ok: boolean, responseTimeMs?: number, error?: string): InspectionEvent {
    const event = { type: "HEALTH_REPORT", ok, ...(responseTimeMs !== undefined ? { responseTimeMs } : {}), ...(error !== undefined ? { error } : {}) }
    return { type: "@xstate.event", rootId: "store", actorRef: this.actorRef, sourceRef: undefined, event } as unknown as InspectionEvent
  }
}

describe("Monitor: bounded histories, checks, samples, services and alerts", () => {
  let monitor: Monitor | undefined
  afterEach(() => {
    monitor?.stop()
    monitor = undefined
  })

  it("a single service: transitions, checks and alerts are recorded as the lifecycle goes", () => {
    monitor = new Monitor()
    const events: MonitorEvent[] = []
    monitor.subscribe((e) => events.push(e))
    const svc = new FakeService(agentScope("a1"), "svc")
    monitor.inspect(svc.enter("initializing", "added"))
    monitor.inspect(svc.enter("healthy", "connected"))
    monitor.inspect(svc.snapshotEvent()) // nothing new: nothing recorded twice
    monitor.inspect(svc.report(true, 12.345))
    monitor.inspect(svc.report(false, undefined, "ping timed out"))
    monitor.inspect(svc.enter("warning", "health check failed: ping timed out"))
    monitor.inspect(svc.report(false))
    monitor.inspect(svc.enter("reconnecting", "health check failed"))
    monitor.inspect(svc.enter("unreachable", "connect ECONNREFUSED"))

    const h = monitor.healthHistory("a1", "svc", 1)
    expect(h.found).toBe(true)
    expect(h.transitions.map((t) => `${t.from}>${t.to}`)).toEqual([
      "null>initializing",
      "initializing>healthy",
      "healthy>warning",
      "warning>reconnecting",
      "reconnecting>unreachable"
    ])
    expect(h.checks.map((c) => [c.ok, c.response_time_ms, c.error])).toEqual([
      [true, 12.35, null],
      [false, null, "ping timed out"],
      [false, null, "health check failed"]
    ])
    const alerts = monitor.alerts()
    expect(alerts.map((a) => [a.level, a.scope, a.service_name, a.resolved])).toEqual([
      ["error", "a1", "svc", false],
      ["warning", "a1", "svc", false]
    ])
    expect(monitor.responseTimes()).toEqual([{ scope: "a1", service_name: "svc", samples: [12.345], last: 12.345 }])

    monitor.inspect(svc.enter("healthy", "reconnected"))
    expect(monitor.alerts().every((a) => a.resolved && a.resolved_at !== null)).toBe(true)
    expect(events.filter((e) => e.type === "status")).toHaveLength(6)
    // Each alert is announced when raised and when resolved.
    expect(events.filter((e) => e.type === "alert")).toHaveLength(4)

    // Actors of other kinds (the store, agents, invoked children) are not services.
    const other = { ...svc.enter("warning", "x"), actorRef: { id: "agent:a1", getSnapshot: () => ({ context: svc.context }) } }
    const before = monitor.sizes()
    monitor.inspect(other as unknown as InspectionEvent)
    expect(monitor.sizes()).toEqual(before)
  })

  it("50,000 inspection events and 100,000 calls and requests: never more than LIMITS", { timeout: 30_000 }, () => {
    monitor = new Monitor()
    // A few hot services that change status and report checks all the time, and a stream of new
    // services (each raising an alert) well past the services limit.
    const hot = [new FakeService(STORE_SCOPE, "hot-0"), new FakeService(agentScope("agent-1"), "hot-1"), new FakeService(agentScope("agent-2"), "hot-2")]
    const cycle: Status[] = ["healthy", "warning", "reconnecting", "unreachable"]
    // 50,000 events: 12,000 new services (2,000 past LIMITS.services, 12 times LIMITS.alerts) and some
    // 38,000 events of the hot services, each over 4,000 transitions and 8,000 checks, four and eight
    // times their limits (newEvery, 4, is no multiple of the 3 hot services: each gets its share all along).
    const EVENTS = 50_000
    const NEW_SERVICES = LIMITS.services + 2_000
    const newEvery = Math.floor(EVENTS / NEW_SERVICES)
    expect(newEvery % hot.length).not.toBe(0)
    let fresh = 0
    const hotTransitions = hot.map(() => 0)
    const hotChecks = hot.map(() => 0)
    let lastRaised = ""
    monitor.subscribe((e) => {
      if (e.type === "alert" && !e.alert.resolved) lastRaised = e.alert.alert_id
    })
    let worst = { services: 0, transitions: 0, checks: 0, samples: 0, alerts: 0 }
    const hotOk = () => {
      for (const s of hot) {
        const h = monitor!.healthHistory(s.context.scope.kind === "store" ? "store" : (s.context.scope as { agentId: string }).agentId, s.context.name, 1)
        expect(h.transitions.length).toBeLessThanOrEqual(LIMITS.transitionsPerService)
        expect(h.checks.length).toBeLessThanOrEqual(LIMITS.checksPerService)
      }
    }
    const check = () => {
      const sizes = monitor!.sizes()
      worst = {
        services: Math.max(worst.services, sizes.services),
        transitions: Math.max(worst.transitions, sizes.transitions),
        checks: Math.max(worst.checks, sizes.checks),
        samples: Math.max(worst.samples, sizes.samples),
        alerts: Math.max(worst.alerts, sizes.alerts)
      }
      expect(sizes.services).toBeLessThanOrEqual(LIMITS.services)
      expect(sizes.alerts).toBeLessThanOrEqual(LIMITS.alerts)
      expect(sizes.transitions).toBeLessThanOrEqual(sizes.services * LIMITS.transitionsPerService)
      expect(sizes.checks).toBeLessThanOrEqual(sizes.services * LIMITS.checksPerService)
      expect(sizes.samples).toBeLessThanOrEqual(sizes.services * LIMITS.samplesPerService)
    }

    for (let i = 0; i < EVENTS; i++) {
      if (i % newEvery === 0 && fresh < NEW_SERVICES) {
        const s = new FakeService(agentScope(`agent-${fresh % 50}`), `svc-${fresh++}`)
        monitor.inspect(s.enter("initializing", "added"))
        monitor.inspect(s.enter("warning", "slow"))
        continue
      }
      const s = hot[i % hot.length]!
      if (i % 2 === 0) {
        monitor.inspect(s.enter(cycle[(i >> 1) % cycle.length]!, `step ${i}`))
        hotTransitions[i % hot.length]! += 1
      } else {
        monitor.inspect(s.report(i % 3 !== 0, (i % 100) + 0.5, i % 3 === 0 ? `failure ${i}` : undefined))
        hotChecks[i % hot.length]! += 1
      }
      if (i % 500 === 0) check()
      if (i % 10_000 === 0) hotOk()
    }
    check()
    hotOk()
    // Each hot service went past its histories' limits several times over.
    for (const n of hotTransitions) expect(n).toBeGreaterThan(4 * LIMITS.transitionsPerService)
    for (const n of hotChecks) expect(n).toBeGreaterThan(4 * LIMITS.checksPerService)
    expect(fresh).toBe(NEW_SERVICES)
    expect(worst.services).toBe(LIMITS.services)
    expect(worst.alerts).toBe(LIMITS.alerts)

    // Whatever is kept of a service is its newest part.
    const newest = monitor.healthHistory("store", "hot-0", 1)
    if (newest.found) {
      expect(newest.transitions.length).toBeLessThanOrEqual(LIMITS.transitionsPerService)
      expect(newest.transitions.at(-1)).toEqual(hot[0]!.context.transitions.at(-1))
    }
    const last = monitor.healthHistory("agent-" + ((NEW_SERVICES - 1) % 50), `svc-${NEW_SERVICES - 1}`, 1)
    expect(last.found).toBe(true)
    expect(last.transitions.map((t) => t.to)).toEqual(["initializing", "warning"])
    const first = monitor.healthHistory("agent-0", "svc-0", 1)
    expect(first.found).toBe(false) // forgotten: the oldest services go first
    expect(monitor.alerts()[0]!.alert_id).toBe(lastRaised)

    // 100,000 tool-call durations and API requests.
    for (let i = 0; i < 100_000; i++) {
      monitor.recordCall(i % 7 === 0 ? "store" : "agent-1", `call-${i % 13}`, (i % 250) + 1)
      monitor.recordRequest((i % 40) + 1)
      if (i % 5_000 === 0) check()
    }
    check()
    for (const r of monitor.responseTimes()) expect(r.samples.length).toBeLessThanOrEqual(LIMITS.samplesPerService)
    const sizes = monitor.sizes()
    expect(sizes.services).toBeLessThanOrEqual(LIMITS.services)
    expect(sizes.alerts).toBeLessThanOrEqual(LIMITS.alerts)
    expect(monitor.requestsTotal).toBe(100_000)
    const requests = monitor.requests.summary()
    expect(requests.count).toBe(100_000)
    expect(requests.p50).toBeGreaterThan(0)
  })

  it("a service's history keeps its newest 1000 transitions and checks even when the actor keeps only 20", () => {
    monitor = new Monitor()
    const svc = new FakeService(STORE_SCOPE, "busy")
    const cycle: Status[] = ["healthy", "warning"]
    for (let i = 0; i < 3_000; i++) {
      monitor.inspect(svc.enter(cycle[i % 2]!, `step ${i}`))
      monitor.inspect(svc.report(true, i))
    }
    const h = monitor.healthHistory("store", "busy", 1)
    expect(h.transitions).toHaveLength(LIMITS.transitionsPerService)
    expect(h.transitions[0]!.reason).toBe(`step ${3_000 - LIMITS.transitionsPerService}`)
    expect(h.transitions.at(-1)!.reason).toBe("step 2999")
    // Every transition exactly once, in order.
    expect(h.transitions.every((t, i) => t.reason === `step ${3_000 - LIMITS.transitionsPerService + i}`)).toBe(true)
    expect(h.checks).toHaveLength(LIMITS.checksPerService)
    expect(h.checks.at(-1)!.response_time_ms).toBe(2999)
    const samples = monitor.responseTimes()[0]!
    expect(samples.samples).toHaveLength(LIMITS.samplesPerService)
    expect(samples.last).toBe(2999)
  })

  it("a service forgotten past LIMITS.services and heard from again does not replay its old transitions", () => {
    monitor = new Monitor()
    const events: MonitorEvent[] = []
    monitor.subscribe((e) => events.push(e))
    const svc = new FakeService(STORE_SCOPE, "old")
    monitor.inspect(svc.enter("initializing", "added"))
    monitor.inspect(svc.enter("healthy", "connected"))
    monitor.inspect(svc.enter("warning", "slow response"))
    expect(monitor.alerts().map((a) => [a.service_name, a.level, a.resolved])).toEqual([["old", "warning", false]])
    // Enough other services to push "old" out of the history map (the oldest key goes first).
    for (let i = 0; i < LIMITS.services; i++) monitor.inspect(new FakeService(agentScope("crowd"), `s${i}`).enter("initializing", "added"))
    expect(monitor.healthHistory("store", "old", 1).found).toBe(false)
    const statusEvents = events.filter((e) => e.type === "status").length

    // The same actor, still in `warning`, with no new transition: its next snapshot (a counter changed).
    monitor.inspect(svc.snapshotEvent())
    // One warning episode, one alert; no status change announced for what happened long ago.
    expect(monitor.alerts().filter((a) => a.service_name === "old")).toHaveLength(1)
    expect(events.filter((e) => e.type === "status").length).toBe(statusEvents)
  })

  it("alerts: at most LIMITS.alerts, newest first", () => {
    monitor = new Monitor()
    for (let i = 0; i < LIMITS.alerts * 3; i++) {
      const s = new FakeService(STORE_SCOPE, `s${i % 100}`)
      monitor.inspect(s.enter("unreachable", `down ${i}`))
    }
    const alerts = monitor.alerts()
    expect(alerts).toHaveLength(LIMITS.alerts)
    expect(alerts[0]!.message).toBe(`down ${LIMITS.alerts * 3 - 1}`)
    expect(alerts.at(-1)!.message).toBe(`down ${LIMITS.alerts * 2}`)
    expect(new Set(alerts.map((a) => a.alert_id)).size).toBe(LIMITS.alerts)
  })
})

describe("LatencyWindow", () => {
  const T0 = 1_700_000_000_000 // a whole second

  it("percentiles within 10 % of the exact ones for a known distribution", () => {
    const w = new LatencyWindow(60)
    const values: number[] = []
    // 1..1000 ms, twice, spread over 20 seconds; and a log-normal-ish tail.
    for (let i = 0; i < 2_000; i++) values.push((i % 1_000) + 1)
    for (let i = 1; i <= 1_000; i++) values.push(0.2 * Math.exp(i / 120))
    values.forEach((v, i) => w.record(v, T0 + (i % 20) * 1_000 + (i % 997)))
    const s = w.summary(T0 + 20_000)
    expect(s.count).toBe(values.length)
    for (const [q, got] of [
      [0.5, s.p50],
      [0.95, s.p95],
      [0.99, s.p99]
    ] as const) {
      const exact = quantile(values, q)
      expect(Math.abs(got - exact) / exact, `q${q}: ${got} vs ${exact}`).toBeLessThanOrEqual(0.1)
    }
  })

  it("a constant latency and very small and very large ones", () => {
    const w = new LatencyWindow(60)
    for (let i = 0; i < 1_000; i++) w.record(42, T0)
    const s = w.summary(T0)
    for (const p of [s.p50, s.p95, s.p99]) expect(Math.abs(p - 42) / 42).toBeLessThanOrEqual(0.1)
    const tiny = new LatencyWindow(60)
    tiny.record(0, T0)
    expect(tiny.summary(T0).p50).toBeGreaterThan(0)
    expect(tiny.summary(T0).p50).toBeLessThan(0.1)
    const empty = new LatencyWindow(60).summary(T0)
    expect(empty).toEqual({ count: 0, p50: 0, p95: 0, p99: 0 })
  })

  it("forgets samples older than the window", () => {
    const w = new LatencyWindow(60)
    w.record(1_000, T0)
    w.record(10, T0 + 30_000)
    expect(w.summary(T0 + 30_000).count).toBe(2)
    expect(w.summary(T0 + 59_999).count).toBe(2)
    // 60 s after the first one's second: gone; the second remains.
    const later = w.summary(T0 + 60_000)
    expect(later.count).toBe(1)
    expect(Math.abs(later.p99 - 10) / 10).toBeLessThanOrEqual(0.1)
    expect(w.summary(T0 + 90_000).count).toBe(0)
    expect(w.summary(T0 + 10 * 60_000)).toEqual({ count: 0, p50: 0, p95: 0, p99: 0 })
  })

  it("a second's slot is reused after the window turns: old counts do not leak into new ones", () => {
    const w = new LatencyWindow(60)
    for (let i = 0; i < 100; i++) w.record(500, T0)
    w.record(5, T0 + 60_000) // the same slot, a minute later
    const s = w.summary(T0 + 60_000)
    expect(s.count).toBe(1)
    expect(Math.abs(s.p50 - 5) / 5).toBeLessThanOrEqual(0.1)
  })

  it("fixed memory: a million samples over ten minutes keep only the last minute's", () => {
    const w = new LatencyWindow(60)
    for (let i = 0; i < 1_000_000; i++) w.record((i % 100) + 1, T0 + Math.floor(i * 0.6))
    const end = T0 + Math.floor(999_999 * 0.6)
    const s = w.summary(end)
    // 60 whole seconds of 1 sample per 0.6 ms, give or take the current second's part.
    expect(s.count).toBeGreaterThan(59 * 1_666)
    expect(s.count).toBeLessThanOrEqual(61 * 1_667)
  })
})

describe("Ring", () => {
  it("keeps the last `capacity` items, oldest first", () => {
    const r = new Ring<number>(3)
    expect(r.size).toBe(0)
    expect(r.toArray()).toEqual([])
    expect(r.last()).toBeUndefined()
    r.push(1)
    r.push(2)
    expect(r.toArray()).toEqual([1, 2])
    expect(r.last()).toBe(2)
    for (let i = 3; i <= 10; i++) {
      r.push(i)
      expect(r.size).toBe(Math.min(i, 3))
      expect(r.last()).toBe(i)
      expect(r.toArray()).toEqual([i - 2, i - 1, i].filter((n) => n >= 1))
    }
  })

  it("capacity 1, and a large ring pushed many times over", () => {
    const one = new Ring<string>(1)
    one.push("a")
    one.push("b")
    expect(one.toArray()).toEqual(["b"])
    expect(one.last()).toBe("b")
    const big = new Ring<number>(1000)
    for (let i = 0; i < 100_000; i++) big.push(i)
    expect(big.size).toBe(1000)
    const all = big.toArray()
    expect(all[0]).toBe(99_000)
    expect(all.at(-1)).toBe(99_999)
    expect(all.every((v, i) => v === 99_000 + i)).toBe(true)
    // toArray is a copy.
    all.length = 0
    expect(big.size).toBe(1000)
  })
})

describe("SampleRing", () => {
  const contents = (r: SampleRing) => Array.from({ length: r.size }, (_, i) => [r.atOf(r.slot(i)), r.valueOf(r.slot(i))])

  it("keeps the last `capacity` samples, oldest first, while its arrays grow", () => {
    const r = new SampleRing(5, 2)
    expect(r.size).toBe(0)
    expect(r.values()).toEqual([])
    expect(r.lastValue()).toBeUndefined()
    for (let i = 1; i <= 12; i++) {
      r.push(i * 10, i)
      expect(r.size).toBe(Math.min(i, 5))
      expect(r.lastValue()).toBe(i)
      const kept = Array.from({ length: Math.min(i, 5) }, (_, k) => i - Math.min(i, 5) + 1 + k)
      expect(r.values()).toEqual(kept)
      expect(contents(r)).toEqual(kept.map((v) => [v * 10, v]))
    }
  })

  it("capacity 1, NaN values, and a large ring pushed many times over", () => {
    const one = new SampleRing(1)
    one.push(1, 1)
    one.push(2, Number.NaN)
    expect(one.size).toBe(1)
    expect(one.lastValue()).toBeNaN()
    const big = new SampleRing(1000)
    for (let i = 0; i < 100_000; i++) big.push(i, i / 2)
    expect(big.size).toBe(1000)
    const all = big.values()
    expect(all.every((v, i) => v === (99_000 + i) / 2)).toBe(true)
    expect(big.atOf(big.slot(0))).toBe(99_000)
  })
})

describe("Monitor: failed checks in a service's history", () => {
  let monitor: Monitor | undefined
  afterEach(() => monitor?.stop())

  it("keep their error and no response time across the ring's wrap-around; answered ones keep theirs", () => {
    monitor = new Monitor()
    const svc = new FakeService(STORE_SCOPE, "flaky")
    monitor.inspect(svc.enter("healthy", "connected"))
    const total = LIMITS.checksPerService + 257
    for (let i = 0; i < total; i++) monitor.inspect(i % 3 === 0 ? svc.report(false, undefined, `down ${i}`) : svc.report(true, i))
    const { checks } = monitor.healthHistory("store", "flaky", 1)
    expect(checks).toHaveLength(LIMITS.checksPerService)
    checks.forEach((c, k) => {
      const i = total - LIMITS.checksPerService + k
      if (i % 3 === 0) expect(c).toMatchObject({ ok: false, response_time_ms: null, error: `down ${i}` })
      else expect(c).toMatchObject({ ok: true, response_time_ms: i, error: null })
    })
    // Only answered checks are response-time samples.
    const samples = monitor.responseTimes()[0]!
    expect(samples.last).toBe(total - 1)
    expect(samples.samples.every((ms) => ms % 3 !== 0)).toBe(true)
  })
})

describe("BoundedMap", () => {
  it("forgets its least recently used keys beyond capacity; updating a key keeps the size", () => {
    const m = new BoundedMap<string, number>(3)
    m.set("a", 1).set("b", 2).set("c", 3)
    m.set("b", 20) // existing key: nothing evicted, now the most recently used
    expect([...m.keys()]).toEqual(["a", "c", "b"])
    expect(m.get("a")).toBe(1) // read: the most recently used
    expect(m.get("missing")).toBeUndefined()
    expect([...m.keys()]).toEqual(["c", "b", "a"])
    m.set("d", 4)
    expect([...m.keys()]).toEqual(["b", "a", "d"])
    expect(m.has("c")).toBe(false)
    expect(m.get("b")).toBe(20)
    m.delete("a")
    m.set("e", 5) // room after a delete: nothing evicted
    expect([...m.keys()]).toEqual(["d", "b", "e"])
    // The size after every set, one assertion on the largest (not 10,000 assertions).
    let largest = 0
    for (let i = 0; i < 10_000; i++) {
      m.set(`k${i}`, i)
      largest = Math.max(largest, m.size)
    }
    expect(largest).toBe(3)
    expect([...m.entries()]).toEqual([
      ["k9997", 9997],
      ["k9998", 9998],
      ["k9999", 9999]
    ])
  })
})

describe("ToolRecords in memory", () => {
  let dir: string | undefined
  afterEach(() => {
    if (dir) rmSync(dir, { recursive: true, force: true })
    dir = undefined
  })

  it("20,000 appended records: the in-memory list stays bounded and holds the newest", { timeout: 30_000 }, async () => {
    dir = mkdtempSync(join(tmpdir(), "mcp-store-bounded-"))
    const memoryLimit = 200
    const records = await ToolRecords.open(join(dir, "mcp.json"), { maxFileSizeMb: -1, retentionDays: -1, memoryLimit })
    const outcomes: Outcome[] = ["success", "tool_error", "success", "unavailable"]
    let longest = 0
    try {
      // 100 times memoryLimit: the list is trimmed some 400 times (every memoryLimit / 4 appends).
      const TOTAL = 20_000
      const BATCH = 2_000
      for (let start = 0; start < TOTAL; start += BATCH) {
        const pending: Array<Promise<unknown>> = []
        for (let i = start; i < start + BATCH; i++) {
          pending.push(
            records.append({
              scope: i % 2 === 0 ? "store" : "agent",
              agent_id: i % 2 === 0 ? null : "a1",
              service_name: `svc${i % 5}`,
              tool_name: "echo",
              params: { i },
              result: i,
              outcome: outcomes[i % outcomes.length]!,
              error: null,
              duration_ms: (i % 50) + 1,
              trace_id: `t${i}`
            })
          )
          longest = Math.max(longest, records.inMemory().length)
        }
        await Promise.all(pending)
      }
      // "The newest `memoryLimit` records" give or take the slack that spares a copy per append.
      expect(longest).toBeLessThanOrEqual(Math.ceil(memoryLimit * 1.25))
      const kept = records.inMemory()
      expect(kept.length).toBeGreaterThanOrEqual(memoryLimit)
      expect(kept.length).toBeLessThanOrEqual(Math.ceil(memoryLimit * 1.25))
      expect(kept.at(-1)!.trace_id).toBe(`t${TOTAL - 1}`)
      expect(kept.every((r, i) => r.trace_id === `t${TOTAL - kept.length + i}`)).toBe(true)
      // The aggregates still cover every record.
      expect(records.summary().total_executions).toBe(TOTAL)
      expect((await records.query({ limit: 5 })).executions.map((r) => r.trace_id)).toEqual([1, 2, 3, 4, 5].map((k) => `t${TOTAL - k}`))
    } finally {
      await records.close()
    }
  })
})
