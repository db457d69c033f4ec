/**
 * The service machine (src/machines/service.ts) against docs/lifecycle.md: one test (or group) per
 * row of the transitions table, plus tool refresh and health-check scheduling. Each test drives the
 * machine with fake side-effect actors (test/support/machines.ts) on a SimulatedClock, with fixed
 * `now` (the clock) and `random` (0.5 unless the test is about jitter or offsets).
 */
import { describe, expect, it } from "vitest"
import { STORE_SCOPE, type Status } from "../../src/domain/service-definition.js"
import { defaultMonitoring, type MonitoringSettings } from "../../src/domain/settings.js"
import { listRefreshMs, MIN_LIST_TTL_MS } from "../../src/machines/service.js"
import { EMPTY_CATALOG } from "../../src/mcp/types.js"
import {
  DEFINITION,
  fakeConnection,
  startHealthy,
  startService,
  startWarning,
  tool,
  type ServiceHarness,
  type ServiceHarnessOptions
} from "../support/index.js"

const SECOND = 1000
const HOUR = 3_600_000

/** Delay until the next reconnection attempt, as the machine scheduled it. */
const retryDelay = (h: ServiceHarness): number => {
  const at = h.ctx().nextRetryAt
  if (at === undefined) throw new Error("no retry scheduled")
  return at - h.clock.now()
}

/** Expects the next call of `kind` (a connect attempt, or a tool list) exactly `ms` from now (not 1 ms earlier). */
const expectCallAfter = async (h: ServiceHarness, kind: "connect" | "list", ms: number) => {
  const before = h.calls[kind].length
  await h.advance(ms - 1)
  expect(h.calls[kind].length, `no ${kind} before ${ms} ms`).toBe(before)
  await h.advance(1)
  expect(h.calls[kind].length, `a ${kind} after ${ms} ms`).toBe(before + 1)
}
/** Expects the next connect attempt exactly `ms` from now. */
const expectAttemptAfter = (h: ServiceHarness, ms: number) => expectCallAfter(h, "connect", ms)

/** A service in `reconnecting` after its first connection failed (first attempt 1 s away at random 0.5). */
const startReconnecting = async (options: ServiceHarnessOptions = {}) => {
  const h = startService(options)
  await h.connectFail()
  expect(h.status()).toBe("reconnecting")
  return h
}

/** A service in `unreachable` after exhausting its reconnection attempts (max 1 attempt). */
const startUnreachable = async (options: ServiceHarnessOptions = {}) => {
  const h = await startReconnecting({ ...options, settings: { max_reconnect_attempts: 1, ...options.settings } })
  await h.advance(retryDelay(h))
  await h.connectFail()
  expect(h.status()).toBe("unreachable")
  return h
}

describe("(new) -> initializing: added", () => {
  it("starts initializing, records the first transition and opens a connection", () => {
    const h = startService()
    expect(h.status()).toBe("initializing")
    expect(h.ctx().transitions).toEqual([{ from: null, to: "initializing", at: 1_000_000, reason: "added" }])
    expect(h.calls.connect).toHaveLength(1)
    expect(h.lastConnect().input).toEqual({
      scope: STORE_SCOPE,
      name: "svc",
      definition: DEFINITION,
      timeoutMs: 60 * SECOND,
      heldTools: []
    })
    expect(h.errors).toEqual([])
  })
})

describe("initializing -> healthy: connected and tools listed", () => {
  it("keeps the connection, the tools, and holds the connection", async () => {
    const h = startService()
    await h.advance(250)
    const connection = await h.connectOk([tool("a"), tool("b")])
    expect(h.status()).toBe("healthy")
    const ctx = h.ctx()
    expect(ctx.connection).toBe(connection)
    expect(ctx.tools.map((t) => t.name)).toEqual(["a", "b"])
    expect(ctx.toolsVersion).toBe(1)
    expect(ctx.toolsUpdatedAt).toBe(1_000_250)
    expect(ctx.transitions.at(-1)).toEqual({ from: "initializing", to: "healthy", at: 1_000_250, reason: "connected" })
    expect(h.calls.hold).toHaveLength(1)
    expect(h.lastHold().input).toEqual({ connection, watchTools: true })
    expect(h.lastHold().released).toBe(false)
  })
})

describe("initializing -> reconnecting: connect failed, or no connection within the initialization time-out", () => {
  it("connect failed -> reconnecting, first attempt 1 s later", async () => {
    const h = startService()
    await h.connectFail("ECONNREFUSED")
    expect(h.status()).toBe("reconnecting")
    expect(h.ctx().lastError).toBe("ECONNREFUSED")
    expect(h.lastTransition()).toMatchObject({ from: "initializing", to: "reconnecting", reason: "ECONNREFUSED" })
    expect(h.ctx().connection).toBeUndefined()
    expect(h.ctx().reconnectAttempts).toBe(0)
    expect(retryDelay(h)).toBe(1000)
    await expectAttemptAfter(h, 1000)
    expect(h.status()).toBe("reconnecting")
  })

  it("no connection within initialization_timeout_seconds -> reconnecting (the attempt is aborted)", async () => {
    const h = startService({ settings: { initialization_timeout_seconds: 20 } })
    const attempt = h.lastConnect()
    await h.advance(20 * SECOND - 1)
    expect(h.status()).toBe("initializing")
    expect(attempt.signal.aborted).toBe(false)
    await h.advance(1)
    expect(h.status()).toBe("reconnecting")
    expect(attempt.signal.aborted).toBe(true)
    expect(h.ctx().lastError).toBe("no connection within 20 s")
    expect(h.lastTransition()).toMatchObject({ from: "initializing", to: "reconnecting", reason: "no connection within 20 s" })
    // A late success of the aborted attempt changes nothing.
    attempt.resolve({ connection: fakeConnection(), tools: [] })
    await h.advance(0)
    expect(h.status()).toBe("reconnecting")
    expect(h.calls.hold).toHaveLength(0)
  })
})

describe("initializing -> unreachable when reconnection is off (enable_reconnection false)", () => {
  it("connect failed -> unreachable, and no retry ever happens", async () => {
    const h = startService({ settings: { enable_reconnection: false } })
    await h.connectFail("refused")
    expect(h.status()).toBe("unreachable")
    expect(h.ctx().lastError).toBe("refused")
    expect(h.ctx().nextRetryAt).toBeUndefined()
    for (let i = 0; i < 5; i++) await h.advance(300 * SECOND)
    await h.advance(24 * HOUR)
    expect(h.calls.connect).toHaveLength(1)
    expect(h.status()).toBe("unreachable")
  })

  it("no connection within the time-out -> unreachable, and no retry", async () => {
    const h = startService({ settings: { enable_reconnection: false } })
    await h.advance(60 * SECOND)
    expect(h.status()).toBe("unreachable")
    await h.advance(24 * HOUR)
    expect(h.calls.connect).toHaveLength(1)
  })

  it("a restart request still reconnects it", async () => {
    const h = startService({ settings: { enable_reconnection: false } })
    await h.connectFail()
    h.send({ type: "RESTART" })
    expect(h.status()).toBe("initializing")
    expect(h.calls.connect).toHaveLength(2)
  })
})

