// Search mode for large catalogs (README, "Large catalogs"; src/runtime/tool-search.ts,
// src/http/gateway/search-mode.ts) over the real store and 259 real tools: the recorded tools/list of
// 14 published MCP servers (test/fixtures/tool-catalog), each served by the catalog fixture over
// Streamable HTTP. Through /mcp with the SDK v2 client (2026-07-28) and the SDK 1.x client (a 2025
// session, and the legacy SSE transport): `?tools=search` lists search_tools, call_tool and the
// --always-visible-tools only;
// search_tools answers the best matches with their schemas in rank order, call_tool calls through the
// one pipeline (recorded as the real tool); an agent key's tools list filters both; a key's tool_mode
// picks the mode; the REST form answers the same ranking; bad input is 400 or an isError result and
// changes nothing; the index follows a removed and re-added service.
import { join } from "node:path"
import { Client as ClientV1 } from "@modelcontextprotocol/sdk/client/index.js"
import { SSEClientTransport } from "@modelcontextprotocol/sdk/client/sse.js"
import { StreamableHTTPClientTransport as TransportV1 } from "@modelcontextprotocol/sdk/client/streamableHttp.js"
import { Client, StreamableHTTPClientTransport } from "@modelcontextprotocol/client"
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest"
import { runKeys } from "../../src/cli/keys-command.js"
import { recordedCatalogs, startCatalogServer, type CatalogServer } from "../fixtures/catalog-server.js"
import { addService, authedApi, eventually, freshDir, MODERN, startTestServer, waitStatus, within, type Api, type TestServer } from "../support/index.js"

const A = "agent-a"
const CATALOGS = recordedCatalogs()
const TOTAL = Object.values(CATALOGS).reduce((n, c) => n + c.tools.length, 0)
/** Agent A's services: a part of the catalog. */
const AGENT_SERVICES = ["github", "slack", "filesystem", "playwright", "memory"]

let catalog: CatalogServer
let server: TestServer
const keys = { admin: "", narrow: "", searcher: "" }
const closers: Array<() => Promise<unknown>> = []

const keysCli = async (file: string, ...argv: string[]) => {
  let out = ""
  let err = ""
  const code = await runKeys([...argv, "--keys-file", file], {}, { writeOut: (t) => void (out += t), writeErr: (t) => void (err += t) })
  return { code, out: out.trim(), err }
}

const authed = (key: string): Api => authedApi(server.url, key)

beforeAll(async () => {
  catalog = await startCatalogServer()
  const dir = freshDir()
  const keysFile = join(dir, "mcp-store.keys.json")
  for (const [name, argv] of [
    ["admin", ["--role", "admin"]],
    ["narrow", ["--role", "agent", "--agent", A, "--tools", "github__*,filesystem__read*"]],
    ["searcher", ["--role", "agent", "--agent", A, "--tool-mode", "search"]]
  ] as const) {
    const r = await keysCli(keysFile, "create", "--name", name, ...argv)
    expect(r.code, r.err).toBe(0)
    keys[name] = r.out
  }
  // Health checks at the default pace (every 30 s), not the tests' 0.5 s: nothing here looks at a
  // check, and 19 services pinged twice a second (a fresh stateless MCP server per ping on the catalog's
  // side) cost some 0.1 to 0.15 CPU-s for every second this file runs (14 of them idle: 0.55 to 0.74
  // CPU-s in 5 s, 0.02 with checks every 30 s).
  server = await startTestServer({
    dir,
    monitoring: { health_check_seconds: 30 },
    options: { always_visible_tools: ["memory__read_graph", "filesystem__list_allowed_directories"] }
  })
  const admin = authed(keys.admin)
  // One add_service per scope, every service in it (one write of the services file each).
  const servers = (names: ReadonlyArray<string>) => ({ mcpServers: Object.fromEntries(names.map((name) => [name, { url: catalog.url(name) }])) })
  for (const [prefix, names] of [
    ["/for_store", Object.keys(CATALOGS)],
    [`/for_agent/${A}`, AGENT_SERVICES]
  ] as const) {
    const r = await admin.post(`${prefix}/add_service?wait=10`, servers(names))
    expect(r.status, r.text).toBe(200)
  }
  for (const name of Object.keys(CATALOGS)) await waitStatus(admin, "/for_store", name, "healthy", 20)
  for (const name of AGENT_SERVICES) await waitStatus(admin, `/for_agent/${A}`, name, "healthy", 20)
}, 90_000)
afterAll(async () => {
  await server?.cleanup()
  await catalog?.stop()
})
afterEach(async () => {
  await Promise.all(closers.splice(0).map((close) => within(close(), 3000, "close").catch(() => undefined)))
})

