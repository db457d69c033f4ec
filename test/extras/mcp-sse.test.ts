// The legacy SSE endpoint (GET /sse + POST /messages, and each agent's /for_agent/{id}/sse) driven by
// the SDK's SSEClientTransport: the scope's tools listed and called, list_changed over the stream, a
// session usable only on its own scope's messages route, the shared session cap, idle expiry of an
// open stream, shutdown, the Origin/Accept guard a web page meets, and the API key.
import { Client } from "@modelcontextprotocol/sdk/client/index.js"
import { SSEClientTransport } from "@modelcontextprotocol/sdk/client/sse.js"
import { ToolListChangedNotificationSchema } from "@modelcontextprotocol/sdk/types.js"
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest"
import { startHttpFixture, type HttpFixture } from "../fixtures/http-fixture.js"
import { addService, eventually, openSse, parsePrometheus, rawRequest, sampleValue, startTestServer, within, type SseStream, type TestServer, type TestServerOptions } from "../support/index.js"

let fixture: HttpFixture
let server: TestServer | undefined
const clients: Client[] = []
const streams: SseStream[] = []

beforeAll(async () => {
  fixture = await startHttpFixture()
})
afterAll(async () => {
  await fixture.stop()
})
afterEach(async () => {
  await Promise.all(clients.splice(0).map((c) => within(c.close(), 3000, "client close").catch(() => undefined)))
  for (const s of streams.splice(0)) s.close()
  await server?.cleanup()
  server = undefined
})

const start = async (options: TestServerOptions = {}) => (server = await startTestServer(options))

/** An SDK client over the SSE transport at `path`; closed in afterEach. */
const connect = async (path: string, headers: Record<string, string> = {}) => {
  const transport = new SSEClientTransport(new URL(server!.url + path), { requestInit: { headers } })
  const client = new Client({ name: "sse-test", version: "1.0.0" })
  client.onerror = () => undefined
  clients.push(client)
  await within(client.connect(transport), 10_000, `connect ${path}`)
  return client
}

const toolNames = async (client: Client) => (await within(client.listTools(), 5000, "tools/list")).tools.map((t) => t.name).sort()

/** A raw stream of `path` and the messages URL its `endpoint` event announces. */
const rawSession = async (path: string, headers: Record<string, string> = {}) => {
  const stream = await openSse(server!.url + path, headers)
  streams.push(stream)
  expect(stream.status).toBe(200)
  const endpoint = await stream.waitFor((e) => e.event === "endpoint", 5000, "endpoint event")
  return { stream, endpoint: endpoint.data }
}

const post = (path: string, body: unknown, headers: Record<string, string> = {}) =>
  fetch(server!.url + path, { method: "POST", headers: { "content-type": "application/json", ...headers }, body: JSON.stringify(body), signal: AbortSignal.timeout(10_000) })

const PING = { jsonrpc: "2.0", id: 1, method: "ping" }
const gauge = async () => sampleValue(parsePrometheus((await server!.get("/metrics")).text), "mcpstore_mcp_sessions")