describe("healthy -> healthy: health check answered within slow_response_ms", () => {
  it("stays healthy and records the check", async () => {
    const h = await startHealthy()
    const check = await h.nextCheck(15 * SECOND)
    expect(check.input).toEqual({ connection: h.ctx().connection, timeoutMs: 5 * SECOND })
    await h.report({ ok: true, responseTimeMs: 12 })
    expect(h.status()).toBe("healthy")
    expect(check.stopped).toBe(true)
    expect(h.ctx()).toMatchObject({ responseTimeMs: 12, lastHealthCheckAt: h.clock.now(), consecutiveFailures: 0 })
    // exactly slow_response_ms is still fast
    await h.nextCheck(30 * SECOND)
    await h.report({ ok: true, responseTimeMs: 3000 })
    expect(h.status()).toBe("healthy")
    expect(h.ctx().transitions.map((t) => t.to)).toEqual(["initializing", "healthy"])
  })

  it("a report from elsewhere (a tool call) during a check withdraws the check: its late answer is not counted", async () => {
    const h = await startHealthy()
    const check = await h.nextCheck(15 * SECOND)
    h.send({ type: "HEALTH_REPORT", ok: true, responseTimeMs: 7 })
    expect(check.stopped).toBe(true)
    check.sendBack({ type: "HEALTH_REPORT", ok: false, error: "late" })
    await h.advance(0)
    expect(h.status()).toBe("healthy")
    expect(h.ctx()).toMatchObject({ responseTimeMs: 7, consecutiveFailures: 0 })
    // the interval starts again from the report, and the next check is a new one
    await h.advance(30 * SECOND - 1)
    expect(h.calls.check).toHaveLength(1)
    const next = await h.nextCheck(1)
    expect(next).not.toBe(check)
    expect(next.stopped).toBe(false)
  })

  it("a report from elsewhere between checks starts the interval again", async () => {
    const h = await startHealthy()
    await h.advance(10 * SECOND)
    h.send({ type: "HEALTH_REPORT", ok: true, responseTimeMs: 3 })
    await h.advance(30 * SECOND - 1)
    expect(h.calls.check).toHaveLength(0)
    await h.nextCheck(1)
    // in warning too
    await h.report({ ok: false, error: "down" })
    expect(h.status()).toBe("warning")
    await h.advance(5 * SECOND)
    h.send({ type: "HEALTH_REPORT", ok: true, responseTimeMs: 4000 })
    expect(h.status()).toBe("warning")
    await h.advance(10 * SECOND - 1)
    expect(h.calls.check).toHaveLength(1)
    await h.nextCheck(1)
    expect(h.ctx().transitions.map((t) => t.to)).toEqual(["initializing", "healthy", "warning"])
  })

  it("checks run one at a time, on the connection the holder owns", async () => {
    const h = await startHealthy()
    for (let i = 0; i < 3; i++) {
      const check = await h.nextCheck(30 * SECOND)
      expect(h.calls.check.filter((c) => !c.stopped)).toEqual([check])
      expect(check.input.connection).toBe(h.lastHold().input.connection)
      await h.report({ ok: true, responseTimeMs: 1 })
    }
    expect(h.calls.hold).toHaveLength(1)
    expect(h.actor.getSnapshot().value).toEqual({ connected: { health: { healthy: "idle" }, tools: "idle", catalog: "idle" } })
  })
})

describe("healthy -> warning: one failed health check, or an answer slower than slow_response_ms", () => {
  it("one failed check -> warning", async () => {
    const h = await startHealthy()
    await h.nextCheck(15 * SECOND)
    await h.report({ ok: false, error: "ping timed out" })
    expect(h.status()).toBe("warning")
    expect(h.ctx()).toMatchObject({ consecutiveFailures: 1, lastError: "ping timed out" })
    expect(h.lastTransition()).toMatchObject({ from: "healthy", to: "warning", reason: "health check failed: ping timed out" })
    expect(h.lastHold().released).toBe(false)
  })

  it("a slow answer -> warning", async () => {
    const h = await startHealthy()
    await h.nextCheck(15 * SECOND)
    await h.report({ ok: true, responseTimeMs: 3001 })
    expect(h.status()).toBe("warning")
    expect(h.ctx()).toMatchObject({ consecutiveFailures: 0, responseTimeMs: 3001 })
    expect(h.lastTransition()).toMatchObject({ from: "healthy", to: "warning", reason: "slow response: 3001 ms" })
  })

  it("a tool call failing at the transport level (a HEALTH_REPORT from outside) counts as a failed check", async () => {
    const h = await startHealthy()
    h.send({ type: "HEALTH_REPORT", ok: false, error: "fetch failed" })
    expect(h.status()).toBe("warning")
    expect(h.ctx().consecutiveFailures).toBe(1)
  })
})

describe("healthy, warning -> reconnecting: transport closed", () => {
  it("from healthy: the held connection is released and dropped", async () => {
    const h = await startHealthy()
    const hold = h.lastHold()
    hold.sendBack({ type: "TRANSPORT_CLOSED", reason: "transport closed: process exited (code 1)" })
    expect(h.status()).toBe("reconnecting")
    expect(hold.released).toBe(true)
    expect(h.ctx().connection).toBeUndefined()
    expect(h.ctx().lastError).toBe("transport closed: process exited (code 1)")
    expect(h.lastTransition()).toMatchObject({ from: "healthy", to: "reconnecting", reason: "transport closed: process exited (code 1)" })
    expect(retryDelay(h)).toBe(1000)
    await expectAttemptAfter(h, 1000)
  })

  it("from warning (a pending check is stopped too)", async () => {
    const h = await startWarning()
    const check = await h.nextCheck(10 * SECOND)
    h.lastHold().sendBack({ type: "TRANSPORT_CLOSED", reason: "stream ended" })
    expect(h.status()).toBe("reconnecting")
    expect(check.stopped).toBe(true)
    expect(h.lastHold().released).toBe(true)
    expect(h.lastTransition()).toMatchObject({ from: "warning", to: "reconnecting", reason: "stream ended" })
  })

  it("session expired (TRANSPORT_CLOSED immediate: true) reconnects with 0 delay", async () => {
    const h = await startHealthy()
    const check = await h.nextCheck(15 * SECOND)
    // what the runtime's connection holder sends when the ping finds HTTP 404
    check.sendBack({ type: "TRANSPORT_CLOSED", reason: "session expired: 404", immediate: true })
    expect(h.status()).toBe("reconnecting")
    expect(retryDelay(h)).toBe(0)
    await h.advance(0)
    expect(h.calls.connect).toHaveLength(2)
    await h.connectOk()
    expect(h.status()).toBe("healthy")
    expect(h.ctx().immediateRetry).toBe(false)
  })

  it("transport closed with reconnection off -> unreachable", async () => {
    const h = await startHealthy({ settings: { enable_reconnection: false } })
    h.lastHold().sendBack({ type: "TRANSPORT_CLOSED", reason: "gone" })
    expect(h.status()).toBe("unreachable")
    expect(h.lastHold().released).toBe(true)
    await h.advance(HOUR)
    expect(h.calls.connect).toHaveLength(1)
  })

  it("a late event from a released connection is ignored", async () => {
    const h = await startHealthy()
    const old = h.lastHold()
    old.sendBack({ type: "TRANSPORT_CLOSED", reason: "gone" })
    await h.advance(1000)
    await h.connectOk()
    expect(h.status()).toBe("healthy")
    old.sendBack({ type: "TRANSPORT_CLOSED", reason: "gone again" })
    expect(h.status()).toBe("healthy")
    expect(h.lastHold().released).toBe(false)
  })
})

