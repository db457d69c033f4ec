/**
 * The lifecycle lines (src/runtime/lifecycle-log.ts) of a service actor on a SimulatedClock: each
 * status change one line at its level, retries that change no status at debug, and a flapping
 * service folded: past FLAP_LINES changes in a minute, one WARN, the rest at debug, then a summary.
 */
import { afterEach, describe, expect, it, vi } from "vitest"
import { FLAP_LINES, LifecycleLog } from "../../src/runtime/lifecycle-log.js"
import { captureLogs, type CapturedLogs } from "../../src/logging/log.js"
import { createActor } from "xstate"
import { STORE_SCOPE } from "../../src/domain/service-definition.js"
import { defaultMonitoring } from "../../src/domain/settings.js"
import { replicatedServiceMachine, viewOf } from "../../src/machines/replicated.js"
import { initialServiceContext, serviceMachine, statusOf } from "../../src/machines/service.js"
import { createFakes, DEFINITION, fakeConnection, flush, startService, tool, type ServiceHarnessOptions } from "../support/index.js"

describe("lifecycle lines of one service", () => {
  let captured: CapturedLogs | undefined
  afterEach(() => {
    captured?.restore()
    vi.useRealTimers()
  })

  /** A service watched by a LifecycleLog on the service's own clock. */
  const watched = (settings: ServiceHarnessOptions["settings"] = {}) => {
    let now = () => 0
    const lifecycle = new LifecycleLog(() => now())
    const h = startService({ name: "svc", settings, inspect: lifecycle.inspect })
    now = () => h.clock.now()
    return { h, lifecycle }
  }

  it("one line per status change, at its level; failed attempts that change no status at debug", async () => {
    captured = captureLogs({ level: "debug" })
    const { h, lifecycle } = watched()
    await h.connectFail("ECONNREFUSED")
    await h.advance(1000)
    await h.connectFail("ECONNREFUSED again")
    await h.advance(2000)
    await h.connectOk([tool("a"), tool("b")])
    lifecycle.stop()
    const lines = captured.lines.map((l) => l.replace(/^\S+Z /, ""))
    expect(lines).toEqual([
      "DEBUG store/svc connecting",
      "WARN  store/svc reconnecting: ECONNREFUSED (attempt 1, next in 1 s)",
      "DEBUG store/svc reconnection attempt 1 failed: ECONNREFUSED again (next in 2 s)",
      "INFO  store/svc healthy again (2 tools, down 3 s)"
    ])
  })

  it("a refresh that changes no names: a debug line, with the server's ttlMs when it gave one", async () => {
    captured = captureLogs({ level: "debug" })
    const { h, lifecycle } = watched()
    h.lastConnect().resolve({ connection: fakeConnection(), tools: [tool("a")], toolsTtlMs: 60_000 })
    await h.advance(0)
    await h.advance(60_000)
    h.lastList().resolve({ tools: [tool("a")], ttlMs: 60_000 })
    await h.advance(0)
    lifecycle.stop()
    expect(captured.lines.at(-1)).toMatch(/ DEBUG store\/svc tools refreshed: 1 tools, names unchanged; the server's ttlMs 60 s$/)
  })

  it("a flapping service: every change counted, past the budget at debug after one WARN, then a summary", async () => {
    vi.useFakeTimers({ toFake: ["setTimeout", "clearTimeout"] })
    captured = captureLogs({ level: "info" })
    const { h, lifecycle } = watched()
    await h.connectOk()
    for (let i = 0; i < 8; i++) {
      h.send({ type: "TRANSPORT_CLOSED", reason: `died ${i}` })
      await h.advance(1000)
      await h.connectOk()
    }
    // 17 changes: the first FLAP_LINES as lines, then one WARN; the other 7 at debug (not shown at info).
    expect(captured.lines).toHaveLength(FLAP_LINES + 1)
    expect(captured.lines.at(-1)).toMatch(/ WARN  store\/svc is flapping: 10 status changes within 60 s/)
    vi.advanceTimersByTime(60_000)
    expect(captured.lines).toHaveLength(FLAP_LINES + 2)
    expect(captured.lines.at(-1)).toMatch(/ WARN  store\/svc flapped: 7 more status changes in the last minute \(logged at debug\); now healthy$/)
    // A new window: its changes are lines again.
    h.send({ type: "TRANSPORT_CLOSED", reason: "died again" })
    await h.advance(0)
    expect(captured.lines.at(-1)).toMatch(/ WARN  store\/svc reconnecting: died again \(attempt 1, next in 1 s\)$/)
    lifecycle.stop()
  })

  it("replica mode: no line for what a mirrored service did elsewhere; taking it over logs from then on", async () => {
    captured = captureLogs({ level: "debug" })
    const lifecycle = new LifecycleLog()
    const fakes = createFakes()
    const machine = replicatedServiceMachine.provide({ actors: { service: serviceMachine.provide({ actors: fakes.actors }) } })
    const input = { scope: STORE_SCOPE, name: "svc", definition: DEFINITION, settings: defaultMonitoring({}) }
    const actor = createActor(machine, { input, id: "service:store:svc", inspect: lifecycle.inspect }).start()
    // The owner elsewhere connected: shown here, not logged here.
    const elsewhere = { ...initialServiceContext(input), status: "healthy" as const, tools: [tool("a")], toolsVersion: 1, transitions: [{ from: "initializing" as const, to: "healthy" as const, at: 1, reason: "connected" }] }
    actor.send({ type: "VIEW", view: viewOf(elsewhere, "healthy"), owner: "other" })
    expect(statusOf(actor.getSnapshot())).toBe("healthy")
    expect(captured.lines).toEqual([])
    actor.send({ type: "OWN", owner: "me" })
    fakes.calls.connect[0]?.resolve({ connection: fakeConnection(), tools: [tool("a"), tool("b")] })
    await flush()
    const lines = captured.lines.map((l) => l.replace(/^\S+Z /, "").replace(/, \d+ ms\)$/, ")"))
    expect(lines).toEqual(["DEBUG store/svc connecting", "INFO  store/svc healthy (2 tools)"])
    lifecycle.stop()
    actor.stop()
  })
})
