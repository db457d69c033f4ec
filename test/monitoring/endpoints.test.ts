// The 14 monitoring endpoints read back what really happened: tool calls that succeed and fail, an
// upstream that dies and comes back (alerts raised and resolved, health history, error rates),
// several agents with local and remote services, and queries out of range. Everything goes through
// the real HTTP server on 127.0.0.1 with fast monitoring settings and the project's real fixtures.
import { connect, type Socket } from "node:net"
import { cpus, totalmem } from "node:os"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import type { MonitoringSettings } from "../../src/domain/settings.js"
import { startHttpFixture, type HttpFixture } from "../fixtures/http-fixture.js"
import { closedPort, eventually, fixtureService, startTestServer, type Reply, type TestServer } from "../support/index.js"

/**
 * Fast lifecycle: checks every 0.3 s, reconnection attempts 0.3 s apart, so a dead upstream is
 * unreachable after 3 attempts within about a second, and retried every 0.5 s from there.
 */
const MONITORING: Partial<MonitoringSettings> = {
  health_check_seconds: 0.3,
  warning_check_seconds: 0.3,
  reconnection_seconds: 0.3,
  ping_timeout_seconds: 1,
  initialization_timeout_seconds: 10,
  max_reconnect_attempts: 3,
  unreachable_retry_seconds: 0.5
}

const STATUSES = ["initializing", "healthy", "warning", "reconnecting", "unreachable", "disconnecting", "disconnected"]
const OUTCOMES = ["success", "tool_error", "invalid_arguments", "protocol_error", "transport_error", "message_too_large", "timeout", "unavailable", "tool_not_allowed", "cancelled", "interrupted", "denied", "approval_timeout", "tool_changed", "credentials_required"]
const ISO = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?Z$/

const utcDate = (ms: number) => new Date(ms).toISOString().slice(0, 10)

/** A 400 with the contract's error body, naming the refused query parameter. */
const expectRefused = (reply: Reply, field: string) => {
  expect(reply.status, `${field}: ${reply.text}`).toBe(400)
  expect(reply.body).toMatchObject({ success: false, error: { code: "VALIDATION_ERROR" } })
  expect(typeof reply.body.message).toBe("string")
  expect(reply.body.error.message).toBe(reply.body.message)
  expect(reply.body.error.details).toBeTypeOf("object")
  const fields: Array<{ field: string }> = reply.body.error.details.fields ?? []
  expect(fields.map((f) => f.field), reply.text).toContain(field)
}

const waitStatus = (server: TestServer, name: string, status: string | string[], timeout: number, agent?: string) =>
  server.post(agent === undefined ? "/for_store/wait_service" : `/for_agent/${agent}/wait_service`, {
    client_id_or_service_name: name,
    status,
    timeout
  })

