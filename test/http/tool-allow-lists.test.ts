// Tool allow-lists at dispatch over real HTTP (src/domain/tool-filter.ts): a service's
// include_tools / exclude_tools (and the Gemini CLI's excludeTools), an agent key's `tools` list made
// by the keys CLI's code path, and --deny-by-default, seen through list_tools, list_services,
// get_service_info, call_tool, use_tool (the direct route and the original-name look-up), the MCP
// endpoints (Streamable HTTP and the legacy SSE transport), /events, the records and the monitoring
// figures; bad globs refused with 400; the services file keeps the lists across a restart. The lists
// are about tools: a service's prompts stay offered whatever its lists and the key's.
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { join } from "node:path"
import { Client } from "@modelcontextprotocol/sdk/client/index.js"
import { SSEClientTransport } from "@modelcontextprotocol/sdk/client/sse.js"
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js"
import { runKeys } from "../../src/cli/keys-command.js"
import { everythingStdio } from "../fixtures/paths.js"
import { addService, authedApi, fixtureService, freshDir, localService, openSse, startTestServer, within, type Api, type SseStream, type TestServer } from "../support/index.js"

const A = "agent-a"

const keysCli = async (file: string, ...argv: string[]) => {
  let out = ""
  let err = ""
  const code = await runKeys([...argv, "--keys-file", file], {}, { writeOut: (t) => void (out += t), writeErr: (t) => void (err += t) })
  return { code, out: out.trim(), err }
}

const names = (tools: ReadonlyArray<{ name: string }>) => tools.map((t) => t.name).sort()

/** An MCP client of agent A's endpoint with `key`, over Streamable HTTP or the legacy SSE transport. */
const mcpClient = async (base: string, key: string, kind: "streamable" | "sse" = "streamable") => {
  const requestInit = { headers: { authorization: `Bearer ${key}` } }
  const transport =
    kind === "sse"
      ? new SSEClientTransport(new URL(`${base}/for_agent/${A}/sse`), { requestInit })
      : new StreamableHTTPClientTransport(new URL(`${base}/for_agent/${A}/mcp`), {
          requestInit,
          reconnectionOptions: { maxRetries: 0, initialReconnectionDelay: 100, maxReconnectionDelay: 100, reconnectionDelayGrowFactor: 1 }
        })
  const client = new Client({ name: "allow-lists-test", version: "1.0.0" })
  client.onerror = () => undefined
  await within(client.connect(transport), 10_000, `connect ${kind}`)
  return client
}

