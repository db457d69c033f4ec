// connect() over Streamable HTTP against the HTTP fixture (sessions, restarts, a dead server), and
// over SSE against a server that never sends its endpoint.
import { createServer, type Server } from "node:http"
import type { AddressInfo } from "node:net"
import { afterAll, afterEach, beforeAll, describe, expect, it, vi } from "vitest"
import { connect } from "../../src/mcp/connect.js"
import type { McpConnection } from "../../src/mcp/types.js"
import { startHttpFixture, type HttpFixture } from "../fixtures/http-fixture.js"
import { eventually, failureOf, remoteDef, T, textOf } from "../support/index.js"

describe("a Streamable HTTP fixture connection", () => {
  let fixture: HttpFixture
  let conn: McpConnection

  beforeAll(async () => {
    fixture = await startHttpFixture({ server: { name: "http-fixture" } })
    conn = await connect(remoteDef(fixture.url), T)
  })
  afterAll(async () => {
    await conn.close()
    await fixture.stop()
  })

  it("lists, calls and pings", async () => {
    expect(fixture.url).toMatch(/^http:\/\/127\.0\.0\.1:\d+\/mcp$/)
    expect(conn.transportType).toBe("streamable_http")
    expect(conn.serverInfo).toEqual({ name: "http-fixture", version: "1.0.0" })
    expect(conn.pid).toBeUndefined()
    expect(conn.stderrTail()).toEqual([])
    expect((await conn.listTools(T)).map((t) => t.name)).toEqual(["echo", "add", "fail", "sleep", "add_tool", "pid"])
    expect(textOf(await conn.callTool("echo", { text: "over http" }, T))).toBe("over http")
    expect(await conn.ping(T)).toBeGreaterThan(0)
    expect(fixture.sessions()).toBe(1)
  })

  it("classifies tool errors, bad arguments, unknown tools and time-outs", async () => {
    expect((await conn.callTool("fail", {}, T)).isError).toBe(true)
    const invalid = await failureOf(conn.callTool("add", { a: 1 }, T))
    expect([invalid.kind, invalid.code]).toEqual(["protocol", -32602])
    const unknown = await failureOf(conn.callTool("nope", {}, T))
    expect(unknown.kind).toBe("protocol")
    const started = performance.now()
    const slow = await failureOf(conn.callTool("sleep", { ms: 10_000 }, { timeoutMs: 300 }))
    expect(slow.kind).toBe("timeout")
    expect(performance.now() - started).toBeLessThan(1_000)
  })

  it("tells when the tool list changes", async () => {
    const changed = vi.fn()
    conn.onToolsChanged(changed)
    await conn.callTool("add_tool", { name: "late" }, T)
    await vi.waitFor(() => expect(changed).toHaveBeenCalled(), { timeout: 2_000 })
    expect((await conn.listTools(T)).map((t) => t.name)).toContain("late")
  })
})

describe("Streamable HTTP failures", () => {
  const fixtures: Array<HttpFixture> = []
  const conns: Array<McpConnection> = []
  afterEach(async () => {
    await Promise.all(conns.splice(0).map((c) => c.close()))
    await Promise.all(fixtures.splice(0).map((f) => f.stop()))
  })
  const setUp = async (options: Parameters<typeof startHttpFixture>[0] = {}, headers: Record<string, string> = {}) => {
    const fixture = await startHttpFixture(options)
    fixtures.push(fixture)
    const conn = await connect(remoteDef(fixture.url, "streamable_http", headers), T)
    conns.push(conn)
    return { fixture, conn }
  }

  it("classifies a request after the server restarted as session_expired", async () => {
    const { fixture, conn } = await setUp()
    await conn.ping(T)
    await fixture.restart()
    expect(fixture.sessions()).toBe(0)
    const error = await failureOf(conn.callTool("echo", { text: "x" }, T))
    expect(error.kind).toBe("session_expired")
    expect(error.message).toMatch(/404/)
    // A new connection (what a reconnection builds) works again.
    const again = await connect(remoteDef(fixture.url), T)
    conns.push(again)
    expect(textOf(await again.callTool("echo", { text: "back" }, T))).toBe("back")
  })

  it("classifies a request to a stopped server as transport, naming the refusal", async () => {
    const { fixture, conn } = await setUp()
    const onClose = vi.fn()
    conn.onClose(onClose)
    await fixture.stop()
    const error = await failureOf(conn.ping(T))
    expect(error.kind).toBe("transport")
    expect(error.message).toMatch(/ECONNREFUSED/)
    // A dead Streamable HTTP server does not close the client by itself.
    expect(onClose).not.toHaveBeenCalled()
  })

  it("rejects connect to a port nobody listens on with transport", async () => {
    const fixture = await startHttpFixture()
    await fixture.stop()
    const error = await failureOf(connect(remoteDef(fixture.url), T))
    expect(error.kind).toBe("transport")
    expect(error.message).toMatch(/ECONNREFUSED/)
  })

  it("sends the definition's headers", async () => {
    const required = { authorization: "Bearer secret" }
    const fixture = await startHttpFixture({ requiredHeaders: required })
    fixtures.push(fixture)
    const refused = await failureOf(connect(remoteDef(fixture.url), T))
    expect(refused.kind).toBe("transport")
    expect(refused.message).toMatch(/401/)
    const conn = await connect(remoteDef(fixture.url, "streamable_http", { Authorization: "Bearer secret" }), T)
    conns.push(conn)
    expect(await conn.ping(T)).toBeGreaterThan(0)
  })

  it("ends the session with DELETE on close(), and close() is idempotent", async () => {
    const { fixture, conn } = await setUp()
    expect(fixture.sessions()).toBe(1)
    await Promise.all([conn.close(), conn.close()])
    expect(fixture.sessions()).toBe(0)
    expect((await failureOf(conn.ping(T))).kind).toBe("transport")
  })

  it("closes promptly even when the server is gone", async () => {
    const { fixture, conn } = await setUp()
    await fixture.stop()
    const started = performance.now()
    await conn.close()
    expect(performance.now() - started).toBeLessThan(1_500)
  })

  it("times out a ping the server never answers, and aborts on request", async () => {
    const { fixture, conn } = await setUp({ server: { silent: true } })
    const started = performance.now()
    expect((await failureOf(conn.ping({ timeoutMs: 200 }))).kind).toBe("timeout")
    expect(performance.now() - started).toBeLessThan(800)
    const controller = new AbortController()
    const pings = () => fixture.requests().filter((r) => r === "POST ping").length
    const before = pings()
    const pending = failureOf(conn.ping({ timeoutMs: 5_000, signal: controller.signal }))
    // The caller gives up once the ping has reached the server.
    expect(await eventually(() => pings() > before, 5_000, 1)).toBe(true)
    controller.abort()
    expect((await pending).kind).toBe("aborted")
  })
})

describe("SSE connect", () => {
  let server: Server
  let url: string
  beforeAll(async () => {
    // Opens the event stream but never sends the endpoint event: the SDK waits for it without limit.
    server = createServer((_req, res) => {
      res.writeHead(200, { "content-type": "text/event-stream", "cache-control": "no-cache" })
      res.write(": hello\n\n")
    })
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve))
    url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/sse`
  })
  afterAll(async () => {
    server.closeAllConnections()
    await new Promise((resolve) => server.close(resolve))
  })

  it("times out at the time-out when the endpoint never comes", async () => {
    const started = performance.now()
    const error = await failureOf(connect(remoteDef(url, "sse"), { timeoutMs: 300 }))
    expect(error.kind).toBe("timeout")
    expect(performance.now() - started).toBeLessThan(1_000)
  })
})
