// connect() over stdio against the project's fixture and demo servers: the happy path, how every
// kind of failure is classified, and that the process group never outlives the connection.
import { afterAll, afterEach, beforeAll, describe, expect, it, vi } from "vitest"
import { connect } from "../../src/mcp/connect.js"
import type { McpConnection } from "../../src/mcp/types.js"
import { FAILURE_TEXT } from "../fixtures/fixture-server.js"
import { demoServer, stdioFixture } from "../fixtures/paths.js"
import { eventually, failureOf, liveGroupMembers, localDef, processGone, T, textOf } from "../support/index.js"

describe("a stdio fixture connection", () => {
  let conn: McpConnection

  beforeAll(async () => {
    conn = await connect(localDef(stdioFixture("--name", "fixture-a")), { ...T, clientName: "test" })
  })
  afterAll(async () => {
    await conn.close()
  })

  it("knows the server, the process and the tools", async () => {
    expect(conn.transportType).toBe("stdio")
    expect(conn.serverInfo).toEqual({ name: "fixture-a", version: "1.0.0" })
    const tools = await conn.listTools(T)
    expect(tools.map((t) => t.name)).toEqual(["echo", "add", "fail", "sleep", "add_tool", "pid"])
    expect(tools.find((t) => t.name === "add")?.inputSchema).toMatchObject({
      type: "object",
      properties: { a: { type: "number" }, b: { type: "number" } }
    })
    const pid = textOf(await conn.callTool("pid", {}, T))
    expect(Number(pid)).toBe(conn.pid)
  })

  it("calls tools and pings", async () => {
    expect(textOf(await conn.callTool("echo", { text: "hello" }, T))).toBe("hello")
    expect(textOf(await conn.callTool("add", { a: 2, b: 3 }, T))).toBe("5")
    const rtt = await conn.ping(T)
    expect(rtt).toBeGreaterThan(0)
    expect(rtt).toBeLessThan(5_000)
  })

  it("resolves a tool error as a result with isError", async () => {
    const result = await conn.callTool("fail", {}, T)
    expect(result.isError).toBe(true)
    expect(textOf(result)).toBe(FAILURE_TEXT)
  })

  it("classifies invalid arguments as protocol -32602", async () => {
    const error = await failureOf(conn.callTool("add", { a: "two", b: 3 }, T))
    expect(error.kind).toBe("protocol")
    expect(error.code).toBe(-32602)
    expect(error.message).toMatch(/Invalid arguments for tool add/)
  })

  it("classifies an unknown tool as a protocol error", async () => {
    const error = await failureOf(conn.callTool("no_such_tool", {}, T))
    expect(error.kind).toBe("protocol")
    expect(error.code).toBe(-32602)
    expect(error.message).toMatch(/no_such_tool not found/)
  })

  it("times out at the time-out, not later, and the connection stays usable", async () => {
    const started = performance.now()
    const error = await failureOf(conn.callTool("sleep", { ms: 10_000 }, { timeoutMs: 300 }))
    const elapsed = performance.now() - started
    expect(error.kind).toBe("timeout")
    expect(error.message).toMatch(/300 ms/)
    expect(elapsed).toBeGreaterThanOrEqual(290)
    expect(elapsed).toBeLessThan(1_000)
    expect(textOf(await conn.callTool("echo", { text: "still here" }, T))).toBe("still here")
  })

  it("classifies the caller's abort as aborted, promptly", async () => {
    const controller = new AbortController()
    const started = performance.now()
    const pending = failureOf(conn.callTool("sleep", { ms: 10_000 }, { timeoutMs: 10_000, signal: controller.signal }))
    // The server reads its requests in order: once a ping sent after the call is answered, the call is running there.
    await conn.ping(T)
    controller.abort(new Error("user gave up"))
    const error = await pending
    expect(error.kind).toBe("aborted")
    expect(error.message).toMatch(/user gave up/)
    expect(performance.now() - started).toBeLessThan(1_000)
  })

  it("classifies an already aborted signal as aborted without sending anything", async () => {
    const error = await failureOf(conn.ping({ timeoutMs: 1_000, signal: AbortSignal.abort() }))
    expect(error.kind).toBe("aborted")
  })

  it("tells when the tool list changes", async () => {
    const changed = vi.fn()
    const unsubscribe = conn.onToolsChanged(changed)
    expect(textOf(await conn.callTool("add_tool", { name: "extra" }, T))).toBe("added extra")
    await vi.waitFor(() => expect(changed).toHaveBeenCalled(), { timeout: 2_000 })
    unsubscribe()
    expect((await conn.listTools(T)).map((t) => t.name)).toContain("extra")
    expect(textOf(await conn.callTool("extra", {}, T))).toBe("called extra")
  })

  it("shows the process's stderr", async () => {
    expect(conn.stderrTail()).toEqual([])
  })
})