/** An SDK v2 client speaking 2026-07-28 on `path`. */
const modernClient = async (path: string, key: string) => {
  const client = new Client({ name: "tool-search-test", version: "1.0.0" }, { versionNegotiation: { mode: { pin: MODERN } } })
  client.onerror = () => undefined
  await within(client.connect(new StreamableHTTPClientTransport(new URL(server.url + path), { requestInit: { headers: { authorization: `Bearer ${key}` } } })), 10_000, `connect ${path}`)
  closers.push(() => client.close())
  return client
}

/** An SDK 1.x client (a 2025 session) on `path`. */
const legacyClient = async (path: string, key: string) => {
  const client = new ClientV1({ name: "tool-search-test", version: "1.0.0" })
  client.onerror = () => undefined
  const transport = new TransportV1(new URL(server.url + path), {
    requestInit: { headers: { authorization: `Bearer ${key}` } },
    reconnectionOptions: { maxRetries: 0, initialReconnectionDelay: 100, maxReconnectionDelay: 100, reconnectionDelayGrowFactor: 1 }
  })
  await within(client.connect(transport), 10_000, `connect ${path}`)
  closers.push(() => client.close())
  return client
}

type AnyClient = Awaited<ReturnType<typeof modernClient>> | Awaited<ReturnType<typeof legacyClient>>
type Found = { name: string; description: string; inputSchema: { type: string; properties?: Record<string, unknown> } }

const call = (client: AnyClient, name: string, args: Record<string, unknown>) =>
  (client as Awaited<ReturnType<typeof legacyClient>>).callTool({ name, arguments: args }) as Promise<{
    content: Array<{ type: string; text?: string }>
    structuredContent?: { tools?: Found[] }
    isError?: boolean
  }>

const searchOver = async (client: AnyClient, query: string, limit?: number) => {
  const result = await call(client, "search_tools", { query, ...(limit !== undefined ? { limit } : {}) })
  expect(result.isError, result.content[0]?.text).not.toBe(true)
  // The text block carries the same answer as the structured content.
  expect(JSON.parse(result.content[0]!.text!)).toEqual(result.structuredContent)
  return result.structuredContent!.tools!
}

const listedNames = async (client: AnyClient) => (await (client as Awaited<ReturnType<typeof legacyClient>>).listTools()).tools.map((t) => t.name)

