// The MCP endpoint as a server of both eras (src/http/gateway/modern.ts): on the same URLs, the SDK
// v2 client pinned to 2026-07-28 and in `auto` mode works without a session (discover, list, call
// with structured content and progress, cancellation by closing the stream), served by any store in
// turn, while the SDK 1.x client (and v2 in legacy mode) keeps its 2025 session; an agent key sees
// `cacheScope: private` and only its tools; the HTTP rules of the 2025 path hold (key, Origin, body
// limit); raw HTTP checks the modern wire rules (Mcp-Method, Mcp-Name and MCP-Protocol-Version
// against the body, unsupported versions, server/discover, resultType, tool order); resources,
// prompts and completion against server-everything; subscriptions/listen fed by the store's events
// (per scope and key, resource updates), capped, counted and ended at shutdown.
import { Client as ClientV1 } from "@modelcontextprotocol/sdk/client/index.js"
import { StreamableHTTPClientTransport as TransportV1 } from "@modelcontextprotocol/sdk/client/streamableHttp.js"
import { Client, StreamableHTTPClientTransport } from "@modelcontextprotocol/client"
import { existsSync } from "node:fs"
import { join } from "node:path"
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest"
import { runKeys } from "../../src/cli/keys-command.js"
import { captureLogs } from "../../src/logging/log.js"
import { startHttpFixture, type HttpFixture } from "../fixtures/http-fixture.js"
import { demoServer, everythingStdio } from "../fixtures/paths.js"
import { addService, authedApi, eventually, freshDir, modernEnvelope, modernRequest, MODERN, parsePrometheus, quietFor, rawRequest, sampleValue, localService, startTestServer, waitStatus, within, type TestServer } from "../support/index.js"

const A = "agent-a"
const B = "agent-b"

let fixture: HttpFixture
let server: TestServer
const keys = { admin: "", narrow: "", wideB: "" }
const closers: Array<() => Promise<unknown>> = []

const keysCli = async (file: string, ...argv: string[]) => {
  let out = ""
  let err = ""
  const code = await runKeys([...argv, "--keys-file", file], {}, { writeOut: (t) => void (out += t), writeErr: (t) => void (err += t) })
  return { code, out: out.trim(), err }
}

beforeAll(async () => {
  fixture = await startHttpFixture({ server: { progressTool: true } })
  const dir = freshDir()
  const keysFile = join(dir, "mcp-store.keys.json")
  for (const [name, argv] of [
    ["admin", ["--role", "admin"]],
    ["narrow", ["--role", "agent", "--agent", A, "--tools", "fx__echo, fx__add"]],
    ["wideB", ["--role", "agent", "--agent", B]]
  ] as const) {
    const r = await keysCli(keysFile, "create", "--name", name, ...argv)
    expect(r.code, r.err).toBe(0)
    keys[name] = r.out
  }
  server = await startTestServer({ dir })
  for (const [prefix, def] of [
    ["/for_store", { name: "fx", url: fixture.url }],
    ["/for_store", localService("demo", demoServer)],
    [`/for_agent/${A}`, { name: "fx", url: fixture.url }],
    [`/for_agent/${B}`, { name: "fx", url: fixture.url }]
  ] as const) {
    const r = await addService(authed(keys.admin), prefix, def)
    expect(r.status, r.text).toBe(200)
  }
  await waitStatus(authed(keys.admin), "/for_store", "demo", "healthy", 30)
}, 60_000)
afterAll(async () => {
  await server?.cleanup()
  await fixture?.stop()
})
afterEach(async () => {
  await Promise.all(closers.splice(0).map((close) => within(close(), 3000, "close").catch(() => undefined)))
})

/** The test client's API with a key. */
const authed = (key: string) => authedApi(server.url, key)

/** An SDK v2 client on `path` with `key`, pinned to 2026-07-28 or in `auto` mode; closed after the test. */
const modernClient = async (path: string, key: string, mode: "auto" | "legacy" | { pin: string } = { pin: MODERN }) => {
  const client = new Client({ name: "modern-test", version: "1.0.0" }, { versionNegotiation: { mode } })
  client.onerror = () => undefined
  const transport = new StreamableHTTPClientTransport(new URL(server.url + path), { requestInit: { headers: { authorization: `Bearer ${key}` } } })
  await within(client.connect(transport), 10_000, `connect ${path}`)
  closers.push(() => client.close())
  return client
}