describe("tool calls that succeed and fail", () => {
  let server: TestServer
  const sent: Array<{ service: string; tool: string; outcome: string }> = []
  let callsStartedAt = 0

  const call = async (tool: string, args: Record<string, unknown>, service: string, outcome: string) => {
    const reply = await server.post("/for_store/call_tool", { tool_name: `${service}__${tool}`, args })
    sent.push({ service, tool, outcome })
    return reply
  }

  beforeAll(async () => {
    server = await startTestServer({ monitoring: MONITORING })
    const added = await server.post("/for_store/add_service?wait=10", [fixtureService("calc"), fixtureService("spare")])
    expect(added.body.services.map((s: { status: string }) => s.status)).toEqual(["healthy", "healthy"])
    callsStartedAt = Date.now()

    for (const text of ["a", "b", "c"]) expect((await call("echo", { text }, "calc", "success")).body.success).toBe(true)
    for (const [a, b] of [[1, 2], [3, 4]]) expect((await call("add", { a, b }, "calc", "success")).body.result).toBe(String(a! + b!))
    const failed = await call("fail", {}, "calc", "tool_error")
    expect(failed.status).toBe(200)
    expect(failed.body).toMatchObject({ success: false, is_error: true })
    const invalid = await call("echo", { text: 5 }, "calc", "invalid_arguments")
    expect(invalid.status).toBe(400)
    expect(invalid.body.error.code).toBe("INVALID_ARGUMENTS")

    const off = await server.post("/for_store/disconnect_service", { service_name: "spare" })
    expect(off.status).toBe(200)
    expect((await waitStatus(server, "spare", "disconnected", 5)).body.data.result).toBe(true)
    const unavailable = await call("echo", { text: "x" }, "spare", "unavailable")
    expect(unavailable.status).toBe(503)
    expect(unavailable.body.error).toMatchObject({ code: "SERVICE_UNAVAILABLE", details: { status: "disconnected" } })
  }, 30_000)
  afterAll(async () => {
    await server?.cleanup()
  })

  it("tools_usage_stats: counts, success rate and p95 per tool, most called first, limit", async () => {
    const reply = await server.get("/monitoring/tools_usage_stats")
    expect(reply.status).toBe(200)
    expect(reply.body.success).toBe(true)
    const tools: Array<Record<string, any>> = reply.body.tools
    expect(tools.map((t) => `${t.service_name}/${t.tool_name}`)).toEqual(["calc/echo", "calc/add", expect.any(String), expect.any(String)])
    expect(tools.slice(2).map((t) => `${t.service_name}/${t.tool_name}`).sort()).toEqual(["calc/fail", "spare/echo"])
    expect(reply.body.total_tools).toBe(4)
    const echo = tools[0]!
    expect(echo).toMatchObject({ scope: "store", call_count: 4, success_count: 3, error_count: 1, success_rate: 0.75 })
    expect(echo.avg_duration_ms).toBeGreaterThan(0)
    expect(echo.p95_duration_ms).toBeGreaterThan(0)
    expect(echo.p95_duration_ms).toBeGreaterThanOrEqual(echo.avg_duration_ms * 0.99)
    expect(echo.last_called_at).toMatch(ISO)
    expect(tools[1]).toMatchObject({ call_count: 2, success_count: 2, error_count: 0, success_rate: 1 })
    const fail = tools.find((t) => t.tool_name === "fail")!
    expect(fail).toMatchObject({ call_count: 1, success_count: 0, error_count: 1, success_rate: 0 })
    for (let i = 1; i < tools.length; i++) expect(tools[i]!.call_count).toBeLessThanOrEqual(tools[i - 1]!.call_count)

    const limited = await server.get("/monitoring/tools_usage_stats?limit=2")
    expect(limited.body.tools.map((t: { tool_name: string }) => t.tool_name)).toEqual(["echo", "add"])
    expect(limited.body.total_tools).toBe(4)
    const narrowed = await server.get("/monitoring/tools_usage_stats?service_name=spare")
    expect(narrowed.body.tools).toEqual([expect.objectContaining({ service_name: "spare", tool_name: "echo", call_count: 1, error_count: 1 })])
  })

  it("error_rate_stats: totals, every outcome key, per service", async () => {
    const reply = await server.get("/monitoring/error_rate_stats")
    expect(reply.status).toBe(200)
    expect(reply.body).toMatchObject({ success: true, minutes: 60, total_calls: 8, failed_calls: 3, error_rate: 0.38 })
    expect(Object.keys(reply.body.by_outcome).sort()).toEqual([...OUTCOMES].sort())
    expect(reply.body.by_outcome).toEqual({ success: 5, tool_error: 1, invalid_arguments: 1, protocol_error: 0, transport_error: 0, message_too_large: 0, timeout: 0, unavailable: 1, tool_not_allowed: 0, cancelled: 0, interrupted: 0, denied: 0, approval_timeout: 0, tool_changed: 0, credentials_required: 0 })
    expect(reply.body.by_service).toEqual({
      calc: { calls: 7, errors: 2, error_rate: 0.29 },
      spare: { calls: 1, errors: 1, error_rate: 1 }
    })
    const narrowed = await server.get("/monitoring/error_rate_stats?service_name=calc&minutes=5")
    expect(narrowed.body).toMatchObject({ minutes: 5, total_calls: 7, failed_calls: 2 })
    expect(Object.keys(narrowed.body.by_service)).toEqual(["calc"])
  })

  it("tool_call_history: the records, newest first, limit", async () => {
    const reply = await server.get("/monitoring/tool_call_history")
    expect(reply.status).toBe(200)
    const calls: Array<Record<string, any>> = reply.body.calls
    expect(calls).toHaveLength(sent.length)
    expect(calls.map((c) => [c.service_name, c.tool_name, c.outcome])).toEqual([...sent].reverse().map((s) => [s.service, s.tool, s.outcome]))
    for (let i = 1; i < calls.length; i++) expect(calls[i]!.timestamp <= calls[i - 1]!.timestamp).toBe(true)
    expect(calls[0]).toMatchObject({ scope: "store", agent_id: null, outcome: "unavailable", params: { text: "x" } })
    expect(calls[0]!.id).toBeTypeOf("string")
    expect(calls[0]!.trace_id).toBeTypeOf("string")

    const three = await server.get("/monitoring/tool_call_history?limit=3")
    expect(three.body.calls.map((c: { id: string }) => c.id)).toEqual(calls.slice(0, 3).map((c) => c.id))
  })

  it("historical_stats: exactly `days` rows ending today (UTC), oldest first, today counts the calls", async () => {
    const reply = await server.get("/monitoring/historical_stats?days=3")
    const today = utcDate(Date.now())
    expect(reply.status).toBe(200)
    const rows: Array<Record<string, any>> = reply.body.days
    expect(rows.map((r) => r.date)).toEqual([utcDate(Date.now() - 2 * 86_400_000), utcDate(Date.now() - 86_400_000), today])
    // Every call of this test was made today (unless the clock passed midnight UTC meanwhile).
    if (utcDate(callsStartedAt) === today) {
      expect(rows[2]).toMatchObject({ calls: 8, errors: 3 })
      expect(rows[2]!.avg_duration_ms).toBeGreaterThan(0)
      expect(rows.slice(0, 2)).toEqual(rows.slice(0, 2).map((r) => ({ date: r.date, calls: 0, errors: 0, avg_duration_ms: 0 })))
    }
    const week = await server.get("/monitoring/historical_stats")
    expect(week.body.days).toHaveLength(7)
    expect(week.body.days.at(-1).date).toBe(today)
    const dates: string[] = week.body.days.map((r: { date: string }) => r.date)
    expect([...dates].sort()).toEqual(dates)
    expect(new Set(dates).size).toBe(7)
    const one = await server.get("/monitoring/historical_stats?days=1")
    expect(one.body.days.map((r: { date: string }) => r.date)).toEqual([today])
  })

  it("realtime_status: services per status, calls and errors of the last minute", async () => {
    const reply = await server.get("/monitoring/realtime_status")
    expect(reply.status).toBe(200)
    expect(reply.body).toMatchObject({ success: true, in_flight_calls: 0, calls_last_minute: 8, errors_last_minute: 3 })
    expect(reply.body.timestamp).toMatch(ISO)
    expect(Object.keys(reply.body.services).sort()).toEqual([...STATUSES].sort())
    expect(reply.body.services).toMatchObject({ healthy: 1, disconnected: 1, reconnecting: 0, unreachable: 0 })
    expect(reply.body.active_connections).toBeGreaterThanOrEqual(1)
  })

  it("system_performance: requests_total grows with the requests made, latency percentiles", async () => {
    const before = await server.typed((c) => c.monitoring.systemPerformance())
    for (let i = 0; i < 5; i++) expect((await server.get("/for_store/health")).status).toBe(200)
    const after = await server.typed((c) => c.monitoring.systemPerformance())
    expect(after.success).toBe(true)
    // The 5 requests and the first system_performance (its own figure is recorded once it is answered).
    expect(after.requests_total).toBeGreaterThanOrEqual(before.requests_total + 6)
    expect(after.requests_total).toBeLessThanOrEqual(before.requests_total + 7)
    expect(after.requests_per_second).toBeGreaterThan(0)
    expect(after.latency_ms.p50).toBeGreaterThan(0)
    expect(after.latency_ms.p95).toBeGreaterThanOrEqual(after.latency_ms.p50)
    expect(after.latency_ms.p99).toBeGreaterThanOrEqual(after.latency_ms.p95)
    expect(Number.isFinite(after.event_loop_lag_ms)).toBe(true)
    expect(Number.isFinite(after.cpu_percentage)).toBe(true)
    expect(after.memory_rss).toBeGreaterThan(after.heap_used)
    expect(after.uptime_seconds).toBeGreaterThan(0)
  })

  it("services_response_time: samples from health checks and from calls", async () => {
    const calcOf = async () =>
      ((await server.get("/monitoring/services_response_time")).body.services as Array<Record<string, any>>).find(
        (s) => s.service_name === "calc"
      )
    // 7 calls, and health checks every 0.3 s on top.
    expect(await eventually(async () => ((await calcOf())?.samples ?? 0) >= 9, 5_000)).toBe(true)
    const before = (await calcOf())!
    expect(before).toMatchObject({ scope: "store" })
    expect(before.last_ms).toBeGreaterThan(0)
    expect(before.avg_ms).toBeGreaterThan(0)
    expect(before.p95_ms).toBeGreaterThan(0)
    expect(before.p50_ms).toBeGreaterThan(0)
    expect(before.p50_ms).toBeLessThanOrEqual(before.p95_ms)

    // Three calls of 150 ms: the top 5 % of a few dozen samples.
    const slow = await Promise.all([1, 2, 3].map(() => server.post("/for_store/call_tool", { tool_name: "calc__sleep", args: { ms: 150 } })))
    for (const s of slow) expect(s.body.success).toBe(true)
    const after = (await calcOf())!
    expect(after.samples).toBeGreaterThanOrEqual(before.samples + 3)
    expect(after.samples).toBeLessThan(60)
    expect(after.p95_ms).toBeGreaterThanOrEqual(140)
    // The slow calls are a quarter of the samples at most: the median is one of the others, below
    // the 95th percentile that the slow calls now set.
    expect(after.p50_ms).toBeLessThan(after.p95_ms)

    const checks = await server.get("/monitoring/service_health_history?service_name=calc")
    expect(checks.body.checks.filter((c: { ok: boolean }) => c.ok).length).toBeGreaterThanOrEqual(1)
    const narrowed = await server.get("/monitoring/services_response_time?service_name=calc")
    expect(narrowed.body.services.map((s: { service_name: string }) => s.service_name)).toEqual(["calc"])
  })

  it("a call refused as unavailable never reached the service: it is not a response-time sample", async () => {
    // spare is disconnected: no health checks run, so only calls could add samples.
    const samplesOf = async () =>
      ((await server.get("/monitoring/services_response_time?service_name=spare")).body.services as Array<{ samples: number }>)[0]?.samples ?? 0
    const before = await samplesOf()
    const refused = await server.post("/for_store/call_tool", { tool_name: "spare__echo", args: { text: "again" } })
    expect(refused.status).toBe(503)
    sent.push({ service: "spare", tool: "echo", outcome: "unavailable" })
    expect(await samplesOf()).toBe(before)
  })

  it("queries out of range are refused with 400 and the contract body; an unknown service is 404", async () => {
    const refused: Array<[string, string]> = [
      ["/monitoring/tools_usage_stats?limit=0", "limit"],
      ["/monitoring/tools_usage_stats?limit=5000", "limit"],
      ["/monitoring/tool_call_history?limit=0", "limit"],
      ["/monitoring/tool_call_history?limit=5000", "limit"],
      ["/monitoring/alerts?limit=0", "limit"],
      ["/monitoring/alerts?limit=5000", "limit"],
      ["/monitoring/historical_stats?days=0", "days"],
      ["/monitoring/historical_stats?days=400", "days"],
      ["/monitoring/error_rate_stats?minutes=-1", "minutes"],
      ["/monitoring/error_rate_stats?minutes=0", "minutes"],
      ["/monitoring/service_health_history?service_name=calc&hours=0", "hours"],
      ["/monitoring/service_health_history?service_name=calc&hours=-3", "hours"],
      ["/monitoring/service_health_history", "service_name"],
      ["/monitoring/service_health_history?service_name=calc&agent_id=bad%20id!", "agent_id"],
      ["/monitoring/tools_usage_stats?agent_id=bad%20id!", "agent_id"],
      ["/monitoring/error_rate_stats?agent_id=%2Fetc", "agent_id"],
      ["/monitoring/tool_call_history?limit=abc", "limit"],
      ["/monitoring/alerts?include_resolved=maybe", "include_resolved"]
    ]
    for (const [path, field] of refused) expectRefused(await server.get(path), field)

    const unknown = await server.get("/monitoring/service_health_history?service_name=nosuch")
    expect(unknown.status).toBe(404)
    expect(unknown.body).toMatchObject({ success: false, error: { code: "SERVICE_NOT_FOUND" } })
    expect(unknown.body.error.message).toBe(unknown.body.message)
    const otherScope = await server.get("/monitoring/service_health_history?service_name=calc&agent_id=someone")
    expect(otherScope.status).toBe(404)

    // Refusals change nothing: the figures are as they were.
    const errors = await server.get("/monitoring/error_rate_stats?service_name=calc")
    expect(errors.body.total_calls).toBeGreaterThanOrEqual(7)
  })

  it("historical_stats: `days` is at most the retention (default 7 days); beyond it is refused", async () => {
    // docs/api.md: `days` (default 7, at most the retention); a value out of range is 400, not clamped.
    expectRefused(await server.get("/monitoring/historical_stats?days=8"), "days")
    expect((await server.get("/monitoring/historical_stats?days=7")).status).toBe(200)
  })
})

