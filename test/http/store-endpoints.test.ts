// The store and agent endpoints added recently, over real HTTP against real MCP servers (the stdio
// fixture and the Streamable HTTP fixture): service info with masked secrets, tool lists, health
// checks and health as services fail, statistics and tool-call records, the services file views,
// resets and deletes, system figures, lifecycle detail, restart / update / disconnect (also across
// a server restart on the same file), agents, settings, and tool-list refresh (asked for, and by
// notifications/tools/list_changed). Each block runs its own server on 127.0.0.1, port 0, fast monitoring.
import { existsSync, readFileSync } from "node:fs"
import { totalmem } from "node:os"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { defaultMonitoring } from "../../src/domain/settings.js"
import { startHttpFixture, type HttpFixture } from "../fixtures/http-fixture.js"
import { eventually, FAST_MONITORING, firstText, fixtureService, processGone, quietFor, startTestServer, uptimeRange, type TestServer } from "../support/index.js"

const ISO = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?Z$/
const FIXTURE_TOOLS = ["echo", "add", "fail", "sleep", "add_tool", "pid"]
const STATUSES = ["initializing", "healthy", "warning", "reconnecting", "unreachable", "disconnecting", "disconnected"]

/** Waits (through wait_service) until a service has the status; fails the test if it does not. */
const reach = async (server: TestServer, prefix: string, name: string, status: string | string[], timeout = 15) => {
  const reply = await server.post(`${prefix}/wait_service`, { client_id_or_service_name: name, status, timeout })
  expect(reply.body.data?.result, `${prefix} ${name} -> ${JSON.stringify(status)}: ${reply.text.slice(0, 300)}`).toBe(true)
}

const clientIdOf = async (server: TestServer, prefix: string, name: string): Promise<string> => {
  const list = await server.get(`${prefix}/list_services`)
  const s = (list.body.services as Array<{ name: string; client_id: string }>).find((x) => x.name === name)
  expect(s, `${name} in ${prefix}`).toBeDefined()
  return s!.client_id
}

const expectNotFound = (reply: { status: number; body: any }, code = "SERVICE_NOT_FOUND") => {
  expect(reply.status).toBe(404)
  expect(reply.body).toMatchObject({ success: false, error: { code, message: reply.body.message } })
}

