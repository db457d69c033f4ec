// Logging through the store (src/http/gateway/log-relay.ts): /mcp and an agent's endpoint declare `logging`
// and take logging/setLevel; upstream log messages reach SDK clients with the service's name as
// logger (server-everything's simulated logging, the conformance fixture's logging tool); the relay
// filters per session, sends the scope's most verbose level upstream, and drops a flood at its rate
// limit without queueing it.
import { Client } from "@modelcontextprotocol/sdk/client/index.js"
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js"
import type { Server } from "@modelcontextprotocol/server"
import { EmptyResultSchema, LoggingMessageNotificationSchema, type LoggingLevel, type LoggingMessageNotification } from "@modelcontextprotocol/sdk/types.js"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { LOG_BURST, LogRelay, passes, type LogSession } from "../../src/http/gateway/log-relay.js"
import { captureLogs } from "../../src/logging/log.js"
import { conformanceServer, everythingStdio } from "../fixtures/paths.js"
import { addService, fakeConnection, localService, startTestServer, within, type TestServer } from "../support/index.js"

type Message = LoggingMessageNotification["params"]

describe("logging on the MCP endpoints", () => {
  let server: TestServer
  const clients: Client[] = []

  beforeAll(async () => {
    server = await startTestServer()
    await addService(server, "/for_store", localService("ev", everythingStdio))
    await addService(server, "/for_store", localService("conf", conformanceServer))
    await addService(server, "/for_agent/agent-1", localService("conf", conformanceServer))
  }, 60_000)

  afterAll(async () => {
    await Promise.all(clients.splice(0).map((c) => within(c.close(), 3000, "client close").catch(() => undefined)))
    await server?.cleanup()
  })

  /** A client on `path` whose log messages are collected; `until(n)` resolves once n have come. */
  const connect = async (path: string) => {
    const client = new Client({ name: "logging-test", version: "1.0.0" })
    client.onerror = () => undefined
    clients.push(client)
    const messages: Message[] = []
    const waiters: Array<{ n: number; resolve: () => void }> = []
    client.setNotificationHandler(LoggingMessageNotificationSchema, (n) => {
      messages.push(n.params)
      for (const w of waiters.filter((w) => messages.length >= w.n)) w.resolve()
    })
    await within(client.connect(new StreamableHTTPClientTransport(new URL(server.url + path))), 10_000, `connect ${path}`)
    const until = (n: number) =>
      within(
        new Promise<void>((resolve) => (messages.length >= n ? resolve() : waiters.push({ n, resolve }))),
        10_000,
        `${n} log messages on ${path}`
      )
    return { client, messages, until }
  }

  it("declares logging and relays a tool's log messages with the service's name as logger", async () => {
    const { client, messages, until } = await connect("/mcp")
    expect(client.getServerCapabilities()?.logging).toEqual({})
    await client.setLoggingLevel("debug")
    await client.callTool({ name: "conf__test_tool_with_logging", arguments: {} })
    await until(3)
    expect(messages.slice(0, 3)).toEqual([
      { level: "info", logger: "conf", data: "Tool execution started" },
      { level: "info", logger: "conf", data: "Tool processing data" },
      { level: "info", logger: "conf", data: "Tool execution completed" }
    ])
  })

  it("relays server-everything's simulated logging", async () => {
    const { client, messages, until } = await connect("/mcp")
    await client.setLoggingLevel("debug")
    await client.callTool({ name: "ev__toggle-simulated-logging", arguments: {} })
    try {
      await until(1)
      expect(messages[0]).toMatchObject({ logger: "ev", data: expect.stringMatching(/message/) })
    } finally {
      await client.callTool({ name: "ev__toggle-simulated-logging", arguments: {} })
    }
  })

  it("an agent's endpoint relays its own services' messages", async () => {
    const { client, messages, until } = await connect("/for_agent/agent-1/mcp")
    expect(client.getServerCapabilities()?.logging).toEqual({})
    await client.setLoggingLevel("info")
    await client.callTool({ name: "conf__test_tool_with_logging", arguments: {} })
    await until(3)
    expect(messages.map((m) => m.logger)).toEqual(["conf", "conf", "conf"])
  })

  it("refuses a level MCP does not know, naming the levels, and keeps the session's level", async () => {
    const { client, messages, until } = await connect("/mcp")
    await client.setLoggingLevel("info")
    await expect(client.request({ method: "logging/setLevel", params: { level: "loud" } }, EmptyResultSchema)).rejects.toThrow(/emergency/)
    await client.callTool({ name: "conf__test_tool_with_logging", arguments: {} })
    await until(3)
    expect(messages).toHaveLength(3)
  })
})