describe("an upstream that dies and comes back", () => {
  let http: HttpFixture
  let server: TestServer

  beforeAll(async () => {
    http = await startHttpFixture()
    server = await startTestServer({ monitoring: MONITORING })
    const added = await server.post("/for_store/add_service?wait=10", { name: "remote", url: http.url })
    expect(added.body.services[0]).toMatchObject({ status: "healthy" })
    const echo = await server.post("/for_store/call_tool", { tool_name: "remote__echo", args: { text: "up" } })
    expect(echo.body).toMatchObject({ success: true, result: "up" })
  }, 20_000)
  afterAll(async () => {
    await server?.cleanup()
    await http?.stop()
  })

  const alertsOf = async (query = "") =>
    (await server.get(`/monitoring/alerts${query}`)).body.alerts as Array<Record<string, any>>

  it("stopped: warning, then reconnecting and unreachable; alerts raised; checks, transitions and error rates show it; back: alerts resolved", { timeout: 30_000 }, async () => {
    expect(await alertsOf()).toEqual([])
    // A first health check answered while the upstream was up (the first one starts at a random offset).
    const answered = async () =>
      ((await server.get("/monitoring/service_health_history?service_name=remote")).body.checks as Array<{ ok: boolean }>).some((c) => c.ok)
    expect(await eventually(answered, 3_000)).toBe(true)
    const stoppedAt = Date.now()
    await http.stop()

    // One failed check (0.3 s) gives `warning`, the second `reconnecting`; 3 failed attempts `unreachable`.
    const warned = await eventually(async () => (await alertsOf()).some((a) => a.level === "warning"), 5_000)
    expect(warned).toBe(true)
    const reconnecting = await waitStatus(server, "remote", ["reconnecting", "unreachable"], 5)
    expect(reconnecting.body.data.result).toBe(true)

    // Calls during the outage are refused (503) and recorded as `unavailable`.
    for (let i = 0; i < 2; i++) {
      const refused = await server.post("/for_store/call_tool", { tool_name: "remote__echo", args: { text: "down" } })
      expect(refused.status).toBe(503)
      expect(refused.body.error).toMatchObject({ code: "SERVICE_UNAVAILABLE" })
      expect(["reconnecting", "unreachable"]).toContain(refused.body.error.details.status)
    }
    const rates = (await server.get("/monitoring/error_rate_stats?service_name=remote")).body
    expect(rates).toMatchObject({ total_calls: 3, failed_calls: 2, error_rate: 0.67 })
    expect(rates.by_outcome).toMatchObject({ success: 1, unavailable: 2 })
    expect(rates.by_service.remote).toEqual({ calls: 3, errors: 2, error_rate: 0.67 })
    const realtime = await server.typed((c) => c.monitoring.realtimeStatus())
    expect(realtime).toMatchObject({ calls_last_minute: 3, errors_last_minute: 2 })

    const unreachable = await waitStatus(server, "remote", "unreachable", 10)
    expect(unreachable.body.data).toMatchObject({ result: true, final_status: "unreachable" })

    const raised = await alertsOf()
    expect(raised.map((a) => a.level)).toEqual(["error", "warning"]) // newest first
    for (const a of raised) {
      expect(a).toMatchObject({ service_name: "remote", scope: "store", resolved: false, resolved_at: null })
      expect(a.alert_id).toBeTypeOf("string")
      expect(a.title).toContain("remote")
      expect(a.message).toBeTypeOf("string")
      expect(a.timestamp).toMatch(ISO)
      expect(Date.parse(a.timestamp)).toBeGreaterThanOrEqual(stoppedAt - 5)
    }
    expect(raised[0]!.timestamp >= raised[1]!.timestamp).toBe(true)
    const counted = (await server.get("/monitoring/alerts")).body
    expect(counted).toMatchObject({ total: 2, unresolved: 2 })

    const history = (await server.get("/monitoring/service_health_history?service_name=remote")).body
    expect(history).toMatchObject({ success: true, service_name: "remote", scope: "store", hours: 24 })
    const path = history.transitions.map((t: { from: string | null; to: string }) => `${t.from}>${t.to}`)
    expect(path).toEqual(["null>initializing", "initializing>healthy", "healthy>warning", "warning>reconnecting", "reconnecting>unreachable"])
    for (const t of history.transitions) {
      expect(t.at).toMatch(ISO)
      expect(t.reason).toBeTypeOf("string")
      expect(t.reason.length).toBeGreaterThan(0)
    }
    expect(history.transitions[2].reason).toMatch(/health check failed/)
    const failedChecks = history.checks.filter((c: { ok: boolean }) => !c.ok)
    expect(failedChecks.length).toBeGreaterThanOrEqual(2)
    for (const c of failedChecks) {
      expect(c.error).toBeTypeOf("string")
      expect(c.at).toMatch(ISO)
    }
    expect(history.checks.some((c: { ok: boolean; response_time_ms: number | null }) => c.ok && c.response_time_ms !== null)).toBe(true)
    const dist = await server.typed((c) => c.monitoring.servicesStatusDistribution({ urlParams: {} }))
    expect(dist.distribution).toMatchObject({ unreachable: 1, healthy: 0 })

    // Back on the same port: the next unreachable retry (every 0.5 s) connects.
    await http.restart()
    const back = await waitStatus(server, "remote", "healthy", 10)
    expect(back.body.data).toMatchObject({ result: true, final_status: "healthy" })

    const resolved = await alertsOf()
    expect(resolved.map((a) => a.alert_id)).toEqual(raised.map((a) => a.alert_id))
    for (const a of resolved) {
      expect(a.resolved).toBe(true)
      expect(a.resolved_at).toMatch(ISO)
      expect(Date.parse(a.resolved_at)).toBeGreaterThanOrEqual(Date.parse(a.timestamp))
    }
    expect(await alertsOf("?include_resolved=false")).toEqual([])
    expect((await server.get("/monitoring/alerts?include_resolved=false")).body).toMatchObject({ total: 0, unresolved: 0 })
    expect(await alertsOf("?include_resolved=true&limit=1")).toEqual([expect.objectContaining({ alert_id: raised[0]!.alert_id })])
    expect(await alertsOf("?service_name=other")).toEqual([])

    const after = (await server.get("/monitoring/service_health_history?service_name=remote")).body
    expect(after.transitions.at(-1)).toMatchObject({ from: "unreachable", to: "healthy" })
    const ok = await server.post("/for_store/call_tool", { tool_name: "remote__echo", args: { text: "again" } })
    expect(ok.body).toMatchObject({ success: true, result: "again" })
    expect((await server.get("/monitoring/error_rate_stats?service_name=remote")).body).toMatchObject({ total_calls: 4, failed_calls: 2 })
  })
})

