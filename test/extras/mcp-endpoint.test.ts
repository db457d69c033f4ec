// The store as one MCP server (/mcp and /for_agent/{id}/mcp), driven by the SDK's own client over
// Streamable HTTP: callable tool names of connected services only, tool calls (content,
// structuredContent, isError for tool errors and unknown tools) recorded like HTTP calls,
// notifications/tools/list_changed, agent isolation, bad agent ids, session termination, shutdown.
import { Client } from "@modelcontextprotocol/sdk/client/index.js"
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js"
import { ToolListChangedNotificationSchema } from "@modelcontextprotocol/sdk/types.js"
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest"
import { FAILURE_TEXT } from "../fixtures/fixture-server.js"
import { startHttpFixture, type HttpFixture } from "../fixtures/http-fixture.js"
import { demoServer } from "../fixtures/paths.js"
import { addService, closedPort, localService, startTestServer, waitStatus, within, type TestServer } from "../support/index.js"

let fixture: HttpFixture
let server: TestServer | undefined
const clients: Client[] = []

beforeAll(async () => {
  fixture = await startHttpFixture()
})
afterAll(async () => {
  await fixture.stop()
})
afterEach(async () => {
  await Promise.all(clients.splice(0).map((c) => within(c.close(), 3000, "client close").catch(() => undefined)))
  await server?.cleanup()
  server = undefined
})

const start = async (options: Parameters<typeof startTestServer>[0] = {}) => {
  server = await startTestServer(options)
  return server
}

/**
 * An SDK client connected to `path` of the server; closed in afterEach. `getStream` resolves once
 * the server has answered the client's standalone GET stream (the one that carries notifications).
 */
const connect = async (path: string) => {
  let streamOpen!: () => void
  const getStream = new Promise<void>((resolve) => (streamOpen = resolve))
  const transport = new StreamableHTTPClientTransport(new URL(server!.url + path), {
    reconnectionOptions: { maxRetries: 0, initialReconnectionDelay: 100, maxReconnectionDelay: 100, reconnectionDelayGrowFactor: 1 },
    fetch: async (url, init) => {
      const res = await fetch(url, init)
      if ((init?.method ?? "GET") === "GET" && res.ok) streamOpen()
      return res
    }
  })
  const client = new Client({ name: "extras-test", version: "1.0.0" })
  client.onerror = () => undefined
  clients.push(client)
  await within(client.connect(transport), 10_000, `connect ${path}`)
  return { client, transport, getStream }
}

const toolNames = async (client: Client) => (await within(client.listTools(), 5000, "tools/list")).tools.map((t) => t.name).sort()

/** Resolves on the next notifications/tools/list_changed. */
const listChanged = (client: Client) => {
  let resolve!: () => void
  let count = 0
  let next = new Promise<void>((r) => (resolve = r))
  client.setNotificationHandler(ToolListChangedNotificationSchema, async () => {
    count += 1
    resolve()
  })
  return {
    get count() {
      return count
    },
    /** Waits for a notification after the previous `wait`. */
    wait: async (ms: number, label: string) => {
      await within(next, ms, label)
      next = new Promise<void>((r) => (resolve = r))
    }
  }
}