describe("reading the store: info, tools, configs, agents, figures, records", () => {
  let remote: HttpFixture
  let agentUpstream: HttpFixture
  let server: TestServer
  const AGENT = "agent-a"
  const local = { ...fixtureService("local", "--stderr-lines", "5"), env: { FIXTURE_SECRET: "s3cr3t-env-value", PLAIN: "also-hidden" } }

  beforeAll(async () => {
    ;[remote, agentUpstream] = await Promise.all([startHttpFixture(), startHttpFixture()])
    server = await startTestServer()
    const store = await server.post("/for_store/add_service?wait=15", [
      local,
      { name: "remote", url: remote.url, headers: { "x-token": "s3cr3t-header-value" } }
    ])
    expect(store.body.services?.map((s: { status: string }) => s.status), store.text).toEqual(["healthy", "healthy"])
    const agent = await server.post(`/for_agent/${AGENT}/add_service?wait=15`, { name: "agent-svc", url: agentUpstream.url })
    expect(agent.body.services?.[0]?.status, agent.text).toBe("healthy")
  }, 30_000)
  afterAll(async () => {
    await server?.cleanup()
    await Promise.all([remote?.stop(), agentUpstream?.stop()])
  })

  it("get_service_info: the service with its config (env and header values masked), its tools, connected", async () => {
    for (const key of ["local", await clientIdOf(server, "/for_store", "local")]) {
      const reply = await server.get(`/for_store/get_service_info?name=${encodeURIComponent(key)}`)
      expect(reply.status).toBe(200)
      expect(reply.body).toMatchObject({ success: true, connected: true })
      expect(reply.body.service).toMatchObject({ name: "local", status: "healthy", transport_type: "stdio", scope: "store", tool_count: 6 })
      expect(reply.body.service.config).toMatchObject({
        command: local.command,
        args: local.args,
        env: { FIXTURE_SECRET: "***", PLAIN: "***" }
      })
      expect(reply.body.tools.map((t: { name: string }) => t.name).sort()).toEqual(FIXTURE_TOOLS.map((t) => `local__${t}`).sort())
      for (const t of reply.body.tools) {
        expect(t).toMatchObject({ service_name: "local", original_name: t.name.slice("local__".length) })
        expect(typeof t.inputSchema).toBe("object")
      }
      expect(reply.text).not.toContain("s3cr3t")
      expect(reply.text).not.toContain("also-hidden")
    }
    const remoteInfo = await server.get("/for_store/get_service_info?name=remote")
    expect(remoteInfo.status).toBe(200)
    expect(remoteInfo.body.service.config).toEqual({ url: remote.url, headers: { "x-token": "***" } })
    expect(remoteInfo.body.service).toMatchObject({ transport_type: "streamable_http", url: remote.url })
    expect(remoteInfo.text).not.toContain("s3cr3t")
    // The agent's service is not the store's, and the other way round.
    expectNotFound(await server.get("/for_store/get_service_info?name=agent-svc"))
    expectNotFound(await server.get(`/for_agent/${AGENT}/get_service_info?name=local`))
    const agentInfo = await server.get(`/for_agent/${AGENT}/get_service_info?name=agent-svc`)
    expect(agentInfo.body).toMatchObject({ success: true, connected: true, service: { name: "agent-svc", scope: AGENT } })
  })

  it("list_tools: every tool, tools_by_service, a service_name filter (name or client_id), 404 for an unknown service", async () => {
    const all = await server.get("/for_store/list_tools")
    expect(all.status).toBe(200)
    expect(all.body).toMatchObject({ success: true, total_tools: 12, services_count: 2, tools_by_service: { local: 6, remote: 6 } })
    expect(all.body.tools).toHaveLength(12)
    expect(all.body.tools.map((t: { name: string }) => t.name)).toEqual(expect.arrayContaining(["local__echo", "remote__echo"]))
    for (const key of ["remote", await clientIdOf(server, "/for_store", "remote")]) {
      const one = await server.get(`/for_store/list_tools?service_name=${encodeURIComponent(key)}`)
      expect(one.status).toBe(200)
      expect(one.body).toMatchObject({ total_tools: 6, services_count: 1, tools_by_service: { remote: 6 } })
      expect(one.body.tools.every((t: { service_name: string }) => t.service_name === "remote")).toBe(true)
    }
    expectNotFound(await server.get("/for_store/list_tools?service_name=nope"))
    expectNotFound(await server.get("/for_store/list_tools?service_name=agent-svc"))
    const agent = await server.get(`/for_agent/${AGENT}/list_tools`)
    expect(agent.body).toMatchObject({ total_tools: 6, services_count: 1, tools_by_service: { "agent-svc": 6 } })
    // An agent without services answers with empty lists, not 404.
    const empty = await server.get("/for_agent/nobody/list_tools")
    expect(empty.body).toMatchObject({ success: true, total_tools: 0, tools: [] })
  })

  it("check_services: a real ping of every service, healthy_count and total", async () => {
    const before = Date.now()
    const sent = performance.now()
    const reply = await server.get("/for_store/check_services")
    const roundTrip = reply.receivedAt - sent
    expect(reply.status).toBe(200)
    expect(reply.body).toMatchObject({ success: true, healthy_count: 2, total: 2 })
    for (const s of reply.body.services) {
      expect(s).toMatchObject({ status: "healthy", healthy: true, error: null })
      expect(typeof s.response_time_ms).toBe("number")
      // A part of the request's round trip.
      expect(s.response_time_ms).toBeLessThanOrEqual(roundTrip + 1)
      expect(s.checked_at).toMatch(ISO)
      expect(Date.parse(s.checked_at)).toBeGreaterThanOrEqual(before - 5)
    }
    expect(reply.body.services.map((s: { name: string }) => s.name).sort()).toEqual(["local", "remote"])
    // The check is fed into the lifecycle: the service's last health check is now.
    const status = await server.get("/for_store/service_status/remote")
    expect(Date.parse(status.body.last_health_check_at)).toBeGreaterThanOrEqual(before - 5)
    const agent = await server.get(`/for_agent/${AGENT}/check_services`)
    expect(agent.body).toMatchObject({ healthy_count: 1, total: 1, services: [{ name: "agent-svc", healthy: true }] })
  })

  it("show_mcpconfig: the whole file for the store, the agent's mcpServers for an agent", async () => {
    const store = await server.get("/for_store/show_mcpconfig")
    expect(store.status).toBe(200)
    expect(store.body.path).toBe(server.file)
    // The file as written, secret values masked (docs/api.md); `reveal=true` shows them to an admin.
    expect(store.body.config.mcpServers.local.env).toEqual({ FIXTURE_SECRET: "***", PLAIN: "***" })
    expect(store.body.config.mcpServers.remote.headers).toEqual({ "x-token": "***" })
    const revealed = await server.get("/for_store/show_mcpconfig?reveal=true")
    expect(revealed.body.config).toEqual(server.readFile())
    expect(revealed.body.config.mcpServers.local.env).toEqual(local.env)
    expect((await server.get("/for_store/show_mcpconfig?reveal=yes")).status).toBe(400)
    const agent = await server.get(`/for_agent/${AGENT}/show_mcpconfig`)
    expect(agent.status).toBe(200)
    const file = server.readFile() as { agents: Record<string, { mcpServers: unknown }> }
    expect(agent.body.config).toEqual({ mcpServers: file.agents[AGENT]!.mcpServers })
    expect(agent.body.config).toEqual({ mcpServers: { "agent-svc": { url: agentUpstream.url } } })
    const nobody = await server.get("/for_agent/nobody/show_mcpconfig")
    expect(nobody.body.config).toEqual({ mcpServers: {} })
  })

  it("list_all_agents: each agent with its services, tools and status summary", async () => {
    const reply = await server.get("/for_store/list_all_agents")
    expect(reply.status).toBe(200)
    expect(reply.body).toMatchObject({ success: true, total_agents: 1 })
    expect(reply.body.agents).toEqual([
      { agent_id: AGENT, service_count: 1, tool_count: 6, status_summary: { healthy: 1 }, services: ["agent-svc"] }
    ])
  })

  it("show_config: effective settings with every monitoring key, defaults filled in", async () => {
    const reply = await server.get("/for_store/show_config")
    expect(reply.status).toBe(200)
    const config = reply.body.config
    expect(config).toMatchObject({ mcp_config_file: server.file, tool_record_max_file_size: 30, tool_record_retention_days: 7 })
    expect(typeof config.debug).toBe("boolean")
    const defaults = defaultMonitoring()
    expect(Object.keys(config.monitoring).sort()).toEqual(Object.keys(defaults).sort())
    // Given keys (the test server's fast settings) and defaults for the rest.
    expect(config.monitoring).toMatchObject({
      health_check_seconds: FAST_MONITORING.health_check_seconds,
      reconnection_seconds: 1,
      ping_timeout_seconds: 2,
      tools_update_hours: defaults.tools_update_hours,
      cleanup_hours: defaults.cleanup_hours,
      enable_tools_update: true,
      enable_reconnection: true,
      update_tools_on_reconnection: true,
      slow_response_ms: defaults.slow_response_ms,
      reconnecting_failure_threshold: defaults.reconnecting_failure_threshold,
      max_reconnect_attempts: defaults.max_reconnect_attempts,
      unreachable_retry_seconds: defaults.unreachable_retry_seconds,
      warning_check_seconds: FAST_MONITORING.health_check_seconds
    })
    expect(config.server).toMatchObject({
      host: "127.0.0.1",
      log_level: "error",
      api_key_set: false,
      allowed_hosts: [],
      allowed_origins: [],
      allow_remote_local_services: false,
      max_event_streams: 100,
      max_body_bytes: 1024 * 1024,
      max_connections: 1000
    })
    expect(config.limits).toEqual({ max_message_bytes: 16 * 1024 * 1024, max_services: 10_000, max_services_per_request: 100, max_waiters: 10_000, max_call_seconds: 3600, max_held_calls: 100, max_async_calls: 100, max_async_results: 1000, async_result_retention_seconds: 86_400, async_results_max_bytes: 64 * 1024 * 1024 })
    expect([0, server.running.port]).toContain(config.server.port)
  })

  it("system_resources: real figures of this machine and process", async () => {
    const sentAt = Date.now()
    const r = await server.typed((c) => c.store.systemResources())
    const uptime = uptimeRange(server.running.store.startedAt, sentAt, Date.now())
    expect(r.memory_total).toBe(totalmem())
    expect(r.memory_used).toBeGreaterThan(0)
    expect(r.memory_used).toBeLessThanOrEqual(r.memory_total)
    expect(r.memory_percentage).toBeGreaterThan(0)
    expect(r.memory_percentage).toBeLessThanOrEqual(100)
    expect(r.process_rss).toBeGreaterThan(0)
    expect(r.heap_used).toBeGreaterThan(0)
    // Of one core, over a short interval: at most all of them.
    expect(Number.isFinite(r.cpu_percentage)).toBe(true)
    expect(r.cpu_percentage).toBeLessThanOrEqual(100 * r.cpu_count + 5)
    expect(r.load_average).toHaveLength(3)
    expect(r.disk_total).toBeGreaterThan(0)
    // The services file is on it.
    expect(r.disk_used).toBeGreaterThan(0)
    expect(r.disk_used).toBeLessThanOrEqual(r.disk_total)
    expect(r.disk_usage_percentage).toBeCloseTo((r.disk_used / r.disk_total) * 100, 1)
    expect(r.server_uptime_seconds).toBeGreaterThanOrEqual(uptime.min)
    expect(r.server_uptime_seconds).toBeLessThanOrEqual(uptime.max)
  })

  it("service_status: counters, transitions and the stderr tail of a local service", async () => {
    for (const key of ["local", await clientIdOf(server, "/for_store", "local")]) {
      const reply = await server.get(`/for_store/service_status/${encodeURIComponent(key)}`)
      expect(reply.status).toBe(200)
      const s = reply.body
      expect(s).toMatchObject({ success: true, name: "local", status: "healthy", consecutive_failures: 0, reconnect_attempts: 0, next_retry_at: null })
      expect(s.state_entered_at).toMatch(ISO)
      expect(s.transitions.length).toBeGreaterThanOrEqual(2)
      expect(s.transitions.length).toBeLessThanOrEqual(20)
      for (const t of s.transitions) {
        expect(t.at).toMatch(ISO)
        expect(STATUSES).toContain(t.to)
        expect(typeof t.reason).toBe("string")
      }
      const tos = s.transitions.map((t: { to: string }) => t.to)
      expect(tos).toContain("initializing")
      expect(tos.indexOf("healthy")).toBeGreaterThan(tos.indexOf("initializing"))
      expect(s.transitions.find((t: { to: string }) => t.to === "healthy")).toMatchObject({ from: "initializing" })
      expect(s.stderr_tail).toEqual(expect.arrayContaining([1, 2, 3, 4, 5].map((i) => `stderr line ${i}`)))
    }
    const remoteStatus = await server.get("/for_store/service_status/remote")
    expect(remoteStatus.body.stderr_tail).toEqual([])
    expectNotFound(await server.get("/for_store/service_status/nope"))
  })

  describe("tool calls: get_stats and tool_records", () => {
    /** trace ids of the calls made here, in order, per scope. */
    const storeTraces: string[] = []
    const agentTraces: string[] = []
    const call = async (prefix: string, tool: string, args: Record<string, unknown>) => {
      const reply = await server.post(`${prefix}/call_tool`, { tool_name: tool, args })
      expect(reply.status, reply.text.slice(0, 200)).toBeLessThan(500)
      ;(prefix === "/for_store" ? storeTraces : agentTraces).push(reply.body.trace_id ?? `(no trace: ${reply.status})`)
      return reply
    }

    it("get_stats: tool_calls total, succeeded and failed move with calls", async () => {
      const before = (await server.get("/for_store/get_stats")).body
      expect(before).toMatchObject({
        success: true,
        context_type: "store",
        total_services: 2,
        total_tools: 12,
        healthy_services: 2,
        tools_by_service: { local: 6, remote: 6 },
        total_agents: 1
      })
      expect(before.services_by_status).toMatchObject({ healthy: 2 })
      expect(Object.keys(before.services_by_status).sort()).toEqual([...STATUSES].sort())
      expect(before.tool_calls).toEqual({ total: 0, succeeded: 0, failed: 0, avg_duration_ms: 0 })

      expect((await call("/for_store", "local__echo", { text: "one" })).body.result).toBe("one")
      expect((await call("/for_store", "local__fail", {})).body.is_error).toBe(true)
      const after = (await server.get("/for_store/get_stats")).body
      expect(after.tool_calls).toMatchObject({ total: 2, succeeded: 1, failed: 1 })
      expect(after.tool_calls.avg_duration_ms).toBeGreaterThan(0)

      // Calls that fail before the tool runs (arguments the tool's schema refuses) count as failed too.
      const invalid = await server.post("/for_store/call_tool", { tool_name: "local__add", args: { a: "x", b: 1 } })
      expect(invalid.status).toBe(400)
      expect(invalid.body.error.code).toBe("INVALID_ARGUMENTS")
      const third = (await server.get("/for_store/get_stats")).body
      expect(third.tool_calls).toMatchObject({ total: 3, succeeded: 1, failed: 2 })
      // An unknown tool is not a call: nothing is recorded.
      expect((await server.post("/for_store/call_tool", { tool_name: "nope__nope" })).status).toBe(404)
      expect((await server.get("/for_store/get_stats")).body.tool_calls.total).toBe(3)

      // The agent's statistics are its own.
      await call(`/for_agent/${AGENT}`, "agent-svc__echo", { text: "agent" })
      const agent = (await server.get(`/for_agent/${AGENT}/get_stats`)).body
      expect(agent).toMatchObject({ context_type: "agent", agent_id: AGENT, total_services: 1, total_tools: 6, tool_calls: { total: 1, succeeded: 1, failed: 0 } })
      expect(agent).not.toHaveProperty("total_agents")
      expect((await server.get("/for_store/get_stats")).body.tool_calls.total).toBe(3)
    })

    it("tool_records: newest first, paging, filters, and a summary over the whole scope", async () => {
      // One more of each kind, so filters have something to pick.
      await call("/for_store", "local__echo", { text: "two" })
      await call("/for_store", "remote__echo", { text: "three" })
      await call("/for_store", "local__add", { a: 2, b: 3 })
      await call("/for_store", "remote__fail", {})
      await call(`/for_agent/${AGENT}`, "agent-svc__add", { a: 1, b: 1 })

      const full = await server.get("/for_store/tool_records?limit=1000")
      expect(full.status).toBe(200)
      const records = full.body.executions as Array<Record<string, any>>
      // 2 + 1 refused + 4 calls of the store scope; the agent's are not here.
      expect(full.body.total).toBe(7)
      expect(records).toHaveLength(7)
      for (const r of records) {
        expect(r).toMatchObject({ scope: "store", agent_id: null })
        expect(r.timestamp).toMatch(ISO)
        expect(typeof r.id).toBe("string")
        expect(typeof r.duration_ms).toBe("number")
      }
      // Newest first: timestamps never increase, and the calls come back in reverse order.
      for (let i = 1; i < records.length; i++) expect(Date.parse(records[i - 1]!.timestamp)).toBeGreaterThanOrEqual(Date.parse(records[i]!.timestamp))
      const traced = records.map((r) => r.trace_id).filter((t) => storeTraces.includes(t))
      expect(traced).toEqual(storeTraces.filter((t) => !t.startsWith("(")).reverse())
      expect(records[0]).toMatchObject({ service_name: "remote", tool_name: "fail", outcome: "tool_error" })
      expect(records.find((r) => r.tool_name === "add" && r.outcome === "success")).toMatchObject({ params: { a: 2, b: 3 }, result: "5", error: null })
      expect(records.find((r) => r.outcome === "invalid_arguments")).toMatchObject({ tool_name: "add", service_name: "local" })

      // Paging: limit and offset cut the list; total and summary do not change.
      const page = await server.get("/for_store/tool_records?limit=2&offset=1")
      expect(page.body.executions.map((r: { id: string }) => r.id)).toEqual(records.slice(1, 3).map((r) => r.id))
      expect(page.body.total).toBe(7)
      expect(page.body.summary).toEqual(full.body.summary)
      const beyond = await server.get("/for_store/tool_records?offset=100")
      expect(beyond.body).toMatchObject({ executions: [], total: 7 })
      const defaultPage = await server.get("/for_store/tool_records")
      expect(defaultPage.body.executions).toHaveLength(7)

      // The summary covers every record of the scope.
      const summary = full.body.summary
      expect(summary.total_executions).toBe(7)
      expect(summary.by_service.local).toMatchObject({ count: 5, errors: 2 })
      expect(summary.by_service.remote).toMatchObject({ count: 2, errors: 1 })
      expect(summary.by_tool.local__echo).toMatchObject({ count: 2, errors: 0 })
      expect(summary.by_tool.local__add).toMatchObject({ count: 2, errors: 1 })
      expect(summary.by_tool.remote__fail).toMatchObject({ count: 1, errors: 1 })
      // The mean duration of the tool's records.
      for (const [tool, t] of Object.entries(summary.by_tool) as Array<[string, { avg_duration_ms: number }]>) {
        const durations = records.filter((r) => `${r.service_name}__${r.tool_name}` === tool).map((r) => r.duration_ms as number)
        expect(durations.length, tool).toBeGreaterThan(0)
        expect(t.avg_duration_ms, tool).toBeCloseTo(durations.reduce((a, b) => a + b, 0) / durations.length, 1)
      }

      // Filters: each narrows executions and total, never the summary.
      const filters: Array<[string, (r: Record<string, any>) => boolean]> = [
        ["service_name=remote", (r) => r.service_name === "remote"],
        ["tool_name=echo", (r) => r.tool_name === "echo"],
        ["outcome=tool_error", (r) => r.outcome === "tool_error"],
        ["service_name=local&outcome=success", (r) => r.service_name === "local" && r.outcome === "success"],
        [`since=${encodeURIComponent(records[2]!.timestamp)}`, (r) => Date.parse(r.timestamp) >= Date.parse(records[2]!.timestamp)],
        ["service_name=agent-svc", () => false]
      ]
      for (const [query, keep] of filters) {
        const reply = await server.get(`/for_store/tool_records?limit=1000&${query}`)
        expect(reply.status, query).toBe(200)
        const expected = records.filter(keep).map((r) => r.id)
        expect(reply.body.executions.map((r: { id: string }) => r.id), query).toEqual(expected)
        expect(reply.body.total, query).toBe(expected.length)
        expect(reply.body.summary, query).toEqual(summary)
      }

      // The agent's records only in the agent's endpoint.
      const agent = await server.get(`/for_agent/${AGENT}/tool_records`)
      expect(agent.body.total).toBe(2)
      expect(agent.body.executions.map((r: { trace_id: string }) => r.trace_id)).toEqual([...agentTraces].reverse())
      for (const r of agent.body.executions) expect(r).toMatchObject({ scope: "agent", agent_id: AGENT, service_name: "agent-svc" })
      expect(agent.body.summary).toMatchObject({ total_executions: 2, by_service: { "agent-svc": { count: 2, errors: 0 } } })
      expect(await server.get("/for_agent/nobody/tool_records")).toMatchObject({ status: 200, body: { executions: [], total: 0 } })

      // scope=all: every scope's records and summary.
      const all = await server.get("/for_store/tool_records?scope=all&limit=1000")
      expect(all.body.total).toBe(9)
      expect(all.body.summary.total_executions).toBe(9)
      expect(all.body.executions.filter((r: { agent_id: string | null }) => r.agent_id === AGENT)).toHaveLength(2)
      expect(all.body.summary.by_service["agent-svc"]).toMatchObject({ count: 2 })
    })
  })
})