describe("stdio connection lifecycle", () => {
  const opened: Array<McpConnection> = []
  afterEach(async () => {
    await Promise.all(opened.splice(0).map((c) => c.close()))
  })
  const open = async (...flags: Array<string>): Promise<McpConnection> => {
    const conn = await connect(localDef(stdioFixture(...flags)), T)
    opened.push(conn)
    return conn
  }

  it("rejects with transport, the exit code and the stderr text when the process exits at once", async () => {
    const error = await failureOf(connect(localDef(stdioFixture("--exit-immediately")), T))
    expect(error.kind).toBe("transport")
    expect(error.message).toMatch(/exited with code 3/)
    expect(error.message).toMatch(/exiting at once, as asked/)
  })

  it("rejects with transport when the command does not exist", async () => {
    const error = await failureOf(connect(localDef({ command: "mcp-store-no-such-command", args: [] }), T))
    expect(error.kind).toBe("transport")
    expect(error.message).toMatch(/ENOENT/)
  })

  it("times out a server that never answers initialize, and ends its process", async () => {
    const hang = { command: process.execPath, args: ["-e", "setInterval(() => {}, 1e9)"] }
    // The process group is known from the ledger the connection tells (on a loaded machine the
    // process may not have printed anything within the time-out).
    const started: number[] = []
    const ended: number[] = []
    const ledger = { started: (pgid: number) => void started.push(pgid), ended: (pgid: number) => void ended.push(pgid) }
    const t0 = performance.now()
    const error = await failureOf(connect(localDef(hang), { timeoutMs: 500, processes: ledger }))
    expect(error.kind).toBe("timeout")
    expect(performance.now() - t0).toBeLessThan(2_000)
    expect(started).toHaveLength(1)
    const pid = started[0] as number
    expect(await eventually(() => ended.includes(pid), 5_000)).toBe(true)
    expect(processGone(pid)).toBe(true)
  })

  it("fires onClose once, with the signal, when the child is SIGKILLed; the grandchild goes too", async () => {
    const conn = await open("--spawn-grandchild")
    const grandchild = Number(textOf(await conn.callTool("grandchild_pid", {}, T)))
    const reasons: Array<string> = []
    conn.onClose((reason) => reasons.push(reason))
    process.kill(conn.pid ?? 0, "SIGKILL")
    await vi.waitFor(() => expect(reasons).toHaveLength(1), { timeout: 5_000 })
    expect(reasons[0]).toMatch(/killed by SIGKILL/)
    await vi.waitFor(() => expect(processGone(grandchild)).toBe(true), { timeout: 5_000 })
    const error = await failureOf(conn.ping(T))
    expect(error.kind).toBe("transport")
    // A listener that comes late still hears about it.
    const late = await new Promise<string>((resolve) => conn.onClose(resolve))
    expect(late).toBe(reasons[0])
    await conn.close()
    expect(reasons).toHaveLength(1)
  })

  it("close() leaves no process of the group, does not fire onClose, and is idempotent", async () => {
    const conn = await open("--spawn-grandchild", "--grandchild-ignores-sigterm")
    const pid = conn.pid ?? 0
    const grandchild = Number(textOf(await conn.callTool("grandchild_pid", {}, T)))
    expect(processGone(grandchild)).toBe(false)
    const onClose = vi.fn()
    conn.onClose(onClose)
    await Promise.all([conn.close(), conn.close()])
    await conn.close()
    expect(processGone(pid)).toBe(true)
    await vi.waitFor(() => expect(processGone(grandchild)).toBe(true), { timeout: 1_000 })
    expect(liveGroupMembers(pid)).toEqual([])
    expect(onClose).not.toHaveBeenCalled()
    const error = await failureOf(conn.ping(T))
    expect(error.kind).toBe("transport")
  })

  it("fails pending requests with transport when closed under them", async () => {
    const conn = await open()
    // Its failure taken at once: the close fails it before the close itself ends.
    const pending = failureOf(conn.callTool("sleep", { ms: 10_000 }, T))
    // The server reads its requests in order: once a ping sent after the call is answered, the call is running there.
    await conn.ping(T)
    await conn.close()
    expect((await pending).kind).toBe("transport")
  })

  it("follows nextCursor through every page of tools", async () => {
    const conn = await open("--tools-page-size", "2", "--prefix", "p_")
    const tools = await conn.listTools(T)
    expect(tools.map((t) => t.name)).toEqual(["p_echo", "p_add", "p_fail", "p_sleep", "p_add_tool", "p_pid"])
    expect(tools[0]?.inputSchema).toMatchObject({ type: "object", properties: { text: { type: "string" } } })
  })

  it("keeps the last 200 stderr lines of the server", async () => {
    const conn = await open("--stderr-lines", "250")
    await vi.waitFor(() => expect(conn.stderrTail().at(-1)).toBe("stderr line 250"), { timeout: 5_000 })
    const tail = conn.stderrTail()
    expect(tail).toHaveLength(200)
    expect(tail[0]).toBe("stderr line 51")
  })
})

describe("the demo server", () => {
  let conn: McpConnection
  beforeAll(async () => {
    conn = await connect(localDef(demoServer, "/"), T)
  })
  afterAll(async () => {
    await conn.close()
  })

  it("serves echo, add and get_time", async () => {
    expect(conn.serverInfo?.name).toBe("demo")
    expect((await conn.listTools(T)).map((t) => t.name)).toEqual(["echo", "add", "get_time"])
    expect(textOf(await conn.callTool("echo", { message: "hi" }, T))).toBe("hi")
    const sum = await conn.callTool("add", { a: 1.5, b: 2 }, T)
    expect(textOf(sum)).toBe("3.5")
    expect(sum.structuredContent).toEqual({ sum: 3.5 })
    expect(textOf(await conn.callTool("get_time", {}, T))).toMatch(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/)
    expect(textOf(await conn.callTool("get_time", { timezone: "Asia/Tokyo" }, T))).toMatch(
      /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d \(Asia\/Tokyo\)$/
    )
    expect((await conn.callTool("get_time", { timezone: "Mars/Olympus" }, T)).isError).toBe(true)
  })
})
