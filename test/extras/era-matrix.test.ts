// Every client era against every upstream era, through one store's /mcp: the SDK v2 client pinned to
// 2026-07-28 and in `auto` mode, and the SDK 1.x client (a 2025 session), each against a
// modern-only SDK v2 server, a dual-era SDK v2 server and an SDK 1.x server (all over Streamable
// HTTP, registered in one store). In each cell: the tool is listed, a call answers, and an
// elicitation crosses the store (the upstream asks mid-call in its own era, the client answers in
// its own), with the call recorded once.
import { Client, StreamableHTTPClientTransport } from "@modelcontextprotocol/client"
import { Client as ClientV1 } from "@modelcontextprotocol/sdk/client/index.js"
import { StreamableHTTPClientTransport as TransportV1 } from "@modelcontextprotocol/sdk/client/streamableHttp.js"
import { ElicitRequestSchema } from "@modelcontextprotocol/sdk/types.js"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { startEraHttpFixture, type EraHttpFixture } from "../fixtures/era-http.js"
import { startHttpFixture, type HttpFixture } from "../fixtures/http-fixture.js"
import { addService, startTestServer, waitStatus, within, type TestServer } from "../support/index.js"

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
  const clients = new Map<string, { callTool: (params: { name: string; arguments: Record<string, unknown> }) => Promise<{ content?: unknown; isError?: boolean }>; listTools: () => Promise<{ tools: Array<{ name: string }> }>; close: () => Promise<void> }>()

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
        await within(client.connect(new TransportV1(url)), 10_000, "connect 1.x")
        clients.set(kind, client as never)
      } else {
        const mode = kind === "v2 auto" ? "auto" : { pin: "2026-07-28" }
        const client = new Client({ name: "matrix-v2", version: "1.0.0" }, { capabilities: { elicitation: { form: {} } }, versionNegotiation: { mode } })
        client.onerror = () => undefined
        client.setRequestHandler("elicitation/create", async () => ANSWER as never)
        await within(client.connect(new StreamableHTTPClientTransport(url)), 10_000, `connect ${kind}`)
        clients.set(kind, client as never)
      }
    }
  }, 60_000)
  afterAll(async () => {
    await Promise.all([...clients.values()].map((c) => within(c.close(), 3000, "close").catch(() => undefined)))
    await server?.cleanup()
    await Promise.all([modern?.stop(), dual?.stop(), legacy?.stop()])
  })

  const text = (result: { content?: unknown }) => (result.content as Array<{ text?: string }> | undefined)?.[0]?.text

  for (const client of CLIENTS) {
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
