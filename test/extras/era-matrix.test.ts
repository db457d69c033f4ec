// Every client era against every upstream era, through one store's /mcp: the SDK v2 client pinned to
// 2026-07-28 and in `auto` mode, and the SDK 1.x client (a 2025 session), each against a
// modern-only SDK v2 server, a dual-era SDK v2 server and an SDK 1.x server (all over Streamable
// HTTP, registered in one store). In each cell: the tool is listed, a call answers, and an
// elicitation crosses the store (the upstream asks mid-call in its own era, the client answers in
// its own), with the call recorded once; and a call the client cancels is cancelled upstream, in
// the upstream's era (a closed stream for a 2026-07-28 server, notifications/cancelled for a 2025
// one), and recorded `cancelled`. A tool added upstream, in either era, is announced to every client
// in its own era (notifications/tools/list_changed on a 2025 session, or on a 2026-07-28 client's
// subscriptions/listen stream) and listed. A 2026-07-28 call whose `_meta` asks for log messages
// gets the called service's on its own stream; one that does not, none.
import { Client, StreamableHTTPClientTransport } from "@modelcontextprotocol/client"
import { Client as ClientV1 } from "@modelcontextprotocol/sdk/client/index.js"
import { StreamableHTTPClientTransport as TransportV1 } from "@modelcontextprotocol/sdk/client/streamableHttp.js"
import { ElicitRequestSchema, ToolListChangedNotificationSchema } from "@modelcontextprotocol/sdk/types.js"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { startEraHttpFixture, type EraHttpFixture } from "../fixtures/era-http.js"
import { startHttpFixture, type HttpFixture } from "../fixtures/http-fixture.js"
import { addService, eventually, startTestServer, waitStatus, within, type TestServer } from "../support/index.js"

/** The upstreams: the service name, and its tool that asks for input with the arguments and the answer it ends with. */
const UPSTREAMS = [
  { name: "modern", ask: "confirm", args: {}, answered: "confirmed 1" },
  { name: "dual", ask: "confirm", args: {}, answered: "confirmed 1" },
  { name: "legacy", ask: "ask", args: {}, answered: "names: matrix" }
] as const
const CLIENTS = ["v2 pinned to 2026-07-28", "v2 auto", "1.x (2025 session)"] as const

/** The answer every client gives to an elicitation: accept, with both fixtures' fields. */
const ANSWER = { action: "accept", content: { ok: true, name: "matrix" } } as const