describe("search mode over /mcp", () => {
  for (const [era, connect] of [
    ["the SDK v2 client (2026-07-28)", modernClient],
    ["the SDK 1.x client (a 2025 session)", legacyClient]
  ] as const) {
    it(`${era}: lists search_tools, call_tool and the always-visible tools; finds tools with their schemas; calls through call_tool`, async () => {
      const full = await connect("/mcp", keys.admin)
      expect((await listedNames(full)).length).toBe(TOTAL)

      const client = await connect("/mcp?tools=search", keys.admin)
      expect(await listedNames(client)).toEqual(["search_tools", "call_tool", "filesystem__list_allowed_directories", "memory__read_graph"])

      const found = await searchOver(client, "create a new issue in a github repository", 5)
      expect(found.length).toBe(5)
      expect(found[0]!.name).toBe("github__create_issue")
      // With its schema, as tools/list would give it.
      expect(Object.keys(found[0]!.inputSchema.properties ?? {})).toEqual(expect.arrayContaining(["owner", "repo", "title"]))
      // Deterministic: the same query, the same order.
      expect((await searchOver(client, "create a new issue in a github repository", 5)).map((t) => t.name)).toEqual(found.map((t) => t.name))

      const shots = (await searchOver(client, "take a screenshot of the web page", 5)).map((t) => t.name)
      expect(shots.some((n) => /screenshot/.test(n))).toBe(true)

      const result = await call(client, "call_tool", { name: "github__create_issue", arguments: { owner: "o", repo: "r", title: "t" } })
      expect(result.isError).not.toBe(true)
      expect(JSON.parse(result.content[0]!.text!)).toEqual({ tool: "create_issue", arguments: { owner: "o", repo: "r", title: "t" } })
      // Recorded as the tool it called, as any call.
      const records = await authed(keys.admin).get("/for_store/tool_records?service_name=github&tool_name=create_issue")
      expect(records.status).toBe(200)
      expect(records.body.executions.some((e: { params: unknown; outcome: string }) => e.outcome === "success" && JSON.stringify(e.params) === JSON.stringify({ owner: "o", repo: "r", title: "t" }))).toBe(true)
    })

    it(`${era}: bad search_tools and call_tool arguments are the tool's failure, not a crash`, async () => {
      const client = await connect("/mcp?tools=search", keys.admin)
      for (const args of [{}, { query: "" }, { query: "x".repeat(501) }, { query: "issue", limit: 0 }, { query: "issue", limit: 51 }, { query: "issue", limit: 2.5 }]) {
        const r = await call(client, "search_tools", args)
        expect(r.isError, JSON.stringify(args)).toBe(true)
      }
      for (const args of [{}, { name: "" }, { name: "github__create_issue", arguments: [1] }, { name: "call_tool" }, { name: "nope__nothing" }]) {
        const r = await call(client, "call_tool", args)
        expect(r.isError, JSON.stringify(args)).toBe(true)
      }
    })
  }

  it("an agent key's tools list filters the search and call_tool (v2 and 1.x clients)", async () => {
    for (const connect of [modernClient, legacyClient]) {
      const client = await connect(`/for_agent/${A}/mcp?tools=search`, keys.narrow)
      // The always-visible tools this key may not call are not listed.
      expect(await listedNames(client)).toEqual(["search_tools", "call_tool"])
      const found = (await searchOver(client, "read a file from disk, take a screenshot, post to slack, create issue", 50)).map((t) => t.name)
      expect(found.length).toBeGreaterThan(0)
      expect(found.every((n) => n.startsWith("github__") || n.startsWith("filesystem__read"))).toBe(true)
      expect(found).toContain("filesystem__read_text_file")
      const refused = await call(client, "call_tool", { name: "slack__slack_post_message", arguments: { channel_id: "c", text: "t" } })
      expect(refused.isError).toBe(true)
      expect(refused.content[0]!.text).toMatch(/not allowed|not found/i)
    }
  })

  it("the legacy SSE transport: /sse?tools=search is a search-mode session too", async () => {
    const client = new ClientV1({ name: "tool-search-test", version: "1.0.0" })
    client.onerror = () => undefined
    await within(client.connect(new SSEClientTransport(new URL(`${server.url}/sse?tools=search`), { requestInit: { headers: { authorization: `Bearer ${keys.admin}` } } })), 10_000, "connect sse")
    closers.push(() => client.close())
    expect(await listedNames(client)).toEqual(["search_tools", "call_tool", "filesystem__list_allowed_directories", "memory__read_graph"])
    expect((await searchOver(client, "merge the pull request", 3))[0]!.name).toBe("github__merge_pull_request")
  })

  it("a key's tool_mode picks search mode; ?tools=full gives the whole list back", async () => {
    const client = await legacyClient(`/for_agent/${A}/mcp`, keys.searcher)
    expect(await listedNames(client)).toEqual(["search_tools", "call_tool", "filesystem__list_allowed_directories", "memory__read_graph"])
    const full = await modernClient(`/for_agent/${A}/mcp?tools=full`, keys.searcher)
    const agentTotal = AGENT_SERVICES.reduce((n, s) => n + CATALOGS[s]!.tools.length, 0)
    expect((await listedNames(full)).length).toBe(agentTotal)
  })

  it("?tools= with another value is 400 with the contract's error body", async () => {
    for (const q of ["?tools=everything", "?tools=search&tools=full"]) {
      const r = await authed(keys.admin).post(`/mcp${q}`, { jsonrpc: "2.0", id: 1, method: "tools/list", params: {} })
      expect(r.status, q).toBe(400)
      expect(r.body.error.code).toBe("VALIDATION_ERROR")
    }
  })
})

