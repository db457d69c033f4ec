// The system and application endpoints (GET /, /openapi.json, /health, /workspace/info) and
// network_check against live and closed loopback endpoints.
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { basename, dirname } from "node:path"
import { endpointCounts, routeTable } from "../../src/http/Api.js"
import { EXTRA_ROUTES } from "../../src/http/extras.js"
import { closedPort, startTestServer, toOpenApiPath, uptimeRange, type TestServer } from "../support/index.js"

const ISO = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?Z$/
const HTTP_METHODS = ["get", "post", "put", "delete", "patch", "head", "options"]

/** The contract's 56 endpoints (docs/api.md), written out: the route table's contract part must be exactly these. */
const STORE = [
  "POST add_service", "GET list_services", "GET get_service_info", "GET list_tools", "POST call_tool", "POST use_tool",
  "GET check_services", "GET health", "GET get_stats", "GET show_mcpconfig", "POST reset_config", "POST reset_mcp_json_file",
  "POST wait_service", "DELETE delete_service/{service_name}", "POST delete_service_two_step", "GET tool_records",
  "POST network_check", "GET system_resources", "GET service_status/{service_name}", "POST restart_service",
  "PUT update_service/{service_name}", "POST disconnect_service", "GET list_all_agents", "GET show_config", "POST refresh_tools"
]
const AGENT = [
  "POST add_service", "GET list_services", "GET get_service_info", "GET list_tools", "POST call_tool", "POST use_tool",
  "POST wait_service", "GET check_services", "DELETE delete_service/{service_name}", "GET show_mcpconfig", "POST reset_config",
  "GET health", "GET get_stats", "GET tool_records"
]
const MONITORING = [
  "agents_summary", "config", "services_status_distribution", "tools_usage_stats", "system_performance", "services_response_time",
  "error_rate_stats", "historical_stats", "service_health_history", "tool_call_history", "realtime_status", "active_connections",
  "resource_usage", "alerts"
]
const under = (prefix: string, routes: ReadonlyArray<string>) => routes.map((r) => r.replace(" ", ` ${prefix}/`))
const CONTRACT = [
  ...under("/for_store", STORE),
  ...under("/for_agent/{agent_id}", AGENT),
  ...MONITORING.map((p) => `GET /monitoring/${p}`),
  "GET /health", "GET /workspace/info",
  "GET /"
]

describe("system and application endpoints", { timeout: 10_000 }, () => {
  let server: TestServer

  beforeAll(async () => {
    server = await startTestServer({ services: { mcpServers: {} } })
  }, 15_000)
  afterAll(async () => {
    await server?.cleanup()
  }, 15_000)

  it("GET / counts the contract's 56 endpoints per group and lists the routes beyond them apart", async () => {
    const reply = await server.get("/")
    expect(reply.status).toBe(200)
    expect(reply.body).toMatchObject({ success: true, name: "mcp-store" })
    expect(typeof reply.body.version).toBe("string")
    expect(typeof reply.body.description).toBe("string")
    // The contract's figures (docs/api.md): store 25, agent 14, monitoring 14, application 2, system 1.
    expect(reply.body.endpoints).toEqual({ store: 25, agent: 14, monitoring: 14, application: 2, system: 1 })
    expect(reply.body.endpoints).toEqual(endpointCounts())
    const contract = routeTable().filter((r) => r.contract)
    expect(contract.map((r) => `${r.method} ${toOpenApiPath(r.path)}`).sort()).toEqual([...CONTRACT].sort())
    // Every other route is listed once under extra_routes: the groups' extras and the routes beside the groups.
    const extras: string[] = reply.body.extra_routes
    const beyond = [...routeTable().filter((r) => !r.contract), ...EXTRA_ROUTES].map((r) => `${r.method} ${toOpenApiPath(r.path)}`)
    expect([...extras].sort()).toEqual(beyond.sort())
    expect(new Set(extras).size).toBe(extras.length)
    for (const route of CONTRACT) expect(extras, route).not.toContain(route)
    for (const route of ["GET /for_store/list_resources", "POST /for_agent/{agent_id}/get_prompt", "POST /for_store/authorize_service", "GET /openapi.json", "POST /mcp", "GET /events"]) {
      expect(extras, route).toContain(route)
    }
  })

  it("GET /openapi.json documents exactly the routes of the table: the contract's and the groups' extras", async () => {
    const reply = await server.get("/openapi.json")
    expect(reply.status).toBe(200)
    expect(reply.body.openapi).toMatch(/^3\./)
    const operations: string[] = []
    for (const [path, item] of Object.entries(reply.body.paths as Record<string, Record<string, unknown>>)) {
      for (const method of Object.keys(item)) if (HTTP_METHODS.includes(method)) operations.push(`${method.toUpperCase()} ${path}`)
    }
    const table = routeTable().map((r) => `${r.method} ${toOpenApiPath(r.path)}`)
    expect(operations.sort()).toEqual([...table].sort())
    const root = await server.get("/")
    const total = Object.values(root.body.endpoints as Record<string, number>).reduce((a, b) => a + b, 0)
    const groupExtras = (root.body.extra_routes as string[]).filter((r) => operations.includes(r))
    expect(operations.length).toBe(total + groupExtras.length)
  })

  it("GET /health is healthy with version, uptime and a UTC time", async () => {
    const sentAt = Date.now()
    // The typed client: the answer is decoded with the contract's schema (version a string, ...).
    const health = await server.typed((c) => c.application.health())
    const uptime = uptimeRange(server.running.store.startedAt, sentAt, Date.now())
    expect(health).toMatchObject({ success: true, status: "healthy" })
    expect(health.uptime_seconds).toBeGreaterThanOrEqual(uptime.min)
    expect(health.uptime_seconds).toBeLessThanOrEqual(uptime.max)
    expect(health.timestamp).toMatch(ISO)
  })

  it("GET /workspace/info names the folder, the config file and the data space", async () => {
    const reply = await server.get("/workspace/info")
    expect(reply.status).toBe(200)
    expect(reply.body).toMatchObject({
      success: true,
      workspace_path: dirname(server.file),
      data_space: server.file
    })
    expect(reply.body.config_files).toContain(basename(server.file))
  })
})

