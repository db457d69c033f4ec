// Each upstream's own tools/list against the store's list of that service: the SDK's
// Client straight to server-everything, server-filesystem (on a temporary folder) and server-memory
// (its file in a temporary folder), and the same servers registered in the store. Every tool the
// store offers agents is listed by REST list_tools and by /mcp tools/list with every MCP field equal
// to the upstream's (name aside: the callable `<service>__<tool>`); the tools it hides are exactly
// those its rules hide (src/runtime/service-views.ts hiddenReason), and none other is missing.
import { mkdtempSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { Client } from "@modelcontextprotocol/sdk/client/index.js"
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js"
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js"
import type { Tool } from "@modelcontextprotocol/sdk/types.js"
import { afterAll, beforeAll, expect, it } from "vitest"
import type { ToolInfo } from "../../src/mcp/types.js"
import { hiddenReason } from "../../src/runtime/service-views.js"
import { everythingStdio, type Launch } from "../fixtures/paths.js"
import { packageProgram, startTestServer, within, type TestServer } from "../support/index.js"

const dir = mkdtempSync(join(tmpdir(), "mcp-store-tool-lists-"))
/**
 * server-filesystem and server-memory each run from one bundle of their package's program
 * (`packageProgram`, test/support/programs.ts): their code, and so their tools, unchanged, at less
 * CPU a start; each is started twice (by the test's client and by the store).
 */
const UPSTREAMS: Record<string, Launch> = {
  everything: everythingStdio,
  filesystem: { command: process.execPath, args: [packageProgram("@modelcontextprotocol/server-filesystem"), dir] },
  memory: { command: process.execPath, args: [packageProgram("@modelcontextprotocol/server-memory")], env: { MEMORY_FILE_PATH: join(dir, "memory.jsonl") } }
}

/** The upstream's own tools/list, every page, read by the SDK's Client straight from the server. */
const upstreamTools = async (launch: Launch): Promise<ReadonlyArray<Tool>> => {
  // With the capabilities the store's own client declares (src/mcp/connect.ts): a server may offer more tools to such a client.
  const client = new Client({ name: "upstream-tool-lists-test", version: "1.0.0" }, { capabilities: { elicitation: {}, sampling: {} } })
  const transport = new StdioClientTransport({ command: launch.command, args: [...launch.args], env: { ...(process.env as Record<string, string>), ...launch.env }, stderr: "ignore" })
  await within(client.connect(transport), 15_000, "connect upstream")
  try {
    return (await within(client.listTools(), 5000, "upstream tools/list")).tools
  } finally {
    await client.close()
  }
}

let server: TestServer
let mcp: Client
const own: Record<string, ReadonlyArray<Tool>> = {}

beforeAll(async () => {
  const lists = await Promise.all(Object.values(UPSTREAMS).map(upstreamTools))
  Object.keys(UPSTREAMS).forEach((name, i) => (own[name] = lists[i]!))
  server = await startTestServer()
  const added = await server.post(
    "/for_store/add_service?wait=20",
    Object.entries(UPSTREAMS).map(([name, l]) => ({ name, command: l.command, args: l.args, ...(l.env !== undefined ? { env: l.env } : {}) }))
  )
  expect(added.status, added.text).toBe(200)
  expect(added.body.services.map((s: { status: string }) => s.status)).toEqual(["healthy", "healthy", "healthy"])
  mcp = new Client({ name: "upstream-tool-lists-test", version: "1.0.0" })
  await within(mcp.connect(new StreamableHTTPClientTransport(new URL(`${server.url}/mcp`))), 10_000, "connect /mcp")
}, 60_000)

afterAll(async () => {
  await mcp?.close().catch(() => undefined)
  await server?.cleanup()
  rmSync(dir, { recursive: true, force: true })
})

/** The upstream's tools the store offers, as it must list them: the callable name, every other field equal. */
const expected = (service: string) =>
  own[service]!
    .filter((t) => hiddenReason({ ...t, description: t.description ?? "" } as ToolInfo) === undefined)
    .map((t) => ({ ...t, name: `${service}__${t.name}` }))

it.each(Object.keys(UPSTREAMS))("%s: REST list_tools and /mcp tools/list give the upstream's tools, every MCP field equal", async (service) => {
  const want = expected(service)
  expect(want.length).toBeGreaterThan(0)
  // Every upstream tool has a description here: the store's "" for a missing one is not at stake.
  expect(own[service]!.every((t) => typeof t.description === "string")).toBe(true)

  const rest = await server.get(`/for_store/list_tools?service_name=${service}`)
  expect(rest.status, rest.text).toBe(200)
  const restTools = (rest.body.tools as Array<Tool & { original_name: string; service_name: string }>).map(({ original_name, service_name, ...tool }) => {
    expect(service_name).toBe(service)
    expect(tool.name).toBe(`${service}__${original_name}`)
    return tool
  })
  expect(restTools).toEqual(want)

  // The store's MCP clients call a tool that requires tasks plainly (the store runs the task): listed "forbidden" to them.
  const listed = (await within(mcp.listTools(), 5000, "/mcp tools/list")).tools.filter((t) => t.name.startsWith(`${service}__`))
  expect(listed).toEqual(want.map((t) => (t.execution?.taskSupport === "required" ? { ...t, execution: { ...t.execution, taskSupport: "forbidden" } } : t)))
})