describe("a deleted service's alerts", () => {
  let server: TestServer
  beforeAll(async () => {
    server = await startTestServer({ monitoring: { ...MONITORING, max_reconnect_attempts: 1 } })
  })
  afterAll(async () => server?.cleanup())

  it("are resolved when it is deleted (nothing would make it healthy again)", { timeout: 20_000 }, async () => {
    const url = `http://127.0.0.1:${await closedPort()}/mcp`
    await server.post("/for_agent/gone/add_service", { name: "dead", url })
    const open = async () =>
      ((await server.get("/monitoring/alerts?include_resolved=false")).body.alerts as Array<{ service_name: string; scope: string }>)
    expect(await eventually(async () => (await open()).some((a) => a.service_name === "dead" && a.scope === "gone"), 10_000)).toBe(true)
    expect((await server.del("/for_agent/gone/delete_service/dead")).status).toBe(200)
    expect(await open()).toEqual([])
    const all = (await server.get("/monitoring/alerts")).body.alerts as Array<{ resolved: boolean; resolved_at: string | null }>
    expect(all.length).toBeGreaterThan(0)
    for (const a of all) expect(a).toMatchObject({ resolved: true, resolved_at: expect.stringMatching(ISO) })
  })
})

describe("several agents with local and remote services", () => {
  let http: HttpFixture
  let server: TestServer
  let deadUrl: string
  const overrides: Partial<MonitoringSettings> = { ...MONITORING, slow_response_ms: 2500, disconnection_timeout_seconds: 4 }

  beforeAll(async () => {
    http = await startHttpFixture()
    deadUrl = `http://127.0.0.1:${await closedPort()}/mcp`
    server = await startTestServer({ monitoring: overrides })
    const [store, alpha, beta] = await Promise.all([
      server.post("/for_store/add_service?wait=15", fixtureService("local")),
      server.post("/for_agent/alpha/add_service?wait=15", [fixtureService("a-local"), { name: "a-remote", url: http.url }]),
      server.post("/for_agent/beta/add_service?wait=15", [{ name: "b-remote", url: http.url }, { name: "b-dead", url: deadUrl }])
    ])
    expect(store.body.services.map((s: { status: string }) => s.status)).toEqual(["healthy"])
    expect(alpha.body.services.map((s: { status: string }) => s.status)).toEqual(["healthy", "healthy"])
    expect(beta.body.services[0].status).toBe("healthy")
    expect(beta.body.services[1].status).not.toBe("healthy")
  }, 30_000)
  afterAll(async () => {
    await server?.cleanup()
    await http?.stop()
  })

  it("agents_summary: per agent services, tools, health, executions through it, last activity", async () => {
    const idle = (await server.get("/monitoring/agents_summary")).body
    const alphaIdle = idle.agents.find((a: { agent_id: string }) => a.agent_id === "alpha")
    expect(alphaIdle.total_tool_executions).toBe(0)

    const before = Date.now()
    for (const text of ["1", "2"]) {
      expect((await server.post("/for_agent/alpha/call_tool", { tool_name: "a-local__echo", args: { text } })).body.success).toBe(true)
    }
    expect((await server.post("/for_agent/alpha/call_tool", { tool_name: "a-remote__add", args: { a: 1, b: 1 } })).body.result).toBe("2")
    expect((await server.post("/for_agent/beta/call_tool", { tool_name: "b-remote__echo", args: { text: "b" } })).body.success).toBe(true)
    expect((await server.post("/for_store/call_tool", { tool_name: "local__echo", args: { text: "s" } })).body.success).toBe(true)

    const reply = await server.get("/monitoring/agents_summary")
    expect(reply.status).toBe(200)
    const body = reply.body
    expect(body).toMatchObject({ success: true, total_agents: 2, active_agents: 2, total_services: 5, store_services: 1, store_tools: 6 })
    expect(body.total_tools).toBe(6 * 4) // b-dead never listed tools
    const byId = Object.fromEntries(body.agents.map((a: { agent_id: string }) => [a.agent_id, a]))
    expect(Object.keys(byId).sort()).toEqual(["alpha", "beta"])
    expect(byId.alpha).toMatchObject({ service_count: 2, tool_count: 12, healthy_services: 2, unhealthy_services: 0, total_tool_executions: 3 })
    expect(byId.beta).toMatchObject({ service_count: 2, tool_count: 6, healthy_services: 1, unhealthy_services: 1, total_tool_executions: 1 })
    for (const id of ["alpha", "beta"]) {
      expect(byId[id].last_activity).toMatch(ISO)
      expect(Date.parse(byId[id].last_activity)).toBeGreaterThanOrEqual(before - 5)
      expect(Date.parse(byId[id].last_activity)).toBeLessThanOrEqual(Date.now())
    }
    // The agents' calls are theirs only: the store's call counts for neither.
    const records = (await server.get("/monitoring/tool_call_history?agent_id=alpha")).body.calls
    expect(records.map((r: { service_name: string }) => r.service_name).sort()).toEqual(["a-local", "a-local", "a-remote"])
    expect(records.every((r: { agent_id: string; scope: string }) => r.agent_id === "alpha" && r.scope === "agent")).toBe(true)
    const usage = (await server.get("/monitoring/tools_usage_stats?agent_id=beta")).body.tools
    expect(usage).toEqual([expect.objectContaining({ scope: "beta", service_name: "b-remote", tool_name: "echo", call_count: 1 })])
    const storeUsage = (await server.get("/monitoring/tools_usage_stats?agent_id=store")).body.tools
    expect(storeUsage.map((t: { service_name: string }) => t.service_name)).toEqual(["local"])
  })

  it("services_status_distribution: all seven keys, in all and per scope", async () => {
    const body = (await server.get("/monitoring/services_status_distribution")).body
    expect(body.success).toBe(true)
    expect(body.total_services).toBe(5)
    expect(Object.keys(body.distribution).sort()).toEqual([...STATUSES].sort())
    expect(body.distribution.healthy + body.distribution.warning).toBe(4)
    expect(body.distribution.initializing + body.distribution.reconnecting + body.distribution.unreachable).toBe(1)
    expect(Object.values(body.distribution as Record<string, number>).reduce((a, b) => a + b, 0)).toBe(5)
    expect(Object.keys(body.by_scope).sort()).toEqual(["alpha", "beta", "store"])
    for (const d of Object.values(body.by_scope as Record<string, Record<string, number>>)) {
      expect(Object.keys(d).sort()).toEqual([...STATUSES].sort())
    }
    expect(body.by_scope.store.healthy + body.by_scope.store.warning).toBe(1)
    expect(body.by_scope.alpha.healthy + body.by_scope.alpha.warning).toBe(2)
    expect(Object.values(body.by_scope.beta as Record<string, number>).reduce((a, b) => a + b, 0)).toBe(2)
    expect(body.by_scope.beta.healthy + body.by_scope.beta.warning).toBe(1)
  })

  it("service_health_history of an agent's service, and of the same name in another scope", async () => {
    const own = await server.get("/monitoring/service_health_history?service_name=a-local&agent_id=alpha")
    expect(own.status).toBe(200)
    expect(own.body).toMatchObject({ service_name: "a-local", scope: "alpha" })
    expect(own.body.transitions.slice(0, 2)).toMatchObject([
      { from: null, to: "initializing" },
      { from: "initializing", to: "healthy", reason: "connected" }
    ])
    expect((await server.get("/monitoring/service_health_history?service_name=a-local")).status).toBe(404)
    expect((await server.get("/monitoring/service_health_history?service_name=a-local&agent_id=beta")).status).toBe(404)
    const dead = (await server.get("/monitoring/service_health_history?service_name=b-dead&agent_id=beta")).body
    expect(dead.transitions[1]).toMatchObject({ from: "initializing" })
    expect(["reconnecting", "unreachable"]).toContain(dead.transitions[1].to)
  })

  it("active_connections: upstream sessions, local processes (fewer after a delete), client sockets", async () => {
    const before = await server.typed((c) => c.monitoring.activeConnections())
    expect(before.success).toBe(true)
    expect(before.upstream_sessions).toBe(4)
    expect(before.stdio_processes).toBe(2)
    expect(before.http_connections).toBeGreaterThanOrEqual(1)
    // No /events stream in this file.
    expect(before.event_subscribers).toBe(0)

    // Idle client sockets count as open connections while they are open.
    const sockets = await Promise.all(
      [1, 2, 3].map(
        () =>
          new Promise<Socket>((resolve, reject) => {
            const s = connect(server.running.port, "127.0.0.1", () => resolve(s))
            s.once("error", reject)
          })
      )
    )
    let opened: number
    try {
      // Ours, and the one that carries this request (fetch's pool may hold more, and may drop them).
      expect((await server.typed((c) => c.monitoring.activeConnections())).http_connections).toBeGreaterThanOrEqual(3 + 1)
      // Read in the process from here on: a request through fetch's pool could open a socket of its own.
      opened = server.running.monitor.httpConnections
      expect(opened).toBeGreaterThanOrEqual(3 + 1)
    } finally {
      for (const s of sockets) s.destroy()
    }
    expect(await eventually(() => server.running.monitor.httpConnections <= opened - 3, 10_000)).toBe(true)

    const deleted = await server.del("/for_agent/alpha/delete_service/a-local")
    expect(deleted.status).toBe(200)
    const after = await server.typed((c) => c.monitoring.activeConnections())
    expect(after.stdio_processes).toBe(1)
    expect(after.upstream_sessions).toBe(3)
    const summary = await server.typed((c) => c.monitoring.agentsSummary({ urlParams: {} }))
    expect(summary.agents.find((a: { agent_id: string }) => a.agent_id === "alpha")).toMatchObject({ service_count: 1, tool_count: 6 })
    expect(summary.total_services).toBe(4)
  })

  it("resource_usage: the process's, the system's and the disk's real figures", async () => {
    const body = await server.typed((c) => c.monitoring.resourceUsage())
    expect(body.success).toBe(true)
    expect(body.process.rss).toBeGreaterThan(10 * 1024 * 1024)
    expect(body.process.heap_used).toBeGreaterThan(0)
    expect(body.process.heap_used).toBeLessThanOrEqual(body.process.heap_total)
    expect(Number.isFinite(body.process.cpu_percentage)).toBe(true)
    expect(body.system.memory_total).toBe(totalmem())
    expect(body.system.memory_free).toBeGreaterThan(0)
    expect(body.system.memory_free).toBeLessThanOrEqual(body.system.memory_total)
    expect(body.system.load_average).toHaveLength(3)
    expect(body.system.cpus).toBe(cpus().length)
    expect(body.disk.total).toBeGreaterThan(0)
    expect(body.disk.used).toBeGreaterThan(0)
    expect(body.disk.used).toBeLessThanOrEqual(body.disk.total)
    expect(body.disk.percentage).toBeGreaterThan(0)
    expect(body.disk.percentage).toBeLessThanOrEqual(100)
  })

  it("config: every monitoring key with its default, the given ones applied", async () => {
    const reply = await server.get("/monitoring/config")
    expect(reply.status).toBe(200)
    const config = reply.body.config
    expect(config).toMatchObject({
      // given
      health_check_seconds: 0.3,
      warning_check_seconds: 0.3,
      reconnection_seconds: 0.3,
      ping_timeout_seconds: 1,
      initialization_timeout_seconds: 10,
      max_reconnect_attempts: 3,
      unreachable_retry_seconds: 0.5,
      slow_response_ms: 2500,
      disconnection_timeout_seconds: 4,
      // defaults (docs/lifecycle.md)
      tools_update_hours: 2,
      cleanup_hours: 24,
      enable_tools_update: true,
      enable_reconnection: true,
      update_tools_on_reconnection: true,
      reconnecting_failure_threshold: 2
    })
    expect(Object.keys(config).sort()).toEqual(
      [
        "health_check_seconds",
        "tools_update_hours",
        "reconnection_seconds",
        "cleanup_hours",
        "enable_tools_update",
        "enable_reconnection",
        "update_tools_on_reconnection",
        "warning_check_seconds",
        "ping_timeout_seconds",
        "slow_response_ms",
        "initialization_timeout_seconds",
        "reconnecting_failure_threshold",
        "max_reconnect_attempts",
        "unreachable_retry_seconds",
        "disconnection_timeout_seconds"
      ].sort()
    )
  })
})