describe("network_check", { timeout: 10_000 }, () => {
  let server: TestServer

  beforeAll(async () => {
    server = await startTestServer({ services: { mcpServers: {} } })
  }, 15_000)
  afterAll(async () => {
    await server?.cleanup()
  }, 15_000)

  it("a live loopback URL is reachable with its HTTP status; a closed port is not", { timeout: 10_000 }, async () => {
    const port = await closedPort()
    const live = `${server.url}/health`
    const missing = `${server.url}/no/such/page`
    const closed = `http://127.0.0.1:${port}/mcp`
    const reply = await server.post("/for_store/network_check", { endpoints: [live, { name: "missing page", url: missing }, closed] })
    expect(reply.status).toBe(200)
    expect(reply.body.success).toBe(true)
    const [a, b, c] = reply.body.results
    expect(a).toMatchObject({ endpoint_name: live, url: live, reachable: true, http_status: 200, status: "healthy", error: null })
    expect(a.response_time_ms).toBeGreaterThan(0)
    expect(a.checked_at).toMatch(ISO)
    // Any HTTP answer counts as reachable.
    expect(b).toMatchObject({ endpoint_name: "missing page", reachable: true, http_status: 404 })
    expect(c).toMatchObject({ url: closed, reachable: false, status: "error", http_status: null, response_time_ms: null })
    expect(c.error).toMatch(/ECONNREFUSED|refused/i)
  })

  it("a URL that is not http(s) is 400", async () => {
    for (const url of ["ftp://127.0.0.1/x", "file:///etc/passwd", "not a url"]) {
      const reply = await server.post("/for_store/network_check", { endpoints: [`${server.url}/health`, url] })
      expect(reply.status, url).toBe(400)
      expect(reply.body.error.code).toBe("VALIDATION_ERROR")
      expect(reply.body.error.details.fields.map((f: { field: string }) => f.field).join(" ")).toMatch(/endpoints/)
    }
  })

  it("more than 50 endpoints is 400; exactly 50 is checked", { timeout: 15_000 }, async () => {
    const url = `${server.url}/health`
    const tooMany = await server.post("/for_store/network_check", { endpoints: Array.from({ length: 51 }, () => url) })
    expect(tooMany.status).toBe(400)
    expect(tooMany.body.error.code).toBe("VALIDATION_ERROR")
    const fifty = await server.post("/for_store/network_check", { endpoints: Array.from({ length: 50 }, () => url) })
    expect(fifty.status).toBe(200)
    expect(fifty.body.results).toHaveLength(50)
    expect(fifty.body.results.every((r: { reachable: boolean }) => r.reachable)).toBe(true)
  })
})