describe("tool allow-lists", () => {
  let server: TestServer
  let dir: string
  let keysFile: string
  let admin: Api
  let narrow: Api
  let wide: Api
  const keys = { admin: "", narrow: "", wide: "" }
  const clients: Client[] = []
  const streams: SseStream[] = []

  beforeAll(async () => {
    dir = freshDir()
    keysFile = join(dir, "mcp-store.keys.json")
    for (const [name, argv] of [
      ["admin", ["--role", "admin"]],
      ["narrow", ["--role", "agent", "--agent", A, "--tools", "svc__echo, svc__f*"]],
      ["wide", ["--role", "agent", "--agent", A]]
    ] as const) {
      const r = await keysCli(keysFile, "create", "--name", name, ...argv)
      expect(r.code, r.err).toBe(0)
      keys[name] = r.out
    }
    server = await startTestServer({ dir })
    admin = authedApi(server.url, keys.admin)
    narrow = authedApi(server.url, keys.narrow)
    wide = authedApi(server.url, keys.wide)
    const added = await Promise.all([
      addService(admin, `/for_agent/${A}`, { ...fixtureService("svc"), include_tools: ["echo", "add*", "fail", "sleep"], exclude_tools: ["add_tool", "sleep"] }),
      addService(admin, `/for_agent/${A}`, { ...fixtureService("gem"), excludeTools: ["echo", "add*", "sleep", "pid"] }),
      // Every tool left out (its `echo` too): its prompts stay offered, the lists being about tools.
      addService(admin, `/for_agent/${A}`, localService("every", everythingStdio, { exclude_tools: ["*"] }))
    ])
    for (const r of added) expect(r.status, r.text).toBe(200)
  }, 60_000)
  afterAll(async () => {
    for (const s of streams) s.close()
    await Promise.all(clients.map((c) => c.close().catch(() => undefined)))
    await server?.cleanup()
  }, 15_000)

  it("a service's include_tools / exclude_tools (or excludeTools) decide what is listed, counted and told as hidden", async () => {
    const tools = await admin.get(`/for_agent/${A}/list_tools`)
    expect(tools.status, tools.text).toBe(200)
    expect(names(tools.body.tools)).toEqual(["gem__fail", "svc__add", "svc__echo", "svc__fail"])
    const services = await admin.get(`/for_agent/${A}/list_services`)
    expect(Object.fromEntries(services.body.services.map((s: { name: string; tool_count: number }) => [s.name, s.tool_count]))).toEqual({ every: 0, gem: 1, svc: 3 })
    const info = await admin.get(`/for_agent/${A}/get_service_info?name=svc`)
    expect(info.body.service.config.include_tools).toEqual(["echo", "add*", "fail", "sleep"])
    const hidden = Object.fromEntries(info.body.hidden_tools.map((t: { name: string; reason: string }) => [t.name, t.reason]))
    expect(hidden["svc__sleep"]).toMatch(/exclude_tools/)
    expect(hidden["svc__add_tool"]).toMatch(/exclude_tools/)
    expect(hidden["svc__pid"]).toMatch(/include_tools/)
    expect(hidden["svc__echo"]).toBeUndefined()
  })

  it("a call to a tool its service leaves out is 403 TOOL_NOT_ALLOWED, by callable or original name, call_tool and use_tool", async () => {
    for (const [route, body] of [
      ["call_tool", { tool_name: "svc__sleep", args: { ms: 0 } }],
      ["use_tool", { tool_name: "svc__add_tool", args: { name: "x" } }],
      ["call_tool", { tool_name: "pid" }],
      ["call_tool", { tool_name: "echo", service_name: "gem", args: { text: "hi" } }]
    ] as const) {
      const reply = await admin.post(`/for_agent/${A}/${route}`, body)
      expect(reply.status, `${route} ${body.tool_name}: ${reply.text}`).toBe(403)
      expect(reply.body.error.code).toBe("TOOL_NOT_ALLOWED")
    }
    // `echo` by its original name: gem leaves it out, so it is svc's (no ambiguity).
    const echo = await admin.post(`/for_agent/${A}/call_tool`, { tool_name: "echo", args: { text: "hi" } })
    expect(echo.status, echo.text).toBe(200)
    expect(echo.body.tool_name).toBe("svc__echo")
  })

  it("an agent key's tools list narrows what it lists and calls; a key without one sees what the services offer", async () => {
    const listed = await narrow.get(`/for_agent/${A}/list_tools`)
    expect(names(listed.body.tools)).toEqual(["svc__echo", "svc__fail"])
    expect(names((await wide.get(`/for_agent/${A}/list_tools`)).body.tools)).toEqual(["gem__fail", "svc__add", "svc__echo", "svc__fail"])
    const services = await narrow.get(`/for_agent/${A}/list_services`)
    expect(services.body.services.find((s: { name: string }) => s.name === "svc").tool_count).toBe(2)
    const info = await narrow.get(`/for_agent/${A}/get_service_info?name=svc`)
    expect(names(info.body.tools)).toEqual(["svc__echo", "svc__fail"])
    expect(info.body.hidden_tools.find((t: { name: string }) => t.name === "svc__add").reason).toMatch(/key's tools list/)

    const refused = await narrow.post(`/for_agent/${A}/call_tool`, { tool_name: "svc__add", args: { a: 1, b: 2 } })
    expect(refused.status, refused.text).toBe(403)
    expect(refused.body.error.code).toBe("TOOL_NOT_ALLOWED")
    expect((await narrow.post(`/for_agent/${A}/use_tool`, { tool_name: "add", args: { a: 1, b: 2 } })).status).toBe(403)
    // A near miss gets no suggestion of a tool outside the list.
    const missing = await narrow.post(`/for_agent/${A}/call_tool`, { tool_name: "svc__ad", args: {} })
    expect(missing.status).toBe(404)
    expect(missing.body.error.details.suggestions).not.toContain("svc__add")
    const allowed = await narrow.post(`/for_agent/${A}/call_tool`, { tool_name: "svc__echo", args: { text: "ok" } })
    expect(allowed.status, allowed.text).toBe(200)
    expect(allowed.body.result).toBe("ok")
    expect((await wide.post(`/for_agent/${A}/call_tool`, { tool_name: "svc__add", args: { a: 1, b: 2 } })).body.result).toBe("3")
  })

  it("an MCP session keeps the list of the key that opened it: tools/list and tools/call", async () => {
    const narrowClient = await mcpClient(server.url, keys.narrow)
    const adminClient = await mcpClient(server.url, keys.admin)
    clients.push(narrowClient, adminClient)
    expect(names((await narrowClient.listTools()).tools)).toEqual(["svc__echo", "svc__fail"])
    expect(names((await adminClient.listTools()).tools)).toEqual(["gem__fail", "svc__add", "svc__echo", "svc__fail"])
    const refused = await narrowClient.callTool({ name: "svc__add", arguments: { a: 1, b: 2 } })
    expect(refused.isError).toBe(true)
    expect(JSON.stringify(refused.content)).toMatch(/not allowed/)
    const ok = await narrowClient.callTool({ name: "svc__echo", arguments: { text: "mcp" } })
    expect(ok.isError).toBeFalsy()
  })

  it("so does a session of the legacy SSE transport (/sse, then /messages)", async () => {
    const sse = await mcpClient(server.url, keys.narrow, "sse")
    clients.push(sse)
    expect(names((await sse.listTools()).tools)).toEqual(["svc__echo", "svc__fail"])
    const refused = await sse.callTool({ name: "gem__fail", arguments: {} })
    expect(refused.isError).toBe(true)
    expect(JSON.stringify(refused.content)).toMatch(/not allowed/)
    expect((await sse.callTool({ name: "svc__echo", arguments: { text: "sse" } })).content).toEqual([{ type: "text", text: "sse" }])
  })

  it("the lists are about tools: a service that offers no tool, to a key with a list, still offers its prompts", async () => {
    const narrowClient = await mcpClient(server.url, keys.narrow)
    clients.push(narrowClient)
    expect(names((await narrowClient.listTools()).tools).filter((n) => n.startsWith("every__"))).toEqual([])
    const prompts = (await narrowClient.listPrompts()).prompts.map((p) => p.name)
    expect(prompts).toContain("every__simple-prompt")
    const prompt = await narrowClient.getPrompt({ name: "every__simple-prompt" })
    expect(prompt.messages.length).toBeGreaterThan(0)
    const rest = await narrow.get(`/for_agent/${A}/list_prompts`)
    expect(rest.status, rest.text).toBe(200)
    expect(JSON.stringify(rest.body)).toContain("every__simple-prompt")
  })

  it("every refusal is recorded with the outcome tool_not_allowed and counted in the figures", async () => {
    const records = await admin.get(`/for_agent/${A}/tool_records?outcome=tool_not_allowed&limit=100`)
    expect(records.status, records.text).toBe(200)
    // 4 by the services' lists, 2 by the key's list over HTTP, 1 over MCP, 1 over SSE.
    expect(records.body.total).toBe(8)
    const sleep = records.body.executions.find((r: { tool_name: string }) => r.tool_name === "sleep")
    expect(sleep).toMatchObject({ service_name: "svc", outcome: "tool_not_allowed", agent_id: A })
    const figures = await admin.get(`/monitoring/error_rate_stats?agent_id=${A}`)
    expect(figures.status, figures.text).toBe(200)
    expect(figures.body.by_outcome.tool_not_allowed).toBe(8)
  })

  it("bad globs are refused with 400 and change nothing; so is a bad --tools of keys create", async () => {
    const before = server.readFileText()
    for (const bad of ["echo", [""], ["x".repeat(201)], Array.from({ length: 101 }, (_, i) => `t${i}`), [5], ["a\u0000b"]]) {
      for (const field of ["include_tools", "exclude_tools", "excludeTools"]) {
        const reply = await admin.post(`/for_agent/${A}/add_service`, { ...fixtureService("bad"), [field]: bad })
        expect(reply.status, `${field} ${JSON.stringify(bad).slice(0, 40)}: ${reply.text}`).toBe(400)
        expect(reply.body.error.code).toBe("VALIDATION_ERROR")
        expect(JSON.stringify(reply.body.error.details.fields)).toContain(field)
      }
    }
    expect(server.readFileText()).toBe(before)
    expect((await keysCli(keysFile, "create", "--role", "agent", "--agent", A, "--tools", "x".repeat(201))).code).toBe(2)
  })

  it("the services file keeps the lists; after a restart with --deny-by-default a key without a list sees and calls nothing", async () => {
    const file = server.readFile() as { agents?: Record<string, { mcpServers: Record<string, Record<string, unknown>> }> }
    const servers = file.agents?.[A]?.mcpServers ?? (server.readFile() as { mcpServers: Record<string, Record<string, unknown>> }).mcpServers
    expect(JSON.stringify(servers)).toContain('"include_tools":["echo","add*","fail","sleep"]')
    expect(JSON.stringify(servers)).toContain('"excludeTools":["echo","add*","sleep","pid"]')
    await server.close()
    server = await startTestServer({ dir, options: { deny_by_default: true } })
    admin = authedApi(server.url, keys.admin)
    wide = authedApi(server.url, keys.wide)
    narrow = authedApi(server.url, keys.narrow)
    const ready = await admin.post(`/for_agent/${A}/wait_service`, { client_id_or_service_name: "svc", status: "healthy", timeout: 20 })
    expect(ready.body.success, ready.text).toBe(true)
    await admin.post(`/for_agent/${A}/wait_service`, { client_id_or_service_name: "gem", status: "healthy", timeout: 20 })
    expect(names((await admin.get(`/for_agent/${A}/list_tools`)).body.tools)).toEqual(["gem__fail", "svc__add", "svc__echo", "svc__fail"])
    expect((await wide.get(`/for_agent/${A}/list_tools`)).body.tools).toEqual([])
    const refused = await wide.post(`/for_agent/${A}/call_tool`, { tool_name: "svc__echo", args: { text: "no" } })
    expect(refused.status, refused.text).toBe(403)
    expect(refused.body.error.code).toBe("TOOL_NOT_ALLOWED")
    expect(names((await narrow.get(`/for_agent/${A}/list_tools`)).body.tools)).toEqual(["svc__echo", "svc__fail"])
  }, 60_000)

  it("/events tells an agent key only of the tools it may see: calls and counts", async () => {
    const open = async (path: string, key: string) => {
      const s = await openSse(server.url + path, { authorization: `Bearer ${key}` })
      streams.push(s)
      expect(s.status).toBe(200)
      return s
    }
    const mine = await open("/events", keys.narrow)
    const all = await open(`/events?agent_id=${A}`, keys.admin)
    // A new service: the key's list matches none of its tools.
    await addService(admin, `/for_agent/${A}`, { ...fixtureService("late"), include_tools: ["echo", "fail"] })
    const changed = (s: SseStream) => s.waitFor((e) => e.event === "tools_changed" && e.json?.service_name === "late", 10_000, "tools_changed late")
    expect((await changed(all)).json.tool_count).toBe(2)
    expect((await changed(mine)).json.tool_count).toBe(0)
    expect((await admin.post(`/for_agent/${A}/call_tool`, { tool_name: "svc__add", args: { a: 1, b: 2 } })).status).toBe(200)
    expect((await admin.post(`/for_agent/${A}/call_tool`, { tool_name: "svc__echo", args: { text: "e" } })).status).toBe(200)
    await all.until((es) => es.filter((e) => e.event === "tool_call").length === 2, 5000, "both calls")
    // Events come in order: once the echo call is in, the add call would have been before it.
    await mine.waitFor((e) => e.event === "tool_call" && e.json?.tool_name === "echo", 5000, "echo call")
    expect(mine.events.filter((e) => e.event === "tool_call").map((e) => e.json.tool_name)).toEqual(["echo"])
  }, 30_000)
})
