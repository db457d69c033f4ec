// Alerts shared by replicas (SharedAlerts) against a real redis-server: two monitors, each with its
// SharedAlerts attached, see each other's alerts; the replica that owns a service now resolves the
// alerts its former owner raised; a held tool's alert is resolved as in a single process; a
// resolution is published even before its raising is read back, and retried; a flood stays within
// the stream's and each replica's caps, and a huge message is cut.
import type { InspectionEvent } from "xstate"
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest"
import { MESSAGE_LIMIT, SharedAlerts, STREAM_LIMIT } from "../../src/monitoring/shared-alerts.js"
import { clusterKey } from "../../src/redis/key-names.js"
import type { Redis } from "../../src/redis/connection.js"
import { STORE_SCOPE } from "../../src/domain/service-definition.js"
import type { Transition } from "../../src/machines/service.js"
import type { ToolChange } from "../../src/domain/pin-rules.js"
import { LIMITS, Monitor, TOOL_HELD_ALERT, type Alert } from "../../src/monitoring/monitor.js"
import { eventually, hasRedisServer, startRedisServer, type RedisServer } from "../support/index.js"

let redis: RedisServer
const closing: Array<{ close(): unknown } | { stop(): unknown }> = []
let seq = 0

const connect = (): Promise<Redis> => redis.connect()
/** A replica's monitor with the cluster's alerts attached. */
const replica = async (cluster: string, runs?: (scope: string, name: string) => boolean) => {
  const monitor = new Monitor()
  const shared = await SharedAlerts.open({ client: await connect(), cluster })
  shared.attach(monitor, runs)
  closing.push(shared, monitor)
  return { monitor, shared }
}
/** What XState's inspection shows the monitor when a service actor's transitions grow. */
const transitions = (monitor: Monitor, actor: object, name: string, all: ReadonlyArray<Transition>) =>
  monitor.inspect({
    type: "@xstate.snapshot",
    actorRef: Object.assign(actor, { id: `service:${name}` }),
    snapshot: { context: { scope: STORE_SCOPE, name, transitions: all, toolsVersion: 0, catalogVersion: 0 } }
  } as unknown as InspectionEvent)
/** The same with tool changes and held tools (docs/tool-pins.md): an unchanged list keeps its identity, as in an owner's views. */
const view = (monitor: Monitor, actor: object, name: string, all: ReadonlyArray<Transition>, toolChanges: ReadonlyArray<ToolChange>, heldTools: ReadonlyArray<ToolChange>) =>
  monitor.inspect({
    type: "@xstate.snapshot",
    actorRef: Object.assign(actor, { id: `service:${name}` }),
    snapshot: { context: { scope: STORE_SCOPE, name, transitions: all, toolsVersion: 0, catalogVersion: 0, toolChanges, heldTools } }
  } as unknown as InspectionEvent)
const next = (shared: SharedAlerts, match: (a: Alert) => boolean) =>
  new Promise<Alert>((resolve) => {
    const off = shared.onAlert((a) => {
      if (match(a)) {
        off()
        resolve({ ...a })
      }
    })
  })

beforeAll(async () => {
  if (hasRedisServer) redis = await startRedisServer()
})
afterEach(async () => {
  for (const c of closing.splice(0)) await ("close" in c ? c.close() : c.stop())
  redis?.disconnectAll()
})
afterAll(() => redis?.stop())