describe("warning -> healthy: health check answered fast", () => {
  it("goes back to healthy and checks again after health_check_seconds", async () => {
    const h = await startWarning()
    await h.nextCheck(10 * SECOND)
    await h.report({ ok: true, responseTimeMs: 20 })
    expect(h.status()).toBe("healthy")
    expect(h.ctx().consecutiveFailures).toBe(0)
    expect(h.lastTransition()).toMatchObject({ from: "warning", to: "healthy", reason: "health check answered" })
    const before = h.calls.check.length
    await h.advance(30 * SECOND - 1)
    expect(h.calls.check.length).toBe(before)
    await h.advance(1)
    expect(h.calls.check.length).toBe(before + 1)
  })

  it("a slow answer keeps it in warning", async () => {
    const h = await startWarning()
    await h.nextCheck(10 * SECOND)
    await h.report({ ok: true, responseTimeMs: 5000 })
    expect(h.status()).toBe("warning")
    expect(h.ctx().consecutiveFailures).toBe(0)
  })
})

describe("warning -> reconnecting: reconnecting_failure_threshold consecutive failed checks", () => {
  it("threshold 2: the failure that entered warning counts as the first", async () => {
    const h = await startWarning()
    expect(h.ctx().consecutiveFailures).toBe(1)
    const hold = h.lastHold()
    await h.nextCheck(10 * SECOND)
    await h.report({ ok: false, error: "timeout" })
    expect(h.status()).toBe("reconnecting")
    expect(hold.released).toBe(true)
    expect(h.ctx().consecutiveFailures).toBe(2)
    expect(h.lastTransition()).toMatchObject({ from: "warning", to: "reconnecting", reason: "health check failed: timeout" })
  })

  it("threshold 3: two failures in warning after the one that entered it", async () => {
    const h = await startWarning({ settings: { reconnecting_failure_threshold: 3 } })
    await h.nextCheck(10 * SECOND)
    await h.report({ ok: false })
    expect(h.status()).toBe("warning")
    expect(h.ctx().consecutiveFailures).toBe(2)
    await h.nextCheck(10 * SECOND)
    await h.report({ ok: false })
    expect(h.status()).toBe("reconnecting")
  })

  it("an answer in between resets the count", async () => {
    const h = await startWarning()
    await h.nextCheck(10 * SECOND)
    await h.report({ ok: true, responseTimeMs: 4000 }) // slow: stays warning, not a failure
    expect(h.ctx().consecutiveFailures).toBe(0)
    await h.nextCheck(10 * SECOND)
    await h.report({ ok: false })
    expect(h.status()).toBe("warning")
    await h.nextCheck(10 * SECOND)
    await h.report({ ok: false })
    expect(h.status()).toBe("reconnecting")
  })
})

describe("reconnecting -> healthy: connected (tools listed again when update_tools_on_reconnection)", () => {
  it("takes the new connection and its tools, and resets the counters", async () => {
    const h = await startHealthy()
    const first = h.ctx().connection
    h.lastHold().sendBack({ type: "TRANSPORT_CLOSED", reason: "gone" })
    await h.advance(1000)
    await h.connectFail()
    expect(h.ctx().reconnectAttempts).toBe(1)
    await h.advance(2000)
    const second = await h.connectOk([tool("x"), tool("y")])
    expect(h.status()).toBe("healthy")
    const ctx = h.ctx()
    expect(ctx.connection).toBe(second)
    expect(ctx.connection).not.toBe(first)
    expect(ctx.tools.map((t) => t.name)).toEqual(["x", "y"])
    expect(ctx.toolsVersion).toBe(2)
    expect(ctx).toMatchObject({ reconnectAttempts: 0, consecutiveFailures: 0, nextRetryAt: undefined })
    expect(h.lastTransition()).toMatchObject({ from: "reconnecting", to: "healthy", reason: "reconnected" })
    expect(h.calls.hold).toHaveLength(2)
    expect(h.lastHold().input.connection).toBe(second)
    expect(h.calls.hold[0]?.released).toBe(true)
    // health checks of the new connection start at a random offset again
    await h.nextCheck(15 * SECOND)
  })

  it("with update_tools_on_reconnection false the tools are not replaced", async () => {
    const h = await startHealthy({ settings: { update_tools_on_reconnection: false } })
    expect(h.ctx().tools.map((t) => t.name)).toEqual(["a"])
    h.lastHold().sendBack({ type: "TRANSPORT_CLOSED", reason: "gone" })
    await h.advance(1000)
    await h.connectOk([tool("x")])
    expect(h.status()).toBe("healthy")
    expect(h.ctx().tools.map((t) => t.name)).toEqual(["a"])
    expect(h.ctx().toolsVersion).toBe(1)
  })
})

