// Every MCP field of an upstream's tools (title, inputSchema, outputSchema, annotations, execution,
// _meta) reaches clients unchanged, through list_tools and through the store's own /mcp (an SDK
// Client), compared with the upstream's own tools/list; app-only tools are hidden from agents and
// named with the reason in get_service_info; a tool that requires MCP tasks is listed and called as a
// task (server-everything's research tool, over REST and /mcp, with its progress); a required
// property with a default may be left out (the upstream applies it); server-everything's tools pass through.
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
    expect(reply.body.total_tools).toBe(2)
  })

  it("the store's /mcp lists each visible tool exactly as the upstream does, but for its callable name", async () => {
    const listed = (await within(mcp.listTools(), 5000, "/mcp tools/list")).tools
    expect(byName(listed, "rich__weather")).toEqual(asListed("rich", byName(rich, "weather")))
  })

  it("hides the app-only tool from agents and says why in get_service_info; the tasks-required tool is offered", async () => {
    const listed = (await within(mcp.listTools(), 5000, "/mcp tools/list")).tools.map((t) => t.name)
    const tools = (await server.get("/for_store/list_tools")).body.tools.map((t: Tool) => t.name)
    for (const names of [listed, tools]) {
      expect(names).toContain("rich__weather")
      expect(names).not.toContain("rich__refresh_card")
      expect(names).toContain("rich__deep_research")
    }
    const info = await server.get("/for_store/get_service_info?name=rich")
    expect(info.status, info.text).toBe(200)
    expect(info.body.tools.map((t: Tool) => t.name)).toEqual(["rich__weather", "rich__deep_research"])
    // Counts are of the tools offered to agents, as listed.
    expect(info.body.service.tool_count).toBe(2)
    expect(info.body.hidden_tools).toEqual([
      { name: "rich__refresh_card", original_name: "refresh_card", reason: expect.stringMatching(/_meta\.ui\.visibility leaves out "model"/) }
    ])
    // REST lists the upstream's fields as they are; /mcp lists the tool as one its clients call plainly (the store runs the task).
    expect(byName(info.body.tools as ReadonlyArray<Tool>, "rich__deep_research").execution).toEqual({ taskSupport: "required" })
    const viaMcp = byName((await within(mcp.listTools(), 5000, "/mcp tools/list")).tools, "rich__deep_research")
    expect(viaMcp).toEqual({ ...asListed("rich", byName(rich, "deep_research")), execution: { taskSupport: "forbidden" } })
  })

  it("the healthy line counts the tools offered to agents, as tool_count does", () => {
    expect(logs.lines.find((l) => l.includes("store/rich healthy"))).toMatch(/store\/rich healthy \(2 tools/)
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

  it("calls a tasks-required tool as a task: an upstream that cannot run it as one fails the call with its own words", async () => {
    const reply = await server.post("/for_store/call_tool", { tool_name: "rich__deep_research", args: { topic: "x" } })
    expect(reply.status, reply.text).toBe(502)
    expect(reply.body.error.code).toBe("UPSTREAM_ERROR")
    // The fixture's SDK server declares no tasks capability, and refuses the call's `task`.
    expect(reply.body.error.message).toMatch(/tools\/call "deep_research": .*does not support task creation/)
  })

  it("server-everything's tasks-required tool runs as a task: REST gets its report, /mcp its report and the task's stages as progress", async () => {
    const rest = server.post("/for_store/call_tool", { tool_name: "everything__simulate-research-query", args: { topic: "tides" }, timeout: 30 })
    const progress: Array<string> = []
    const viaMcp = within(
      mcp.callTool({ name: "everything__simulate-research-query", arguments: { topic: "moons" } }, undefined, { onprogress: (p) => void progress.push(p.message ?? ""), timeout: 30_000 }),
      30_000,
      "/mcp research call"
    )
    const [reply, result] = await Promise.all([rest, viaMcp])
    expect(reply.status, reply.text).toBe(200)
    expect(reply.body.is_error).toBe(false)
    expect(reply.body.result).toMatch(/^# Research Report: tides/)
    expect(result.isError ?? false).toBe(false)
    expect((result.content as Array<{ text: string }>)[0]!.text).toMatch(/^# Research Report: moons/)
    // The stages the task was seen in are progress of the call: its first, and its last (seen while
    // working, or only with its end when the task got there between two polls on a loaded machine).
    expect(progress[0], progress.join("\n")).toBe("task working: Gathering sources...")
    expect(progress.at(-1), progress.join("\n")).toMatch(/^task (working|completed): Generating report\.\.\.$/)
  }, 40_000)

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

  it("server-everything: every tool passes through unchanged, its tasks-required tool as one its clients call plainly", async () => {
    const listed = (await within(mcp.listTools(), 5000, "/mcp tools/list")).tools.filter((t) => t.name.startsWith("everything__"))
    expect(everything.filter((t) => t.execution?.taskSupport === "required").map((t) => t.name)).toEqual(["simulate-research-query"])
    expect(listed.length).toBeGreaterThanOrEqual(10)
    expect(listed).toEqual(
      everything.map((t) => asListed("everything", t.execution?.taskSupport === "required" ? { ...t, execution: { ...t.execution, taskSupport: "forbidden" } } : t))
    )
    const hidden = (await server.get("/for_store/get_service_info?name=everything")).body.hidden_tools
    expect(hidden).toEqual([])
  })
})