describe("every client era against every upstream era, through /mcp", { timeout: 30_000 }, () => {
  let server: TestServer
  let modern: EraHttpFixture
  let dual: EraHttpFixture
  let legacy: HttpFixture
  /** A client as the cells use it: the SDK 1.x and v2 clients, each called its own way. */
  interface CellClient {
    callTool(params: { name: string; arguments: Record<string, unknown> }, signal?: AbortSignal): Promise<{ content?: unknown; isError?: boolean }>
    listTools(): Promise<{ tools: Array<{ name: string }> }>
    close(): Promise<void>
    /** How many tool list changes the client has heard (through its era's channel). */
    changes(): number
  }
  const clients = new Map<string, CellClient>()

  beforeAll(async () => {
    ;[modern, dual, legacy, server] = await Promise.all([
      startEraHttpFixture(),
      startEraHttpFixture({ legacy: "stateless" }),
      startHttpFixture({ server: { elicitTool: true } }),
      startTestServer()
    ])
    for (const [name, url] of [["modern", modern.url], ["dual", dual.url], ["legacy", legacy.url]] as const) await addService(server, "/for_store", { name, url })
    for (const name of ["modern", "dual", "legacy"]) await waitStatus(server, "/for_store", name, "healthy", 15)
    const url = new URL(`${server.url}/mcp`)
    for (const kind of CLIENTS) {
      if (kind === "1.x (2025 session)") {
        const client = new ClientV1({ name: "matrix-1x", version: "1.0.0" }, { capabilities: { elicitation: {} } })
        client.setRequestHandler(ElicitRequestSchema, async () => ANSWER)
        let changes = 0
        client.setNotificationHandler(ToolListChangedNotificationSchema, () => void (changes += 1))
        await within(client.connect(new TransportV1(url)), 10_000, "connect 1.x")
        clients.set(kind, {
          callTool: (params, signal) => client.callTool(params, undefined, signal === undefined ? {} : { signal }) as never,
          listTools: () => client.listTools(),
          close: () => client.close(),
          changes: () => changes
        })
      } else {
        const mode = kind === "v2 auto" ? "auto" : { pin: "2026-07-28" }
        const client = new Client({ name: "matrix-v2", version: "1.0.0" }, { capabilities: { elicitation: { form: {} } }, versionNegotiation: { mode } })
        client.onerror = () => undefined
        client.setRequestHandler("elicitation/create", async () => ANSWER as never)
        let changes = 0
        client.setNotificationHandler("notifications/tools/list_changed", () => void (changes += 1))
        await within(client.connect(new StreamableHTTPClientTransport(url)), 10_000, `connect ${kind}`)
        // A 2026-07-28 client hears of changes on a listen stream (in `auto` mode too: the store answers server/discover).
        const listening = await within(client.listen({ toolsListChanged: true }), 5000, `listen ${kind}`)
        clients.set(kind, {
          callTool: (params, signal) => client.callTool(params, signal === undefined ? {} : { signal }) as never,
          listTools: () => client.listTools({}, { cacheMode: "bypass" }) as never,
          close: async () => {
            await listening.close()
            await client.close()
          },
          changes: () => changes
        })
      }
    }
  }, 60_000)
  afterAll(async () => {
    await Promise.all([...clients.values()].map((c) => within(c.close(), 3000, "close").catch(() => undefined)))
    await server?.cleanup()
    await Promise.all([modern?.stop(), dual?.stop(), legacy?.stop()])
  })

  const text = (result: { content?: unknown }) => (result.content as Array<{ text?: string }> | undefined)?.[0]?.text

  it("a 2026-07-28 call that asks for log messages in its _meta hears the called service's, on its own stream", async () => {
    const client = new Client({ name: "matrix-logs", version: "1.0.0" }, { versionNegotiation: { mode: { pin: "2026-07-28" } } })
    client.onerror = () => undefined
    const heard: Array<{ data: unknown; logger?: string }> = []
    client.setNotificationHandler("notifications/message", (n) => void heard.push(n.params as { data: unknown; logger?: string }))
    await within(client.connect(new StreamableHTTPClientTransport(new URL(`${server.url}/mcp`))), 10_000, "connect")
    try {
      await client.callTool({ name: "modern__say", arguments: { text: "unheard" } })
      const said = await client.callTool({ name: "modern__say", arguments: { text: "heard" }, _meta: { "io.modelcontextprotocol/logLevel": "info" } })
      expect(text(said)).toBe("said")
      expect(await eventually(() => heard.some((m) => m.data === "heard"), 5000)).toBe(true)
      expect(heard.find((m) => m.data === "heard")?.logger).toBe("modern")
      expect(heard.some((m) => m.data === "unheard")).toBe(false)
    } finally {
      await client.close()
    }
  })

  it("a tool added upstream, in either era, is announced to every client in its own era, and listed", async () => {
    for (const service of ["modern", "legacy"]) {
      const heard = new Map(CLIENTS.map((kind) => [kind, clients.get(kind)!.changes()]))
      const tool = `late_${service}`
      await server.post("/for_store/call_tool", { tool_name: `${service}__add_tool`, args: { name: tool } })
      for (const kind of CLIENTS) {
        const c = clients.get(kind)!
        expect(await eventually(() => c.changes() > heard.get(kind)!, 5000), `${kind} hears of ${tool}`).toBe(true)
        expect((await c.listTools()).tools.map((t) => t.name), kind).toContain(`${service}__${tool}`)
      }
    }
  })

  for (const client of CLIENTS) {
    it(`${client}: a cancelled call is cancelled upstream in either era, and recorded cancelled`, async () => {
      const c = clients.get(client)!
      const outcomes = async (service: string) =>
        ((await server.get(`/for_store/tool_records?tool_name=sleep&service_name=${service}&limit=1000`)).body.executions as Array<{ outcome: string }>).filter((r) => r.outcome === "cancelled").length
      const cancelledBefore = { modern: await outcomes("modern"), legacy: await outcomes("legacy") }
      const noted = modern.notes().filter((n) => n === "cancelled sleep").length
      const posted = legacy.requests().filter((r) => r === "POST notifications/cancelled").length
      for (const service of ["modern", "legacy"]) {
        const abort = new AbortController()
        const call = c.callTool({ name: `${service}__sleep`, arguments: { ms: 10_000 } }, abort.signal)
        setTimeout(() => abort.abort(), 300)
        await expect(call).rejects.toBeDefined()
      }
      expect(await eventually(() => modern.notes().filter((n) => n === "cancelled sleep").length === noted + 1, 5000)).toBe(true)
      expect(await eventually(() => legacy.requests().filter((r) => r === "POST notifications/cancelled").length === posted + 1, 5000)).toBe(true)
      expect(await eventually(async () => (await outcomes("modern")) === cancelledBefore.modern + 1 && (await outcomes("legacy")) === cancelledBefore.legacy + 1, 5000)).toBe(true)
    })

    for (const upstream of UPSTREAMS) {
      it(`${client} → ${upstream.name}: listed, called, and an elicitation crosses`, async () => {
        const c = clients.get(client)!
        const names = (await within(c.listTools(), 5000, "tools/list")).tools.map((t) => t.name)
        expect(names).toContain(`${upstream.name}__echo`)
        const echoed = await within(c.callTool({ name: `${upstream.name}__echo`, arguments: { text: `${client} ${upstream.name}` } }), 10_000, "echo")
        expect(text(echoed)).toBe(`${client} ${upstream.name}`)
        const before = (await server.get(`/for_store/tool_records?tool_name=${upstream.ask}&service_name=${upstream.name}`)).body.total as number
        const asked = await within(c.callTool({ name: `${upstream.name}__${upstream.ask}`, arguments: upstream.args }), 15_000, "the call that asks")
        expect(asked.isError ?? false).toBe(false)
        expect(text(asked)).toBe(upstream.answered)
        const after = (await server.get(`/for_store/tool_records?tool_name=${upstream.ask}&service_name=${upstream.name}`)).body.total as number
        expect(after - before).toBe(1)
      })
    }
  }
})