describe("reconnecting -> reconnecting: attempt failed, next attempt after the backoff delay", () => {
  const delays = async (random: number, settings: Partial<MonitoringSettings> = {}, count = 8) => {
    const h = await startReconnecting({ random: () => random, settings: { max_reconnect_attempts: 20, ...settings } })
    const seen: number[] = []
    for (let i = 0; i < count; i++) {
      const d = retryDelay(h)
      seen.push(d)
      await expectAttemptAfter(h, d)
      await h.connectFail(`attempt ${i + 1} failed`)
      expect(h.status()).toBe("reconnecting")
      expect(h.ctx().reconnectAttempts).toBe(i + 1)
      expect(h.ctx().lastError).toBe(`attempt ${i + 1} failed`)
    }
    return seen
  }

  it("1 s, 2 s, 4 s ... capped at reconnection_seconds (random 0.5: no jitter)", async () => {
    expect(await delays(0.5)).toEqual([1000, 2000, 4000, 8000, 16000, 32000, 60000, 60000])
  })

  it("-10 % jitter at random 0", async () => {
    expect(await delays(0)).toEqual([900, 1800, 3600, 7200, 14400, 28800, 57600, 60000])
  })

  it("+10 % jitter at random 1, never above reconnection_seconds", async () => {
    expect(await delays(1)).toEqual([1100, 2200, 4400, 8800, 17600, 35200, 60000, 60000])
  })

  it("a short reconnection_seconds caps the delay", async () => {
    expect(await delays(0.5, { reconnection_seconds: 5 }, 6)).toEqual([1000, 2000, 4000, 5000, 5000, 5000])
  })

  it("an attempt that times out counts as failed", async () => {
    const h = await startReconnecting({ settings: { initialization_timeout_seconds: 10 } })
    await h.advance(1000)
    const attempt = h.lastConnect()
    await h.advance(10 * SECOND)
    expect(attempt.signal.aborted).toBe(true)
    expect(h.status()).toBe("reconnecting")
    expect(h.ctx().reconnectAttempts).toBe(1)
    expect(retryDelay(h)).toBe(2000)
  })

  it("the status stays reconnecting: no transition is recorded per attempt", async () => {
    const h = await startReconnecting()
    await h.advance(1000)
    await h.connectFail()
    await h.advance(2000)
    await h.connectFail()
    expect(h.transitionsTo()).toEqual(["initializing", "reconnecting"])
  })
})

describe("reconnecting -> unreachable: max_reconnect_attempts failed", () => {
  it("the 10th failed attempt (default) -> unreachable", async () => {
    const h = await startReconnecting()
    for (let i = 1; i <= 10; i++) {
      expect(h.status()).toBe("reconnecting")
      await h.advance(retryDelay(h))
      await h.connectFail(`failure ${i}`)
    }
    expect(h.status()).toBe("unreachable")
    expect(h.calls.connect).toHaveLength(11) // the first connection + 10 attempts
    expect(h.ctx().lastError).toBe("failure 10")
    expect(h.lastTransition()).toMatchObject({ from: "reconnecting", to: "unreachable", reason: "failure 10" })
    expect(retryDelay(h)).toBe(300 * SECOND)
  })

  it("max_reconnect_attempts 3, the last attempt timing out", async () => {
    const h = await startReconnecting({ settings: { max_reconnect_attempts: 3, initialization_timeout_seconds: 5 } })
    await h.advance(1000)
    await h.connectFail()
    await h.advance(2000)
    await h.connectFail()
    expect(h.status()).toBe("reconnecting")
    await h.advance(4000)
    await h.advance(5 * SECOND)
    expect(h.status()).toBe("unreachable")
    expect(h.ctx().lastError).toBe("no connection within 5 s")
  })
})

describe("unreachable -> healthy: a retry every unreachable_retry_seconds, for ever; success", () => {
  it("retries every 300 s over many cycles, then connects", async () => {
    const h = await startUnreachable({ settings: { initialization_timeout_seconds: 30 } })
    for (let cycle = 0; cycle < 6; cycle++) {
      expect(h.status()).toBe("unreachable")
      expect(retryDelay(h)).toBe(300 * SECOND)
      await expectAttemptAfter(h, 300 * SECOND)
      if (cycle === 2) await h.advance(30 * SECOND) // this one times out
      else await h.connectFail(`still down ${cycle}`)
    }
    expect(h.status()).toBe("unreachable")
    expect(h.transitionsTo()).toEqual(["initializing", "reconnecting", "unreachable"])
    await expectAttemptAfter(h, 300 * SECOND)
    await h.connectOk([tool("back")])
    expect(h.status()).toBe("healthy")
    expect(h.ctx()).toMatchObject({ reconnectAttempts: 0, nextRetryAt: undefined })
    expect(h.ctx().tools.map((t) => t.name)).toEqual(["back"])
    expect(h.lastTransition()).toMatchObject({ from: "unreachable", to: "healthy", reason: "reconnected" })
  })

  it("honours unreachable_retry_seconds", async () => {
    const h = await startUnreachable({ settings: { unreachable_retry_seconds: 7 } })
    await expectAttemptAfter(h, 7 * SECOND)
    await h.connectFail()
    await expectAttemptAfter(h, 7 * SECOND)
  })
})

/** Ways to reach each status, with the connection closeConnection should get. */
const reach: Record<string, () => Promise<ServiceHarness>> = {
  initializing: async () => startService(),
  healthy: () => startHealthy(),
  warning: () => startWarning(),
  reconnecting: () => startReconnecting(),
  "reconnecting (attempting)": async () => {
    const h = await startReconnecting()
    await h.advance(1000)
    return h
  },
  unreachable: () => startUnreachable(),
  "unreachable (crashed)": async () => startService({ crash: { error: "boom", attempt: 1 } })
}

describe("any but disconnecting, disconnected -> disconnecting -> disconnected", () => {
  for (const [from, setup] of Object.entries(reach)) {
    it(`from ${from}: disconnected once the transport is closed`, async () => {
      const h = await setup()
      const connection = h.ctx().connection
      const holds = h.calls.hold.length
      h.send({ type: "DISCONNECT" })
      expect(h.status()).toBe("disconnecting")
      expect(h.lastTransition()).toMatchObject({ to: "disconnecting", reason: "disconnect requested" })
      if (holds > 0) expect(h.lastHold().released).toBe(true)
      // a pending connection attempt is aborted
      const pending = h.calls.connect.at(-1)
      if (pending !== undefined && !pending.settled) expect(pending.signal.aborted).toBe(true)
      expect(h.calls.close).toHaveLength(1)
      expect(h.lastClose().input.connection).toBe(connection)
      h.send({ type: "DISCONNECT" }) // ignored while disconnecting
      expect(h.calls.close).toHaveLength(1)
      h.lastClose().resolve()
      await h.advance(0)
      expect(h.status()).toBe("disconnected")
      expect(h.lastTransition()).toMatchObject({ from: "disconnecting", to: "disconnected", reason: "transport closed" })
      expect(h.ctx()).toMatchObject({ connection: undefined, reconnectAttempts: 0, nextRetryAt: undefined })
      // nothing runs any more: no retries, no checks
      const calls = { connect: h.calls.connect.length, check: h.calls.check.length }
      await h.advance(HOUR)
      expect({ connect: h.calls.connect.length, check: h.calls.check.length }).toEqual(calls)
      h.send({ type: "DISCONNECT" }) // ignored while disconnected
      expect(h.status()).toBe("disconnected")
      expect(h.calls.close).toHaveLength(1)
    })
  }

  it("forced after disconnection_timeout_seconds when the close never ends", async () => {
    const h = await startHealthy({ settings: { disconnection_timeout_seconds: 10 } })
    h.send({ type: "DISCONNECT", reason: "removed by test" })
    expect(h.lastTransition()).toMatchObject({ to: "disconnecting", reason: "removed by test" })
    await h.advance(10 * SECOND - 1)
    expect(h.status()).toBe("disconnecting")
    await h.advance(1)
    expect(h.status()).toBe("disconnected")
    expect(h.lastTransition().reason).toBe("disconnection timed out: closed by force")
  })

  it("a close that fails still ends disconnected", async () => {
    const h = await startHealthy()
    h.send({ type: "DISCONNECT" })
    h.lastClose().reject(new Error("kill failed"))
    await h.advance(0)
    expect(h.status()).toBe("disconnected")
    expect(h.lastTransition().reason).toBe("transport closed with an error")
  })
})