describe("health and check_services as services fail", () => {
  let fixtures: HttpFixture[]
  let server: TestServer

  beforeAll(async () => {
    fixtures = await Promise.all([startHttpFixture(), startHttpFixture(), startHttpFixture()])
    server = await startTestServer()
    const store = await server.post("/for_store/add_service?wait=15", [
      { name: "h1", url: fixtures[0]!.url },
      { name: "h2", url: fixtures[1]!.url }
    ])
    expect(store.body.services?.map((s: { status: string }) => s.status), store.text).toEqual(["healthy", "healthy"])
    const agent = await server.post("/for_agent/watcher/add_service?wait=15", { name: "only", url: fixtures[2]!.url })
    expect(agent.body.services?.[0]?.status, agent.text).toBe("healthy")
  }, 30_000)
  afterAll(async () => {
    await server?.cleanup()
    await Promise.all((fixtures ?? []).map((f) => f.stop()))
  })

  const health = async (prefix = "/for_store") => (await server.get(`${prefix}/health`)).body

  it("healthy while every service is", async () => {
    const sentAt = Date.now()
    const h = await server.typed((c) => c.store.health())
    const uptime = uptimeRange(server.running.store.startedAt, sentAt, Date.now())
    expect(h).toMatchObject({ success: true, status: "healthy", total_services: 2, services: { healthy: 2 } })
    expect(Object.keys(h.services).sort()).toEqual([...STATUSES].sort())
    expect(h.uptime_seconds).toBeGreaterThanOrEqual(uptime.min)
    expect(h.uptime_seconds).toBeLessThanOrEqual(uptime.max)
    expect(await health("/for_agent/watcher")).toMatchObject({ status: "healthy", total_services: 1, agent_id: "watcher" })
  })

  it("a stopped upstream: the check reports it unhealthy, it leaves healthy, the store is degraded", async () => {
    await fixtures[0]!.stop()
    const check = await server.get("/for_store/check_services")
    expect(check.status).toBe(200)
    expect(check.body).toMatchObject({ healthy_count: 1, total: 2 })
    const h1 = check.body.services.find((s: { name: string }) => s.name === "h1")
    expect(h1).toMatchObject({ healthy: false, response_time_ms: null })
    expect(typeof h1.error).toBe("string")
    expect(h1.status).not.toBe("healthy")
    expect(check.body.services.find((s: { name: string }) => s.name === "h2")).toMatchObject({ healthy: true, status: "healthy" })
    const listed = (await server.get("/for_store/list_services")).body.services.find((s: { name: string }) => s.name === "h1")
    expect(listed.status).not.toBe("healthy")
    const h = await health()
    expect(h.status).toBe("degraded")
    expect(h.services.healthy).toBe(1)
  })

  it("every upstream stopped: unhealthy (store and agent)", async () => {
    await fixtures[1]!.stop()
    await fixtures[2]!.stop()
    const check = await server.get("/for_store/check_services")
    expect(check.body).toMatchObject({ healthy_count: 0, total: 2 })
    expect(check.body.services.every((s: { healthy: boolean; status: string }) => !s.healthy && s.status !== "healthy")).toBe(true)
    expect((await health()).status).toBe("unhealthy")
    const agentCheck = await server.get("/for_agent/watcher/check_services")
    expect(agentCheck.body).toMatchObject({ healthy_count: 0, total: 1 })
    expect(await health("/for_agent/watcher")).toMatchObject({ status: "unhealthy", agent_id: "watcher" })
  })
})

