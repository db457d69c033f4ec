// Calls through the store that last, report progress or are cancelled, against real servers: an
// MCP client's progressToken reaches the upstream and every progress comes back to it with its own
// token; a REST call's progress reaches /events with the call's trace_id, throttled however many
// the upstream sends; a client's notifications/cancelled reaches the upstream (the HTTP fixture
// records it) and the record says `cancelled`. A call that lasts longer than the client's time-out
// (server-everything's long-running tool, 5 s against a 2 s time-out) lives on its progress. The
// tests with server-everything share one store with it (started once, on first use), and so do the
// tests with the HTTP fixture and the refused roots (each reads only its own call's progress and
// records, and waits for its call's end; a refused add_service changes nothing).
import { Client } from "@modelcontextprotocol/sdk/client/index.js"
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js"
import { CreateMessageRequestSchema, ElicitRequestSchema, type Progress } from "@modelcontextprotocol/sdk/types.js"
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest"
import { startHttpFixture, type HttpFixture } from "../fixtures/http-fixture.js"
import { realpathSync } from "node:fs"
import { pathToFileURL } from "node:url"
import { everythingStdio } from "../fixtures/paths.js"
import { addService, eventually, localService, openSse, packageProgram, startTestServer, waitStatus, within, type SseStream, type TestServer } from "../support/index.js"

let fixture: HttpFixture
let server: TestServer | undefined
let stream: SseStream | undefined
const clients: Client[] = []
/** The store with server-everything that its tests share (their clients end after each test). */
let everythingStore: Promise<TestServer> | undefined
/** The store with the HTTP fixture as `fx` that its tests share. */
let fixtureStore: Promise<TestServer> | undefined

beforeAll(async () => {
  fixture = await startHttpFixture({ server: { progressTool: true } })
})
afterAll(async () => {
  await fixture.stop()
  await (await everythingStore?.catch(() => undefined))?.cleanup()
  await (await fixtureStore?.catch(() => undefined))?.cleanup()
})
afterEach(async () => {
  stream?.close()
  stream = undefined
  await Promise.all(clients.splice(0).map((c) => within(c.close(), 3000, "client close").catch(() => undefined)))
  await server?.cleanup()
  server = undefined
})

/** An SDK client on the store's /mcp; closed in afterEach. */
const connect = async (srv: TestServer, capabilities: ConstructorParameters<typeof Client>[1] = {}) => {
  const client = new Client({ name: "calls-test", version: "1.0.0" }, capabilities)
  client.onerror = () => undefined
  clients.push(client)
  await within(client.connect(new StreamableHTTPClientTransport(new URL(`${srv.url}/mcp`))), 10_000, "connect /mcp")
  return client
}

/**
 * The shared store with server-everything, healthy. Its MCP sessions expire after 2 s idle (the
 * long-running call outlives that); every test that uses it connects and calls at once.
 */
const everything = (): Promise<TestServer> =>
  (everythingStore ??= (async () => {
    const srv = await startTestServer({ options: { mcp_session_idle_seconds: 2 } })
    try {
      await addService(srv, "/for_store", localService("everything", everythingStdio))
      await waitStatus(srv, "/for_store", "everything", "healthy", 30)
      return srv
    } catch (error) {
      await srv.cleanup()
      throw error
    }
  })())

/** The shared store with the HTTP fixture as `fx` (started once, on first use). */
const sharedFixture = (): Promise<TestServer> =>
  (fixtureStore ??= (async () => {
    const srv = await startTestServer()
    try {
      await addService(srv, "/for_store", { name: "fx", url: fixture.url })
      return srv
    } catch (error) {
      await srv.cleanup()
      throw error
    }
  })())