describe("/sse and /for_agent/{id}/sse", () => {
  it("list and call the scope's tools; list_changed arrives over the stream when a service is removed", async () => {
    const srv = await start()
    await addService(srv, "/for_store", { name: "alpha", url: fixture.url })
    await addService(srv, "/for_agent/a1", { name: "beta", url: fixture.url })

    const store = await connect("/sse")
    const names = await toolNames(store)
    expect(names).toContain("alpha__echo")
    expect(names.every((n) => n.startsWith("alpha__"))).toBe(true)
    const echo = await within(store.callTool({ name: "alpha__echo", arguments: { text: "over sse" } }), 10_000, "alpha__echo")
    expect(echo.content).toEqual([{ type: "text", text: "over sse" }])

    const agent = await connect("/for_agent/a1/sse")
    expect((await toolNames(agent)).every((n) => n.startsWith("beta__"))).toBe(true)
    const sum = await within(agent.callTool({ name: "beta__add", arguments: { a: 2, b: 3 } }), 10_000, "beta__add")
    expect(sum.isError ?? false).toBe(false)
    const records = await srv.get("/for_agent/a1/tool_records")
    expect(records.body.executions).toEqual([expect.objectContaining({ agent_id: "a1", service_name: "beta", tool_name: "add", outcome: "success" })])

    let changed!: () => void
    const listChanged = new Promise<void>((resolve) => (changed = resolve))
    store.setNotificationHandler(ToolListChangedNotificationSchema, async () => changed())
    expect((await srv.request("DELETE", "/for_store/delete_service/alpha")).status).toBe(200)
    await within(listChanged, 5000, "list_changed over SSE")
    expect(await toolNames(store)).toEqual([])
    expect(await toolNames(agent)).toContain("beta__add")
  })

  it("announces each scope's messages route; a session id is 404 on another scope's route, an unknown one 404", async () => {
    await start()
    const store = await rawSession("/sse")
    expect(store.endpoint).toMatch(/^\/messages\?sessionId=[0-9a-f-]{36}$/)
    const agent = await rawSession("/for_agent/a1/sse")
    expect(agent.endpoint).toMatch(/^\/for_agent\/a1\/messages\?sessionId=[0-9a-f-]{36}$/)

    const agentId = new URLSearchParams(agent.endpoint.split("?")[1]).get("sessionId")!
    for (const path of [`/messages?sessionId=${agentId}`, `/for_agent/a2/messages?sessionId=${agentId}`, "/messages?sessionId=nope"]) {
      const reply = await post(path, PING)
      expect(reply.status, path).toBe(404)
      expect(await reply.json()).toMatchObject({ jsonrpc: "2.0", error: { code: -32001 } })
    }
    expect((await post("/messages", PING)).status).toBe(400)
    // A Streamable HTTP request with an SSE session's id does not reach it either.
    const mixed = await post("/for_agent/a1/mcp", PING, { accept: "application/json, text/event-stream", "mcp-session-id": agentId })
    expect(mixed.status).toBe(404)
    const bad = await post(agent.endpoint, { hello: 1 })
    expect(bad.status).toBe(400)

    // The right route: 202, and the answer comes on the stream.
    const ok = await post(agent.endpoint, { jsonrpc: "2.0", id: 42, method: "ping" })
    expect(ok.status).toBe(202)
    const answer = await agent.stream.waitFor((e) => e.event === "message" && e.json?.id === 42, 5000, "ping answer")
    expect(answer.json).toEqual({ jsonrpc: "2.0", id: 42, result: {} })
  })

  it("shares max_mcp_sessions with /mcp: an open stream is busy (429 with Retry-After); a closed one frees its slot", async () => {
    await start({ options: { max_mcp_sessions: 2 } })
    const first = await rawSession("/sse")
    await rawSession("/for_agent/a1/sse")
    const refused = await openSse(`${server!.url}/sse`)
    expect(refused.status).toBe(429)
    expect(refused.headers.get("retry-after")).toBe("5")
    expect(JSON.parse(refused.text())).toMatchObject({ error: { data: { code: "TOO_MANY", details: { limit: "max_mcp_sessions", max: 2 } } } })
    const init = { jsonrpc: "2.0", id: 1, method: "initialize", params: { protocolVersion: "2025-06-18", capabilities: {}, clientInfo: { name: "t", version: "1" } } }
    expect((await post("/mcp", init, { accept: "application/json, text/event-stream" })).status).toBe(429)

    first.stream.close()
    expect(await eventually(async () => (await gauge()) === 1, 5000)).toBe(true)
    await rawSession("/sse")
    expect(await gauge()).toBe(2)
  })

  it("ends an open stream that carried no request for mcp_session_idle_seconds, and every stream at shutdown", async () => {
    await start({ options: { mcp_session_idle_seconds: 0.5 } })
    const idle = await rawSession("/sse")
    expect(await within(idle.stream.ended, 5000, "idle stream ended")).toBe("end")
    expect((await post(idle.endpoint, PING)).status).toBe(404)
    expect(await gauge()).toBe(0)

    const open = await rawSession("/for_agent/a1/sse")
    await within(server!.close(), 5000, "server close with an SSE stream open")
    expect(await within(open.stream.ended, 5000, "stream ended at shutdown")).not.toBe("aborted")
  })

  it("does not expire a session while a call it sent is in flight (the POST was answered 202 long before)", async () => {
    const srv = await start({ options: { mcp_session_idle_seconds: 0.4 } })
    await addService(srv, "/for_store", { name: "alpha", url: fixture.url })
    const session = await rawSession("/sse")
    const call = { jsonrpc: "2.0", id: 9, method: "tools/call", params: { name: "alpha__sleep", arguments: { ms: 1200 } } }
    expect((await post(session.endpoint, call)).status).toBe(202)
    const answer = await session.stream.waitFor((e) => e.event === "message" && e.json?.id === 9, 10_000, "the call's answer")
    expect(answer.json.result.isError ?? false).toBe(false)
    // Idle from the answer on: the stream ends.
    expect(await within(session.stream.ended, 5000, "idle stream ended")).toBe("end")
  })

  it("takes at most 64 requests in flight per session: the next is refused 429 with Retry-After (each is answered on the stream, the POST at once)", async () => {
    const srv = await start()
    await addService(srv, "/for_store", { name: "alpha", url: fixture.url })
    const session = await rawSession("/sse")
    const call = (id: number) => ({ jsonrpc: "2.0", id, method: "tools/call", params: { name: "alpha__sleep", arguments: { ms: 3_000 } } })
    const taken = await Promise.all(Array.from({ length: 64 }, (_, i) => post(session.endpoint, call(100 + i))))
    expect(taken.map((r) => r.status)).toEqual(Array(64).fill(202))
    const refused = await post(session.endpoint, call(200))
    expect(refused.status).toBe(429)
    expect(Number(refused.headers.get("retry-after"))).toBeGreaterThan(0)
    expect(await refused.json()).toMatchObject({ id: 200, error: { code: -32000, data: { code: "TOO_MANY", details: { limit: "sse_requests_in_flight", max: 64 } } } })
    // A notification is not a request: taken.
    expect((await post(session.endpoint, { jsonrpc: "2.0", method: "notifications/cancelled", params: { requestId: 100 } })).status).toBe(202)
  })

  it("a call the client cancels stops counting at once: the session then expires while the upstream call would still run", async () => {
    const srv = await start({ options: { mcp_session_idle_seconds: 0.4 } })
    await addService(srv, "/for_store", { name: "alpha", url: fixture.url })
    const session = await rawSession("/sse")
    const call = { jsonrpc: "2.0", id: 11, method: "tools/call", params: { name: "alpha__sleep", arguments: { ms: 30_000 } } }
    expect((await post(session.endpoint, call)).status).toBe(202)
    expect((await post(session.endpoint, { jsonrpc: "2.0", method: "notifications/cancelled", params: { requestId: 11 } })).status).toBe(202)
    expect(await within(session.stream.ended, 10_000, "stream ended after the cancelled call")).toBe("end")
    expect(session.stream.events.some((e) => e.json?.id === 11)).toBe(false)
  })

  it("refuses a web page: a foreign Origin (403), a GET that does not ask for an event stream (406); no session is opened", async () => {
    await start()
    const foreign = await openSse(`${server!.url}/sse`, { origin: "http://evil.example" })
    expect(foreign.status).toBe(403)
    expect(JSON.parse(foreign.text())).toMatchObject({ error: { code: "FORBIDDEN_ORIGIN" } })
    // A top-level navigation (allowed by the request guard) asks for HTML. Over node:http: fetch sends its own Sec-Fetch-Mode.
    const navigation = await rawRequest(`${server!.url}/for_agent/a1/sse`, "GET", undefined, {
      accept: "text/html,*/*;q=0.8",
      "sec-fetch-mode": "navigate",
      "sec-fetch-site": "cross-site"
    })
    expect(navigation.status).toBe(406)
    expect(await gauge()).toBe(0)
    const session = await rawSession("/sse")
    expect((await post(session.endpoint, PING, { origin: "http://evil.example" })).status).toBe(403)
    expect(await gauge()).toBe(1)
  })

  it("needs the API key on the stream and on every message when one is set", async () => {
    await start({ apiKey: "sse-secret" })
    const auth = { authorization: "Bearer sse-secret" }
    expect((await openSse(`${server!.url}/sse`)).status).toBe(401)
    const session = await rawSession("/sse", auth)
    expect((await post(session.endpoint, PING)).status).toBe(401)
    expect((await post(session.endpoint, PING, auth)).status).toBe(202)
    const client = await connect("/for_agent/a1/sse", auth)
    expect(await toolNames(client)).toEqual([])
  })
})
