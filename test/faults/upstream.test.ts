// Upstream faults against real processes and sockets: a stdio server killed with SIGKILL, an HTTP
// server stopped and started again, a restart that forgets the session (HTTP 404), a server that
// accepts and never answers, a slow server, a command that exits at once or does not exist. Each
// test records the statuses the service goes through (actor subscription, cross-checked with
// GET /monitoring/service_health_history), checks them against the table of docs/lifecycle.md,
// and makes no client request while the store is expected to recover by itself.
//
// The tests wait on the store's timers, so they run at the same time (describe.concurrent), each with
// its own store and servers, ended when it finishes. The slow server's pings take 300 ms against a
// 200 ms threshold and a 0.8 s time-out: a busy event loop lengthens them by far less (they were
// measured at 304-369 ms with the other tests running).
import { existsSync, mkdtempSync, readFileSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { describe, expect, it, type TestContext } from "vitest"
import type { ServiceActorRef } from "../../src/machines/service.js"
import { startHttpFixture, type HttpFixture } from "../fixtures/http-fixture.js"
import { startSilentTcpServer, type SilentTcpServer } from "../fixtures/silent-tcp-server.js"
import { startTunableServer, type TunableServer } from "../fixtures/tunable-server.js"
import {
  eventually,
  FAULT_MONITORING,
  firstText,
  fixtureService,
  illegalTransitions,
  recordStatuses,
  startTestServer,
  type StatusLog,
  type TestServer
} from "../support/index.js"

/** What one test started (its store, servers, recorder, scratch folder). */
interface Own {
  server?: TestServer
  http?: HttpFixture
  tunable?: TunableServer
  tcp?: SilentTcpServer
  log?: StatusLog
  scratch?: string
}

/** A test's own resources, ended when it finishes (its own hook: the tests run at the same time). */
const own = ({ onTestFinished }: TestContext): Own => {
  const o: Own = {}
  onTestFinished(async () => {
    o.log?.stop()
    await o.server?.cleanup()
    await Promise.all([o.http?.stop(), o.tunable?.stop(), o.tcp?.stop()])
    if (o.scratch !== undefined) rmSync(o.scratch, { recursive: true, force: true })
  }, 20_000)
  return o
}

/** Starts the test's store with the fault settings (plus `monitoring`). */
const startStore = async (o: Own, monitoring = {}): Promise<TestServer> =>
  (o.server = await startTestServer({ monitoring: { ...FAULT_MONITORING, ...monitoring } }))

/** Starts the test's store (as startStore), adds `definition` and waits until it is healthy. */
const healthyService = async (
  o: Own,
  definition: Record<string, unknown>,
  monitoring = {}
): Promise<{ server: TestServer; actor: ServiceActorRef }> => {
  const server = await startStore(o, monitoring)
  const added = await server.post("/for_store/add_service?wait=15", definition)
  expect(added.status).toBe(200)
  expect(added.body.services[0].status).toBe("healthy")
  return { server, actor: server.running.store.forStore().findService(String(definition.name))! }
}

/** The transitions GET /monitoring/service_health_history gives, as "from>to". */
const historyPairs = async (server: TestServer, name: string): Promise<string[]> => {
  const reply = await server.get(`/monitoring/service_health_history?service_name=${name}`)
  expect(reply.status).toBe(200)
  return reply.body.transitions.map((t: { from: string | null; to: string }) => `${t.from}>${t.to}`)
}

const pairs = (l: StatusLog) => l.transitions.map((t) => `${t.from}>${t.to}`)

/**
 * The retry delays of the tests that wait them out, shorter than FAULT_MONITORING's 1 s: the backoff's
 * cap (`reconnection_seconds`) and `unreachable_retry_seconds`. Their checks of the spacing scale with it.
 */
const RETRY_MS = 300
const QUICK_RETRIES = { reconnection_seconds: RETRY_MS / 1000, unreachable_retry_seconds: RETRY_MS / 1000 }

describe.concurrent("a command that cannot serve", () => {
  /** Samples the actor's (status, reconnect_attempts, next_retry_at) at each change. */
  const sampleRetries = (actor: ServiceActorRef) => {
    const samples: Array<{ status: string; attempts: number; nextRetryAt: number | undefined; at: number }> = []
    const take = (s: ReturnType<ServiceActorRef["getSnapshot"]>) => {
      const c = s.context
      const last = samples.at(-1)
      if (last && last.status === c.status && last.attempts === c.reconnectAttempts && last.nextRetryAt === c.nextRetryAt) return
      samples.push({ status: c.status ?? "", attempts: c.reconnectAttempts, nextRetryAt: c.nextRetryAt, at: Date.now() })
    }
    take(actor.getSnapshot())
    const sub = actor.subscribe(take)
    return { samples, stop: () => sub.unsubscribe() }
  }

  it("--exit-immediately: reconnecting, then unreachable with the stderr tail in last_error; the retries keep their backoff", { timeout: 30_000 }, async (context) => {
    const o = own(context)
    const server = await startStore(o, QUICK_RETRIES)
    await server.post("/for_store/add_service", fixtureService("quitter", "--exit-immediately"))
    const actor = server.running.store.forStore().findService("quitter")!
    const log = (o.log = recordStatuses(actor, { fromStart: true }))
    const retries = sampleRetries(actor)
    try {
      expect(await log.waitFor("unreachable", 20_000)).toBe(true)
      // Two more unreachable retries (one every 0.3 s).
      const firstRetryAt = actor.getSnapshot().context.nextRetryAt!
      expect(await eventually(() => (actor.getSnapshot().context.nextRetryAt ?? 0) > firstRetryAt + 1.5 * RETRY_MS, 8_000)).toBe(true)
    } finally {
      retries.stop()
    }
    expect(log.statuses().slice(0, 3)).toEqual(["initializing", "reconnecting", "unreachable"])
    expect(log.statuses()).not.toContain("healthy")
    expect(illegalTransitions(log.transitions)).toEqual([])

    const status = await server.get("/for_store/service_status/quitter")
    expect(status.body.status).toBe("unreachable")
    expect(status.body.last_error).toMatch(/fixture: exiting at once, as asked \(--exit-immediately\)/)
    expect(status.body.last_error).toMatch(/exited with code 3/)
    const listed = (await server.get("/for_store/list_services")).body.services[0]
    expect(listed.last_error).toMatch(/fixture: exiting at once/)
    expect(listed.reconnect_attempts).toBe(3)

    // reconnect_attempts grows 0, 1, 2, 3 (max_reconnect_attempts) while reconnecting ...
    const attempts = retries.samples.map((s) => s.attempts)
    expect([...new Set(attempts)]).toEqual([0, 1, 2, 3])
    // ... and next_retry_at only ever moves forward, each time by at least a backoff delay
    // (1 s ±10 % capped at reconnection_seconds = 0.3 s while reconnecting, unreachable_retry_seconds = 0.3 s afterwards).
    const retryTimes = [...new Set(retries.samples.map((s) => s.nextRetryAt).filter((t): t is number => t !== undefined))]
    expect(retryTimes.length).toBeGreaterThanOrEqual(5)
    for (let i = 1; i < retryTimes.length; i++) expect(retryTimes[i]! - retryTimes[i - 1]!).toBeGreaterThanOrEqual(0.9 * RETRY_MS)
  })

  it("a shell command that exits at once: attempts are spaced by the backoff, never a hot loop", { timeout: 20_000 }, async (context) => {
    const o = own(context)
    o.scratch = mkdtempSync(join(tmpdir(), "mcp-store-faults-"))
    const attemptsFile = join(o.scratch, "attempts")
    const server = await startStore(o, QUICK_RETRIES)
    await server.post("/for_store/add_service", {
      name: "sh-quitter",
      command: "/bin/sh",
      args: ["-c", `date +%s%N >> ${attemptsFile}; echo "boom: missing API token" >&2; exit 7`]
    })
    const actor = server.running.store.forStore().findService("sh-quitter")!
    const log = (o.log = recordStatuses(actor, { fromStart: true }))
    const watchedFrom = Date.now()
    const startsSoFar = () => {
      const text = existsSync(attemptsFile) ? readFileSync(attemptsFile, "utf8").trim() : ""
      return text === "" ? [] : text.split("\n").map((ns) => Number(BigInt(ns) / 1_000_000n))
    }
    // The start when added, three reconnection attempts, then retries while unreachable: wait for
    // the first of those retries (the fifth start), which comes about 1.2 s in.
    expect(await log.waitFor("unreachable", 10_000)).toBe(true)
    expect(await eventually(() => startsSoFar().length >= 5, 7_000)).toBe(true)
    const starts = startsSoFar()
    const watchedFor = Date.now() - watchedFrom
    // One start per backoff delay of 0.3 s: about three a second, never dozens. Once, an attempt
    // starts two processes: the era probe's, which exited, then the handshake's (the probe is not
    // asked again of that command).
    expect(starts.length).toBeGreaterThanOrEqual(4)
    expect(starts.length).toBeLessThanOrEqual(Math.ceil(watchedFor / RETRY_MS) + 3)
    const gaps = starts.slice(1).map((s, i) => s - starts[i]!)
    expect(gaps.filter((gap) => gap < 0.85 * RETRY_MS).length, `gaps between starts: ${gaps.join(", ")} ms`).toBeLessThanOrEqual(1)
    expect(starts[0]! - watchedFrom).toBeLessThan(1_000)
    expect(log.statuses().slice(0, 3)).toEqual(["initializing", "reconnecting", "unreachable"])
    const status = await server.get("/for_store/service_status/sh-quitter")
    expect(status.body.last_error).toMatch(/boom: missing API token/)
    expect(status.body.last_error).toMatch(/exited with code 7/)
  })

  it("a command that does not exist: unreachable at once (a permanent failure), the spawn error in last_error with a hint; retried on the unreachable cadence only", { timeout: 20_000 }, async (context) => {
    const o = own(context)
    const server = await startStore(o, QUICK_RETRIES)
    const added = await server.post("/for_store/add_service", { name: "ghost", command: "/nonexistent/mcp-server-ghost", args: ["--x"] })
    expect(added.status).toBe(200)
    const actor = server.running.store.forStore().findService("ghost")!
    const log = (o.log = recordStatuses(actor, { fromStart: true }))
    const retries = sampleRetries(actor)
    try {
      expect(await log.waitFor("unreachable", 10_000)).toBe(true)
      // Two retries on the unreachable cadence (0.3 s here), each failing the same way.
      const at = actor.getSnapshot().context.nextRetryAt!
      expect(await eventually(() => (actor.getSnapshot().context.nextRetryAt ?? 0) > at + 0.9 * RETRY_MS, 5_000)).toBe(true)
    } finally {
      retries.stop()
    }
    expect(log.statuses().join(" → ")).toBe("initializing → unreachable")
    const status = await server.get("/for_store/service_status/ghost")
    expect(status.body.last_error).toMatch(/ENOENT/)
    expect(status.body.last_error).toMatch(/\/nonexistent\/mcp-server-ghost/)
    expect(status.body.hint).toMatch(/no executable at "\/nonexistent\/mcp-server-ghost": check the path/)
    // No reconnection attempts (their backoff is for failures that may pass).
    expect(status.body.reconnect_attempts).toBe(0)
    expect([...new Set(retries.samples.map((s) => s.attempts))]).toEqual([0])
    const retryTimes = [...new Set(retries.samples.map((s) => s.nextRetryAt).filter((t): t is number => t !== undefined))]
    expect(retryTimes.length).toBeGreaterThanOrEqual(2)
    for (let i = 1; i < retryTimes.length; i++) expect(retryTimes[i]! - retryTimes[i - 1]!).toBeGreaterThanOrEqual(0.9 * RETRY_MS)
    const listed = (await server.get("/for_store/list_services")).body.services[0]
    expect(listed).toMatchObject({ status: "unreachable", last_error: expect.stringMatching(/ENOENT/), hint: status.body.hint })
  })
})

describe.concurrent("an upstream that dies comes back with no client request", () => {
  it("stdio server killed with SIGKILL: reconnecting, then healthy, with a new process", { timeout: 25_000 }, async (context) => {
    const o = own(context)
    // No scheduled health check in the test's time: a ping in flight when the process dies could
    // fail before the exit is seen (warning first: 3 of about 20 runs of this file on a loaded
    // machine), and the store is to notice the exit by itself.
    const { server, actor } = await healthyService(o, fixtureService("proc"), { ...QUICK_RETRIES, health_check_seconds: 3600, warning_check_seconds: 3600 })
    const pid = Number(firstText((await server.post("/for_store/call_tool", { tool_name: "proc__pid" })).body.content))
    const log = (o.log = recordStatuses(actor))
    process.kill(pid, "SIGKILL")
    // No request to the store from here until it is healthy again.
    expect(await log.waitFor("healthy", 15_000)).toBe(true)
    expect(log.statuses().join(" → ")).toBe("reconnecting → healthy")
    expect(log.transitions[0]!.reason).toMatch(/transport closed: the process was killed by SIGKILL/)
    expect(illegalTransitions(log.transitions)).toEqual([])
    // The history endpoint tells the same story.
    expect((await historyPairs(server, "proc")).slice(-2)).toEqual(pairs(log))
    const again = await server.post("/for_store/call_tool", { tool_name: "proc__pid" })
    expect(again.status).toBe(200)
    expect(Number(firstText(again.body.content))).not.toBe(pid)
  })

  it("HTTP server stopped: warning, reconnecting, unreachable; started again: healthy", { timeout: 30_000 }, async (context) => {
    const o = own(context)
    const http = (o.http = await startHttpFixture())
    const { server, actor } = await healthyService(o, { name: "remote", url: http.url }, QUICK_RETRIES)
    const log = (o.log = recordStatuses(actor))
    const started = performance.now()
    await http.stop()
    // 0.3 s checks: warning at the first refused ping, reconnecting at the second, three attempts 0.3 s apart.
    expect(await log.waitFor("unreachable", 15_000)).toBe(true)
    const downFor = performance.now() - started
    await http.restart()
    expect(await log.waitFor("healthy", 10_000)).toBe(true)
    // The end of its GET stream (a resumption refused) may be seen before the first refused ping.
    expect([["warning", "reconnecting", "unreachable", "healthy"], ["reconnecting", "unreachable", "healthy"]]).toContainEqual(log.statuses())
    expect(illegalTransitions(log.transitions)).toEqual([])
    // Three attempts with a backoff of 0.3 s each: neither a hot loop nor a long stall.
    expect(downFor).toBeGreaterThan(3 * 0.9 * RETRY_MS)
    expect(downFor).toBeLessThan(10_000)
    // The history is written as the monitor hears each change: the last one may come just after the
    // actor's, and a loaded machine may add a change after the recovery (a slow check: warning). The
    // changes from the stop through the recovery are in it, in order, one after the other.
    const seen = pairs(log)
    const through = seen.slice(0, seen.findIndex((p) => p.endsWith(">healthy")) + 1)
    expect(through.length).toBeGreaterThanOrEqual(3)
    const holds = async () => JSON.stringify(await historyPairs(server, "remote")).includes(JSON.stringify(through).slice(1, -1))
    await eventually(holds, 5000)
    expect({ history: await historyPairs(server, "remote"), holds: await holds() }).toMatchObject({ holds: true })
    const echo = await server.post("/for_store/call_tool", { tool_name: "remote__echo", args: { text: "back" } })
    expect(echo.body).toMatchObject({ success: true, result: "back" })
  })
})

describe.concurrent("a server that accepts connections and never answers", () => {
  it("after it hangs: a call ends with 504 at its 1 s time-out; checks time out: warning, then reconnecting; healthy once it answers", { timeout: 30_000 }, async (context) => {
    const o = own(context)
    const tunable = (o.tunable = await startTunableServer())
    const { server, actor } = await healthyService(o, { name: "hung", url: tunable.url }, QUICK_RETRIES)
    const log = (o.log = recordStatuses(actor))
    tunable.hang = true
    const t0 = performance.now()
    const call = await server.post("/for_store/call_tool", { tool_name: "hung__echo", args: { text: "x" }, timeout: 1 })
    const elapsed = performance.now() - t0
    expect(call.status).toBe(504)
    expect(call.body.error.code).toBe("TOOL_TIMEOUT")
    // It waited out its time-out, and ended as one.
    expect(elapsed).toBeGreaterThanOrEqual(1_000)
    expect(await log.waitFor("reconnecting", 5_000)).toBe(true)
    expect(log.statuses().slice(0, 2)).toEqual(["warning", "reconnecting"])
    expect(log.transitions[0]!.reason).toMatch(/no answer within 800 ms/)
    tunable.hang = false
    // An attempt made while it still hung would wait out its 5 s initialization time-out; the next one connects.
    expect(await log.waitFor("healthy", 12_000)).toBe(true)
    expect(illegalTransitions(log.transitions)).toEqual([])
    const records = await server.get("/for_store/tool_records?limit=50")
    expect(records.body.executions.find((r: { params: { text?: string } }) => r.params.text === "x")).toMatchObject({ outcome: "timeout" })
  })

  it("a raw TCP server that never replies: a 1 s call to the initializing service ends at 1 s with 504 TOOL_TIMEOUT", { timeout: 20_000 }, async (context) => {
    const o = own(context)
    const tcp = (o.tcp = await startSilentTcpServer())
    const server = await startStore(o)
    const added = await server.post("/for_store/add_service", { name: "mute", url: tcp.url })
    expect(added.body.services[0].status).toBe("initializing")
    o.log = recordStatuses(server.running.store.forStore().findService("mute")!)
    const t0 = performance.now()
    const call = await server.post("/for_store/call_tool", { tool_name: "mute__echo", args: { text: "x" }, timeout: 1 })
    const elapsed = performance.now() - t0
    // It waited out its time-out and ended as a time-out, not at the 5 s initialization time-out
    // (docs/lifecycle.md: a call to an initializing service waits up to the call time-out; 504 when
    // the call exceeded it), nor as 404 TOOL_NOT_FOUND.
    expect(elapsed).toBeGreaterThanOrEqual(1_000)
    expect({ status: call.status, code: call.body.error?.code }).toEqual({ status: 504, code: "TOOL_TIMEOUT" })
  })

  it("a raw TCP server that never replies: no connection within the initialization time-out, reconnecting", { timeout: 20_000 }, async (context) => {
    const o = own(context)
    const tcp = (o.tcp = await startSilentTcpServer())
    // An initialization time-out of 1 s (5 s in FAULT_MONITORING): nothing can answer in any case.
    const server = await startStore(o, { initialization_timeout_seconds: 1 })
    await server.post("/for_store/add_service", { name: "mute", url: tcp.url })
    const log = (o.log = recordStatuses(server.running.store.forStore().findService("mute")!, { fromStart: true }))
    expect(await log.waitFor("reconnecting", 8_000)).toBe(true)
    expect(log.transitions[1]).toMatchObject({ from: "initializing", to: "reconnecting" })
    expect(log.transitions[1]!.reason).toMatch(/no answer within 1000 ms/)
    expect(tcp.accepted()).toBeGreaterThanOrEqual(1)
    const status = await server.get("/for_store/service_status/mute")
    expect(status.body.last_error).toMatch(/no answer within 1000 ms/)
  })
})

describe.concurrent("a restart that forgets the session (HTTP 404)", () => {
  it("the next tool call reconnects and succeeds: one client request, answered 200", { timeout: 20_000 }, async (context) => {
    const o = own(context)
    const http = (o.http = await startHttpFixture())
    // No scheduled health check in the test's time (the first one comes at a random point of an hour).
    const { server, actor } = await healthyService(o, { name: "remote", url: http.url }, { health_check_seconds: 3600, warning_check_seconds: 3600 })
    const before = await server.post("/for_store/call_tool", { tool_name: "remote__echo", args: { text: "before" } })
    expect(before.body).toMatchObject({ success: true, result: "before" })
    const log = (o.log = recordStatuses(actor))
    await http.restart()
    expect(actor.getSnapshot().context.status).toBe("healthy") // nothing has noticed yet
    const call = await server.post("/for_store/call_tool", { tool_name: "remote__echo", args: { text: "after" } })
    expect(call.status).toBe(200)
    expect(call.body).toMatchObject({ success: true, result: "after", is_error: false })
    expect(log.statuses().join(" → ")).toBe("reconnecting → healthy")
    expect(log.transitions[0]!.reason).toMatch(/session expired/)
    expect(illegalTransitions(log.transitions)).toEqual([])
    // The server ran the call once, in a new session; the record says success.
    expect(http.sessions()).toBe(1)
    const records = await server.get("/for_store/tool_records?limit=1")
    expect(records.body.executions[0]).toMatchObject({ tool_name: "echo", outcome: "success", params: { text: "after" } })
  })
})

describe.concurrent("a slow server", () => {
  it("pings slower than slow_response_ms: warning (not reconnecting); fast again: healthy", { timeout: 20_000 }, async (context) => {
    const o = own(context)
    const tunable = (o.tunable = await startTunableServer())
    // Checks every 0.1 s (0.3 s in FAULT_MONITORING), so that the slow ones below come sooner.
    const { server, actor } = await healthyService(o, { name: "slow", url: tunable.url }, { health_check_seconds: 0.1, warning_check_seconds: 0.1 })
    const log = (o.log = recordStatuses(actor))
    tunable.pingDelayMs = 300 // over slow_response_ms (200), under ping_timeout_seconds (0.8 s)
    expect(await log.waitFor("warning", 5_000)).toBe(true)
    expect(log.transitions[0]!.reason).toMatch(/slow response: \d+ ms/)
    // Slow answers are answers: several more checks, and it stays in warning.
    const pings = tunable.pings()
    expect(await eventually(() => tunable.pings() >= pings + 4, 6_000)).toBe(true)
    expect(actor.getSnapshot().context.status).toBe("warning")
    tunable.pingDelayMs = 0
    expect(await log.waitFor("healthy", 5_000)).toBe(true)
    expect(log.statuses().join(" → ")).toBe("warning → healthy")
    expect(illegalTransitions(log.transitions)).toEqual([])
    const listed = (await server.get("/for_store/list_services")).body.services[0]
    expect(listed).toMatchObject({ status: "healthy", consecutive_failures: 0 })
  })
})
