// Every MCP field of an upstream's tools (title, inputSchema, outputSchema, annotations, execution,
// _meta) reaches clients unchanged, through list_tools and through the store's own /mcp (an SDK
// Client), compared with the upstream's own tools/list; app-only tools and tools that require MCP
// tasks are hidden from agents and named with the reason in get_service_info; a required property
// with a default may be left out (the upstream applies it); server-everything's tools pass through.
import { join } from "node:path"
import { Client } from "@modelcontextprotocol/sdk/client/index.js"
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js"
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js"
import type { Tool } from "@modelcontextprotocol/sdk/types.js"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { everythingStdio, REPO_ROOT, type Launch } from "../fixtures/paths.js"
import { addService, localService, programArgs, startTestServer, waitStatus, within, type TestServer } from "../support/index.js"
import { captureLogs, type CapturedLogs } from "../../src/logging/log.js"

const richTools: Launch = { command: process.execPath, args: programArgs(join(REPO_ROOT, "test", "fixtures", "rich-tools-server.ts")) }

/**
 * The upstream's own tools/list, read by the SDK's Client straight from the server, with the
 * capabilities the store declares (server-everything offers its elicitation and sampling tools only then).
 */
const upstreamTools = async (launch: Launch): Promise<ReadonlyArray<Tool>> => {
  const client = new Client({ name: "tool-fields-test", version: "1.0.0" }, { capabilities: { elicitation: {}, sampling: {} } })
  await within(client.connect(new StdioClientTransport({ command: launch.command, args: [...launch.args], stderr: "ignore" })), 15_000, "connect upstream")
  try {
    return (await within(client.listTools(), 5000, "upstream tools/list")).tools
  } finally {
    await client.close()
  }
}

/** A tool of the upstream as the store must list it: its callable name, every other field equal. */
const asListed = (service: string, tool: Tool) => ({ ...tool, name: `${service}__${tool.name}` })

let server: TestServer
let mcp: Client
let rich: ReadonlyArray<Tool>
let everything: ReadonlyArray<Tool>
let logs: CapturedLogs

beforeAll(async () => {
  ;[rich, everything] = await Promise.all([upstreamTools(richTools), upstreamTools(everythingStdio)])
  server = await startTestServer()
  logs = captureLogs({ level: "info" })
  await addService(server, "/for_store", localService("rich", richTools))
  await addService(server, "/for_store", localService("everything", everythingStdio))
  await waitStatus(server, "/for_store", "rich", "healthy")
  await waitStatus(server, "/for_store", "everything", "healthy")
  mcp = new Client({ name: "tool-fields-test", version: "1.0.0" })
  await within(mcp.connect(new StreamableHTTPClientTransport(new URL(server.url + "/mcp"))), 10_000, "connect /mcp")
}, 60_000)

afterAll(async () => {
  logs?.restore()
  await mcp?.close().catch(() => undefined)
  await server?.cleanup()
})

const byName = <T extends { name: string }>(tools: ReadonlyArray<T>, name: string): T => {
  const tool = tools.find((t) => t.name === name)
  if (tool === undefined) throw new Error(`no tool ${name} in ${tools.map((t) => t.name).join(", ")}`)
  return tool
}