describe("restart, disconnect (across a server restart), update", () => {
  let upstream: HttpFixture
  let server: TestServer
  const name = "web"

  beforeAll(async () => {
    upstream = await startHttpFixture()
    server = await startTestServer()
    const reply = await server.post("/for_store/add_service?wait=15", { name, url: upstream.url })
    expect(reply.body.services?.[0]?.status, reply.text).toBe("healthy")
  }, 30_000)
  afterAll(async () => {
    await server?.cleanup()
    await upstream?.stop()
  })

  const transitions = async () => (await server.get(`/for_store/service_status/${name}`)).body.transitions as Array<{ from: string | null; to: string; at: string; reason: string }>

  it("restart_service from healthy: closes and connects afresh", async () => {
    const before = Date.now()
    const reply = await server.post("/for_store/restart_service", { service_name: name })
    expect(reply.status).toBe(200)
    expect(reply.body).toMatchObject({ success: true, service_name: name })
    expect(STATUSES).toContain(reply.body.status)
    await reach(server, "/for_store", name, "healthy")
    const after = (await transitions()).filter((t) => Date.parse(t.at) >= before - 5)
    expect(after.map((t) => t.to)).toEqual(expect.arrayContaining(["initializing", "healthy"]))
    expect(after.find((t) => t.to === "initializing")).toMatchObject({ from: "healthy" })
    // The old session was ended: one session is open upstream.
    expect(await eventually(() => upstream.sessions() === 1, 3_000)).toBe(true)
    expectNotFound(await server.post("/for_store/restart_service", { service_name: "nope" }))
  })

  it("disconnect_service: disconnected, marked disabled in the file", async () => {
    const reply = await server.post("/for_store/disconnect_service", { service_name: name, reason: "maintenance" })
    expect(reply.status).toBe(200)
    expect(reply.body).toMatchObject({ success: true, service_name: name, status: "disconnected" })
    const file = server.readFile() as { mcpServers: Record<string, Record<string, unknown>> }
    expect(file.mcpServers[name]).toEqual({ url: upstream.url, disabled: true })
    const tos = (await transitions()).map((t) => t.to)
    expect(tos.slice(-2)).toEqual(["disconnecting", "disconnected"])
    expect(await eventually(() => upstream.sessions() === 0, 3_000)).toBe(true)
    // It does not come back by itself (fast monitoring would have reconnected it by now).
    await quietFor(1_000)
    const listed = (await server.get("/for_store/list_services")).body.services[0]
    expect(listed).toMatchObject({ name, status: "disconnected" })
    expect((await server.post("/for_store/call_tool", { tool_name: `${name}__echo`, args: { text: "x" } })).status).toBe(503)

    // Enabling it is restart_service's: an edit saying "disabled": false is refused, and changes nothing.
    const put = (body: unknown) => server.request("PUT", `/for_store/update_service/${name}`, { body: JSON.stringify(body), headers: { "content-type": "application/json" } })
    const fileBefore = server.readFileText()
    for (const reply of [await put({ url: upstream.url, disabled: false }), await server.post("/for_store/add_service", { name, url: upstream.url, disabled: false })]) {
      expect(reply.status, reply.text).toBe(400)
      expect(JSON.stringify(reply.body.error.details.fields)).toContain("restart_service")
    }
    expect(server.readFileText()).toBe(fileBefore)
    // An edit that leaves `disabled` out keeps the service disabled, in the file and running.
    const edited = await put({ url: upstream.url, headers: { "x-while": "disabled" } })
    expect(edited.status, edited.text).toBe(200)
    expect((server.readFile() as { mcpServers: Record<string, unknown> }).mcpServers[name]).toEqual({ url: upstream.url, headers: { "x-while": "disabled" }, disabled: true })
    await quietFor(500)
    expect((await server.get("/for_store/list_services")).body.services[0]).toMatchObject({ name, status: "disconnected" })
    expect((await put({ url: upstream.url })).status).toBe(200)
  })

  it("still disconnected after a server restart on the same file; restart_service brings it back and removes the mark", { timeout: 30_000 }, async () => {
    await server.close()
    server = await startTestServer({ dir: server.dir })
    await reach(server, "/for_store", name, "disconnected", 5)
    await quietFor(1_000) // no reconnection by itself
    expect((await server.get("/for_store/list_services")).body.services[0]).toMatchObject({ name, status: "disconnected" })
    expect(upstream.sessions()).toBe(0)

    const reply = await server.post("/for_store/restart_service", { service_name: await clientIdOf(server, "/for_store", name) })
    expect(reply.status).toBe(200)
    expect(reply.body.service_name).toBe(name)
    await reach(server, "/for_store", name, "healthy")
    const file = server.readFile() as { mcpServers: Record<string, Record<string, unknown>> }
    expect(file.mcpServers[name]).toEqual({ url: upstream.url })
    const call = await server.post("/for_store/call_tool", { tool_name: `${name}__echo`, args: { text: "back" } })
    expect(call.body.result).toBe("back")
  })

  it("update_service: a changed definition is written and reconnects; unchanged changes nothing; a name mismatch is 400", async () => {
    const oldClientId = await clientIdOf(server, "/for_store", name)
    const before = Date.now()
    const definition = { url: upstream.url, headers: { "x-version": "2" } }
    const reply = await server.request("PUT", `/for_store/update_service/${name}`, {
      body: JSON.stringify(definition),
      headers: { "content-type": "application/json" }
    })
    expect(reply.status).toBe(200)
    expect(reply.body).toMatchObject({ success: true, changed: true, service: { name, url: upstream.url } })
    expect(reply.body.service.client_id).not.toBe(oldClientId)
    expect((server.readFile() as { mcpServers: Record<string, unknown> }).mcpServers[name]).toEqual(definition)
    await reach(server, "/for_store", name, "healthy")
    const changed = (await transitions()).filter((t) => Date.parse(t.at) >= before - 5)
    expect(changed.find((t) => t.to === "initializing")).toMatchObject({ reason: "definition changed" })

    const fileBefore = server.readFileText()
    const put = (path: string, body: unknown) =>
      server.request("PUT", path, { body: JSON.stringify(body), headers: { "content-type": "application/json" } })
    const same = await put(`/for_store/update_service/${encodeURIComponent(reply.body.service.client_id)}`, { name, ...definition })
    expect(same.status).toBe(200)
    expect(same.body).toMatchObject({ changed: false, service: { name, status: "healthy" } })
    const mismatch = await put(`/for_store/update_service/${name}`, { name: "other", url: upstream.url })
    expect(mismatch.status).toBe(400)
    expect(mismatch.body.error.code).toBe("VALIDATION_ERROR")
    expect(mismatch.body.error.details.fields.map((f: { field: string }) => f.field)).toContain("name")
    expectNotFound(await put("/for_store/update_service/nope", { url: upstream.url }))
    expect(server.readFileText()).toBe(fileBefore)
  })
})

