// The store's Streamable HTTP client transport (src/mcp/http-transport.ts): its event-stream parser,
// and the cases the fixture servers do not produce, against a scripted raw HTTP server on loopback
// driven through connect() and the SDK client: JSON answers, a stream that ends before the answer,
// a kept-alive socket the server dropped (a read sent again, a tool call or a task's cancellation
// not; a reset or a failed write), a resumed GET stream, redirects, and close() under load.
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http"
import type { AddressInfo, Socket } from "node:net"
import { afterEach, describe, expect, it } from "vitest"
import { connect } from "../../src/mcp/connect.js"
import { EventStreamParser, sharedAgents, type StreamEvent } from "../../src/mcp/http-transport.js"
import type { McpConnection } from "../../src/mcp/types.js"
import { eventually, failureOf, quietFor, remoteDef, T } from "../support/index.js"

describe("EventStreamParser", () => {
  const parse = (chunks: ReadonlyArray<string>) => {
    const events: Array<StreamEvent> = []
    const parser = new EventStreamParser((e) => events.push(e))
    for (const chunk of chunks) parser.push(chunk)
    return { events, parser }
  }

  it("splits on LF, CRLF and CR, also across chunks, and joins data lines", () => {
    const { events } = parse(["data: a\r", "\ndata: b\n\nid: 7\r", "event: note\rdata:c\r\r", ": comment\n\n", "data: d\r\n\r\n"])
    expect(events).toEqual([
      { event: "message", data: "a\nb", id: undefined },
      { event: "note", data: "c", id: "7" },
      { event: "message", data: "d", id: "7" }
    ])
  })

  it("reads a long line over many chunks, and a CR that ends one chunk with or without a LF opening the next", () => {
    const long = "x".repeat(200_000)
    const chunks = `data: ${long}\n\n`.match(/[\s\S]{1,1000}/g)!
    expect(parse(chunks).events).toEqual([{ event: "message", data: long, id: undefined }])
    const { events } = parse(["data: a\r", "", "\ndata: b\r", "\r", "data: c\r", "\n\r\n"])
    expect(events).toEqual([
      { event: "message", data: "a\nb", id: undefined },
      { event: "message", data: "c", id: undefined }
    ])
  })

  it("keeps the last id of an event without data (a priming event) and retry; ignores unknown fields and an unfinished event", () => {
    const { events, parser } = parse(["id: 1\n\n", "retry: 250\nfoo: bar\n\n", "data: half"])
    expect(events).toEqual([])
    expect(parser.lastEventId).toBe("1")
    expect(parser.retryMs).toBe(250)
  })
})

/** What the scripted server does with a `tools/call` (by tool name) besides answering. */
type Behaviour = (req: IncomingMessage, res: ServerResponse, id: unknown) => void

interface Scripted {
  readonly url: string
  /** Requests seen, as "METHOD rpc-method". */
  readonly seen: Array<string>
  /** GET requests' Last-Event-ID headers. */
  readonly lastEventIds: Array<string | undefined>
  /** Sockets opened by clients. */
  readonly sockets: Set<Socket>
  /** Open GET streams. */
  readonly streams: Set<ServerResponse>
  readonly server: Server
  stop(): Promise<void>
}

const json = (res: ServerResponse, status: number, body: unknown, headers: Record<string, string> = {}) => {
  res.writeHead(status, { "content-type": "application/json", ...headers })
  res.end(JSON.stringify(body))
}

const toolResult = (id: unknown, text: string) => ({ jsonrpc: "2.0", id, result: { content: [{ type: "text", text }] } })

