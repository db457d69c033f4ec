// call_tool and use_tool against real stdio upstreams: the fixture (answers bad arguments with
// JSON-RPC -32602), the demo server (an SDK McpServer; `add` has structured output) and the strict
// server (loose schemas, -32602/-32603 at run time). Success, tool errors, name resolution,
// ambiguity, invalid arguments, upstream errors, unknown tools, time-outs.
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { demoServer } from "../fixtures/paths.js"
import { FAILURE_TEXT } from "../fixtures/fixture-server.js"
import { fixtureService, localService, startTestServer, strictServer, type TestServer } from "../support/index.js"

describe.each(["call_tool", "use_tool"])("store %s", { timeout: 10_000 }, (endpoint) => {
  let server: TestServer
  const call = (body: unknown) => server.post(`/for_store/${endpoint}`, body)

  beforeAll(async () => {
    server = await startTestServer()
    const reply = await server.post("/for_store/add_service?wait=15", [
      fixtureService("fx"),
      localService("demo", demoServer),
      localService("strict", strictServer)
    ])
    expect(reply.body.services.map((s: { status: string }) => s.status)).toEqual(["healthy", "healthy", "healthy"])
  }, 25_000)
  afterAll(async () => {
    await server?.cleanup()
  }, 15_000)

  it("calls a tool by callable name: result text, content, no structured content", async () => {
    const reply = await call({ tool_name: "fx__echo", args: { text: "hello there" } })
    expect(reply.status).toBe(200)
    expect(reply.body).toMatchObject({
      success: true,
      result: "hello there",
      content: [{ type: "text", text: "hello there" }],
      structured_content: null,
      is_error: false,
      tool_name: "fx__echo",
      original_name: "echo",
      service_name: "fx"
    })
    expect(typeof reply.body.message).toBe("string")
    expect(reply.body.duration_ms).toBeGreaterThan(0)
    expect(reply.body.trace_id).toMatch(/\S/)
  })

  it("gives structured_content and uses it as result for a tool with structured output", async () => {
    const reply = await call({ tool_name: "demo__add", args: { a: 2, b: 40 } })
    expect(reply.status).toBe(200)
    expect(reply.body).toMatchObject({
      success: true,
      result: { sum: 42 },
      structured_content: { sum: 42 },
      content: [{ type: "text", text: "42" }],
      is_error: false,
      tool_name: "demo__add",
      original_name: "add",
      service_name: "demo"
    })
  })

  it("resolves an original name that only one service exposes", async () => {
    const reply = await call({ tool_name: "get_time", args: {} })
    expect(reply.status).toBe(200)
    expect(reply.body).toMatchObject({ success: true, tool_name: "demo__get_time", original_name: "get_time", service_name: "demo" })
    expect(reply.body.result).toMatch(/^\d{4}-\d{2}-\d{2}T/)
  })

  it("a tool error (isError) is HTTP 200 with success false, is_error true and the tool's text", async () => {
    const reply = await call({ tool_name: "fx__fail" })
    expect(reply.status).toBe(200)
    expect(reply.body).toMatchObject({ success: false, is_error: true, message: FAILURE_TEXT, result: FAILURE_TEXT, tool_name: "fx__fail" })
  })

  it("an unknown tool is 404 TOOL_NOT_FOUND in the contract's error shape", async () => {
    for (const name of ["fx__nope", "nope"]) {
      const reply = await call({ tool_name: name })
      expect(reply.status).toBe(404)
      expect(reply.body).toMatchObject({ success: false, error: { code: "TOOL_NOT_FOUND" } })
      expect(reply.body.error.message).toBe(reply.body.message)
    }
  })

  it("an original name two services expose is 400 AMBIGUOUS_TOOL with candidates; service_name disambiguates", async () => {
    const reply = await call({ tool_name: "echo", args: { text: "x" } })
    expect(reply.status).toBe(400)
    expect(reply.body).toMatchObject({ success: false, error: { code: "AMBIGUOUS_TOOL" } })
    expect([...reply.body.error.details.candidates].sort()).toEqual(["demo__echo", "fx__echo"])

    const demo = await call({ tool_name: "echo", service_name: "demo", args: { message: "via demo" } })
    expect(demo.status).toBe(200)
    expect(demo.body).toMatchObject({ success: true, result: "via demo", tool_name: "demo__echo", service_name: "demo" })
    const fx = await call({ tool_name: "echo", service_name: "fx", args: { text: "via fx" } })
    expect(fx.status).toBe(200)
    expect(fx.body).toMatchObject({ success: true, result: "via fx", tool_name: "fx__echo", service_name: "fx" })
  })

  it("arguments that break the tool's input schema are 400 INVALID_ARGUMENTS naming the field (both upstreams)", async () => {
    // Observed: the store checks arguments against the tool's inputSchema before the call leaves it,
    // so neither the fixture's -32602 nor the SDK McpServer's isError "Input validation error" is
    // ever reached: both answer the same contract error, with each bad field named.
    for (const tool of ["fx__add", "demo__add"]) {
      const reply = await call({ tool_name: tool, args: { a: "one", b: 2 } })
      expect(reply.status, tool).toBe(400)
      expect(reply.body).toMatchObject({ success: false, error: { code: "INVALID_ARGUMENTS" } })
      expect(reply.body.error.details.fields).toEqual(expect.arrayContaining([expect.objectContaining({ field: "args.a" })]))
      expect(reply.body.message).toBe(reply.body.error.message)
    }
    const missing = await call({ tool_name: "fx__echo", args: {} })
    expect(missing.status).toBe(400)
    expect(missing.body.error.code).toBe("INVALID_ARGUMENTS")
    expect(missing.body.error.details.fields).toEqual([expect.objectContaining({ field: "args.text" })])
  })

  it("an upstream JSON-RPC -32602 (schema accepted, server refused) is 400 INVALID_ARGUMENTS", async () => {
    const ok = await call({ tool_name: "strict__strict", args: { value: "ok" } })
    expect(ok.status).toBe(200)
    expect(ok.body).toMatchObject({ success: true, result: "accepted" })
    const reply = await call({ tool_name: "strict__strict", args: { value: "nope" } })
    expect(reply.status).toBe(400)
    expect(reply.body).toMatchObject({ success: false, error: { code: "INVALID_ARGUMENTS" } })
    expect(reply.body.message).toMatch(/value must be "ok"/)
  })

  it("another upstream JSON-RPC error is 502 UPSTREAM_ERROR with outcome protocol_error", async () => {
    const reply = await call({ tool_name: "strict__broken" })
    expect(reply.status).toBe(502)
    expect(reply.body).toMatchObject({ success: false, error: { code: "UPSTREAM_ERROR", details: { outcome: "protocol_error" } } })
    expect(reply.body.message).toMatch(/the tool broke/)
  })

  it("a call over its time-out is 504 TOOL_TIMEOUT", { timeout: 10_000 }, async () => {
    const started = performance.now()
    const reply = await call({ tool_name: "fx__sleep", args: { ms: 5_000 }, timeout: 0.4 })
    expect(reply.status).toBe(504)
    expect(reply.body).toMatchObject({ success: false, error: { code: "TOOL_TIMEOUT" } })
    expect(performance.now() - started).toBeLessThan(3_000)
  })

  it("an unknown service_name is 404 SERVICE_NOT_FOUND", async () => {
    const reply = await call({ tool_name: "echo", service_name: "ghost" })
    expect(reply.status).toBe(404)
    expect(reply.body.error.code).toBe("SERVICE_NOT_FOUND")
  })
})