describe.skipIf(!hasRedisServer)("alerts of a cluster", () => {
  it("are listed by every replica, and resolved by whichever owns the service now", async () => {
    const cluster = `alerts-${seq++}`
    const a = await replica(cluster)
    const b = await replica(cluster)
    const raisedOnB = next(b.shared, (x) => !x.resolved)
    const down: Transition[] = [{ from: "healthy", to: "unreachable", at: Date.now(), reason: "connection refused" }]
    transitions(a.monitor, {}, "svc", down)
    expect(await raisedOnB).toMatchObject({ level: "error", service_name: "svc", scope: "store", message: "connection refused", resolved: false })
    expect(b.monitor.alerts()).toHaveLength(1)
    // The service moved to b, where it is healthy again: a's alert is resolved on both.
    const resolvedOnA = next(a.shared, (x) => x.resolved)
    transitions(b.monitor, {}, "svc", [{ from: "reconnecting", to: "healthy", at: Date.now(), reason: "connected" }])
    expect(await resolvedOnA).toMatchObject({ service_name: "svc", resolved: true })
    // Each replica applies what it reads from the stream in its own time.
    expect(await eventually(() => [a, b].every(({ monitor }) => monitor.alerts()[0]?.resolved === true), 5_000)).toBe(true)
    for (const { monitor } of [a, b]) {
      expect(monitor.alerts()).toHaveLength(1)
      expect(monitor.alerts()[0]).toMatchObject({ resolved: true, resolved_at: expect.any(String) })
    }
    // A replica started later lists it too.
    const c = await replica(cluster)
    expect(c.monitor.alerts()).toMatchObject([{ service_name: "svc", resolved: true }])
  })

  it("are raised once, by the replica that runs the service, and reach every replica's live listeners once", async () => {
    const cluster = `alerts-${seq++}`
    // Both replicas see the service's transitions (replica mode shows every service everywhere); a runs it.
    const a = await replica(cluster, () => true)
    const b = await replica(cluster, () => false)
    const heard = { a: [] as Alert[], b: [] as Alert[] }
    a.monitor.subscribe((e) => e.type === "alert" && heard.a.push(e.alert))
    b.monitor.subscribe((e) => e.type === "alert" && heard.b.push(e.alert))
    const down: Transition[] = [{ from: "healthy", to: "unreachable", at: Date.now(), reason: "connection refused" }]
    const onA = {}
    transitions(a.monitor, onA, "svc", down)
    transitions(b.monitor, {}, "svc", down)
    expect(await eventually(() => heard.b.length === 1 && heard.a.length === 1, 5_000)).toBe(true)
    // One alert in the cluster, the same one everywhere.
    for (const { monitor } of [a, b]) expect(await eventually(() => monitor.alerts().length === 1, 5_000)).toBe(true)
    expect(heard.b[0]?.alert_id).toBe(heard.a[0]?.alert_id)
    expect(a.monitor.alerts()[0]?.alert_id).toBe(heard.a[0]?.alert_id)
    // Healthy again where it runs: resolved once, and b's listeners hear of it.
    transitions(a.monitor, onA, "svc", [...down, { from: "unreachable", to: "healthy", at: Date.now(), reason: "connected" }])
    expect(await eventually(() => heard.b.some((x) => x.resolved), 5_000)).toBe(true)
    expect(await eventually(() => b.monitor.alerts()[0]?.resolved === true, 5_000)).toBe(true)
    const entries = await (await connect()).xLen(clusterKey(cluster, "alerts"))
    expect(entries).toBe(2)
  })

  it("of held tools: resolved everywhere once none is held, and not by the service being healthy again", async () => {
    const cluster = `alerts-${seq++}`
    const a = await replica(cluster, () => true)
    const b = await replica(cluster, () => false)
    const held: ToolChange = { tool: "t", change: "new", held: true, changed_fields: [], diff: {}, digest: "d" } as unknown as ToolChange
    const onA = {}
    const up: Transition[] = [{ from: "initializing", to: "healthy", at: Date.now(), reason: "connected" }]
    view(a.monitor, onA, "svc", up, [], [])
    const changes = [held]
    view(a.monitor, onA, "svc", up, changes, [held])
    const degraded = [...up, { from: "healthy", to: "warning", at: Date.now(), reason: "slow" } as const]
    view(a.monitor, onA, "svc", degraded, changes, [held])
    expect(await eventually(() => b.monitor.alerts().length === 2, 5_000)).toBe(true)
    // Healthy again: the degradation's alert is resolved, the held tool's is not (as in a single process).
    const healthy = [...degraded, { from: "warning", to: "healthy", at: Date.now(), reason: "fast again" } as const]
    view(a.monitor, onA, "svc", healthy, changes, [held])
    const isHeld = (x: Alert) => x.title.startsWith(`${TOOL_HELD_ALERT}:`)
    expect(await eventually(() => b.monitor.alerts().some((x) => !isHeld(x) && x.resolved), 5_000)).toBe(true)
    const entries = () => redis.clients[0]!.xLen(clusterKey(cluster, "alerts"))
    // The resolution read back (the last entry): the held tool's alert is still open on every replica.
    expect(await eventually(async () => (await entries()) === 3 && a.monitor.alerts().some((x) => !isHeld(x) && x.resolved), 5_000)).toBe(true)
    for (const { monitor } of [a, b]) expect(monitor.alerts().find(isHeld)).toMatchObject({ resolved: false })
    // Accepted: no tool held any more, its alert is resolved on every replica.
    view(a.monitor, onA, "svc", healthy, changes, [])
    for (const { monitor } of [a, b]) expect(await eventually(() => monitor.alerts().every((x) => x.resolved), 5_000)).toBe(true)
  })

  it("are resolved when the service is healthy again before their raising was read back", async () => {
    const cluster = `alerts-${seq++}`
    const a = await replica(cluster, () => true)
    const b = await replica(cluster, () => false)
    const down: Transition[] = [{ from: "healthy", to: "unreachable", at: Date.now(), reason: "connection refused" }]
    const onA = {}
    // Both in one turn: the raising is not read back from the stream yet when the resolution is published.
    transitions(a.monitor, onA, "svc", down)
    transitions(a.monitor, onA, "svc", [...down, { from: "unreachable", to: "healthy", at: Date.now(), reason: "connected" }])
    for (const { monitor } of [a, b]) expect(await eventually(() => monitor.alerts().length === 1 && monitor.alerts()[0]!.resolved, 5_000)).toBe(true)
  })

  /** One replica with an alert raised for `svc` (unreachable), whose Redis then fails the next addition once. */
  const failingOnce = async () => {
    const client = await connect()
    const monitor = new Monitor()
    const shared = await SharedAlerts.open({ client, cluster: `alerts-${seq++}` })
    shared.attach(monitor)
    closing.push(shared, monitor)
    const down: Transition[] = [{ from: "healthy", to: "unreachable", at: Date.now(), reason: "connection refused" }]
    const onA = {}
    transitions(monitor, onA, "svc", down)
    expect(await eventually(() => shared.alerts().length === 1, 5_000)).toBe(true)
    const add = client.xAdd.bind(client)
    const failing = { left: 1 }
    Object.assign(client, { xAdd: (...args: Parameters<typeof add>) => (failing.left-- > 0 ? Promise.reject(new Error("connection lost")) : add(...args)) })
    return { monitor, shared, down, onA, failing }
  }

  it("a resolution that could not be added to the stream is added again", async () => {
    const { monitor, shared, down, onA, failing } = await failingOnce()
    transitions(monitor, onA, "svc", [...down, { from: "unreachable", to: "healthy", at: Date.now(), reason: "connected" }])
    expect(await eventually(() => shared.alerts()[0]?.resolved === true, 5_000)).toBe(true)
    expect(failing.left).toBe(-1)
  })

  it("a resolution added again after a newer raise leaves the newer alert open", async () => {
    const { monitor, shared, down, onA } = await failingOnce()
    const healthy = [...down, { from: "unreachable", to: "healthy", at: Date.now(), reason: "connected" } as const]
    transitions(monitor, onA, "svc", healthy)
    await new Promise((resolve) => setTimeout(resolve, 5))
    // Down again before the resolution is sent again: its alert is raised after the resolution was made.
    transitions(monitor, onA, "svc", [...healthy, { from: "healthy", to: "unreachable", at: Date.now(), reason: "refused again" }])
    expect(await eventually(() => shared.alerts().length === 2 && shared.alerts()[1]?.resolved === true, 5_000)).toBe(true)
    await new Promise((resolve) => setTimeout(resolve, 300))
    expect(shared.alerts()[0]).toMatchObject({ resolved: false })
  })

  it("stays within its caps under a flood, and cuts a huge message", async () => {
    const cluster = `alerts-${seq++}`
    const a = await replica(cluster)
    const b = await replica(cluster)
    const base = { level: "warning", title: "Service degraded", scope: "store", timestamp: new Date().toISOString(), resolved: false, resolved_at: null } as const
    const count = STREAM_LIMIT + 500
    const last = next(b.shared, (x) => x.alert_id === `flood-${count - 1}`)
    // Sent together: one connection keeps their order.
    await Promise.all(
      Array.from({ length: count }, (_, i) =>
        a.shared.publish({ ...base, alert_id: `flood-${i}`, service_name: `s${i}`, message: i === count - 1 ? "x".repeat(1_000_000) : "slow" })
      )
    )
    expect((await last).message).toHaveLength(MESSAGE_LIMIT)
    // MAXLEN ~ trims whole nodes: at most one node (100 entries) over.
    expect(await redis.clients[0]!.xLen(clusterKey(cluster, "alerts"))).toBeLessThanOrEqual(STREAM_LIMIT + 100)
    expect(b.monitor.alerts()).toHaveLength(LIMITS.alerts)
    expect(b.monitor.alerts()[0]?.alert_id).toBe(`flood-${count - 1}`)
  })
})