describe("any -> initializing: restart requested (the old connection is closed)", () => {
  const all: Record<string, () => Promise<ServiceHarness>> = {
    ...reach,
    disconnecting: async () => {
      const h = await startHealthy()
      h.send({ type: "DISCONNECT" })
      return h
    },
    disconnected: async () => {
      const h = await startHealthy()
      h.send({ type: "DISCONNECT" })
      h.lastClose().resolve()
      await h.advance(0)
      expect(h.status()).toBe("disconnected")
      return h
    }
  }
  for (const [from, setup] of Object.entries(all)) {
    it(`from ${from}`, async () => {
      const h = await setup()
      const before = h.status()
      const connects = h.calls.connect.length
      const pending = h.calls.connect.at(-1)
      h.send({ type: "RESTART" })
      expect(h.status()).toBe("initializing")
      for (const hold of h.calls.hold) expect(hold.released).toBe(true)
      if (pending !== undefined && !pending.settled) expect(pending.signal.aborted).toBe(true)
      expect(h.calls.connect).toHaveLength(connects + 1)
      expect(h.ctx()).toMatchObject({
        connection: undefined,
        reconnectAttempts: 0,
        consecutiveFailures: 0,
        nextRetryAt: undefined,
        crash: undefined
      })
      if (before !== "initializing") {
        expect(h.lastTransition()).toMatchObject({ from: before, to: "initializing", reason: "restart requested" })
      }
      const connection = await h.connectOk([tool("fresh")])
      expect(h.status()).toBe("healthy")
      expect(h.ctx().connection).toBe(connection)
      // nothing left over from before keeps running: only one connection held
      expect(h.calls.hold.filter((c) => !c.released)).toHaveLength(1)
    })
  }

  it("RESTART with a reason records it", async () => {
    const h = await startHealthy()
    h.send({ type: "RESTART", reason: "restarted by the user" })
    expect(h.lastTransition()).toMatchObject({ from: "healthy", to: "initializing", reason: "restarted by the user" })
  })
})

describe("any -> initializing: the definition changed", () => {
  it("reconnects with the new definition", async () => {
    const h = await startHealthy()
    const hold = h.lastHold()
    const definition = { url: "http://127.0.0.1:10/mcp", headers: { authorization: "Bearer x" } }
    h.send({ type: "UPDATE_DEFINITION", definition })
    expect(h.status()).toBe("initializing")
    expect(hold.released).toBe(true)
    expect(h.ctx().definition).toEqual(definition)
    expect(h.lastConnect().input.definition).toEqual(definition)
    expect(h.lastTransition()).toMatchObject({ from: "healthy", to: "initializing", reason: "definition changed" })
    await h.connectOk()
    expect(h.status()).toBe("healthy")
  })

  it("from unreachable and from disconnected", async () => {
    for (const h of [await startUnreachable(), await startService({ definition: { ...DEFINITION, disabled: true } })]) {
      const definition = { command: "node", args: ["server.js"] }
      h.send({ type: "UPDATE_DEFINITION", definition })
      expect(h.status()).toBe("initializing")
      expect(h.lastConnect().input.definition).toEqual(definition)
    }
  })

  it("a changed definition with disabled: true goes (and stays) disconnected", async () => {
    // src/runtime/store.ts sends UPDATE_DEFINITION when a hand edit changes the url and sets disabled
    const h = await startHealthy()
    const connection = h.ctx().connection
    const definition = { url: "http://127.0.0.1:10/mcp", disabled: true }
    h.send({ type: "UPDATE_DEFINITION", definition })
    expect(h.lastHold().released).toBe(true)
    expect(h.status()).toBe("disconnecting")
    expect(h.lastClose().input.connection).toBe(connection)
    h.lastClose().resolve()
    await h.advance(0)
    expect(h.status()).toBe("disconnected")
    expect(h.ctx().definition).toEqual(definition)
    await h.advance(HOUR)
    expect(h.calls.connect).toHaveLength(1)
    // already disconnected: a new disabled definition is kept, nothing else happens
    const next = { url: "http://127.0.0.1:11/mcp", disabled: true }
    h.send({ type: "UPDATE_DEFINITION", definition: next })
    expect(h.status()).toBe("disconnected")
    expect(h.ctx().definition).toEqual(next)
    expect(h.calls.close).toHaveLength(1)
    expect(h.calls.connect).toHaveLength(1)
    // enabling it again connects
    h.send({ type: "UPDATE_DEFINITION", definition: { url: "http://127.0.0.1:11/mcp" } })
    expect(h.status()).toBe("initializing")
  })
})

describe("a definition with disabled: true starts disconnected", () => {
  it("never connects until restarted", async () => {
    const h = startService({ definition: { ...DEFINITION, disabled: true } })
    expect(h.status()).toBe("disconnected")
    expect(h.ctx().transitions).toEqual([
      { from: null, to: "disconnected", at: 1_000_000, reason: "disabled in the services file" }
    ])
    await h.advance(HOUR)
    expect(h.calls.connect).toHaveLength(0)
    expect(h.calls.close).toHaveLength(0)
    h.send({ type: "RESTART" })
    expect(h.status()).toBe("initializing")
    expect(h.calls.connect).toHaveLength(1)
  })
})

describe("a supervisor-restarted actor (input.crash) starts unreachable, then initializing after the backoff", () => {
  it("first crash: 1 s", async () => {
    const h = startService({ crash: { error: "boom", attempt: 1 } })
    expect(h.status()).toBe("unreachable")
    expect(h.ctx().lastError).toBe("boom")
    expect(h.ctx().transitions).toEqual([{ from: null, to: "unreachable", at: 1_000_000, reason: "actor crashed: boom" }])
    expect(h.calls.connect).toHaveLength(0)
    await expectAttemptAfter(h, 1000)
    expect(h.status()).toBe("initializing")
    expect(h.lastTransition()).toMatchObject({ from: "unreachable", to: "initializing", reason: "restarted after a crash" })
    await h.connectOk()
    expect(h.status()).toBe("healthy")
    expect(h.ctx().crash).toBeUndefined()
  })

  it("third crash: 4 s", async () => {
    const h = startService({ crash: { error: "boom", attempt: 3 } })
    expect(retryDelay(h)).toBe(4000)
    await expectAttemptAfter(h, 4000)
  })
})