describe("every tool field kept", () => {
  it("the fixture's upstream list has every MCP field (the test's premise)", () => {
    const weather = byName(rich, "weather")
    expect(Object.keys(weather).sort()).toEqual(["_meta", "annotations", "description", "execution", "inputSchema", "name", "outputSchema", "title"])
  })

  it("list_tools: the contract's fields, and the upstream's MCP fields unchanged", async () => {
    const reply = await server.get("/for_store/list_tools?service_name=rich")
    expect(reply.status, reply.text).toBe(200)
    const { name, original_name, service_name, ...mcpFields } = byName(reply.body.tools as ReadonlyArray<Tool>, "rich__weather") as Tool & {
      original_name: string
      service_name: string
    }
    expect({ name, original_name, service_name }).toEqual({ name: "rich__weather", original_name: "weather", service_name: "rich" })
    expect({ name: "weather", ...mcpFields }).toEqual(byName(rich, "weather"))
    expect(reply.body.total_tools).toBe(1)
  })

  it("the store's /mcp lists each visible tool exactly as the upstream does, but for its callable name", async () => {
    const listed = (await within(mcp.listTools(), 5000, "/mcp tools/list")).tools
    expect(byName(listed, "rich__weather")).toEqual(asListed("rich", byName(rich, "weather")))
  })

  it("hides the app-only tool and the tasks-required tool from agents, and says why in get_service_info", async () => {
    const listed = (await within(mcp.listTools(), 5000, "/mcp tools/list")).tools.map((t) => t.name)
    const tools = (await server.get("/for_store/list_tools")).body.tools.map((t: Tool) => t.name)
    for (const names of [listed, tools]) {
      expect(names).toContain("rich__weather")
      expect(names).not.toContain("rich__refresh_card")
      expect(names).not.toContain("rich__deep_research")
    }
    const info = await server.get("/for_store/get_service_info?name=rich")
    expect(info.status, info.text).toBe(200)
    expect(info.body.tools.map((t: Tool) => t.name)).toEqual(["rich__weather"])
    // Counts are of the tools offered to agents, as listed.
    expect(info.body.service.tool_count).toBe(1)
    expect(info.body.hidden_tools).toEqual([
      { name: "rich__refresh_card", original_name: "refresh_card", reason: expect.stringMatching(/_meta\.ui\.visibility leaves out "model"/) },
      { name: "rich__deep_research", original_name: "deep_research", reason: expect.stringMatching(/requires MCP tasks .*taskSupport "required"/) }
    ])
  })

  it("the healthy line counts the tools offered to agents, as tool_count does", () => {
    expect(logs.lines.find((l) => l.includes("store/rich healthy"))).toMatch(/store\/rich healthy \(1 tools/)
  })

  it("never suggests a hidden tool: a misspelt name gets only the tools offered to agents", async () => {
    const near = await server.post("/for_store/call_tool", { tool_name: "rich__refresh_cards", args: {} })
    expect(near.status, near.text).toBe(404)
    expect(near.body.error.details.suggestions ?? []).not.toContain("rich__refresh_card")
    expect(near.text).not.toMatch(/did you mean/)
    const visible = await server.post("/for_store/call_tool", { tool_name: "rich__weathr", args: {} })
    expect(visible.status, visible.text).toBe(404)
    expect(visible.body.error.details.suggestions).toEqual(["rich__weather"])
  })

  it("refuses a call to a tasks-required tool with 400 and the reason, without sending it", async () => {
    const reply = await server.post("/for_store/call_tool", { tool_name: "rich__deep_research", args: { topic: "x" } })
    expect(reply.status, reply.text).toBe(400)
    expect(reply.text).toMatch(/requires MCP tasks/)
  })

  it("a required property with a default may be left out: the call reaches the upstream as sent", async () => {
    const reply = await server.post("/for_store/call_tool", { tool_name: "rich__weather", args: { city: "Oslo" } })
    expect(reply.status, reply.text).toBe(200)
    expect(reply.text).toContain(JSON.stringify(JSON.stringify({ tool: "weather", received: { city: "Oslo" } })).slice(1, -1))
    // Still checked where it is stricter than nothing: a missing property without a default.
    const missing = await server.post("/for_store/call_tool", { tool_name: "rich__weather", args: {} })
    expect(missing.status, missing.text).toBe(400)
    expect(missing.text).toMatch(/args\.city/)
    // And through /mcp: structuredContent checked by the client against the outputSchema it was given.
    const result = await within(mcp.callTool({ name: "rich__weather", arguments: { city: "Oslo" } }), 5000, "/mcp call")
    expect(result.structuredContent).toEqual({ city: "Oslo", temperature: 21 })
  })

  it("server-everything: every tool it offers agents passes through unchanged, its tasks-required tool hidden", async () => {
    const listed = (await within(mcp.listTools(), 5000, "/mcp tools/list")).tools.filter((t) => t.name.startsWith("everything__"))
    const offered = everything.filter((t) => t.execution?.taskSupport !== "required")
    expect(offered.length).toBeGreaterThanOrEqual(10)
    expect(listed).toEqual(offered.map((t) => asListed("everything", t)))
    const hidden = (await server.get("/for_store/get_service_info?name=everything")).body.hidden_tools
    expect(hidden.map((t: { original_name: string }) => t.original_name)).toEqual(
      everything.filter((t) => t.execution?.taskSupport === "required").map((t) => t.name)
    )
  })
})