/** An SDK 1.x client (2025, a session) on `path`. */
const legacyClient = async (path: string, key: string) => {
  const client = new ClientV1({ name: "legacy-test", version: "1.0.0" })
  client.onerror = () => undefined
  const transport = new TransportV1(new URL(server.url + path), {
    requestInit: { headers: { authorization: `Bearer ${key}` } },
    reconnectionOptions: { maxRetries: 0, initialReconnectionDelay: 100, maxReconnectionDelay: 100, reconnectionDelayGrowFactor: 1 }
  })
  await within(client.connect(transport), 10_000, `connect ${path}`)
  closers.push(() => client.close())
  return { client, transport }
}

const envelope = (version = MODERN) => modernEnvelope(version)

interface RawOptions {
  readonly key?: string
  readonly version?: string
  /** Headers to send instead of the standard ones (`null` leaves one out). */
  readonly headers?: Record<string, string | null>
  readonly params?: Record<string, unknown>
}

/** One modern JSON-RPC request over raw HTTP to `path` of the shared store. */
const raw = (path: string, method: string, options: RawOptions = {}) => rawRequestModern(server.url + path, method, { key: keys.admin, ...options })

/** A modern request with `params` to a store without keys. */
const rawAt = (url: string, method: string, params: Record<string, unknown> = {}) => rawRequestModern(url, method, { params })

/** One modern JSON-RPC request over raw HTTP: the status and the JSON-RPC response (the last of an SSE stream). */
const rawRequestModern = (url: string, method: string, options: RawOptions = {}) => modernRequest(url, method, options.params ?? {}, options)

describe("the SDK v2 client on /mcp", () => {
  it("pinned to 2026-07-28: connects without a session, lists in a deterministic order, calls with structured content and progress", async () => {
    const client = await modernClient("/mcp", keys.admin)
    expect(client.getProtocolEra()).toBe("modern")
    const { tools } = await within(client.listTools(), 5000, "tools/list")
    const names = tools.map((t) => t.name)
    expect(names).toContain("fx__echo")
    expect(names).toContain("demo__add")
    // The services by name, each one's tools in its server's order.
    const services = names.map((n) => n.split("__")[0])
    expect(services).toEqual([...services].sort())

    const sum = await within(client.callTool({ name: "demo__add", arguments: { a: 4, b: 5 } }), 10_000, "demo__add")
    expect(sum.isError ?? false).toBe(false)
    expect(sum.content).toEqual([{ type: "text", text: "9" }])
    expect(sum.structuredContent).toEqual({ sum: 9 })

    const seen: number[] = []
    const progress = await within(
      client.callTool({ name: "fx__progress", arguments: { count: 4, every: 20 } }, { onprogress: (p) => void seen.push(p.progress) }),
      10_000,
      "fx__progress"
    )
    expect(progress.content).toEqual([{ type: "text", text: "sent 4 progress notifications" }])
    expect(seen).toEqual([1, 2, 3, 4])

    // An unknown tool is the tool's failure, as on the 2025 face.
    const unknown = await within(client.callTool({ name: "fx__nope", arguments: {} }), 10_000, "fx__nope")
    expect(unknown.isError).toBe(true)
  })

  it("in auto mode: server/discover answers, so the client speaks 2026-07-28", async () => {
    const client = await modernClient("/mcp", keys.admin, "auto")
    expect(client.getProtocolEra()).toBe("modern")
    const echo = await within(client.callTool({ name: "fx__echo", arguments: { text: "hi" } }), 10_000, "fx__echo")
    expect(echo.content).toEqual([{ type: "text", text: "hi" }])
  })

  it("the SDK 1.x client (and v2 in legacy mode) keeps its 2025 session on the same URL, beside a modern client", async () => {
    const modern = await modernClient("/mcp", keys.admin)
    const { client, transport } = await legacyClient("/mcp", keys.admin)
    expect(transport.sessionId).toMatch(/.+/)
    const [a, b] = await Promise.all([client.listTools(), modern.listTools()])
    expect(a.tools.map((t) => t.name)).toEqual(b.tools.map((t) => t.name))
    const sum = await within(client.callTool({ name: "demo__add", arguments: { a: 1, b: 2 } }), 10_000, "demo__add (1.x)")
    expect(sum.structuredContent).toEqual({ sum: 3 })
    // The SDK v2 client in its default `legacy` mode: a 2025 session too.
    const v2legacy = await modernClient("/mcp", keys.admin, "legacy")
    expect(v2legacy.getProtocolEra()).toBe("legacy")
    expect((await v2legacy.callTool({ name: "demo__add", arguments: { a: 2, b: 2 } })).structuredContent).toEqual({ sum: 4 })
  })

  it("closing a call's stream cancels it: the upstream is told and the record says cancelled", async () => {
    const client = await modernClient("/mcp", keys.admin)
    const before = fixture.requests().filter((r) => r === "POST notifications/cancelled").length
    const controller = new AbortController()
    const call = client.callTool({ name: "fx__sleep", arguments: { ms: 60_000 } }, { signal: controller.signal }).catch((e: unknown) => e)
    expect(await eventually(() => server.running.store.inFlightCalls === 1, 10_000)).toBe(true)
    controller.abort("changed my mind")
    expect(await within(call, 5000, "the aborted call")).toBeInstanceOf(Error)
    expect(await eventually(() => fixture.requests().filter((r) => r === "POST notifications/cancelled").length === before + 1, 5000)).toBe(true)
    expect(await eventually(() => server.running.store.inFlightCalls === 0, 5000)).toBe(true)
    expect(await eventually(async () => (await server.running.store.records.query({ tool_name: "sleep" })).executions.some((r) => r.outcome === "cancelled"), 5000)).toBe(true)
  })
})