describe("any -> stopped: deleted (the actor is stopped; its connection is released)", () => {
  it("stopping a healthy actor releases the held connection and stops a running check", async () => {
    const h = await startHealthy()
    const check = await h.nextCheck(15 * SECOND)
    h.actor.stop()
    expect(h.lastHold().released).toBe(true)
    expect(check.stopped).toBe(true)
    expect(h.actor.getSnapshot().status).toBe("stopped")
  })

  it("stopping during a tool refresh aborts it", async () => {
    const h = await startHealthy()
    h.lastHold().sendBack({ type: "TOOLS_CHANGED" })
    const list = h.lastList()
    h.actor.stop()
    expect(list.signal.aborted).toBe(true)
    expect(h.lastHold().released).toBe(true)
  })

  it("stopping while connecting aborts the attempt", async () => {
    const h = startService()
    h.actor.stop()
    expect(h.lastConnect().signal.aborted).toBe(true)
    await h.advance(HOUR)
    expect(h.calls.connect).toHaveLength(1)
  })

  it("stopping while reconnecting leaves no timer behind", async () => {
    const h = await startReconnecting()
    h.actor.stop()
    await h.advance(HOUR)
    expect(h.calls.connect).toHaveLength(1)
  })
})

describe("tool list refresh", () => {
  it("on TOOLS_CHANGED (notifications/tools/list_changed)", async () => {
    const h = await startHealthy()
    const connection = h.ctx().connection
    await h.advance(5000)
    h.lastHold().sendBack({ type: "TOOLS_CHANGED" })
    expect(h.calls.list).toHaveLength(1)
    // The service goes with the list: the runtime judges it against the service's pins (docs/tool-pins.md).
    expect(h.lastList().input).toEqual({ connection, timeoutMs: 5 * SECOND, scope: STORE_SCOPE, name: "svc", definition: DEFINITION, heldTools: [] })
    h.lastList().resolve([tool("b"), tool("c")])
    await h.advance(0)
    expect(h.ctx().tools.map((t) => t.name)).toEqual(["b", "c"])
    expect(h.ctx().toolsVersion).toBe(2)
    expect(h.ctx().toolsUpdatedAt).toBe(h.clock.now())
    expect(h.status()).toBe("healthy")
  })

  it("a list judged against the pins: its held tools and the changes it noticed are in the context; the next list that holds nothing clears them", async () => {
    const h = await startHealthy()
    const change = { tool: "b", change: "changed" as const, held: true, changed_fields: ["description" as const], diff: { description: { before: "old", after: "new" } }, hash: "h", seen_at: "t" }
    h.lastHold().sendBack({ type: "TOOLS_CHANGED" })
    h.lastList().resolve({ tools: [tool("b")], pins: { held: [change], noticed: [change] } })
    await h.advance(0)
    expect(h.ctx().heldTools).toEqual([change])
    expect(h.ctx().toolChanges).toEqual([change])
    h.lastHold().sendBack({ type: "TOOLS_CHANGED" })
    expect(h.lastList().input.heldTools).toEqual([change])
    h.lastList().resolve({ tools: [tool("b")], pins: { held: [], noticed: [] } })
    await h.advance(0)
    expect(h.ctx().heldTools).toEqual([])
    // The last changes told stay as they were (a new array only when a list notices changes).
    expect(h.ctx().toolChanges).toEqual([change])
  })

  it("a change announced during a refresh lists again", async () => {
    const h = await startHealthy()
    h.lastHold().sendBack({ type: "TOOLS_CHANGED" })
    const first = h.lastList()
    h.lastHold().sendBack({ type: "TOOLS_CHANGED" })
    expect(first.signal.aborted).toBe(true)
    expect(h.calls.list).toHaveLength(2)
    h.lastList().resolve([tool("z")])
    await h.advance(0)
    expect(h.ctx().tools.map((t) => t.name)).toEqual(["z"])
  })

  it("a failed refresh keeps the tools, records the error and counts as a refresh", async () => {
    const h = await startHealthy()
    h.send({ type: "REFRESH_TOOLS" })
    h.lastList().reject(new Error("timeout"))
    await h.advance(0)
    expect(h.ctx().tools.map((t) => t.name)).toEqual(["a"])
    expect(h.ctx().lastError).toBe("tool list refresh failed: timeout")
    expect(h.ctx().toolsVersion).toBe(2)
    expect(h.status()).toBe("healthy")
  })

  it("periodically every tools_update_hours", async () => {
    const h = await startHealthy({ settings: { tools_update_hours: 0.5 } })
    await h.advance(HOUR / 2 - 1)
    expect(h.calls.list).toHaveLength(0)
    await h.advance(1)
    expect(h.calls.list).toHaveLength(1)
    h.lastList().resolve([tool("p")])
    await h.advance(0)
    expect(h.ctx().tools.map((t) => t.name)).toEqual(["p"])
    await h.advance(HOUR / 2 - 1)
    expect(h.calls.list).toHaveLength(1)
    await h.advance(1)
    expect(h.calls.list).toHaveLength(2)
  })

  it("not on TOOLS_CHANGED nor periodically when enable_tools_update is false", async () => {
    const h = await startHealthy({ settings: { enable_tools_update: false } })
    expect(h.lastHold().input.watchTools).toBe(false)
    h.lastHold().sendBack({ type: "TOOLS_CHANGED" })
    await h.advance(5 * HOUR)
    expect(h.calls.list).toHaveLength(0)
    // an explicit refresh request is still honoured
    h.send({ type: "REFRESH_TOOLS" })
    expect(h.calls.list).toHaveLength(1)
  })

  it("a refresh does not disturb the health status", async () => {
    const h = await startWarning()
    h.lastHold().sendBack({ type: "TOOLS_CHANGED" })
    h.lastList().resolve([tool("w")])
    await h.advance(0)
    expect(h.status()).toBe("warning")
  })
})

