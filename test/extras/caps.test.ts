// The caps on long-lived things of the routes beyond the 56: /events and /inspect/events streams
// share max_event_streams, and MCP sessions are held to max_mcp_sessions (the oldest idle one
// evicted, 429 when all are busy; one API key to a quarter of them, its own oldest idle session
// evicted first) and closed after mcp_session_idle_seconds without a request.
// Every refusal is a 429 TOO_MANY with Retry-After; every slot comes back when its holder goes.
import { join } from "node:path"
import { afterEach, describe, expect, it } from "vitest"
import { runKeys } from "../../src/cli/keys-command.js"
import {
  eventually,
  freshDir,
  openSse,
  parsePrometheus,
  sampleValue,
  startTestServer,
  within,
  type SseStream,
  type TestServer,
  type TestServerOptions
} from "../support/index.js"

let server: TestServer | undefined
const streams: SseStream[] = []
const aborts: AbortController[] = []

afterEach(async () => {
  for (const s of streams.splice(0)) s.close()
  for (const a of aborts.splice(0)) a.abort()
  await server?.cleanup()
  server = undefined
})

const start = async (options: TestServerOptions) => {
  server = await startTestServer(options)
  return server
}

const open = async (path: string) => {
  const s = await openSse(server!.url + path)
  streams.push(s)
  return s
}

const subscribers = async () => (await server!.get("/monitoring/active_connections")).body.event_subscribers as number
const gauge = async (name: string) => sampleValue(parsePrometheus((await server!.get("/metrics")).text), name)

const MCP_HEADERS = { "content-type": "application/json", accept: "application/json, text/event-stream" }

/** The authorization header of `key`, if any. */
const bearer = (key?: string): Record<string, string> => (key === undefined ? {} : { authorization: `Bearer ${key}` })

/** A JSON-RPC initialize over a plain POST; resolves with the answer and its session id. */
const initialize = async (path = "/mcp", key?: string) => {
  const res = await fetch(server!.url + path, {
    method: "POST",
    headers: { ...MCP_HEADERS, ...bearer(key) },
    body: JSON.stringify({
      jsonrpc: "2.0",
      id: 1,
      method: "initialize",
      params: { protocolVersion: "2025-06-18", capabilities: {}, clientInfo: { name: "caps-test", version: "1" } }
    }),
    signal: AbortSignal.timeout(10_000)
  })
  const text = await res.text()
  return { status: res.status, headers: res.headers, text, session: res.headers.get("mcp-session-id") ?? undefined }
}

/** A ping in a session: 200 while the session lives, 404 once it is gone. */
const ping = async (session: string, key?: string) => {
  const res = await fetch(`${server!.url}/mcp`, {
    method: "POST",
    headers: { ...MCP_HEADERS, "mcp-session-id": session, "mcp-protocol-version": "2025-06-18", ...bearer(key) },
    body: JSON.stringify({ jsonrpc: "2.0", id: 2, method: "ping" }),
    signal: AbortSignal.timeout(10_000)
  })
  await res.text()
  return res.status
}

/** Opens a session's standalone GET stream (the session is busy while it is open); resolves once its headers are in. */
const holdGetStream = async (session: string, key?: string) => {
  const controller = new AbortController()
  aborts.push(controller)
  const res = await fetch(`${server!.url}/mcp`, {
    headers: { accept: "text/event-stream", "mcp-session-id": session, "mcp-protocol-version": "2025-06-18", ...bearer(key) },
    signal: controller.signal
  })
  expect(res.status).toBe(200)
  return () => controller.abort()
}

describe("max_event_streams", () => {
  it("caps /events and /inspect/events together: 429 TOO_MANY with Retry-After, and a closed stream frees its slot", async () => {
    const srv = await start({ options: { max_event_streams: 3 } })
    const a = await open("/events")
    await open("/inspect/events")
    await open("/events?agent_id=store")
    for (const s of streams) expect(s.status).toBe(200)
    expect(await subscribers()).toBe(3)

    for (const path of ["/events", "/inspect/events", "/events?agent_id=a1"]) {
      const refused = await srv.get(path)
      expect(refused.status, path).toBe(429)
      expect(refused.headers.get("retry-after"), path).toBe("5")
      expect(refused.body).toEqual({
        success: false,
        message: expect.stringContaining("3"),
        error: { code: "TOO_MANY", message: refused.body.message, details: { limit: "max_event_streams", max: 3, retry_after_seconds: 5 } }
      })
    }
    // Refusals hold nothing.
    expect(await subscribers()).toBe(3)
    expect(await gauge("mcpstore_event_streams")).toBe(3)

    a.close()
    expect(await eventually(async () => (await subscribers()) === 2, 2000)).toBe(true)
    const again = await open("/inspect/events")
    expect(again.status).toBe(200)
    expect((await srv.get("/events")).status).toBe(429)

    for (const s of streams) s.close()
    expect(await eventually(async () => (await subscribers()) === 0, 2000)).toBe(true)
  })

  it("every slot comes back when many clients go away at once, and when shutdown ends the streams", async () => {
    const srv = await start({ options: { max_event_streams: 20 }, graceMs: 5000 })
    const first = await Promise.all(Array.from({ length: 20 }, (_, i) => open(i % 2 === 0 ? "/events" : "/inspect/events")))
    expect(first.map((s) => s.status)).toEqual(Array(20).fill(200))
    expect((await srv.get("/events")).status).toBe(429)
    for (const s of first) s.close()
    expect(await eventually(async () => (await subscribers()) === 0, 3000)).toBe(true)

    const second = await Promise.all(Array.from({ length: 20 }, () => open("/events")))
    expect(second.map((s) => s.status)).toEqual(Array(20).fill(200))
    expect(srv.running.monitor.eventStreams).toBe(20)
    await within(srv.close(), 4000, "close with 20 open streams")
    expect(srv.running.monitor.eventStreams).toBe(0)
  })
})

