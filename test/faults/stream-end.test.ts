// Fast failure detection: when an upstream's standing stream (an SSE service's
// stream, a Streamable HTTP service's GET stream) ends and cannot be resumed, the service leaves
// healthy at once, for reconnecting with a reason naming the stream, without waiting for a failed
// ping (health checks here are 10 minutes apart); its tools leave /mcp with list_changed, and come
// back on reconnect. The other side: a server that offers no GET stream (405), or ends it as it
// may, stays healthy.
//
// The tests run at the same time (describe.concurrent), each with its own store, servers and client,
// ended when it finishes.
import { Client } from "@modelcontextprotocol/sdk/client/index.js"
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js"
import { ToolListChangedNotificationSchema } from "@modelcontextprotocol/sdk/types.js"
import { describe, expect, it, type TestContext } from "vitest"
import type { ServiceActorRef } from "../../src/machines/service.js"
import { startEverythingHttp, type EverythingHttp } from "../fixtures/everything-http.js"
import { startHttpFixture, type HttpFixture } from "../fixtures/http-fixture.js"
import { eventually, illegalTransitions, quietFor, recordStatuses, startTestServer, within, type StatusLog, type TestServer } from "../support/index.js"

/** Health checks far apart: a status change in these tests cannot come from a ping. */
const NO_PINGS = { health_check_seconds: 600, reconnection_seconds: 0.2 }

/** What one test started (its store, servers, recorder, client). */
interface Own {
  server?: TestServer
  everything?: EverythingHttp
  fixture?: HttpFixture
  log?: StatusLog
  client?: Client
}

/** A test's own resources, ended when it finishes (its own hook: the tests run at the same time). */
const own = ({ onTestFinished }: TestContext): Own => {
  const o: Own = {}
  onTestFinished(async () => {
    o.log?.stop()
    await o.client?.close().catch(() => undefined)
    await o.server?.cleanup()
    await Promise.all([o.everything?.stop(), o.fixture?.stop()])
  }, 20_000)
  return o
}

const healthyServices = async (o: Own, ...definitions: ReadonlyArray<Record<string, unknown>>): Promise<TestServer> => {
  const server = (o.server = await startTestServer({ monitoring: NO_PINGS }))
  const added = await server.post("/for_store/add_service?wait=15", definitions)
  expect(added.status).toBe(200)
  expect(added.body.services.map((s: { status: string }) => s.status)).toEqual(definitions.map(() => "healthy"))
  return server
}

const actorOf = (server: TestServer, name: string): ServiceActorRef => server.running.store.forStore().findService(name)!

/** An SDK client on the store's /mcp, with a count of the list_changed notifications it got. */
const mcpClient = async (o: Own, server: TestServer) => {
  const c = new Client({ name: "stream-end-test", version: "1.0.0" })
  let changes = 0
  const waiters = new Set<() => void>()
  c.setNotificationHandler(ToolListChangedNotificationSchema, async () => {
    changes += 1
    for (const wake of [...waiters]) wake()
  })
  o.client = c
  await within(c.connect(new StreamableHTTPClientTransport(new URL(`${server.url}/mcp`))), 10_000, "connect /mcp")
  return {
    client: c,
    /** Resolves once the client has had more than `seen` list_changed notifications. */
    changedAfter: (seen: number) =>
      within(
        new Promise<void>((resolve) => {
          const check = () => {
            if (changes <= seen) return
            waiters.delete(check)
            resolve()
          }
          waiters.add(check)
          check()
        }),
        10_000,
        "notifications/tools/list_changed"
      ),
    changes: () => changes,
    toolNames: async () => (await c.listTools()).tools.map((t) => t.name)
  }
}