/**
 * Two stores without keys, sharing nothing, each with the fixture as `fx` and a cap of four streams:
 * started for the first test that needs them, stopped at the end of the file. Their tests leave
 * nothing open in them (every client and stream is closed after its test).
 */
let keylessStores: Promise<TestServer[]> | undefined
const keyless = (): Promise<TestServer[]> =>
  (keylessStores ??= Promise.all([0, 1].map(() => startTestServer({ services: { mcpServers: { fx: { url: fixture.url } } }, options: { max_mcp_sessions: 4 } }))))
afterAll(async () => {
  const stores = await keylessStores?.catch(() => [])
  await Promise.all((stores ?? []).map((s) => s.cleanup()))
})

describe("no session, so no affinity", () => {
  it("a modern client served in turn by two stores that share nothing (no secret, no key file) lists and calls on each", async () => {
    const stores = await keyless()
    await Promise.all(stores.map((s) => waitStatus(s, "/for_store", "fx", "healthy", 30)))
    const served: string[] = []
    let turn = 0
    const c = new Client({ name: "modern-test", version: "1.0.0" }, { versionNegotiation: { mode: { pin: MODERN } } })
    c.onerror = () => undefined
    const transport = new StreamableHTTPClientTransport(new URL(`${stores[0]!.url}/mcp`), {
      // A load balancer with no stickiness: each request to the next store.
      fetch: (url, init) => {
        const base = stores[turn++ % 2]!.url
        served.push(base)
        return fetch(String(url).replace(stores[0]!.url, base), init)
      }
    })
    await within(c.connect(transport), 10_000, "connect")
    closers.push(() => c.close())
    for (let i = 0; i < 4; i++) {
      const echo = await within(c.callTool({ name: "fx__echo", arguments: { text: `turn ${i}` } }), 10_000, `echo ${i}`)
      expect(echo.content).toEqual([{ type: "text", text: `turn ${i}` }])
    }
    expect((await c.listTools({}, { cacheMode: "bypass" })).tools.map((t) => t.name)).toContain("fx__echo")
    expect(new Set(served).size).toBe(2)
    // Nothing was sealed: no store made its key file.
    for (const s of stores) expect(existsSync(`${s.file}.key`)).toBe(false)
  })
})