describe("/mcp", () => {
  it("lists the callable names of the tools of healthy services only", async () => {
    const srv = await start()
    await addService(srv, "/for_store", { name: "alpha", url: fixture.url })
    await addService(srv, "/for_store", { name: "beta", url: fixture.url })
    // A service that cannot connect is never healthy: its tools are not offered.
    const port = await closedPort()
    expect((await srv.post("/for_store/add_service", { name: "down", url: `http://127.0.0.1:${port}/mcp` })).status).toBe(200)

    const { client } = await connect("/mcp")
    const names = await toolNames(client)
    expect(names).toContain("alpha__echo")
    expect(names).toContain("beta__add")
    expect(names.every((n) => /^(alpha|beta)__[a-z_]+$/.test(n))).toBe(true)
    expect(names.filter((n) => n.startsWith("alpha__")).length).toBe(names.filter((n) => n.startsWith("beta__")).length)
    const listed = (await client.listTools()).tools.find((t) => t.name === "alpha__add")!
    expect(listed.description).toBe("Adds two numbers.")
    expect(listed.inputSchema).toMatchObject({ type: "object", properties: { a: expect.anything(), b: expect.anything() } })

    const reply = await srv.post("/for_store/disconnect_service", { service_name: "beta" })
    expect(reply.status).toBe(200)
    await waitStatus(srv, "/for_store", "beta", "disconnected")
    const after = await toolNames(client)
    expect(after.some((n) => n.startsWith("beta__"))).toBe(false)
    expect(after).toContain("alpha__echo")
  })

  it("calls tools: content and structuredContent, a tool error and an unknown tool come back isError; calls are recorded", async () => {
    const srv = await start()
    await addService(srv, "/for_store", { name: "alpha", url: fixture.url })
    await addService(srv, "/for_store", localService("demo", demoServer))
    await waitStatus(srv, "/for_store", "demo", "healthy")
    const { client } = await connect("/mcp")

    const sum = await within(client.callTool({ name: "demo__add", arguments: { a: 4, b: 5 } }), 10_000, "demo__add")
    expect(sum.isError ?? false).toBe(false)
    expect(sum.content).toEqual([{ type: "text", text: "9" }])
    expect(sum.structuredContent).toEqual({ sum: 9 })

    const echo = await within(client.callTool({ name: "alpha__echo", arguments: { text: "hello" } }), 10_000, "alpha__echo")
    expect(echo.content).toEqual([{ type: "text", text: "hello" }])
    expect(echo.structuredContent).toBeUndefined()

    const failed = await within(client.callTool({ name: "alpha__fail", arguments: {} }), 10_000, "alpha__fail")
    expect(failed.isError).toBe(true)
    expect(failed.content).toEqual([{ type: "text", text: FAILURE_TEXT }])

    const unknown = await within(client.callTool({ name: "nope__nothing", arguments: {} }), 10_000, "unknown tool")
    expect(unknown.isError).toBe(true)
    const text = (unknown.content as Array<{ type: string; text: string }>)[0]!
    expect(text.type).toBe("text")
    expect(text.text).toContain("nope__nothing")

    const records = await srv.get("/for_store/tool_records?limit=50")
    expect(records.status).toBe(200)
    const executions = records.body.executions as Array<Record<string, unknown>>
    expect(executions.find((r) => r.service_name === "demo" && r.tool_name === "add")).toMatchObject({
      scope: "store",
      agent_id: null,
      params: { a: 4, b: 5 },
      outcome: "success",
      result: { sum: 9 }
    })
    expect(executions.find((r) => r.service_name === "alpha" && r.tool_name === "echo")).toMatchObject({ outcome: "success" })
    expect(executions.find((r) => r.service_name === "alpha" && r.tool_name === "fail")).toMatchObject({ outcome: "tool_error" })
  })

  it("sends notifications/tools/list_changed when a service is added or disconnected", async () => {
    const srv = await start()
    const { client, getStream } = await connect("/mcp")
    const changes = listChanged(client)
    expect(await toolNames(client)).toEqual([])
    // The client's standalone GET stream carries server notifications: wait until it is open.
    await within(getStream, 5_000, "the client's GET stream")

    await addService(srv, "/for_store", { name: "alpha", url: fixture.url })
    await changes.wait(5000, "list_changed after add_service")
    expect(await toolNames(client)).toContain("alpha__echo")

    expect((await srv.post("/for_store/disconnect_service", { service_name: "alpha" })).status).toBe(200)
    await changes.wait(5000, "list_changed after disconnect_service")
    expect(await toolNames(client)).toEqual([])
  })

  it("/for_agent/a1/mcp offers only agent a1's tools, and its calls are recorded with agent_id", async () => {
    const srv = await start()
    await addService(srv, "/for_store", { name: "storeonly", url: fixture.url })
    await addService(srv, "/for_agent/a1", { name: "alpha", url: fixture.url })
    await addService(srv, "/for_agent/a2", { name: "other", url: fixture.url })

    const a1 = await connect("/for_agent/a1/mcp")
    const names = await toolNames(a1.client)
    expect(names).toContain("alpha__echo")
    expect(names.every((n) => n.startsWith("alpha__"))).toBe(true)
    const store = await connect("/mcp")
    expect((await toolNames(store.client)).every((n) => n.startsWith("storeonly__"))).toBe(true)

    const echo = await within(a1.client.callTool({ name: "alpha__echo", arguments: { text: "from a1" } }), 10_000, "a1 call")
    expect(echo.content).toEqual([{ type: "text", text: "from a1" }])
    // The store's tool is not callable from the agent's endpoint.
    const foreign = await within(a1.client.callTool({ name: "storeonly__echo", arguments: { text: "x" } }), 10_000, "foreign call")
    expect(foreign.isError).toBe(true)

    const agentRecords = await srv.get("/for_agent/a1/tool_records")
    expect(agentRecords.body.executions).toEqual([
      expect.objectContaining({ scope: "agent", agent_id: "a1", service_name: "alpha", tool_name: "echo", outcome: "success" })
    ])
    const storeRecords = await srv.get("/for_store/tool_records")
    expect(storeRecords.body.executions).toEqual([])

    // A session belongs to its scope: the a1 session id is unknown on the store's endpoint.
    const reply = await fetch(`${srv.url}/mcp`, {
      method: "POST",
      headers: { "content-type": "application/json", accept: "application/json, text/event-stream", "mcp-session-id": a1.transport.sessionId! },
      body: JSON.stringify({ jsonrpc: "2.0", id: 1, method: "tools/list", params: {} })
    })
    expect(reply.status).toBe(404)
  })

  it("answers a bad agent id with 400 and the contract body", async () => {
    const srv = await start()
    const init = {
      jsonrpc: "2.0",
      id: 1,
      method: "initialize",
      params: { protocolVersion: "2025-06-18", capabilities: {}, clientInfo: { name: "t", version: "1" } }
    }
    for (const bad of ["bad.id", "a%20b", "x".repeat(101)]) {
      const reply = await srv.request("POST", `/for_agent/${bad}/mcp`, {
        body: JSON.stringify(init),
        headers: { "content-type": "application/json", accept: "application/json, text/event-stream" }
      })
      expect(reply.status, bad).toBe(400)
      expect(reply.body).toMatchObject({
        success: false,
        error: { code: "VALIDATION_ERROR", message: reply.body.message, details: { fields: [expect.objectContaining({ field: "agent_id" })] } }
      })
    }
    expect((await srv.get("/for_agent/bad.id/mcp")).status).toBe(400)
  })

  it("forgets a terminated session: a request with its id gets 404", async () => {
    await start()
    const { client, transport } = await connect("/mcp")
    await toolNames(client)
    const old = transport.sessionId
    expect(old).toEqual(expect.any(String))
    await within(transport.terminateSession(), 5000, "terminateSession")
    const reply = await fetch(`${server!.url}/mcp`, {
      method: "POST",
      headers: { "content-type": "application/json", accept: "application/json, text/event-stream", "mcp-session-id": old! },
      body: JSON.stringify({ jsonrpc: "2.0", id: 7, method: "tools/list", params: {} })
    })
    expect(reply.status).toBe(404)
    expect(await reply.json()).toMatchObject({ jsonrpc: "2.0", error: { code: -32001 } })
  })

  it("close() ends the MCP sessions and completes within a few seconds with a client connected", async () => {
    // The production default grace period (2 s): the client's open GET stream is cut at its end.
    const srv = await start({ graceMs: 2000 })
    await addService(srv, "/for_store", { name: "alpha", url: fixture.url })
    const { client, getStream } = await connect("/mcp")
    expect(await toolNames(client)).toContain("alpha__echo")
    await within(getStream, 5_000, "the client's GET stream")
    await within(srv.close(), 5000, "server close with an MCP client connected")
    // The session is gone: the next request fails instead of hanging.
    await expect(within(client.listTools(), 5000, "tools/list after close")).rejects.toThrow()
  })
})