/** A minimal MCP server: JSON answers, a session id, a GET stream, and per-tool misbehaviour. */
const startScripted = async (tools: Record<string, Behaviour>, options: { getStream?: "events" | "none"; keepAliveMs?: number } = {}): Promise<Scripted> => {
  const seen: Array<string> = []
  const lastEventIds: Array<string | undefined> = []
  const sockets = new Set<Socket>()
  const streams = new Set<ServerResponse>()
  const server: Server = createServer((req, res) => {
    if (req.method === "GET") {
      seen.push("GET")
      lastEventIds.push(req.headers["last-event-id"] as string | undefined)
      if (options.getStream === "none") return json(res, 405, {})
      res.writeHead(200, { "content-type": "text/event-stream" })
      res.write(`id: e${lastEventIds.length}\n\n`)
      streams.add(res)
      res.on("close", () => streams.delete(res))
      return
    }
    if (req.method === "DELETE") {
      seen.push("DELETE")
      return json(res, 200, {})
    }
    let body = ""
    req.setEncoding("utf8")
    req.on("data", (c: string) => (body += c))
    req.on("end", () => {
      const message = JSON.parse(body) as { id?: unknown; method: string; params?: { name?: string; arguments?: { text?: string } } }
      seen.push(`POST ${message.method}${message.params?.name !== undefined ? ` ${message.params.name}` : ""}`)
      if (message.method === "initialize") {
        return json(
          res,
          200,
          { jsonrpc: "2.0", id: message.id, result: { protocolVersion: "2025-06-18", capabilities: { tools: { listChanged: true }, prompts: {} }, serverInfo: { name: "scripted", version: "1" } } },
          { "mcp-session-id": "s-1" }
        )
      }
      if (req.headers["mcp-session-id"] !== "s-1") return json(res, 400, { error: "no session" })
      if (message.id === undefined) {
        res.writeHead(202).end()
        return
      }
      if (message.method === "ping") return json(res, 200, { jsonrpc: "2.0", id: message.id, result: {} })
      // A tool's behaviour by its name; another request's by its method.
      const behaviour = tools[message.params?.name ?? message.method]
      if (behaviour) return behaviour(req, res, message.id)
      return json(res, 200, toolResult(message.id, message.params?.arguments?.text ?? ""))
    })
  })
  server.on("connection", (socket: Socket) => {
    sockets.add(socket)
    socket.on("close", () => sockets.delete(socket))
  })
  if (options.keepAliveMs !== undefined) server.keepAliveTimeout = options.keepAliveMs
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve))
  const port = (server.address() as AddressInfo).port
  return {
    url: `http://127.0.0.1:${port}/mcp`,
    seen,
    lastEventIds,
    sockets,
    streams,
    server,
    stop: async () => {
      server.closeAllConnections()
      await new Promise((resolve) => server.close(resolve))
    }
  }
}