/**
 * One store for the last two tests, with no services of its own but the second test's: the first
 * only reads its settings, the second counts the services it adds (whatever their status, so the
 * slow checks of this store's settings change nothing there).
 */
describe("a store with health checks every 4 s", () => {
  let server: TestServer
  beforeAll(async () => {
    server = await startTestServer({ monitoring: { health_check_seconds: 4 } })
  })
  afterAll(async () => {
    await server?.cleanup()
  })

  describe("defaults of /monitoring/config", () => {
    it("warning_check_seconds follows health_check_seconds (min(10, h)) when not given", async () => {
      const config = (await server.get("/monitoring/config")).body.config
      expect(config).toMatchObject({ health_check_seconds: 4, warning_check_seconds: 4, slow_response_ms: 3000, max_reconnect_attempts: 10, unreachable_retry_seconds: 300 })
    })
  })

  describe("an agent whose id is `store`", () => {
    it("services_status_distribution: the scopes' distributions add up to the total (the store's own services are not hidden)", async () => {
      // by_scope keys the store scope as `store`, and `store` matches the agent id pattern: either the
      // id is refused, or the figures keep the two scopes apart.
      const dead = `http://127.0.0.1:${await closedPort()}/mcp`
      expect((await server.post("/for_store/add_service", { name: "s1", url: dead })).status).toBe(200)
      const agent = await server.post("/for_agent/store/add_service", [{ name: "a1", url: dead }, { name: "a2", url: dead }])
      if (agent.status === 400) {
        expect(agent.body.error.code).toBe("VALIDATION_ERROR")
        return
      }
      expect(agent.status).toBe(200)
      const body = await server.typed((c) => c.monitoring.servicesStatusDistribution({ urlParams: {} }))
      expect(body.total_services).toBe(3)
      const sum = Object.values(body.by_scope)
        .flatMap((d) => Object.values(d))
        .reduce((a, b) => a + b, 0)
      expect(sum).toBe(3)
    })
  })
})