describe("keys and scopes", () => {
  it("an agent key with a tools list: its agent's tools only, cacheScope private; an admin key on /mcp: public", async () => {
    const narrow = await raw(`/for_agent/${A}/mcp`, "tools/list", { key: keys.narrow })
    expect(narrow.status).toBe(200)
    expect(narrow.response.result.tools.map((t: { name: string }) => t.name)).toEqual(["fx__echo", "fx__add"])
    expect(narrow.response.result).toMatchObject({ resultType: "complete", cacheScope: "private", ttlMs: expect.any(Number) })

    const store = await raw("/mcp", "tools/list")
    expect(store.response.result).toMatchObject({ resultType: "complete", cacheScope: "public" })

    // A call of a tool its list leaves out is refused as the tool's failure.
    const refused = await raw(`/for_agent/${A}/mcp`, "tools/call", { key: keys.narrow, params: { name: "fx__sleep", arguments: { ms: 1 } } })
    expect(refused.response.result.isError).toBe(true)

    // The SDK v2 client sees the same.
    const client = await modernClient(`/for_agent/${A}/mcp`, keys.narrow)
    expect((await client.listTools()).tools.map((t) => t.name)).toEqual(["fx__echo", "fx__add"])
  })

  it("a modern request with an agent key cannot reach another agent's endpoint", async () => {
    const other = await raw(`/for_agent/${A}/mcp`, "tools/list", { key: keys.wideB })
    expect(other.status).toBe(403)
    const own = await raw(`/for_agent/${B}/mcp`, "tools/list", { key: keys.wideB })
    expect(own.response.result.cacheScope).toBe("private")
    expect(own.response.result.tools.every((t: { name: string }) => t.name.startsWith("fx__"))).toBe(true)
  })
})

describe("the 2025 path's HTTP rules hold for modern requests", () => {
  it("no key: 401; a foreign Origin: 403; a body over max_body_bytes: 413", async () => {
    const noKey = await rawRequestModern(server.url + "/mcp", "tools/list")
    expect(noKey.status).toBe(401)
    const origin = await raw("/mcp", "tools/list", { headers: { origin: "http://evil.example" } })
    expect(origin.status).toBe(403)
    const big = JSON.stringify({
      jsonrpc: "2.0",
      id: 1,
      method: "tools/call",
      params: { name: "fx__echo", arguments: { text: "x".repeat(1_200_000) }, _meta: envelope() }
    })
    const tooBig = await rawRequest(server.url + "/mcp", "POST", big, {
      "content-type": "application/json",
      accept: "application/json, text/event-stream",
      authorization: `Bearer ${keys.admin}`,
      "mcp-protocol-version": MODERN,
      "mcp-method": "tools/call",
      "mcp-name": "fx__echo"
    })
    expect(tooBig.status).toBe(413)
  })
})

describe("the modern wire rules over raw HTTP", () => {
  it("server/discover: the supported versions, capabilities and identity, with resultType and cache fields", async () => {
    const r = await raw("/mcp", "server/discover")
    expect(r.status).toBe(200)
    expect(r.response.result).toMatchObject({
      resultType: "complete",
      supportedVersions: expect.arrayContaining([MODERN]),
      capabilities: { tools: { listChanged: true } },
      _meta: { "io.modelcontextprotocol/serverInfo": { name: "mcp-store" } },
      ttlMs: expect.any(Number),
      cacheScope: "public"
    })
    const agent = await raw(`/for_agent/${A}/mcp`, "server/discover")
    expect(agent.response.result._meta["io.modelcontextprotocol/serverInfo"].name).toBe(`mcp-store/${A}`)
  })

  it("Mcp-Method or Mcp-Name unlike the body: 400 HeaderMismatch (-32020); missing where required (MCP-Protocol-Version too): the same", async () => {
    const method = await raw("/mcp", "tools/list", { headers: { "mcp-method": "prompts/list" } })
    expect(method.status).toBe(400)
    expect(method.response.error.code).toBe(-32020)
    const name = await raw("/mcp", "tools/call", { params: { name: "fx__echo", arguments: { text: "x" } }, headers: { "mcp-name": "fx__add" } })
    expect(name.status).toBe(400)
    expect(name.response.error.code).toBe(-32020)
    const noName = await raw("/mcp", "tools/call", { params: { name: "fx__echo", arguments: { text: "x" } }, headers: { "mcp-name": null } })
    expect(noName.status).toBe(400)
    expect(noName.response.error.code).toBe(-32020)
    const noMethod = await raw("/mcp", "tools/list", { headers: { "mcp-method": null } })
    expect(noMethod.status).toBe(400)
    expect(noMethod.response.error.code).toBe(-32020)
    const noVersion = await raw("/mcp", "tools/list", { headers: { "mcp-protocol-version": null } })
    expect(noVersion.status).toBe(400)
    expect(noVersion.response.error.code).toBe(-32020)
    // A listen whose headers disagree with its body is refused the same, before anything of it is
    // looked at (its task ids without the extension would be -32021, its resources subscribed).
    const listen = await raw("/mcp", "subscriptions/listen", { params: { notifications: { taskIds: ["t"] } }, headers: { "mcp-method": "tools/list" } })
    expect(listen.status).toBe(400)
    expect(listen.response.error.code).toBe(-32020)
  })

  it("an unsupported protocol version: 400 UnsupportedProtocolVersion (-32022) with the supported list", async () => {
    const r = await raw("/mcp", "tools/list", { version: "2099-01-01" })
    expect(r.status).toBe(400)
    expect(r.response.error.code).toBe(-32022)
    expect(r.response.error.data.supported).toContain(MODERN)
  })

  it("every result has resultType; tools/list is in the same order every time; a call's result is complete", async () => {
    const first = await raw("/mcp", "tools/list")
    const second = await raw("/mcp", "tools/list")
    const names = first.response.result.tools.map((t: { name: string }) => t.name)
    const services = names.map((n: string) => n.split("__")[0])
    expect(services).toEqual([...services].sort())
    expect(second.response.result.tools.map((t: { name: string }) => t.name)).toEqual(names)
    const call = await raw("/mcp", "tools/call", { params: { name: "demo__add", arguments: { a: 2, b: 3 } } })
    expect(call.response.result).toMatchObject({ resultType: "complete", structuredContent: { sum: 5 } })
    // No session id is given out: any replica answers the next request.
    expect(call.headers.get("mcp-session-id")).toBeNull()
  })
})