describe("list refresh bounded by the server's ttlMs (2026-07-28)", () => {
  /** A healthy service whose connect answered the tools with `toolsTtlMs` (and the catalog with `catalogTtlMs`). */
  const startWithTtl = async (ttl: { tools?: number | undefined; catalog?: number | undefined }, options: ServiceHarnessOptions = {}) => {
    const h = startService({ random: () => 0, ...options })
    const connection = { ...fakeConnection(), capabilities: { resources: ttl.catalog !== undefined, subscribe: false, prompts: false, completions: false } }
    h.lastConnect().resolve({ connection, tools: [tool("a")], toolsTtlMs: ttl.tools, catalogTtlMs: ttl.catalog })
    await h.advance(0)
    expect(h.status()).toBe("healthy")
    return h
  }
  /** Expects the next tool list exactly `ms` from now. */
  const expectListAfter = (h: ServiceHarness, ms: number) => expectCallAfter(h, "list", ms)

  it("a ttl shorter than tools_update_hours: listed again at the ttl, then at the ttl its answer gives", async () => {
    const h = await startWithTtl({ tools: 60 * SECOND })
    expect(h.ctx().toolsTtlMs).toBe(60 * SECOND)
    await expectListAfter(h, 60 * SECOND)
    h.lastList().resolve({ tools: [tool("a"), tool("b")], ttlMs: 120 * SECOND })
    await h.advance(0)
    expect(h.ctx().tools.map((t) => t.name)).toEqual(["a", "b"])
    await expectListAfter(h, 120 * SECOND)
    // an answer without a ttl: back to the interval
    h.lastList().resolve([tool("a")])
    await h.advance(0)
    expect(h.ctx().toolsTtlMs).toBeUndefined()
    await expectListAfter(h, h.settings.tools_update_hours * HOUR)
  })

  it("a ttl below the floor (0, 1 s): listed again at MIN_LIST_TTL_MS, not in a loop; backed off while the list is unchanged", async () => {
    for (const ttl of [0, SECOND]) {
      const h = await startWithTtl({ tools: ttl })
      await expectListAfter(h, MIN_LIST_TTL_MS)
      // the same list again: 10 s, then 20 s
      h.lastList().resolve({ tools: [tool("a")], ttlMs: ttl })
      await h.advance(0)
      expect(h.ctx().toolsUnchanged).toBe(1)
      await expectListAfter(h, 2 * MIN_LIST_TTL_MS)
      h.lastList().resolve({ tools: [tool("a")], ttlMs: ttl })
      await h.advance(0)
      await expectListAfter(h, 4 * MIN_LIST_TTL_MS)
      // a changed list: back to the floor
      h.lastList().resolve({ tools: [tool("a"), tool("b")], ttlMs: ttl })
      await h.advance(0)
      expect(h.ctx().toolsUnchanged).toBe(0)
      await expectListAfter(h, MIN_LIST_TTL_MS)
      h.actor.stop()
    }
  })

  it("the backoff of a sub-floor ttl stops at tools_update_hours", () => {
    const settings = defaultMonitoring({ tools_update_hours: 0.01 })
    expect(listRefreshMs(0, settings, () => 0, 0)).toBe(MIN_LIST_TTL_MS)
    expect(listRefreshMs(0, settings, () => 0, 2)).toBe(4 * MIN_LIST_TTL_MS)
    expect(listRefreshMs(0, settings, () => 0, 100)).toBe(36 * SECOND)
    // a ttl at or above the floor is kept to, changed or not
    expect(listRefreshMs(MIN_LIST_TTL_MS, settings, () => 0, 5)).toBe(MIN_LIST_TTL_MS)
  })

  it("no ttl (a 2025 server), or one longer than tools_update_hours: the interval", async () => {
    for (const ttl of [undefined, 10 * HOUR]) {
      const h = await startWithTtl({ tools: ttl }, { settings: { tools_update_hours: 2 } })
      await expectListAfter(h, 2 * HOUR)
      h.actor.stop()
    }
  })

  it("up to 10 % early at random (the ttl stays an upper bound), never below the floor", async () => {
    const settings = defaultMonitoring({})
    expect(listRefreshMs(60 * SECOND, settings, () => 1)).toBe(54 * SECOND)
    expect(listRefreshMs(60 * SECOND, settings, () => 0.5)).toBe(57 * SECOND)
    expect(listRefreshMs(MIN_LIST_TTL_MS, settings, () => 1)).toBe(MIN_LIST_TTL_MS)
    expect(listRefreshMs(undefined, settings, () => 1)).toBe(settings.tools_update_hours * HOUR)
    const h = await startWithTtl({ tools: 60 * SECOND }, { random: () => 1 })
    await expectListAfter(h, 54 * SECOND)
  })

  it("only while connected: a service that lost its connection lists nothing at the ttl", async () => {
    const h = await startWithTtl({ tools: 10 * SECOND }, { settings: { enable_reconnection: false } })
    h.lastHold().sendBack({ type: "TRANSPORT_CLOSED", reason: "gone" })
    await h.advance(0)
    expect(h.status()).toBe("unreachable")
    await h.advance(60 * SECOND)
    expect(h.calls.list).toHaveLength(0)
  })

  it("not when enable_tools_update is false", async () => {
    const h = await startWithTtl({ tools: 10 * SECOND }, { settings: { enable_tools_update: false } })
    await h.advance(60 * SECOND)
    expect(h.calls.list).toHaveLength(0)
  })

  it("the catalog (resources, templates, prompts) by its own ttl", async () => {
    const h = await startWithTtl({ tools: 60 * SECOND, catalog: 20 * SECOND })
    await h.advance(20 * SECOND - 1)
    expect(h.fakes.calls.catalog).toHaveLength(0)
    await h.advance(1)
    expect(h.fakes.calls.catalog).toHaveLength(1)
    expect(h.calls.list).toHaveLength(0)
    h.fakes.calls.catalog[0]!.resolve({ catalog: { ...EMPTY_CATALOG, prompts: [{ name: "p" }] }, ttlMs: 0 })
    await h.advance(0)
    expect(h.ctx().catalogTtlMs).toBe(0)
    await h.advance(MIN_LIST_TTL_MS)
    expect(h.fakes.calls.catalog).toHaveLength(2)
    await h.advance(60 * SECOND - 20 * SECOND - MIN_LIST_TTL_MS)
    expect(h.calls.list).toHaveLength(1)
  })
})

