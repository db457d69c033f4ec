// GET /metrics: Prometheus text (prom-client) with services per status and scope, tool calls by
// outcome, API requests, health-check durations, reconnections and the process figures; each
// server has its own registry, so two servers in one process both answer.
import { describe, expect, it } from "vitest"
import { startHttpFixture } from "../fixtures/http-fixture.js"
import { addService, eventually, parsePrometheus, sampleValue, useTestServers, waitStatus, type TestServer } from "../support/index.js"

const stores = useTestServers({ httpFixture: true })
const start = stores.start

const scrape = async (srv: TestServer) => {
  const reply = await srv.get("/metrics")
  expect(reply.status).toBe(200)
  return { text: reply.text, samples: parsePrometheus(reply.text), contentType: reply.headers.get("content-type") }
}

describe("GET /metrics", () => {
  it("the series of a deleted service, and of a deleted agent's services, are removed", async () => {
    const srv = await start()
    await addService(srv, "/for_store", { name: "gone", url: stores.fixture.url })
    await addService(srv, "/for_store", { name: "kept", url: stores.fixture.url })
    await addService(srv, "/for_agent/ag-del", { name: "agsvc", url: stores.fixture.url })
    for (const [prefix, tool] of [["/for_store", "gone__echo"], ["/for_store", "kept__echo"], ["/for_agent/ag-del", "agsvc__echo"]] as const) {
      expect((await srv.post(`${prefix}/call_tool`, { tool_name: tool, args: { text: "x" } })).status).toBe(200)
    }
    const calls = (service: string, scope = "store") => ({ scope, service, tool: "echo", outcome: "success" })
    const before = await scrape(srv)
    expect(sampleValue(before.samples, "mcpstore_tool_calls_total", calls("gone"))).toBe(1)
    expect(sampleValue(before.samples, "mcpstore_tool_calls_total", calls("agsvc", "ag-del"))).toBe(1)
    expect(before.samples.some((s) => s.name === "mcpstore_tool_call_duration_seconds_count" && s.labels["service"] === "gone")).toBe(true)

    expect((await srv.del("/for_store/delete_service/gone")).status).toBe(200)
    expect((await srv.post("/for_agent/ag-del/reset_config", {})).status).toBe(200)
    const after = await scrape(srv)
    const of = (service: string) => after.samples.filter((s) => s.labels["service"] === service)
    expect(of("gone")).toEqual([])
    expect(of("agsvc")).toEqual([])
    expect(after.samples.some((s) => s.labels["scope"] === "ag-del" && s.labels["service"] !== undefined)).toBe(false)
    expect(sampleValue(after.samples, "mcpstore_tool_calls_total", calls("kept"))).toBe(1)
  })

  it("is Prometheus text with services, tool calls, API requests, health checks and process figures", async () => {
    const srv = await start()
    await addService(srv, "/for_store", { name: "alpha", url: stores.fixture.url })
    await waitStatus(srv, "/for_store", "alpha", "healthy")

    const first = await scrape(srv)
    expect(first.contentType).toMatch(/^text\/plain; version=0\.0\.4/)
    expect(first.text).toContain("# TYPE mcpstore_services gauge")
    expect(first.text).toMatch(/^mcpstore_services\{status="healthy",scope="store"\} 1$/m)
    expect(sampleValue(first.samples, "mcpstore_services", { status: "initializing", scope: "store" })).toBe(0)
    expect(sampleValue(first.samples, "mcpstore_tools")).toBeGreaterThan(0)
    expect(first.text).toMatch(/^mcpstore_process_/m)
    expect(first.samples.some((s) => s.name.startsWith("mcpstore_process_") && Number.isFinite(s.value))).toBe(true)
    expect(sampleValue(first.samples, "mcpstore_status_transitions_total", { to: "healthy" })).toBeGreaterThanOrEqual(1)
    const requestsBefore = sampleValue(first.samples, "mcpstore_http_requests_total")
    expect(requestsBefore).toBeGreaterThan(0)

    const success = { scope: "store", service: "alpha", tool: "echo", outcome: "success" }
    const toolError = { scope: "store", service: "alpha", tool: "fail", outcome: "tool_error" }
    expect(sampleValue(first.samples, "mcpstore_tool_calls_total", success)).toBe(0)
    for (let i = 0; i < 2; i++) expect((await srv.post("/for_store/call_tool", { tool_name: "alpha__echo", args: { text: "x" } })).status).toBe(200)
    const fail = await srv.post("/for_store/call_tool", { tool_name: "alpha__fail", args: {} })
    expect(fail.body.is_error).toBe(true)

    const second = await scrape(srv)
    expect(sampleValue(second.samples, "mcpstore_tool_calls_total", success)).toBe(2)
    expect(sampleValue(second.samples, "mcpstore_tool_calls_total", toolError)).toBe(1)
    expect(sampleValue(second.samples, "mcpstore_tool_call_duration_seconds_count", { service: "alpha", outcome: "success" })).toBe(2)
    // The four requests since the first scrape (that scrape itself included) are counted.
    expect(sampleValue(second.samples, "mcpstore_http_requests_total")).toBeGreaterThanOrEqual(requestsBefore + 4)
    expect(sampleValue(second.samples, "mcpstore_http_requests_total", { method: "POST", status: "200" })).toBeGreaterThanOrEqual(4)
    expect(sampleValue(second.samples, "mcpstore_http_request_duration_seconds_count")).toBeGreaterThan(0)

    // Health checks run every 0.5 s here: their durations are observed.
    expect(
      await eventually(
        async () => sampleValue((await scrape(srv)).samples, "mcpstore_health_check_duration_seconds_count", { scope: "store", service: "alpha" }) > 0,
        5000
      )
    ).toBe(true)
  })

  it("counts a reconnection when the HTTP server of a service goes away and comes back", async () => {
    const own = await startHttpFixture()
    try {
      const srv = await start()
      await addService(srv, "/for_store", { name: "flaky", url: own.url })
      await waitStatus(srv, "/for_store", "flaky", "healthy")
      expect(sampleValue((await scrape(srv)).samples, "mcpstore_reconnections_total", { service: "flaky" })).toBe(0)

      await own.stop()
      await waitStatus(srv, "/for_store", "flaky", ["reconnecting", "unreachable"], 10)
      await own.restart()
      await waitStatus(srv, "/for_store", "flaky", "healthy", 15)

      const { samples } = await scrape(srv)
      expect(sampleValue(samples, "mcpstore_reconnections_total", { scope: "store", service: "flaky" })).toBeGreaterThanOrEqual(1)
      expect(sampleValue(samples, "mcpstore_status_transitions_total", { to: "reconnecting" })).toBeGreaterThanOrEqual(1)
      expect(sampleValue(samples, "mcpstore_services", { status: "healthy", scope: "store" })).toBe(1)
    } finally {
      await own.stop()
    }
  })

  it("keeps one registry per server: two servers in one process both answer", async () => {
    const one = await start()
    const two = await start()
    await addService(one, "/for_store", { name: "alpha", url: stores.fixture.url })
    await addService(two, "/for_agent/a1", { name: "beta", url: stores.fixture.url })
    await waitStatus(one, "/for_store", "alpha", "healthy")
    await waitStatus(two, "/for_agent/a1", "beta", "healthy")
    const [a, b] = await Promise.all([scrape(one), scrape(two)])
    expect(sampleValue(a.samples, "mcpstore_services", { status: "healthy", scope: "store" })).toBe(1)
    expect(sampleValue(a.samples, "mcpstore_services", { scope: "a1" })).toBe(0)
    expect(sampleValue(b.samples, "mcpstore_services", { status: "healthy", scope: "store" })).toBe(0)
    expect(sampleValue(b.samples, "mcpstore_services", { status: "healthy", scope: "a1" })).toBe(1)
    expect(a.text).toMatch(/^mcpstore_process_/m)
    expect(b.text).toMatch(/^mcpstore_process_/m)
    // Closing one leaves the other's metrics working.
    await one.close()
    expect((await scrape(two)).text).toMatch(/^mcpstore_services\{status="healthy",scope="a1"\} 1$/m)
  })
})