describe("subscriptions/listen", () => {
  it("a tool list change of its scope reaches a listening client; not another agent's, nor a key whose list did not change", async () => {
    const client = await modernClient(`/for_agent/${A}/mcp`, keys.admin)
    const other = await modernClient(`/for_agent/${B}/mcp`, keys.admin)
    let changed = 0
    let otherChanged = 0
    client.setNotificationHandler("notifications/tools/list_changed", () => void (changed += 1))
    other.setNotificationHandler("notifications/tools/list_changed", () => void (otherChanged += 1))
    // An agent key whose list (fx__echo, fx__add) the change leaves as it was.
    const narrow = await modernClient(`/for_agent/${A}/mcp`, keys.narrow)
    let narrowChanged = 0
    narrow.setNotificationHandler("notifications/tools/list_changed", () => void (narrowChanged += 1))
    const sub = await within(client.listen({ toolsListChanged: true }), 5000, "listen A")
    const subOther = await within(other.listen({ toolsListChanged: true }), 5000, "listen B")
    const subNarrow = await within(narrow.listen({ toolsListChanged: true }), 5000, "listen A, narrow key")
    closers.push(() => sub.close(), () => subOther.close(), () => subNarrow.close())
    expect(sub.honoredFilter).toEqual({ toolsListChanged: true })

    const added = await authed(keys.admin).post(`/for_agent/${A}/add_service`, localService("demo", demoServer))
    expect(added.status).toBe(200)
    await waitStatus(authed(keys.admin), `/for_agent/${A}`, "demo", "healthy", 30)
    expect(await eventually(() => changed >= 1, 5000)).toBe(true)
    expect((await client.listTools({}, { cacheMode: "bypass" })).tools.map((t) => t.name)).toContain("demo__add")
    await quietFor(300)
    expect(otherChanged).toBe(0)
    expect(narrowChanged).toBe(0)
  })
})