describe("health-check scheduling", () => {
  const firstCheckAt = async (random: number, health = 30): Promise<number> => {
    const h = await startHealthy({ random: () => random, settings: { health_check_seconds: health } })
    const start = h.clock.now()
    for (let t = 0; t <= health * 1000; t += 100) {
      if (t > 0) await h.advance(100)
      else await h.advance(0)
      if (h.calls.check.length > 0) return h.clock.now() - start
    }
    throw new Error("no check within the interval")
  }

  it("a fresh connection's first check starts at a random offset within the interval", async () => {
    expect(await firstCheckAt(0)).toBe(0)
    expect(await firstCheckAt(0.25)).toBe(7500)
    expect(await firstCheckAt(0.5)).toBe(15000)
    expect(await firstCheckAt(0.9)).toBe(27000)
    expect(await firstCheckAt(0.5, 10)).toBe(5000)
  })

  it("then every health_check_seconds after each answer", async () => {
    const h = await startHealthy({ settings: { health_check_seconds: 20 } })
    await h.nextCheck(10 * SECOND)
    for (let i = 0; i < 4; i++) {
      await h.advance(700) // the answer takes a while: the interval runs from the answer
      await h.report({ ok: true, responseTimeMs: 700 })
      const before = h.calls.check.length
      await h.advance(20 * SECOND - 1)
      expect(h.calls.check.length).toBe(before)
      await h.advance(1)
      expect(h.calls.check.length).toBe(before + 1)
    }
    expect(h.status()).toBe("healthy")
  })

  it("no new check starts while one is running", async () => {
    const h = await startHealthy()
    await h.nextCheck(15 * SECOND)
    await h.advance(5 * 60 * SECOND)
    expect(h.calls.check).toHaveLength(1)
  })

  it("warning checks every warning_check_seconds (min(10, health_check_seconds) by default)", async () => {
    for (const [settings, interval] of [
      [{}, 10],
      [{ health_check_seconds: 4 }, 4],
      [{ warning_check_seconds: 3 }, 3]
    ] as const) {
      const h = await startWarning({ settings })
      for (let i = 0; i < 3; i++) {
        const before = h.calls.check.length
        await h.advance(interval * SECOND - 1)
        expect(h.calls.check.length).toBe(before)
        await h.advance(1)
        expect(h.calls.check.length).toBe(before + 1)
        await h.report({ ok: true, responseTimeMs: 3500 }) // slow: stays in warning
        expect(h.status()).toBe("warning")
      }
    }
  })
})

describe("transition record", () => {
  it("keeps the last 20 transitions with from, to, at, reason", async () => {
    const h = await startHealthy()
    for (let i = 0; i < 15; i++) {
      h.lastHold().sendBack({ type: "TRANSPORT_CLOSED", reason: `closed ${i}` })
      await h.advance(1000)
      await h.connectOk()
    }
    const transitions = h.ctx().transitions
    expect(transitions).toHaveLength(20)
    expect(transitions.at(-1)).toMatchObject({ from: "reconnecting", to: "healthy", reason: "reconnected" })
    for (let i = 1; i < transitions.length; i++) {
      expect(transitions[i]?.from).toBe(transitions[i - 1]?.to)
      expect(transitions[i]!.at).toBeGreaterThanOrEqual(transitions[i - 1]!.at)
    }
    const statuses: Status[] = ["healthy", "reconnecting"]
    expect(new Set(transitions.map((t) => t.to))).toEqual(new Set(statuses))
  })
})

/** A connect failure the transport edge classified as permanent (src/mcp/connect.ts), with its hint. */
const permanent = (message: string, hint: string) => Object.assign(new Error(message), { permanent: true, hint })

describe("initializing, reconnecting -> unreachable at once: a permanent connect failure", () => {
  it("initializing -> unreachable, the hint kept, retried on the unreachable cadence only", async () => {
    const h = startService()
    h.lastConnect().reject(permanent("spawn no-such-cmd ENOENT", "executable not found"))
    await h.advance(0)
    expect(h.status()).toBe("unreachable")
    expect(h.transitionsTo()).toEqual(["initializing", "unreachable"])
    expect(h.lastTransition()).toMatchObject({ from: "initializing", to: "unreachable", reason: "spawn no-such-cmd ENOENT" })
    expect(h.ctx()).toMatchObject({ lastError: "spawn no-such-cmd ENOENT", hint: "executable not found", permanentFailure: true, reconnectAttempts: 0 })
    // No attempt on the reconnection backoff (1 s, 2 s, ...): the next one is unreachable_retry_seconds away.
    expect(retryDelay(h)).toBe(300 * SECOND)
    await expectAttemptAfter(h, 300 * SECOND)
    h.lastConnect().reject(permanent("spawn no-such-cmd ENOENT", "executable not found"))
    await h.advance(0)
    expect(h.status()).toBe("unreachable")
    await expectAttemptAfter(h, 300 * SECOND)
    // Installed meanwhile: connected, and the hint is gone.
    await h.connectOk([tool("found")])
    expect(h.status()).toBe("healthy")
    expect(h.ctx()).toMatchObject({ hint: undefined, permanentFailure: false })
  })

  it("reconnecting -> unreachable at the first permanent failure, not after max_reconnect_attempts", async () => {
    const h = startService()
    await h.connectFail("ECONNREFUSED")
    expect(h.status()).toBe("reconnecting")
    expect(h.ctx().hint).toBeUndefined()
    await h.advance(retryDelay(h))
    h.lastConnect().reject(permanent("HTTP 404 to initialize", "check the URL's path"))
    await h.advance(0)
    expect(h.status()).toBe("unreachable")
    expect(h.ctx()).toMatchObject({ hint: "check the URL's path", permanentFailure: true })
    expect(h.transitionsTo()).toEqual(["initializing", "reconnecting", "unreachable"])
  })

  it("a transient failure keeps the reconnection backoff, and a hint it brings", async () => {
    const h = startService()
    h.lastConnect().reject(Object.assign(new Error("npm error 404"), { hint: "npm cannot find the package" }))
    await h.advance(0)
    expect(h.status()).toBe("reconnecting")
    expect(h.ctx()).toMatchObject({ hint: "npm cannot find the package", permanentFailure: false })
    expect(retryDelay(h)).toBe(1000)
  })

  it("a changed definition forgets the hint and connects again at once", async () => {
    const h = startService()
    h.lastConnect().reject(permanent("spawn npx -y pkg ENOENT", "command contains spaces"))
    await h.advance(0)
    expect(h.status()).toBe("unreachable")
    const before = h.calls.connect.length
    h.send({ type: "UPDATE_DEFINITION", definition: { command: "npx", args: ["-y", "pkg"] } })
    await h.advance(0)
    expect(h.status()).toBe("initializing")
    expect(h.calls.connect.length).toBe(before + 1)
    expect(h.ctx()).toMatchObject({ hint: undefined, permanentFailure: false })
  })
})

describe("the remembered era", () => {
  const modern = { kind: "modern", version: "2026-07-28", discover: { supportedVersions: ["2026-07-28"], capabilities: {}, serverInfo: undefined } } as const

  it("the era a connection found is handed to the next connect, and forgotten when the definition changes", async () => {
    const h = startService()
    expect(h.lastConnect().input.prior).toBeUndefined()
    await h.connectOk([tool("a")], { ...fakeConnection(), protocolVersion: "2026-07-28", era: modern })
    expect(h.ctx().era).toEqual(modern)
    h.lastHold().sendBack({ type: "TRANSPORT_CLOSED", reason: "stream ended" })
    await h.advance(retryDelay(h))
    expect(h.lastConnect().input.prior).toEqual(modern)
    h.send({ type: "UPDATE_DEFINITION", definition: { url: "http://127.0.0.1:10/mcp" } })
    expect(h.ctx().era).toBeUndefined()
    expect(h.lastConnect().input.prior).toBeUndefined()
  })
})