describe("progress", () => {

  it("an MCP client's progressToken reaches the upstream and each progress comes back with the client's token", async () => {
    const srv = await sharedFixture()
    const client = await connect(srv)
    const seen: Progress[] = []
    // The SDK client sends its own progressToken only with onprogress, and drops a progress whose token is not its own.
    const result = await within(
      client.callTool({ name: "fx__progress", arguments: { count: 4, every: 20 } }, undefined, { onprogress: (p) => void seen.push(p) }),
      10_000,
      "fx__progress"
    )
    expect(result.content).toEqual([{ type: "text", text: "sent 4 progress notifications" }])
    expect(seen.map((p) => p.progress)).toEqual([1, 2, 3, 4])
    expect(seen.every((p) => p.total === 4)).toBe(true)
  })

  it("an MCP client gets every one of a few progress notifications sent back to back, in order; a flood reaches it coalesced, ending with the last", async () => {
    const srv = await sharedFixture()
    const client = await connect(srv)
    const burst: Progress[] = []
    await within(client.callTool({ name: "fx__progress", arguments: { count: 8 } }, undefined, { onprogress: (p) => void burst.push(p) }), 10_000, "fx__progress burst")
    expect(burst.map((p) => p.progress)).toEqual([1, 2, 3, 4, 5, 6, 7, 8])
    // A thousand sent back to back: far faster than the client is written to, so most are coalesced
    // (measured: about 4 % of 5,000 arrived), the last always arrives.
    const flood: Progress[] = []
    await within(client.callTool({ name: "fx__progress", arguments: { count: 1_000 } }, undefined, { onprogress: (p) => void flood.push(p) }), 20_000, "fx__progress flood")
    const steps = flood.map((p) => p.progress)
    expect(steps.at(-1)).toBe(1_000)
    expect(steps.length).toBeLessThan(1_000)
    expect(steps).toEqual([...steps].sort((a, b) => a - b))
    expect(new Set(steps).size).toBe(steps.length)
  })

  it("a REST call's progress reaches /events with its trace_id, at most one event per 100 ms however many the upstream sends", async () => {
    const srv = await sharedFixture()
    stream = await openSse(`${srv.url}/events`)
    const started = performance.now()
    // Five hundred notifications in well under a second: far more than one per 100 ms.
    const reply = await srv.post("/for_store/call_tool", { tool_name: "fx__progress", args: { count: 500 } })
    const elapsed = performance.now() - started
    expect(reply.status, reply.text).toBe(200)
    expect(reply.body.result).toBe("sent 500 progress notifications")
    const traceId = reply.body.trace_id as string
    await stream.waitFor((e) => e.event === "tool_call" && e.json?.trace_id === traceId, 5000, "the call's tool_call event")
    const progress = stream.events.filter((e) => e.event === "progress" && e.json?.trace_id === traceId)
    expect(progress.length).toBeGreaterThan(0)
    expect(progress.length).toBeLessThanOrEqual(Math.ceil(elapsed / 100) + 1)
    expect(progress[0]!.json).toMatchObject({ scope: "store", agent_id: null, service_name: "fx", tool_name: "progress", total: 500 })
  })

  // The call lasts 5 s, well over the client's 2 s time-out and the store's 2 s session idle limit;
  // its 20 progress notifications (one every 0.25 s) each restart the client's time-out, and a session
  // with a call in flight is not idle. (It used to run 65 s against the SDK's default 60 s time-out,
  // then 8 s against 3 s: the same chain, at a scale that cost the suite more.)
  it(
    "a call longer than the client's time-out lives on its progress (resetTimeoutOnProgress) over /mcp",
    { timeout: 60_000 },
    async () => {
      const client = await connect(await everything())
      let progress = 0
      const started = performance.now()
      const result = await client.callTool(
        { name: "everything__trigger-long-running-operation", arguments: { duration: 5, steps: 20 } },
        undefined,
        { timeout: 2_000, resetTimeoutOnProgress: true, onprogress: () => void (progress += 1) }
      )
      expect(performance.now() - started).toBeGreaterThan(4_000) // more than twice the client's time-out
      expect(result.isError ?? false).toBe(false)
      expect(result.content).toEqual([{ type: "text", text: "Long running operation completed. Duration: 5 seconds, Steps: 20." }])
      expect(progress).toBe(20)
    }
  )
})