describe("GET search_tools (REST)", () => {
  it("answers the tools the caller may call in rank order, with scores, as /mcp does", async () => {
    const admin = authed(keys.admin)
    const r = await admin.get(`/for_store/search_tools?q=${encodeURIComponent("create a new issue in a github repository")}&limit=5`)
    expect(r.status, r.text).toBe(200)
    const names = r.body.tools.map((t: Found) => t.name)
    expect(names[0]).toBe("github__create_issue")
    const client = await legacyClient("/mcp?tools=search", keys.admin)
    expect((await searchOver(client, "create a new issue in a github repository", 5)).map((t) => t.name)).toEqual(names)
    const scores = r.body.tools.map((t: { score: number }) => t.score)
    expect([...scores].sort((a, b) => b - a)).toEqual(scores)

    const narrow = await authed(keys.narrow).get(`/for_agent/${A}/search_tools?q=${encodeURIComponent("screenshot slack message read file")}&limit=50`)
    expect(narrow.status, narrow.text).toBe(200)
    expect(narrow.body.tools.length).toBeGreaterThan(0)
    expect(narrow.body.tools.every((t: Found) => t.name.startsWith("github__") || t.name.startsWith("filesystem__read"))).toBe(true)
    // Another agent's key does not reach the store's search.
    expect((await authed(keys.narrow).get(`/for_store/search_tools?q=issue`)).status).toBe(403)
  })

  it("refuses bad input with 400 VALIDATION_ERROR", async () => {
    const admin = authed(keys.admin)
    for (const q of ["", "?q=", "?q=%20%20", `?q=${"x".repeat(501)}`, "?q=issue&limit=0", "?q=issue&limit=51", "?q=issue&limit=two"]) {
      const r = await admin.get(`/for_store/search_tools${q}`)
      expect(r.status, q).toBe(400)
      expect(r.body.error.code, q).toBe("VALIDATION_ERROR")
    }
  })

  it("answers hostile but valid queries (one long word, many terms, repeated terms) within the limit, and holds nothing for unknown agents", async () => {
    const admin = authed(keys.admin)
    for (const q of ["a".repeat(500), Array.from({ length: 100 }, (_, i) => `w${i}`).join(" "), "issue ".repeat(80), "éà".repeat(250)]) {
      const r = await admin.get(`/for_store/search_tools?q=${encodeURIComponent(q)}&limit=3`)
      expect(r.status, q.slice(0, 20)).toBe(200)
      expect(r.body.tools.length).toBeLessThanOrEqual(3)
    }
    const before = server.running.store.toolSearch.stats().scopes
    for (let i = 0; i < 20; i++) expect((await admin.get(`/for_agent/nobody-${i}/search_tools?q=issue`)).body.tools).toEqual([])
    expect(server.running.store.toolSearch.stats().scopes).toBe(before)
  })

  it("follows the catalog: a removed service's tools leave the index, and come back with it", async () => {
    const admin = authed(keys.admin)
    const slackTools = async () => {
      const r = await admin.get(`/for_store/search_tools?q=${encodeURIComponent("post a message to a slack channel")}&limit=10`)
      expect(r.status, r.text).toBe(200)
      return r.body.tools.map((t: Found) => t.name).filter((n: string) => n.startsWith("slack__"))
    }
    expect(await slackTools()).toContain("slack__slack_post_message")
    expect((await admin.del("/for_store/delete_service/slack")).status).toBe(200)
    expect(await slackTools()).toEqual([])
    await addService(admin, "/for_store", { name: "slack", url: catalog.url("slack") })
    expect(await eventually(async () => (await slackTools()).includes("slack__slack_post_message"), 10_000)).toBe(true)
  })
})