describe("the relay", () => {
  /** A session whose relayed messages are collected. */
  const session = (logLevel?: LoggingLevel) => {
    const got: Message[] = []
    const s: LogSession & { got: Message[] } = { logLevel, got, server: { sendLoggingMessage: async (m: Message) => void got.push(m) } as unknown as Server }
    return s
  }
  /** A fake connection that declares logging, with its log listener and the levels it was sent. */
  const upstream = (logging = true) => {
    let listener: ((m: Message) => void) | undefined
    const levels: LoggingLevel[] = []
    const connection = {
      ...fakeConnection(),
      logging,
      setLoggingLevel: async (level: LoggingLevel) => void levels.push(level),
      onLogMessage: (l: (m: Message) => void) => {
        listener = l
        return () => (listener = undefined)
      }
    }
    return { connection, levels, emit: (m: Message) => listener?.(m), listening: () => listener !== undefined }
  }

  it("orders levels as MCP does", () => {
    expect(passes("error", "warning")).toBe(true)
    expect(passes("info", "warning")).toBe(false)
    expect(passes("debug", undefined)).toBe(true)
    expect(passes("emergency", "emergency")).toBe(true)
  })

  it("filters per session, prefixes the logger, keeps the scope's messages in the scope", () => {
    const verbose = session("debug")
    const quiet = session("error")
    const unset = session()
    const other = session("debug")
    const relay = new LogRelay((scope) => (scope === "store" ? [verbose, quiet, unset] : [other]))
    const up = upstream()
    relay.watch("store", "svc", up.connection)
    up.emit({ level: "info", logger: "db", data: "hello" })
    up.emit({ level: "critical", data: { n: 1 } })
    expect(verbose.got).toEqual([
      { level: "info", logger: "svc/db", data: "hello" },
      { level: "critical", logger: "svc", data: { n: 1 } }
    ])
    expect(quiet.got).toEqual([{ level: "critical", logger: "svc", data: { n: 1 } }])
    expect(unset.got).toHaveLength(2)
    expect(other.got).toEqual([])
    relay.close()
    expect(up.listening()).toBe(false)
  })

  it("sends the scope's most verbose level upstream, once per change, only to services that declared logging", () => {
    const sessions: Array<LogSession & { logLevel: LoggingLevel | undefined }> = [session(), session()]
    const relay = new LogRelay(() => sessions)
    const up = upstream()
    const mute = upstream(false)
    relay.watch("store", "a", up.connection)
    relay.watch("store", "b", mute.connection)
    expect(up.levels).toEqual([]) // no session asked: the upstream keeps its default
    sessions[0]!.logLevel = "warning"
    relay.levelsChanged("store")
    sessions[1]!.logLevel = "error"
    relay.levelsChanged("store")
    sessions[1]!.logLevel = "debug"
    relay.levelsChanged("store")
    expect(up.levels).toEqual(["warning", "debug"])
    expect(mute.levels).toEqual([])
    // A new connection of the service (a reconnection) gets the scope's level at once.
    const again = upstream()
    relay.watch("store", "a", again.connection)
    expect(up.listening()).toBe(false)
    expect(again.levels).toEqual(["debug"])
    relay.close()
  })

  it("drops a flood over the rate limit at once, without queueing, and says so in one line", () => {
    const logs = captureLogs({ level: "warning" })
    try {
      const s = session("debug")
      const relay = new LogRelay(() => [s])
      const up = upstream()
      relay.watch("store", "flood", up.connection)
      for (let i = 0; i < 100_000; i++) up.emit({ level: "info", data: i })
      // The burst, plus what the bucket refilled while the loop ran (50 a second).
      expect(s.got.length).toBeGreaterThanOrEqual(LOG_BURST)
      expect(s.got.length).toBeLessThan(LOG_BURST + 100)
      expect(logs.lines.filter((l) => l.includes("faster than"))).toHaveLength(1)
      relay.close()
      expect(logs.lines.some((l) => /flood: \d+ log messages dropped/.test(l))).toBe(true)
    } finally {
      logs.restore()
    }
  })
})