describe("max_mcp_sessions and mcp_session_idle_seconds", () => {
  it("at the cap the oldest idle session is evicted: its id answers 404, the others still work", async () => {
    await start({ options: { max_mcp_sessions: 3 } })
    const ids: string[] = []
    for (let i = 0; i < 3; i++) {
      const reply = await initialize()
      expect(reply.status).toBe(200)
      ids.push(reply.session!)
    }
    const [s1, s2, s3] = ids as [string, string, string]
    // s1 was used last: s2 is now the oldest idle session.
    expect(await ping(s1)).toBe(200)
    const fourth = await initialize()
    expect(fourth.status).toBe(200)
    expect(await ping(s2)).toBe(404)
    for (const s of [s1, s3, fourth.session!]) expect(await ping(s)).toBe(200)
    expect(await gauge("mcpstore_mcp_sessions")).toBe(3)
    // An agent's endpoint shares the cap: the oldest idle session now (s1, pinged first just above) makes room.
    expect((await initialize("/for_agent/a1/mcp")).status).toBe(200)
    expect(await ping(s1)).toBe(404)
    expect(await ping(s3)).toBe(200)
    expect(await gauge("mcpstore_mcp_sessions")).toBe(3)
  })

  it("when every session is busy, a new one is refused with 429 and Retry-After; a freed session makes room", async () => {
    await start({ options: { max_mcp_sessions: 2 } })
    const a = (await initialize()).session!
    const b = (await initialize()).session!
    const releaseA = await holdGetStream(a)
    await holdGetStream(b)

    const refused = await initialize()
    expect(refused.status).toBe(429)
    expect(refused.headers.get("retry-after")).toBe("5")
    expect(refused.session).toBeUndefined()
    expect(JSON.parse(refused.text)).toMatchObject({
      jsonrpc: "2.0",
      error: { code: -32000, message: expect.stringContaining("2"), data: { code: "TOO_MANY", details: { limit: "max_mcp_sessions", max: 2, retry_after_seconds: 5 } } },
      id: null
    })
    // A stray request without a session neither takes a slot nor evicts one.
    const stray = await fetch(`${server!.url}/mcp`, { method: "POST", headers: MCP_HEADERS, body: JSON.stringify({ jsonrpc: "2.0", id: 3, method: "tools/list" }) })
    expect(stray.status).toBe(400)
    expect(await gauge("mcpstore_mcp_sessions")).toBe(2)

    // The client of a goes away: a becomes idle and is evicted for the next session.
    releaseA()
    let admitted: Awaited<ReturnType<typeof initialize>> | undefined
    expect(
      await eventually(async () => {
        const reply = await initialize()
        if (reply.status === 200) admitted = reply
        return admitted !== undefined
      }, 3000)
    ).toBe(true)
    expect(await ping(a)).toBe(404)
    expect(await ping(b)).toBe(200)
    expect(await gauge("mcpstore_mcp_sessions")).toBe(2)
  })

  it("one API key holds at most a quarter of the sessions: past it its own oldest idle session makes room, and when all of them are busy it gets 429, while another key still opens one", async () => {
    const dir = freshDir()
    const keys: string[] = []
    for (const name of ["first", "second"]) {
      let out = ""
      expect(await runKeys(["create", "--name", name, "--role", "admin", "--keys-file", join(dir, "mcp-store.keys.json")], {}, { writeOut: (t) => void (out += t), writeErr: () => undefined })).toBe(0)
      keys.push(out.trim())
    }
    const [first, second] = keys as [string, string]
    // Four sessions in all: one per key.
    await start({ dir, options: { max_mcp_sessions: 4 } })
    const s1 = (await initialize("/mcp", first)).session!
    const release = await holdGetStream(s1, first)
    const refused = await initialize("/mcp", first)
    expect(refused.status).toBe(429)
    expect(refused.headers.get("retry-after")).toBe("5")
    expect(refused.text).toContain("Too many MCP sessions for this API key: all 1 of its sessions are busy")
    // Another key is not held back by the first one's share.
    const other = await initialize("/mcp", second)
    expect(other.status).toBe(200)
    // Once its session is idle, the key's next session takes its place.
    release()
    expect(await eventually(async () => (await initialize("/mcp", first)).status === 200, 5000)).toBe(true)
    expect(await ping(s1, first)).toBe(404)
    expect(await ping(other.session!, second)).toBe(200)
  })

  it("closes a session idle for mcp_session_idle_seconds, not one with an open GET stream, and not before its time", async () => {
    await start({ options: { mcp_session_idle_seconds: 0.6 } })
    const idle = await initialize()
    const initializedAt = performance.now()
    const busy = (await initialize()).session!
    const release = await holdGetStream(busy)
    expect(await gauge("mcpstore_mcp_sessions")).toBe(2)

    expect(await eventually(async () => (await gauge("mcpstore_mcp_sessions")) === 1, 5000)).toBe(true)
    expect(performance.now() - initializedAt).toBeGreaterThanOrEqual(550)
    expect(await ping(idle.session!)).toBe(404)
    // The GET stream kept the other session alive past the idle time; its clock starts when the stream closes.
    expect(await ping(busy)).toBe(200)
    release()
    const releasedAt = performance.now()
    expect(await eventually(async () => (await gauge("mcpstore_mcp_sessions")) === 0, 5000)).toBe(true)
    expect(performance.now() - releasedAt).toBeGreaterThanOrEqual(500)
    expect(await ping(busy)).toBe(404)
  })
})