describe.concurrent("a standing stream that ends: reconnecting at once", () => {
  it("Streamable HTTP (server-everything killed): reconnecting with the stream's end as reason; its tools leave /mcp with list_changed", { timeout: 30_000 }, async (context) => {
    const o = own(context)
    const [everything, fixture] = await Promise.all([
      startEverythingHttp("streamableHttp").then((started) => (o.everything = started)),
      startHttpFixture().then((started) => (o.fixture = started))
    ])
    const server = await healthyServices(o, { name: "ev", url: everything.url }, { name: "fx", url: fixture.url })
    const mcp = await mcpClient(o, server)
    const before = await mcp.toolNames()
    expect(before.some((n) => n.startsWith("ev__"))).toBe(true)
    expect(before).toContain("fx__echo")
    const log = (o.log = recordStatuses(actorOf(server, "ev")))
    const seen = mcp.changes()

    await everything.stop() // SIGKILL
    expect(await log.waitFor("reconnecting", 10_000)).toBe(true)
    // At once, by the stream's end (no health check runs here). A loaded machine may first see a
    // request of the store's fail on the dead server (warning; seen once in a fresh clone's run):
    // then the stream's end still makes it reconnecting, and nothing else comes between.
    const statuses = log.statuses()
    expect(statuses[0] === "reconnecting" || (statuses[0] === "warning" && statuses[1] === "reconnecting"), statuses.join(" → ")).toBe(true)
    const reconnecting = log.transitions.find((t) => t.to === "reconnecting")!
    // Refused; or reset, when the resumption reached the listening socket of the killed process
    // before the kernel closed it (seen in about one run in eight on a loaded machine).
    expect(reconnecting.reason).toMatch(/^transport closed: the event stream ended and could not be resumed: .*(ECONNREFUSED|ECONNRESET)/)
    expect(illegalTransitions(log.transitions)).toEqual([])

    await mcp.changedAfter(seen)
    const after = await mcp.toolNames()
    expect(after.filter((n) => n.startsWith("ev__"))).toEqual([])
    expect(after).toContain("fx__echo")
  })

  it("Streamable HTTP (server stopped, then back on its port): reconnecting at once, healthy again, its tools back on /mcp", { timeout: 30_000 }, async (context) => {
    const o = own(context)
    const fixture = (o.fixture = await startHttpFixture())
    const server = await healthyServices(o, { name: "fx", url: fixture.url })
    const mcp = await mcpClient(o, server)
    expect(await mcp.toolNames()).toContain("fx__echo")
    const log = (o.log = recordStatuses(actorOf(server, "fx")))

    const gone = mcp.changes()
    await fixture.stop()
    expect(await log.waitFor("reconnecting", 10_000)).toBe(true)
    // No ping failed first: straight from healthy.
    expect(log.transitions[0]).toMatchObject({ from: "healthy", to: "reconnecting", reason: expect.stringMatching(/the event stream ended/) })
    await mcp.changedAfter(gone)
    expect(await mcp.toolNames()).toEqual([])

    const back = mcp.changes()
    await fixture.restart()
    expect(await log.waitFor("healthy", 15_000)).toBe(true)
    await mcp.changedAfter(back)
    expect(await mcp.toolNames()).toContain("fx__echo")
    expect(illegalTransitions(log.transitions)).toEqual([])
  })

  it("SSE (server-everything killed): reconnecting with the SSE stream's end as reason", { timeout: 30_000 }, async (context) => {
    const o = own(context)
    const everything = (o.everything = await startEverythingHttp("sse"))
    const server = await healthyServices(o, { name: "legacy", url: everything.url, transport: "sse" })
    const log = (o.log = recordStatuses(actorOf(server, "legacy")))
    await everything.stop()
    expect(await log.waitFor("reconnecting", 10_000)).toBe(true)
    expect(log.transitions[0]).toMatchObject({ from: "healthy", to: "reconnecting", reason: expect.stringMatching(/^transport closed: the SSE stream ended/) })
  })
})

describe.concurrent("a server that offers no standing stream, or ends it: stays healthy", () => {
  it("GET answered 405: healthy; calls work", { timeout: 20_000 }, async (context) => {
    const o = own(context)
    const fixture = (o.fixture = await startHttpFixture({ getStream: "refuse" }))
    const server = await healthyServices(o, { name: "nostream", url: fixture.url })
    const log = (o.log = recordStatuses(actorOf(server, "nostream")))
    expect(await eventually(() => fixture.requests().includes("GET"), 5_000)).toBe(true)
    // Nothing is to happen after the refusal: a short quiet spell, then the same status.
    await quietFor(300)
    const call = await server.post("/for_store/call_tool", { tool_name: "nostream__echo", args: { text: "still here" } })
    expect(call.body).toMatchObject({ success: true, result: "still here" })
    expect(log.transitions).toEqual([])
    expect(fixture.requests().filter((r) => r === "GET")).toHaveLength(1)
  })

  it("GET stream ended by the server as soon as it opens: reopened (no faster than once a second), healthy", { timeout: 20_000 }, async (context) => {
    const o = own(context)
    const fixture = (o.fixture = await startHttpFixture({ getStream: "end" }))
    const server = await healthyServices(o, { name: "short", url: fixture.url })
    const log = (o.log = recordStatuses(actorOf(server, "short")))
    /** When the GET requests arrived. */
    const gets = () => fixture.requestTimes().filter((_, i) => fixture.requests()[i] === "GET")
    expect(await eventually(() => gets().length >= 2, 5_000)).toBe(true)
    // The server ended the first at once: the second came a second later, not in a hot loop.
    const [first, second] = gets()
    expect(second! - first!).toBeGreaterThan(900)
    const call = await server.post("/for_store/call_tool", { tool_name: "short__echo", args: { text: "fine" } })
    expect(call.body).toMatchObject({ success: true, result: "fine" })
    expect(log.transitions).toEqual([])
  })
})