describe("resources, prompts and completion over 2026-07-28 (server-everything)", () => {
  const EV = "/for_agent/ev-agent"
  let ev: TestServer
  const uri = "demo://resource/dynamic/text/1"
  beforeAll(async () => {
    ev = await startTestServer()
    await addService(ev, EV, localService("solo", everythingStdio))
    await waitStatus(ev, EV, "solo", "healthy", 30)
  }, 60_000)
  afterAll(async () => {
    await ev?.cleanup()
  })
  const client = async () => {
    const c = new Client({ name: "modern-test", version: "1.0.0" }, { versionNegotiation: { mode: { pin: MODERN } } })
    c.onerror = () => undefined
    await within(c.connect(new StreamableHTTPClientTransport(new URL(`${ev.url}${EV}/mcp`))), 10_000, "connect")
    closers.push(() => c.close())
    return c
  }

  it("lists, reads, gets a prompt and completes as the 2025 face does; a missing resource is -32602", async () => {
    const c = await client()
    expect(c.getServerCapabilities()).toMatchObject({ resources: { listChanged: true, subscribe: true }, prompts: { listChanged: true }, completions: {} })
    const { resources } = await c.listResources()
    expect(resources.length).toBeGreaterThan(0)
    const read = await c.readResource({ uri: resources[0]!.uri })
    expect(read.contents[0]?.uri).toBe(resources[0]!.uri)
    expect((await c.listResourceTemplates()).resourceTemplates.length).toBeGreaterThan(0)
    const prompt = await c.getPrompt({ name: "solo__args-prompt", arguments: { city: "Lyon", state: "Rhône" } })
    expect(JSON.stringify(prompt.messages)).toContain("Lyon")
    const done = await c.complete({ ref: { type: "ref/prompt", name: "solo__completable-prompt" }, argument: { name: "department", value: "En" } })
    expect(done.completion.values).toEqual(["Engineering"])

    // The same lists as a 2025 session gets.
    const legacy = new ClientV1({ name: "legacy-test", version: "1.0.0" })
    await within(legacy.connect(new TransportV1(new URL(`${ev.url}${EV}/mcp`))), 10_000, "connect 1.x")
    closers.push(() => legacy.close())
    expect((await legacy.listResources()).resources).toEqual(resources)

    const list = await rawAt(ev.url + EV + "/mcp", "resources/list")
    expect(list.response.result).toMatchObject({ resultType: "complete", cacheScope: "public", ttlMs: expect.any(Number) })
    const readRaw = await rawAt(ev.url + EV + "/mcp", "resources/read", { uri })
    expect(readRaw.response.result).toMatchObject({ resultType: "complete", ttlMs: 0, cacheScope: "public" })
    const missing = await rawAt(ev.url + EV + "/mcp", "resources/read", { uri: "mcp-store://nope/x" })
    expect(missing.response.error).toMatchObject({ code: -32602, data: { uri: "mcp-store://nope/x" } })
  })

  it("an upstream's elicitation during a modern call is declined, in words that say why", async () => {
    const c = await client()
    const result = await within(c.callTool({ name: "solo__trigger-elicitation-request", arguments: {} }), 15_000, "elicitation")
    expect(result.isError).toBe(true)
    expect(JSON.stringify(result.content)).toContain("mcp-store declined elicitation/create: the MCP 2026-07-28 client that made this call did not declare the capability")
  })

  it("subscriptions/listen with resourceSubscriptions: the upstream's updates of that URI reach the stream", async () => {
    const c = await client()
    let updated: string | undefined
    c.setNotificationHandler("notifications/resources/updated", (n) => void (updated = n.params.uri))
    const sub = await within(c.listen({ resourceSubscriptions: [uri] }), 5000, "listen")
    closers.push(() => sub.close())
    expect(sub.honoredFilter).toEqual({ resourceSubscriptions: [uri] })
    // server-everything sends updates of subscribed URIs once the tool turns them on.
    await c.callTool({ name: "solo__toggle-subscriber-updates", arguments: {} })
    try {
      expect(await eventually(() => updated === uri, 15_000)).toBe(true)
    } finally {
      await c.callTool({ name: "solo__toggle-subscriber-updates", arguments: {} })
    }
  })

  it("subscriptions/listen naming more resource URIs than the cap: the stream opens, no more than the cap are tried, the rest is one log line", async () => {
    const logs = captureLogs({ level: "info" })
    try {
      const c = await client()
      // The URI twice and 150 others: 151 distinct, of which 100 are tried.
      const many = [uri, uri, ...Array.from({ length: 150 }, (_, i) => `mem://nothing/${i}`)]
      const sub = await within(c.listen({ resourceSubscriptions: many }), 10_000, "listen")
      closers.push(() => sub.close())
      const lines = logs.lines.filter((l) => l.includes("subscriptions/listen"))
      expect(lines.filter((l) => l.includes("past the cap"))).toEqual([expect.stringContaining("51 resource URIs past the cap of 100 not subscribed")])
      // None of the URIs past the cap was tried (each would have been refused, one line each).
      expect(lines.filter((l) => l.includes("may hold at most"))).toEqual([])
    } finally {
      logs.restore()
    }
  })
})