describe("HttpClientTransport against a scripted server", () => {
  const servers: Array<Scripted> = []
  const conns: Array<McpConnection> = []
  afterEach(async () => {
    await Promise.all(conns.splice(0).map((c) => c.close()))
    await Promise.all(servers.splice(0).map((s) => s.stop()))
  })
  const setUp = async (tools: Record<string, Behaviour> = {}, options: { getStream?: "events" | "none"; keepAliveMs?: number } = {}) => {
    const server = await startScripted(tools, options)
    servers.push(server)
    const conn = await connect(remoteDef(server.url), T)
    conns.push(conn)
    return { server, conn }
  }

  it("works with JSON answers: the era probe, initialize, the session header, calls, and DELETE on close", async () => {
    const { server, conn } = await setUp()
    expect(conn.serverInfo).toEqual({ name: "scripted", version: "1" })
    const result = await conn.callTool("echo", { text: "hi" }, T)
    expect(result.content).toEqual([{ type: "text", text: "hi" }])
    await conn.close()
    // The server/discover probe finds a 2025-era server: the initialize handshake follows.
    expect(server.seen).toEqual(["POST server/discover", "POST initialize", "POST notifications/initialized", "GET", "POST tools/call echo", "DELETE"])
  })

  it("fails a call at once, as a transport failure, when its event stream ends before the answer", async () => {
    const { conn } = await setUp({
      cut: (_req, res) => {
        res.writeHead(200, { "content-type": "text/event-stream" })
        res.end(": nothing to say\n\n")
      }
    })
    const started = performance.now()
    const error = await failureOf(conn.callTool("cut", {}, { timeoutMs: 10_000 }))
    expect(error.kind).toBe("transport")
    expect(error.message).toMatch(/closed before the answer/)
    expect(performance.now() - started).toBeLessThan(2_000)
    // The connection stays usable.
    expect((await conn.callTool("echo", { text: "still here" }, T)).content).toEqual([{ type: "text", text: "still here" }])
  })

  it("delivers answers that come as an event stream, with notifications before them", async () => {
    const { conn } = await setUp({
      streamed: (_req, res, id) => {
        res.writeHead(200, { "content-type": "text/event-stream; charset=utf-8" })
        res.write(`data: {"jsonrpc":"2.0","method":"notifications/message","params":{"level":"info","data":"x"}}\r\n\r\n`)
        // One answer split across writes, and a multi-byte character split across chunks.
        const text = JSON.stringify(toolResult(id, "né"))
        const bytes = Buffer.from(`data: ${text}\n\n`)
        const cut = bytes.indexOf(0xc3) + 1
        res.write(bytes.subarray(0, cut))
        setTimeout(() => res.end(bytes.subarray(cut)), 20)
      }
    })
    expect((await conn.callTool("streamed", {}, T)).content).toEqual([{ type: "text", text: "né" }])
  })

  /**
   * Once the client keeps a socket idle, the server drops each socket it already had as soon as a
   * POST arrives on it (as a server does that closed it at its keep-alive time-out, or read the
   * request and died): how many POSTs it dropped, and how many came on new sockets.
   */
  const dropOldSockets = async (server: Scripted) => {
    expect(await eventually(() => sharedAgents.idleSockets(server.url) > 0, 5_000)).toBe(true)
    const old = new Set(server.sockets)
    const posts = { dropped: 0, fresh: 0 }
    server.server.prependListener("request", (req: IncomingMessage) => {
      if (req.method !== "POST") return
      if (!old.has(req.socket)) posts.fresh += 1
      else {
        posts.dropped += 1
        req.socket.destroy()
      }
    })
    return posts
  }

  it("sends a request that may run twice (a ping) again on a new socket when the server dropped the kept-alive one", async () => {
    const { server, conn } = await setUp()
    const posts = await dropOldSockets(server)
    expect(await conn.ping(T)).toBeGreaterThan(0)
    expect(posts).toEqual({ dropped: 1, fresh: 1 })
  })

  it("goes on to a new socket when every kept-alive one was dropped (several idle at once, as after the server's keep-alive time-out)", async () => {
    const { server, conn } = await setUp({
      slow: (_req, res, id) => void setTimeout(() => json(res, 200, toolResult(id, "slow")), 50)
    })
    // Four calls at once: four sockets, idle (kept alive) once answered.
    await Promise.all(Array.from({ length: 4 }, () => conn.callTool("slow", {}, T)))
    expect(server.sockets.size).toBeGreaterThanOrEqual(3)
    const posts = await dropOldSockets(server)
    expect(await conn.ping(T)).toBeGreaterThan(0)
    // One try on a kept-alive socket, then a new connection: the other idle ones were dropped with it.
    expect(posts).toEqual({ dropped: 1, fresh: 1 })
  })

  it("sends a tool call once: a kept-alive socket reset after the server read it fails the call, which is not sent again", async () => {
    const { server, conn } = await setUp()
    const posts = await dropOldSockets(server)
    const error = await failureOf(conn.callTool("echo", { text: "once" }, T))
    expect(error.kind).toBe("transport")
    expect(error.message).toMatch(/may have run it, so it is not sent again/)
    expect(posts).toEqual({ dropped: 1, fresh: 0 })
    // The connection stays usable, on a new socket.
    expect((await conn.callTool("echo", { text: "next" }, T)).content).toEqual([{ type: "text", text: "next" }])
    expect(posts).toEqual({ dropped: 1, fresh: 1 })
  })

  it("sends a task's cancellation or update once, and a task query again, after a kept-alive socket reset", async () => {
    for (const [method, again] of [
      ["tasks/cancel", false],
      ["tasks/update", false],
      ["tasks/get", true]
    ] as const) {
      const { server, conn } = await setUp()
      const posts = await dropOldSockets(server)
      const asked = conn.taskRequest(method, { taskId: "t-1" }, T)
      if (again) expect(await asked, method).toMatchObject({ content: [{ type: "text", text: "" }] })
      else expect((await failureOf(asked)).message, method).toMatch(/may have run it, so it is not sent again/)
      expect(posts, method).toEqual({ dropped: 1, fresh: again ? 1 : 0 })
      expect(server.seen.filter((s) => s === `POST ${method}`), method).toHaveLength(again ? 2 : 1)
    }
  })

  it("sends a large request that may run twice again when the server's close makes its writing fail (EPIPE)", async () => {
    // The server closes its idle sockets, and four megabytes are written before the client has
    // read the close: the first part makes the server's side answer with a reset, and the next
    // write fails with EPIPE, not ECONNRESET.
    const big = "x".repeat(4 * 1024 * 1024)
    const { server, conn } = await setUp({ big: (_req, res, id) => json(res, 200, { jsonrpc: "2.0", id, result: { messages: [] } }) })
    for (let round = 0; round < 5; round++) {
      expect(await eventually(() => sharedAgents.idleSockets(server.url) > 0, 5_000)).toBe(true)
      server.server.closeIdleConnections()
      expect((await conn.getPrompt("big", { text: big }, T)).messages, `round ${round}`).toEqual([])
    }
    expect(server.seen.filter((s) => s === "POST prompts/get big")).toHaveLength(5)
  })

  it("does not reuse a kept-alive socket idle for longer than its server's Keep-Alive timeout less a second, even when the socket's timer could not run", async () => {
    // timeout=2 in every answer's Keep-Alive header: a socket may be idle 1 s.
    const { server, conn } = await setUp({}, { keepAliveMs: 2_000 })
    expect((await conn.callTool("echo", { text: "first" }, T)).content).toEqual([{ type: "text", text: "first" }])
    expect(await eventually(() => sharedAgents.idleSockets(server.url) > 0, 5_000)).toBe(true)
    // A busy event loop: no timer runs for 1.2 s (the server's close, as the client sees it, is
    // `dropOldSockets`: a request on an old socket is reset).
    const posts = await dropOldSockets(server)
    const busy = performance.now()
    while (performance.now() - busy < 1_200) {
      // the event loop is held
    }
    expect((await conn.callTool("echo", { text: "second" }, T)).content).toEqual([{ type: "text", text: "second" }])
    expect(posts).toEqual({ dropped: 0, fresh: 1 })
  })

  it("sends a tool call on a new socket when the server closed the kept-alive one before it was written (its keep-alive time-out, a restart)", async () => {
    const { server, conn } = await setUp()
    expect(await eventually(() => sharedAgents.idleSockets(server.url) > 0, 5_000)).toBe(true)
    const fresh = { posts: 0 }
    const old = new Set(server.sockets)
    server.server.prependListener("request", (req: IncomingMessage) => {
      if (req.method === "POST" && !old.has(req.socket)) fresh.posts += 1
    })
    // The server closes its idle sockets, and the call is made before the client has read the close.
    server.server.closeIdleConnections()
    const result = await conn.callTool("echo", { text: "after the close" }, T)
    expect(result.content).toEqual([{ type: "text", text: "after the close" }])
    expect(fresh.posts).toBe(1)
    expect(server.seen.filter((s) => s === "POST tools/call echo")).toHaveLength(1)
  })

  it("does not send a cancelled request again: the cancel ends its socket, which is no reset", async () => {
    const held: ServerResponse[] = []
    const { server, conn } = await setUp({ "tools/list": (_req, res) => void held.push(res) })
    expect(await eventually(() => sharedAgents.idleSockets(server.url) > 0, 5_000)).toBe(true)
    const cancel = new AbortController()
    // A list (sent again after a reset) on a kept-alive socket, cancelled while the server holds it.
    const listed = conn.listTools({ timeoutMs: 10_000, signal: cancel.signal })
    expect(await eventually(() => server.seen.includes("POST tools/list"), 5_000)).toBe(true)
    cancel.abort()
    await listed.catch(() => undefined)
    await quietFor(300)
    expect(server.seen.filter((s) => s === "POST tools/list")).toHaveLength(1)
    for (const res of held) res.destroy()
  })

  it("reopens the GET stream when the server ends it, with the last event id", async () => {
    const { server } = await setUp()
    expect(await eventually(() => server.streams.size === 1, 5_000)).toBe(true)
    for (const stream of server.streams) stream.end()
    expect(await eventually(() => server.lastEventIds.length === 2, 5_000)).toBe(true)
    expect(server.lastEventIds).toEqual([undefined, "e1"])
  })

  it("does without a GET stream when the server offers none (405)", async () => {
    const { server, conn } = await setUp({}, { getStream: "none" })
    expect(await conn.ping(T)).toBeGreaterThan(0)
    await quietFor(100) // no second attempt at a GET stream
    expect(server.seen.filter((s) => s === "GET")).toHaveLength(1)
  })

  it("fails a redirected request, naming where it points", async () => {
    const { conn } = await setUp({
      moved: (_req, res) => {
        res.writeHead(307, { location: "http://127.0.0.1:1/elsewhere" })
        res.end()
      }
    })
    const error = await failureOf(conn.callTool("moved", {}, T))
    expect(error.kind).toBe("transport")
    expect(error.message).toMatch(/307.*127\.0\.0\.1:1\/elsewhere/)
  })

  it("connections to one server share kept-alive sockets; the last one to close ends them", async () => {
    const { server, conn } = await setUp()
    const second = await connect(remoteDef(server.url), T)
    conns.push(second)
    const agents = sharedAgents.size
    await conn.ping(T)
    // Two GET streams, and the sockets the POSTs went over: a ping of either reuses one of those.
    const before = server.sockets.size
    for (let i = 0; i < 5; i++) {
      await conn.ping(T)
      await second.ping(T)
    }
    expect(server.sockets.size).toBe(before)
    await conn.close()
    expect(sharedAgents.size).toBe(agents)
    expect(await second.ping(T)).toBeGreaterThan(0)
    await second.close()
    expect(sharedAgents.size).toBe(agents - 1)
    expect(await eventually(() => server.sockets.size === 0, 5_000)).toBe(true)
  })

  it("close() ends a call in flight and every socket", async () => {
    const { server, conn } = await setUp({ hang: () => undefined })
    const call = failureOf(conn.callTool("hang", {}, { timeoutMs: 10_000 }))
    expect(await eventually(() => server.seen.includes("POST tools/call hang"), 5_000)).toBe(true)
    await conn.close()
    expect((await call).kind).toBe("transport")
    expect(await eventually(() => server.sockets.size === 0, 5_000)).toBe(true)
  })
})