describe("tool lists: refresh_tools, and notifications/tools/list_changed", () => {
  let upstream: HttpFixture
  let manual: TestServer
  let automatic: TestServer

  beforeAll(async () => {
    upstream = await startHttpFixture()
    // One store ignores list_changed (so only refresh_tools can show a new tool), one follows it.
    // New tools are taken at once: the tests add tools upstream on purpose (held by default: test/extras/tool-pins.test.ts).
    const options = { pin_new_tools: "accept" } as const
    ;[manual, automatic] = await Promise.all([startTestServer({ monitoring: { enable_tools_update: false }, options }), startTestServer({ options })])
    // The automatic one also has a local service: list_changed over stdio.
    for (const [server, defs] of [
      [manual, [{ name: "up", url: upstream.url }, { name: "up2", url: upstream.url }]],
      [automatic, [{ name: "up", url: upstream.url }, fixtureService("loc")]]
    ] as const) {
      const reply = await server.post("/for_store/add_service?wait=15", defs)
      expect(reply.body.services?.map((s: { status: string }) => s.status), reply.text).toEqual(["healthy", "healthy"])
    }
  }, 30_000)
  afterAll(async () => {
    await Promise.all([manual?.cleanup(), automatic?.cleanup()])
    await upstream?.stop()
  })

  const toolNames = async (server: TestServer, service: string) =>
    ((await server.get(`/for_store/list_tools?service_name=${service}`)).body.tools as Array<{ name: string }>).map((t) => t.name)

  it("refresh_tools: after add_tool the refresh shows changed and the new tool is listed", async () => {
    const added = await manual.post("/for_store/call_tool", { tool_name: "up__add_tool", args: { name: "manual_tool" } })
    expect(added.body.result).toBe("added manual_tool")
    expect(await toolNames(manual, "up")).not.toContain("up__manual_tool")

    const reply = await manual.post("/for_store/refresh_tools", { service_name: "up" })
    expect(reply.status).toBe(200)
    expect(reply.body.results).toEqual([{ service_name: "up", tool_count: 7, changed: true, status: "healthy", error: null }])
    expect(await toolNames(manual, "up")).toContain("up__manual_tool")
    const called = await manual.post("/for_store/call_tool", { tool_name: "up__manual_tool" })
    expect(called.body.result).toBe("called manual_tool")

    // Again: nothing changed. Without a body: every service of the store.
    const again = await manual.post("/for_store/refresh_tools", { service_name: "up" })
    expect(again.body.results).toMatchObject([{ service_name: "up", changed: false, tool_count: 7 }])
    const every = await manual.request("POST", "/for_store/refresh_tools")
    expect(every.status).toBe(200)
    expect(every.body.results.map((r: { service_name: string }) => r.service_name).sort()).toEqual(["up", "up2"])
    expectNotFound(await manual.post("/for_store/refresh_tools", { service_name: "nope" }))
  })

  it.each([
    ["up", "Streamable HTTP"],
    ["loc", "stdio"]
  ])("a tool added upstream arrives by itself through list_changed (%s, %s)", async (service) => {
    const tool = `auto_${service}`
    const added = await automatic.post("/for_store/call_tool", { tool_name: `${service}__add_tool`, args: { name: tool } })
    expect(added.body.result).toBe(`added ${tool}`)
    const arrived = await eventually(async () => (await toolNames(automatic, service)).includes(`${service}__${tool}`), 5_000)
    expect(arrived, `${service}__${tool} listed within 5 s without refresh_tools`).toBe(true)
  })
})