describe("listen streams: capped, counted, and ended gracefully at shutdown", () => {
  /** A client pinned to 2026-07-28 on `url` (with `key`), connected; closed after the test. */
  const connectAt = async (url: string, key?: string) => {
    const c = new Client({ name: "modern-test", version: "1.0.0" }, { versionNegotiation: { mode: { pin: MODERN } } })
    c.onerror = () => undefined
    const headers = key === undefined ? {} : { authorization: `Bearer ${key}` }
    await within(c.connect(new StreamableHTTPClientTransport(new URL(url), { requestInit: { headers } })), 10_000, "connect")
    closers.push(() => c.close())
    return c
  }

  it("in a store without keys, requests share the whole cap: two listens of a four-stream cap both open", async () => {
    const small = (await keyless())[0]!
    try {
      const listen = async () => {
        const sub = await within((await connectAt(`${small.url}/mcp`)).listen({ toolsListChanged: true }), 5000, "listen")
        closers.push(() => sub.close())
        return sub
      }
      expect((await listen()).honoredFilter).toEqual({ toolsListChanged: true })
      expect((await listen()).honoredFilter).toEqual({ toolsListChanged: true })
    } finally {
      await Promise.all(closers.splice(0).map((close) => within(close(), 3000, "close").catch(() => undefined)))
    }
  })

  it("one key holds at most a quarter of the streams: past it its listen is refused (-32603), while another key still listens", async () => {
    const dir = freshDir()
    const keysFile = join(dir, "mcp-store.keys.json")
    const own: Record<string, string> = {}
    for (const [name, agent] of [["first", A], ["second", B]] as const) {
      const r = await keysCli(keysFile, "create", "--name", name, "--role", "agent", "--agent", agent)
      expect(r.code, r.err).toBe(0)
      own[name] = r.out
    }
    // Four streams in all: one per key.
    const small = await startTestServer({ dir, options: { max_mcp_sessions: 4 } })
    try {
      const listenAs = async (agent: string, key: string) => (await connectAt(`${small.url}/for_agent/${agent}/mcp`, key)).listen({ toolsListChanged: true })
      const first = await within(listenAs(A, own["first"]!), 5000, "the first key's listen")
      closers.push(() => first.close())
      await expect(within(listenAs(A, own["first"]!), 5000, "the first key's second listen")).rejects.toThrow(/Subscription limit reached for this API key \(1 open/)
      const other = await within(listenAs(B, own["second"]!), 5000, "the other key's listen")
      closers.push(() => other.close())
      // The first key's stream closed: once the store has seen it end, the key may listen again.
      await first.close()
      let again: Awaited<ReturnType<typeof listenAs>> | undefined
      expect(
        await eventually(async () => (again = await within(listenAs(A, own["first"]!), 5000, "listen again").catch(() => undefined)) !== undefined, 5000),
        "the first key listens again once its stream closed"
      ).toBe(true)
      closers.push(() => again!.close())
    } finally {
      await Promise.all(closers.splice(0).map((close) => within(close(), 3000, "close").catch(() => undefined)))
      await small.cleanup()
    }
  })

  it("past max_mcp_sessions open streams a listen is refused (-32603); the gauge counts them; shutdown ends the open one with its final result", async () => {
    const small = await startTestServer({ options: { max_mcp_sessions: 1 } })
    try {
      const connectOne = () => connectAt(`${small.url}/mcp`)
      const first = await within((await connectOne()).listen({ toolsListChanged: true }), 5000, "first listen")
      await expect(within((await connectOne()).listen({ toolsListChanged: true }), 5000, "second listen")).rejects.toThrow(/limit/i)
      const metrics = parsePrometheus(await (await fetch(`${small.url}/metrics`)).text())
      expect(sampleValue(metrics, "mcpstore_mcp_listen_streams")).toBe(1)
      // A 2025 session still fits: the sessions' count is apart.
      const { transport } = await (async () => {
        const client = new ClientV1({ name: "legacy-test", version: "1.0.0" })
        const transport = new TransportV1(new URL(`${small.url}/mcp`))
        await within(client.connect(transport), 10_000, "connect 1.x")
        closers.push(() => client.close())
        return { transport }
      })()
      expect(transport.sessionId).toMatch(/.+/)
      await within(small.cleanup(), 10_000, "shutdown with a listen stream open")
      expect(await within(first.closed, 5000, "the stream's end")).toBe("graceful")
    } finally {
      await small.cleanup().catch(() => undefined)
    }
  })
})