describe("cancellation", () => {
  const sleeps = async (srv: TestServer) => (await srv.running.store.records.query({ tool_name: "sleep" })).executions

  it("a client's notifications/cancelled reaches the upstream and the record's outcome is cancelled", async () => {
    const srv = await sharedFixture()
    const client = await connect(srv)
    const before = fixture.requests().filter((r) => r === "POST notifications/cancelled").length
    const recorded = (await sleeps(srv)).length
    const controller = new AbortController()
    const call = client.callTool({ name: "fx__sleep", arguments: { ms: 60_000 } }, undefined, { signal: controller.signal }).catch((e: unknown) => e)
    expect(await eventually(() => srv.running.store.inFlightCalls === 1, 10_000)).toBe(true)
    controller.abort("changed my mind")
    expect(await within(call, 5000, "the aborted call")).toBeInstanceOf(Error)
    // The fixture records every request it receives: the store told it.
    expect(await eventually(() => fixture.requests().filter((r) => r === "POST notifications/cancelled").length === before + 1, 5000)).toBe(true)
    expect(await eventually(() => srv.running.store.inFlightCalls === 0, 5000)).toBe(true)
    expect(await eventually(async () => (await sleeps(srv)).length === recorded + 1, 5000)).toBe(true)
    // The only sleep calls are this describe's, each cancelled.
    for (const record of await sleeps(srv)) expect(record).toMatchObject({ service_name: "fx", outcome: "cancelled" })
  })

  it("a REST client that goes away: the upstream is told and the record says cancelled", async () => {
    const srv = await sharedFixture()
    const before = fixture.requests().filter((r) => r === "POST notifications/cancelled").length
    const recorded = (await sleeps(srv)).length
    const controller = new AbortController()
    const call = fetch(`${srv.url}/for_store/call_tool`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ tool_name: "fx__sleep", args: { ms: 60_000 } }),
      signal: controller.signal
    }).catch((e: unknown) => e)
    expect(await eventually(() => srv.running.store.inFlightCalls === 1, 10_000)).toBe(true)
    controller.abort()
    expect(await call).toBeInstanceOf(Error)
    expect(await eventually(() => fixture.requests().filter((r) => r === "POST notifications/cancelled").length === before + 1, 5000)).toBe(true)
    expect(await eventually(async () => (await sleeps(srv)).length === recorded + 1, 5000)).toBe(true)
    for (const record of await sleeps(srv)) expect(record).toMatchObject({ outcome: "cancelled" })
    expect(await eventually(() => srv.running.store.inFlightCalls === 0, 5000)).toBe(true)
  })
})

describe("roots", () => {
  const FILESYSTEM_PATH = packageProgram("@modelcontextprotocol/server-filesystem")

  it("server-filesystem started without a directory works in the roots its definition lists", async () => {
    server = await startTestServer()
    const dir = realpathSync(server.dir)
    await addService(server, "/for_store", { name: "fs", command: process.execPath, args: [FILESYSTEM_PATH], roots: [pathToFileURL(dir).href] })
    await waitStatus(server, "/for_store", "fs", "healthy", 30)
    // The server asks roots/list once initialized: its allowed directories are the roots.
    const allowed = async () => JSON.stringify((await server!.post("/for_store/call_tool", { tool_name: "fs__list_allowed_directories", args: {} })).body.result)
    expect(await eventually(async () => (await allowed()).includes(dir), 10_000)).toBe(true)
  })

  it("refuses roots that are not file:// URIs with 400, naming the field", async () => {
    const srv = await sharedFixture()
    const reply = await srv.post("/for_store/add_service", { name: "fs", command: process.execPath, args: [FILESYSTEM_PATH], roots: ["http://example.com/"] })
    expect(reply.status).toBe(400)
    expect(reply.text).toContain("roots")
    expect(reply.text).toContain("file://")
  })
})

describe("elicitation and sampling", () => {
  it("an upstream's elicitation and sampling during a call go to the MCP client that made it, and its answers come back", async () => {
    const srv = await everything()
    const client = await connect(srv, { capabilities: { elicitation: {}, sampling: {} } })
    const asked: string[] = []
    client.setRequestHandler(ElicitRequestSchema, async (request) => {
      asked.push(request.params.message)
      return { action: "decline" }
    })
    client.setRequestHandler(CreateMessageRequestSchema, async () => ({
      model: "test-model",
      role: "assistant",
      content: { type: "text", text: "sampled by the test client" }
    }))
    const elicited = await within(client.callTool({ name: "everything__trigger-elicitation-request", arguments: {} }), 15_000, "elicitation")
    expect(asked).toEqual(["Please provide inputs for the following fields:"])
    expect(JSON.stringify(elicited.content)).toContain("User declined to provide the requested information")
    const sampled = await within(client.callTool({ name: "everything__trigger-sampling-request", arguments: { prompt: "hi" } }), 15_000, "sampling")
    expect(JSON.stringify(sampled.content)).toContain("sampled by the test client")
  })

  it("is declined with a clear error over REST and to an MCP client without the capability", async () => {
    const srv = await everything()
    const rest = await srv.post("/for_store/call_tool", { tool_name: "everything__trigger-elicitation-request", args: {} })
    expect(rest.text).toContain("mcp-store declined elicitation/create: the tool call was made through the REST API")
    const client = await connect(srv)
    const result = await within(client.callTool({ name: "everything__trigger-sampling-request", arguments: { prompt: "hi" } }), 15_000, "sampling")
    expect(JSON.stringify(result.content)).toContain("did not declare the sampling capability")
  })
})
