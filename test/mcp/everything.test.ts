// connect() against the protocol's reference server (@modelcontextprotocol/server-everything) over
// each transport: a server we did not write must work the same way.
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { connect } from "../../src/mcp/connect.js"
import { McpRequestError, type McpConnection } from "../../src/mcp/types.js"
import { everythingStdio } from "../fixtures/paths.js"
import { startEverythingHttp, type EverythingHttp } from "../fixtures/everything-http.js"
import { localDef, processGone, remoteDef, T, textOf } from "../support/index.js"

/** The checks every transport must pass against the reference server. */
const exercise = async (conn: McpConnection): Promise<void> => {
  expect(conn.serverInfo?.name).toBe("mcp-servers/everything")
  const tools = await conn.listTools(T)
  const names = tools.map((t) => t.name)
  expect(names).toEqual(expect.arrayContaining(["echo", "get-sum"]))
  expect(tools.find((t) => t.name === "echo")?.annotations).toMatchObject({ readOnlyHint: true })
  expect(textOf(await conn.callTool("echo", { message: "hi" }, T))).toBe("Echo: hi")
  expect(textOf(await conn.callTool("get-sum", { a: 2, b: 40 }, T))).toMatch(/42/)
  expect(await conn.ping(T)).toBeGreaterThan(0)
  const unknown = await conn.callTool("no-such-tool", {}, T).then(
    (result) => result,
    (error: unknown) => error
  )
  // SDK 1.x servers answer an unknown tool with an isError result, not a JSON-RPC error.
  if (unknown instanceof McpRequestError) expect(unknown.kind).toBe("protocol")
  else expect(unknown).toMatchObject({ isError: true })
}

describe("server-everything over stdio", () => {
  let conn: McpConnection
  beforeAll(async () => {
    conn = await connect(localDef(everythingStdio), T)
  })
  afterAll(async () => {
    await conn.close()
  })

  it("lists, calls and pings", async () => {
    expect(conn.transportType).toBe("stdio")
    await exercise(conn)
    expect(conn.stderrTail().join("\n")).toMatch(/Starting default \(STDIO\) server/)
  })

  it("ends its process on close()", async () => {
    const pid = conn.pid ?? 0
    await conn.close()
    expect(processGone(pid)).toBe(true)
  })
})

describe.each([
  ["streamableHttp", "streamable_http"],
  ["sse", "sse"]
] as const)("server-everything over %s", (mode, transport) => {
  let server: EverythingHttp
  let conn: McpConnection
  beforeAll(async () => {
    server = await startEverythingHttp(mode)
    conn = await connect(remoteDef(server.url, transport), T)
  })
  afterAll(async () => {
    await conn.close()
    await server.stop()
  })

  it("lists, calls and pings", async () => {
    expect(server.url).toMatch(/^http:\/\/127\.0\.0\.1:\d+\//)
    expect(conn.transportType).toBe(transport)
    await exercise(conn)
  })
})