describe("delete_service and resets", () => {
  let fixtures: HttpFixture[]
  let server: TestServer

  const pidOf = async (prefix: string, service: string) => {
    const pid = Number(firstText((await server.post(`${prefix}/call_tool`, { tool_name: `${service}__pid` })).body.content))
    expect(pid).toBeGreaterThan(0)
    expect(processGone(pid)).toBe(false)
    return pid
  }
  const storeNames = async (scope = "") =>
    ((await server.get(`/for_store/list_services${scope}`)).body.services as Array<{ name: string; scope: string }>).map((s) => `${s.scope}/${s.name}`).sort()

  beforeAll(async () => {
    fixtures = await Promise.all([startHttpFixture(), startHttpFixture()])
    server = await startTestServer()
    const store = await server.post("/for_store/add_service?wait=15", [
      fixtureService("gone1"),
      fixtureService("gone2"),
      { name: "h-a", url: fixtures[0]!.url },
      { name: "h-b", url: fixtures[1]!.url }
    ])
    expect(store.body.services?.map((s: { status: string }) => s.status), store.text).toEqual(["healthy", "healthy", "healthy", "healthy"])
    for (const [agent, defs] of [
      ["ag", [fixtureService("a1"), { name: "a2", url: fixtures[0]!.url }]],
      ["ag2", [{ name: "b1", url: fixtures[1]!.url }]]
    ] as const) {
      const reply = await server.post(`/for_agent/${agent}/add_service?wait=15`, defs)
      expect(reply.body.services?.every((s: { status: string }) => s.status === "healthy"), reply.text).toBe(true)
    }
  }, 30_000)
  afterAll(async () => {
    await server?.cleanup()
    await Promise.all((fixtures ?? []).map((f) => f.stop()))
  })

  it("DELETE delete_service/{name} in the store, by name and by client_id: entry removed, process gone", async () => {
    const pid1 = await pidOf("/for_store", "gone1")
    const pid2 = await pidOf("/for_store", "gone2")
    const byName = await server.del("/for_store/delete_service/gone1")
    expect(byName.status).toBe(200)
    expect(byName.body).toMatchObject({ success: true, service_name: "gone1" })
    expect((server.readFile() as { mcpServers: Record<string, unknown> }).mcpServers).not.toHaveProperty("gone1")
    expect(processGone(pid1)).toBe(true)

    const byClientId = await server.del(`/for_store/delete_service/${await clientIdOf(server, "/for_store", "gone2")}`)
    expect(byClientId.status).toBe(200)
    expect(byClientId.body).toMatchObject({ success: true, service_name: "gone2" })
    expect((server.readFile() as { mcpServers: Record<string, unknown> }).mcpServers).not.toHaveProperty("gone2")
    expect(processGone(pid2)).toBe(true)
    expect(await storeNames()).toEqual(["store/h-a", "store/h-b"])
    expectNotFound(await server.del("/for_store/delete_service/gone1"))
  })

  it("DELETE delete_service/{name} of an agent, by name and by client_id; the HTTP session is ended", async () => {
    const pid = await pidOf("/for_agent/ag", "a1")
    // The agent's service, not the store's "h-a" of the same upstream.
    expectNotFound(await server.del("/for_agent/ag/delete_service/h-a"))
    const byName = await server.del("/for_agent/ag/delete_service/a1")
    expect(byName.body).toMatchObject({ success: true, service_name: "a1" })
    expect(processGone(pid)).toBe(true)

    const sessions = fixtures[0]!.sessions()
    const byClientId = await server.del(`/for_agent/ag/delete_service/${await clientIdOf(server, "/for_agent/ag", "a2")}`)
    expect(byClientId.body).toMatchObject({ success: true, service_name: "a2" })
    expect(await eventually(() => fixtures[0]!.sessions() === sessions - 1, 3_000)).toBe(true)
    const file = server.readFile() as { agents?: Record<string, { mcpServers: Record<string, unknown> }> }
    expect(file.agents?.ag?.mcpServers ?? {}).toEqual({})
    expect((await server.get("/for_agent/ag/list_services")).body).toMatchObject({ success: true, services: [] })
    expect((await server.get("/for_store/list_all_agents")).body.agents.map((a: { agent_id: string }) => a.agent_id)).toEqual(["ag2"])
    // The store's services are untouched.
    expect(await storeNames()).toEqual(["store/h-a", "store/h-b"])
  })

  it("reset_config scope store: only the store's services are stopped and removed", async () => {
    const reply = await server.post("/for_store/reset_config", {})
    expect(reply.status).toBe(200)
    expect(reply.body).toMatchObject({ success: true, scope: "store", removed: 2 })
    expect(await storeNames("?scope=all")).toEqual(["ag2/b1"])
    const file = server.readFile() as { mcpServers: Record<string, unknown>; agents: Record<string, { mcpServers: Record<string, unknown> }> }
    expect(file.mcpServers).toEqual({})
    expect(Object.keys(file.agents.ag2!.mcpServers)).toEqual(["b1"])
    expect(await eventually(() => fixtures[0]!.sessions() === 0, 3_000)).toBe(true)
  })

  it("reset_config scope all: the store's and every agent's services", async () => {
    const added = await server.post("/for_store/add_service?wait=15", { name: "again", url: fixtures[0]!.url })
    expect(added.body.services?.[0]?.status).toBe("healthy")
    const reply = await server.post("/for_store/reset_config?scope=all")
    expect(reply.status).toBe(200)
    expect(reply.body).toMatchObject({ success: true, scope: "all", removed: 2 })
    expect(await storeNames("?scope=all")).toEqual([])
    expect((await server.get("/for_store/list_all_agents")).body.total_agents).toBe(0)
    const file = server.readFile() as { mcpServers: Record<string, unknown>; agents?: Record<string, { mcpServers: Record<string, unknown> }> }
    expect(file.mcpServers).toEqual({})
    for (const agent of Object.values(file.agents ?? {})) expect(agent.mcpServers).toEqual({})
    expect(await eventually(() => fixtures[0]!.sessions() === 0 && fixtures[1]!.sessions() === 0, 3_000)).toBe(true)
  })

  it("an agent's reset_config removes that agent's services only", async () => {
    await server.post("/for_agent/x1/add_service?wait=15", { name: "s", url: fixtures[0]!.url })
    await server.post("/for_agent/x2/add_service?wait=15", { name: "s", url: fixtures[1]!.url })
    const reply = await server.post("/for_agent/x1/reset_config", {})
    expect(reply.status).toBe(200)
    expect(reply.body).toMatchObject({ success: true, removed: 1 })
    expect(await storeNames("?scope=all")).toEqual(["x2/s"])
  })

  it("reset_mcp_json_file: .bak holds the old file, the file is emptied, every service is stopped", async () => {
    await server.post("/for_store/add_service?wait=15", [fixtureService("last"), { name: "h", url: fixtures[0]!.url }])
    const pid = await pidOf("/for_store", "last")
    const old = server.readFileText()
    expect(old).toContain("last")
    const reply = await server.post("/for_store/reset_mcp_json_file")
    expect(reply.status).toBe(200)
    expect(reply.body).toMatchObject({ success: true, backup_path: `${server.file}.bak`, removed: 3 })
    expect(existsSync(reply.body.backup_path)).toBe(true)
    expect(readFileSync(reply.body.backup_path, "utf8")).toBe(old)
    expect(server.readFile()).toEqual({ mcpServers: {} })
    expect(await storeNames("?scope=all")).toEqual([])
    expect(processGone(pid)).toBe(true)
    expect(await eventually(() => fixtures[0]!.sessions() === 0 && fixtures[1]!.sessions() === 0, 3_000)).toBe(true)
    expect((await server.get("/for_store/show_mcpconfig")).body.config).toEqual({ mcpServers: {} })
  })
})
