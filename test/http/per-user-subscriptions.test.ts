// Resource subscriptions of a `per_user` service (README, Per-user credentials): each caller's is
// its own, made on its own connection. One store with keys, the era fixture over Streamable HTTP as
// a `per_user` (Authorization header) service of an agent, its updates announced per caller (a
// `touch` reaches only the listen streams opened with the toucher's own Authorization, as an
// upstream that keeps subscriptions per user). Two keys subscribe to the same URI, from a 2025
// session and from a 2026-07-28 listen stream: the upstream sees one subscription on each
// principal's connection (none on the shared one), an update on one principal's connection reaches
// that principal's session or stream only; a key without a credential is refused
// CREDENTIALS_REQUIRED in each era; a held connection outlives the pool's idle time-out, a
// redefined service or a changed credential makes the subscription again on the new connection (at
// most five times a minute: a connection that keeps closing drops it), a deleted credential drops it.
// A listen's acknowledged filter leaves out a URI of no service, and the second form (prefixed) of
// a URI it names twice. With room for two principals'
// connections, subscriptions hold at most one: other principals' calls get the other (429 only while
// both are busy), another principal's subscribe and listen are refused TOO_MANY (never a stream as
// if subscribed), one warn line for the refusals, the subscriber still hearing its updates; a listen
// naming many URIs reads the caller's credential once; a listen waits for no shared service's
// subscribe (an upstream that never answers it, the fixture's `unansweredSubscribe`), and stops
// waiting for a principal's when its client goes away (the subscribe cancelled and unsubscribed
// upstream) or at the first refusal of another; a listen joining a principal's subscription being
// made again is answered as that making ends (refused when it fails, its credential read held back).
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest"
import { Client as ClientV1 } from "@modelcontextprotocol/sdk/client/index.js"
import { StreamableHTTPClientTransport as TransportV1 } from "@modelcontextprotocol/sdk/client/streamableHttp.js"
import { McpError, ResourceUpdatedNotificationSchema } from "@modelcontextprotocol/sdk/types.js"
import { Client, StreamableHTTPClientTransport } from "@modelcontextprotocol/client"
import { startEraHttpFixture, type EraHttpFixture } from "../fixtures/era-http.js"
import { startHttpFixture, type HttpFixture } from "../fixtures/http-fixture.js"
import { captureLogs } from "../../src/logging/log.js"
import { addService, authedApi, eventually, giveCredential, MODERN, modernRequest, quietFor, startPerUserStore, waitStatus, within, type Api, type TestServer } from "../support/index.js"

const AGENT = "crew"
const PREFIX = `/for_agent/${AGENT}`
const MCP = `${PREFIX}/mcp`
const URI = "mem://note"

/** A 2025 session of `key` at `url`, noting the resource updates it hears; closed by `closers`. */
const sessionOf = async (url: string, key: string, closers: Array<() => Promise<unknown>>) => {
  const client = new ClientV1({ name: "per-user-subscriptions", version: "1.0.0" })
  client.onerror = () => undefined
  const heard: Array<string> = []
  client.setNotificationHandler(ResourceUpdatedNotificationSchema, (n) => void heard.push(n.params.uri))
  await within(client.connect(new TransportV1(new URL(url), { requestInit: { headers: { authorization: `Bearer ${key}` } } })), 10_000, "connect")
  closers.push(() => client.close())
  return { client, heard }
}

/** A 2026-07-28 client of `key` at `url`, noting the resource updates its listen streams hear; closed by `closers`. */
const modernClientOf = async (url: string, key: string, closers: Array<() => Promise<unknown>>) => {
  const client = new Client({ name: "per-user-subscriptions", version: "1.0.0" }, { versionNegotiation: { mode: { pin: MODERN } } })
  client.onerror = () => undefined
  const heard: Array<string> = []
  client.setNotificationHandler("notifications/resources/updated", (n) => void heard.push(n.params.uri))
  await within(client.connect(new StreamableHTTPClientTransport(new URL(url), { requestInit: { headers: { authorization: `Bearer ${key}` } } })), 10_000, "connect")
  closers.push(() => client.close())
  return { client, heard }
}

/** A `touch` of the resource through `who`'s own connection: the upstream announces it to that principal's subscriptions. */
const touch = async (who: Api) => {
  const reply = await who.post(`${PREFIX}/call_tool`, { tool_name: "notes__touch", args: {} })
  expect(reply.status, reply.text).toBe(200)
}

/** The Authorization headers of the upstream's listen streams that asked updates of the URI, in order. */
const subscribedWith = (era: EraHttpFixture) => era.listens().filter((l) => l.uris.includes(URI)).map((l) => l.authorization)

describe("resource subscriptions of a per_user service are each caller's own", { timeout: 30_000 }, () => {
  let era: EraHttpFixture
  let server: TestServer
  const keys = { admin: "", alice: "", bob: "", carol: "" }
  let alice: Api
  let bob: Api
  const closers: Array<() => Promise<unknown>> = []

  beforeAll(async () => {
    era = await startEraHttpFixture({ updatesPerCaller: true })
    // Idle principals' connections closed after half a second: a subscription's must outlive it.
    const store = await startPerUserStore({ url: era.url, agent: AGENT, service: "notes", principals: ["alice", "bob"], without: ["carol"], options: { per_user_idle_seconds: 0.5 } })
    ;[server, alice, bob] = [store.server, store.as("alice"), store.as("bob")]
    Object.assign(keys, store.keys)
  }, 30_000)

  afterAll(async () => {
    for (const close of closers.splice(0).reverse()) await close().catch(() => undefined)
    await server?.cleanup()
    await era?.stop()
  }, 15_000)

  const session = (key: string, path = MCP) => sessionOf(server.url + path, key, closers)
  const modernClient = (key: string) => modernClientOf(server.url + MCP, key, closers)
  const subscribedAs = () => subscribedWith(era)

  let aliceSession: Awaited<ReturnType<typeof session>>
  let bobSession: Awaited<ReturnType<typeof session>>

  it("two principals' 2025 sessions subscribe to one URI: one upstream subscription on each one's own connection, none on the shared one", async () => {
    aliceSession = await session(keys.alice)
    bobSession = await session(keys.bob)
    await within(aliceSession.client.subscribeResource({ uri: URI }), 10_000, "alice subscribes")
    await within(bobSession.client.subscribeResource({ uri: URI }), 10_000, "bob subscribes")
    expect(await eventually(() => subscribedAs().includes("Bearer alice-own") && subscribedAs().includes("Bearer bob-own"), 5_000), JSON.stringify(era.listens())).toBe(true)
    expect(subscribedAs()).not.toContain(undefined)
  })

  it("an update on one principal's connection reaches that principal's session only", async () => {
    await touch(alice)
    expect(await eventually(() => aliceSession.heard.length === 1, 5_000), "alice hears her update").toBe(true)
    await touch(bob)
    expect(await eventually(() => bobSession.heard.length === 1, 5_000), "bob hears his update").toBe(true)
    expect(aliceSession.heard).toEqual([URI])
    expect(bobSession.heard).toEqual([URI])
  })

  it("a principal's subscribed connection outlives the pool's idle time-out: updates still reach it", async () => {
    const listens = subscribedAs().length
    // Well past the half-second idle time-out of the principals' connections.
    await quietFor(1_500)
    await touch(alice)
    expect(await eventually(() => aliceSession.heard.length === 2, 5_000), "alice hears her update after the idle time-out").toBe(true)
    // The same subscription: the upstream was not asked again.
    expect(subscribedAs()).toHaveLength(listens)
  })

  it("a caller without its own credential is refused CREDENTIALS_REQUIRED, in a 2025 session and on a 2026-07-28 listen", async () => {
    const route = `PUT ${PREFIX}/credentials/notes`
    const carol = await session(keys.carol)
    const refused = await carol.client.subscribeResource({ uri: URI }).then(
      () => undefined,
      (e: unknown) => e
    )
    expect(refused).toBeInstanceOf(McpError)
    expect((refused as McpError).code).toBe(-32600)
    expect((refused as McpError).data).toMatchObject({ code: "CREDENTIALS_REQUIRED", service_name: "notes", headers: ["Authorization"], route })
    const listen = await modernRequest(server.url + MCP, "subscriptions/listen", { notifications: { resourceSubscriptions: [URI] } }, { key: keys.carol })
    expect(listen.response.error, JSON.stringify(listen.response)).toMatchObject({ code: -32600, data: { code: "CREDENTIALS_REQUIRED", service_name: "notes", route } })
    // Nothing reached the upstream for her.
    expect(subscribedAs().filter((a) => a !== "Bearer alice-own" && a !== "Bearer bob-own")).toEqual([])
  })

  it("2026-07-28 listen streams: each principal's on its own connection, an update reaching only that principal's stream", async () => {
    const a = await modernClient(keys.alice)
    const b = await modernClient(keys.bob)
    // A URI of no service of the scope cannot be subscribed: the acknowledged filter leaves it out.
    const subA = await within(a.client.listen({ resourceSubscriptions: [URI, "mcp-store://nobody/mem://note"] }), 5_000, "alice listens")
    closers.push(() => subA.close())
    expect(subA.honoredFilter).toEqual({ resourceSubscriptions: [URI] })
    // Its prefixed form names the same subscription: acknowledged once, in the form given first (the one its updates name).
    const subB = await within(b.client.listen({ resourceSubscriptions: [URI, `mcp-store://notes/${URI}`] }), 5_000, "bob listens")
    closers.push(() => subB.close())
    expect(subB.honoredFilter).toEqual({ resourceSubscriptions: [URI] })
    await touch(bob)
    expect(await eventually(() => b.heard.length === 1 && bobSession.heard.length === 2, 5_000), "bob's stream and session hear his update").toBe(true)
    await touch(alice)
    expect(await eventually(() => a.heard.length === 1 && aliceSession.heard.length === 3, 5_000), "alice's stream and session hear hers").toBe(true)
    expect(b.heard).toEqual([URI])
    expect(bobSession.heard).toHaveLength(2)
    expect(subscribedAs()).not.toContain(undefined)
  })

  it("a redefined service: a principal's subscription is made again on a connection of the new definition once it is connected", async () => {
    // In the store's scope (an agent has no update_service): the admin key is the principal.
    const admin = authedApi(server.url, keys.admin)
    const definition = { name: "shelf", url: era.url, per_user: { headers: ["Authorization"] } }
    expect((await addService(admin, "/for_store", definition)).status).toBe(200)
    await giveCredential(admin, "/for_store", "shelf", { headers: { Authorization: "Bearer admin-own" } })
    const own = await session(keys.admin, "/mcp")
    await within(own.client.subscribeResource({ uri: URI }), 10_000, "the admin subscribes")
    const admins = () => subscribedAs().filter((a) => a === "Bearer admin-own").length
    expect(await eventually(() => admins() === 1, 5_000), JSON.stringify(era.listens())).toBe(true)
    const updated = await admin.request("PUT", "/for_store/update_service/shelf", {
      body: JSON.stringify({ ...definition, headers: { "X-Definition": "2" } }),
      headers: { "content-type": "application/json" }
    })
    expect(updated.status, updated.text).toBe(200)
    await waitStatus(admin, "/for_store", "shelf", "healthy")
    expect(await eventually(() => admins() === 2, 5_000), JSON.stringify(era.listens())).toBe(true)
    const touched = await admin.post("/for_store/call_tool", { tool_name: "shelf__touch", args: {} })
    expect(touched.status, touched.text).toBe(200)
    expect(await eventually(() => own.heard.length === 1, 5_000), "the admin hears its update after the redefinition").toBe(true)
  })

  it("a changed credential makes the subscription again on the principal's new connection; a deleted one drops it", async () => {
    await giveCredential(bob, PREFIX, "notes", { headers: { Authorization: "Bearer bob-renewed" } })
    expect(await eventually(() => subscribedAs().includes("Bearer bob-renewed"), 5_000), JSON.stringify(era.listens())).toBe(true)
    const before = bobSession.heard.length
    await touch(bob)
    expect(await eventually(() => bobSession.heard.length === before + 1, 5_000), "bob hears his update on the new connection").toBe(true)
    // Alice deletes her credential: her subscription is dropped, so her session may subscribe again, and is refused.
    expect((await alice.del(`${PREFIX}/credentials/notes`)).status).toBe(200)
    let refusal: unknown
    const refused = await eventually(async () => {
      refusal = await aliceSession.client.subscribeResource({ uri: URI }).then(
        () => undefined,
        (e: unknown) => e
      )
      return refusal instanceof McpError
    }, 5_000)
    expect(refused, String(refusal)).toBe(true)
    expect((refusal as McpError).data).toMatchObject({ code: "CREDENTIALS_REQUIRED" })
  })

  it("a principal's connection that keeps closing does not make its subscription forever: the sixth close within a minute drops it, with a line", async () => {
    const logs = captureLogs({ level: "info" })
    try {
      // A URI of its own: a subscription of its own, made again only by the changes below.
      const uri = "mem://notes/renewals"
      const made = () => era.listens().filter((l) => l.uris.includes(uri)).map((l) => l.authorization)
      const own = await session(keys.bob)
      await own.client.subscribeResource({ uri })
      // Each change of bob's credential closes his connection: the subscription is made again, five times.
      for (let i = 1; i <= 6; i++) {
        await giveCredential(bob, PREFIX, "notes", { headers: { Authorization: `Bearer bob-${i}` } })
        if (i <= 5) expect(await eventually(() => made().includes(`Bearer bob-${i}`), 5_000), `made again on bob-${i}'s connection`).toBe(true)
      }
      const dropped = () => logs.lines.filter((l) => l.includes(uri) && l.includes("dropped") && l.includes("the 6th time within 60 s"))
      expect(await eventually(() => dropped().length === 1, 5_000), logs.lines.filter((l) => l.includes("subscribe")).join("\n")).toBe(true)
      expect(logs.lines.filter((l) => l.includes(uri) && l.includes("made again: its connection was closed"))).toHaveLength(5)
      // Not made on the sixth connection, and not again later.
      await quietFor(300)
      expect(made()).not.toContain("Bearer bob-6")
      // Dropped for the session too: it may subscribe again, on the connection of the credential it has now.
      await own.client.subscribeResource({ uri })
      expect(await eventually(() => made().includes("Bearer bob-6"), 5_000)).toBe(true)
    } finally {
      logs.restore()
    }
  })
})

describe("a per_user service's connections held by subscriptions, and listens naming many resources", { timeout: 30_000 }, () => {
  let era: EraHttpFixture
  /** Answers every request but `resources/subscribe`, which it never answers. */
  let hung: HttpFixture
  let server: TestServer
  let keys: Readonly<Record<string, string>>
  let alice: Api
  let admin: Api
  const closers: Array<() => Promise<unknown>> = []
  /** A store-scope URI of the shared service `hung` (the one a subscribe of is never answered), and of its `per_user` twin `private`. */
  const hungUri = (n: number) => `mcp-store://hung/mem://notes/${n}`
  const privateUri = (n: number) => `mcp-store://private/mem://notes/${n}`
  const subscribesReceived = () => hung.requests().filter((r) => r === "POST resources/subscribe").length
  const unsubscribesReceived = () => hung.requests().filter((r) => r === "POST resources/unsubscribe").length

  beforeAll(async () => {
    ;[era, hung] = await Promise.all([startEraHttpFixture({ updatesPerCaller: true }), startHttpFixture({ server: { catalog: true, unansweredSubscribe: true } })])
    // Room for two principals' connections per service, one of them kept for plain requests; a key's share of listen streams is one (4 / 4).
    const store = await startPerUserStore({ url: era.url, agent: AGENT, service: "notes", principals: ["alice", "bob"], without: ["carol"], options: { per_user_connections: 2, max_mcp_sessions: 4 } })
    ;({ server, keys } = store)
    alice = store.as("alice")
    admin = store.as("admin")
    await giveCredential(admin, PREFIX, "notes", { headers: { Authorization: "Bearer admin-own" } })
    await addService(admin, "/for_store", { name: "hung", url: hung.url })
    await addService(admin, "/for_store", { name: "private", url: hung.url, per_user: { headers: ["Authorization"] } })
    await giveCredential(admin, "/for_store", "private", { headers: { Authorization: "Bearer admin-own" } })
  }, 30_000)

  afterAll(async () => {
    for (const close of closers.splice(0).reverse()) await close().catch(() => undefined)
    await server?.cleanup()
    await Promise.all([era?.stop(), hung?.stop()])
  }, 15_000)

  it("subscriptions hold at most one of two principals' connections: another principal's subscribe and listen are refused TOO_MANY, plain calls get the other one (refused 429 only while it is busy), one line for every refusal", async () => {
    const logs = captureLogs({ level: "warning" })
    const calls: Array<AbortController> = []
    try {
      const own = await sessionOf(server.url + MCP, keys.alice!, closers)
      await within(own.client.subscribeResource({ uri: URI }), 10_000, "alice subscribes")
      expect(await eventually(() => subscribedWith(era).includes("Bearer alice-own"), 5_000), JSON.stringify(era.listens())).toBe(true)
      // Plain calls of other principals get the connection kept for them.
      expect((await authedApi(server.url, keys.bob!).post(`${PREFIX}/call_tool`, { tool_name: "notes__touch", args: {} })).status).toBe(200)
      expect((await admin.post(`${PREFIX}/call_tool`, { tool_name: "notes__touch", args: {} })).status).toBe(200)
      // Both connections busy (alice's held one with a call in flight, bob's): the admin's call is refused 429.
      const before = era.requests().length
      const sleepOf = (key: string) => {
        const gone = new AbortController()
        calls.push(gone)
        void modernRequest(server.url + MCP, "tools/call", { name: "notes__sleep", arguments: { ms: 30_000 } }, { key, signal: gone.signal }).catch(() => undefined)
      }
      sleepOf(keys.alice!)
      sleepOf(keys.bob!)
      const sleeping = () => era.headers().slice(before).filter((h, i) => era.requests()[before + i] === "POST tools/call").map((h) => h.authorization)
      expect(await eventually(() => sleeping().includes("Bearer alice-own") && sleeping().includes("Bearer bob-own"), 5_000), JSON.stringify(sleeping())).toBe(true)
      const refused = await admin.post(`${PREFIX}/call_tool`, { tool_name: "notes__touch", args: {} })
      expect(refused.status, refused.text).toBe(429)
      expect(refused.body.error).toMatchObject({ code: "TOO_MANY", details: { limit: "per_user_connections", max: 2 } })
      expect(refused.body.error.message).toContain("already has 2 principals' connections in use; try again shortly")
      for (const gone of calls.splice(0)) gone.abort()
      // Bob's subscribe would hold the second connection, the last one: refused, in a 2025 session and on a listen (no stream opens as if subscribed).
      const bob = await sessionOf(server.url + MCP, keys.bob!, closers)
      const subscribe = await bob.client.subscribeResource({ uri: URI }).then(
        () => undefined,
        (e: unknown) => e
      )
      expect(subscribe).toBeInstanceOf(McpError)
      expect((subscribe as McpError).code).toBe(-32000)
      expect((subscribe as McpError).data).toMatchObject({ code: "TOO_MANY", details: { limit: "per_user_connections", max: 2, retry_after_seconds: 1 } })
      expect((subscribe as McpError).message).toContain("1 of its 2 principals' connections held by resource subscriptions (one is kept for plain requests)")
      const listening = new AbortController()
      calls.push(listening)
      const listen = await within(modernRequest(server.url + MCP, "subscriptions/listen", { notifications: { resourceSubscriptions: [URI] } }, { key: keys.bob, signal: listening.signal }), 5_000, "bob's listen answered, no stream opened")
      expect(listen.response.error, JSON.stringify(listen.response)).toMatchObject({ code: -32000, data: { code: "TOO_MANY", details: { limit: "per_user_connections", max: 2 } } })
      expect(subscribedWith(era)).not.toContain("Bearer bob-own")
      // The calls go on: on /mcp too.
      const called = await bob.client.callTool({ name: "notes__touch", arguments: {} })
      expect(called.isError, JSON.stringify(called.content)).toBeFalsy()
      // One line for the three refusals (the next a minute later at most), counting alice's busy connection as held.
      const full = logs.lines.filter((l) => l.includes("a per-user ") && l.includes(" refused: "))
      expect(full, full.join("\n")).toHaveLength(1)
      expect(full[0]).toContain("refused: its 2 principals' connections are all in use (1 held by resource subscriptions)")
      // Alice's subscription was left alone: her update still reaches her session.
      await touch(alice)
      expect(await eventually(() => own.heard.length >= 1, 5_000), "alice hears her update").toBe(true)
      expect(logs.lines.filter((l) => l.includes("dropped"))).toEqual([])
    } finally {
      for (const gone of calls) gone.abort()
      logs.restore()
    }
  })

  it("a listen naming a hundred URIs of a per_user service reads the caller's credential once: without one, one refusal line and CREDENTIALS_REQUIRED", async () => {
    const credentials = server.running.store.credentials
    const reads = vi.spyOn(credentials, "find")
    const logs = captureLogs({ level: "warning" })
    try {
      const uris = Array.from({ length: 100 }, (_, i) => `mem://notes/many-${i}`)
      const listen = await modernRequest(server.url + MCP, "subscriptions/listen", { notifications: { resourceSubscriptions: uris } }, { key: keys.carol })
      expect(listen.response.error, JSON.stringify(listen.response)).toMatchObject({ code: -32600, data: { code: "CREDENTIALS_REQUIRED", service_name: "notes" } })
      expect(reads).toHaveBeenCalledTimes(1)
      expect(logs.lines.filter((l) => l.includes("refused: this caller has not given its own"))).toHaveLength(1)
      // With a credential: read once too, every URI subscribed on the caller's own connection.
      reads.mockClear()
      const own = await modernClientOf(server.url + MCP, keys.alice!, closers)
      const few = uris.slice(0, 5)
      const sub = await within(own.client.listen({ resourceSubscriptions: few }), 10_000, "alice listens")
      closers.push(() => sub.close())
      expect(reads).toHaveBeenCalledTimes(1)
      const made = () => few.filter((u) => era.listens().some((l) => l.authorization === "Bearer alice-own" && l.uris.includes(u)))
      expect(await eventually(() => made().length === few.length, 5_000), JSON.stringify(era.listens())).toBe(true)
      await sub.close()
    } finally {
      reads.mockRestore()
      logs.restore()
    }
  })

  it("a listen whose shared upstream never answers its subscribe opens its stream at once", async () => {
    const before = subscribesReceived()
    const admin = await modernClientOf(server.url + "/mcp", keys.admin!, closers)
    const sub = await within(admin.client.listen({ resourceSubscriptions: [hungUri(1)] }), 5_000, "the listen opens")
    expect(sub.honoredFilter).toEqual({ resourceSubscriptions: [hungUri(1)] })
    // The subscribe was sent, and is still unanswered.
    expect(await eventually(() => subscribesReceived() === before + 1, 5_000)).toBe(true)
    const unsubscribed = unsubscribesReceived()
    await sub.close()
    expect(await eventually(() => unsubscribesReceived() === unsubscribed + 1, 5_000), "its close unsubscribes upstream").toBe(true)
  })

  it("a listen waiting for a per_user subscribe its upstream never answers stops waiting when its client goes away: the subscribe is cancelled upstream, the key's listen slot is free again", async () => {
    const before = subscribesReceived()
    const cancelled = () => hung.requests().filter((r) => r === "POST notifications/cancelled").length
    const cancelledBefore = cancelled()
    const unsubscribed = unsubscribesReceived()
    const gone = new AbortController()
    const waiting = modernRequest(server.url + "/mcp", "subscriptions/listen", { notifications: { resourceSubscriptions: [privateUri(1)] } }, { key: keys.admin, signal: gone.signal }).then(
      () => "answered",
      () => "aborted"
    )
    expect(await eventually(() => subscribesReceived() === before + 1, 5_000), "the subscribe reached the upstream").toBe(true)
    gone.abort()
    expect(await waiting).toBe("aborted")
    // Not left running until the catalog's 60 s time-out, the principal's connection busy meanwhile.
    expect(await eventually(() => cancelled() === cancelledBefore + 1, 5_000), hung.requests().slice(-5).join(", ")).toBe(true)
    // The upstream may have taken the subscribe before the cancel: it is unsubscribed too, nobody's subscription left there.
    expect(await eventually(() => unsubscribesReceived() === unsubscribed + 1, 5_000), hung.requests().slice(-5).join(", ")).toBe(true)
    // The key's only listen slot is taken until the store stops waiting (else for the catalog's 60 s).
    const admin = await modernClientOf(server.url + "/mcp", keys.admin!, closers)
    const opened = await eventually(async () => {
      const sub = await within(admin.client.listen({ toolsListChanged: true }), 5_000, "listen").catch(() => undefined)
      await sub?.close()
      return sub !== undefined
    }, 5_000, 100)
    expect(opened, "a new listen of the key opens").toBe(true)
  })

  it("a listen is refused at the first refusal of its per_user subscribes, not after the slowest (a subscribe its upstream never answers)", async () => {
    await addService(admin, "/for_store", { name: "locked", url: hung.url, per_user: { headers: ["Authorization"] } })
    const listening = new AbortController()
    try {
      const uris = [privateUri(2), "mcp-store://locked/mem://notes/2"]
      const listen = await within(modernRequest(server.url + "/mcp", "subscriptions/listen", { notifications: { resourceSubscriptions: uris } }, { key: keys.admin, signal: listening.signal }), 5_000, "the listen refused at once")
      expect(listen.response.error, JSON.stringify(listen.response)).toMatchObject({ code: -32600, data: { code: "CREDENTIALS_REQUIRED", service_name: "locked" } })
    } finally {
      listening.abort()
    }
  })

  it("a listen joining a principal's subscription being made again is answered as that making ends: refused when it fails, never acknowledged before", async () => {
    const credentials = server.running.store.credentials
    // Alice's credential reads held back (the making again of her one subscription, the first test's session's) until `release`.
    let release: (value: undefined) => void = () => undefined
    const held = new Promise<undefined>((resolve) => (release = resolve))
    const find = credentials.find.bind(credentials)
    let holding = true
    const reads = vi.spyOn(credentials, "find").mockImplementation((...args) => (holding ? held : find(...args)))
    const listening = new AbortController()
    try {
      // Her changed credential closes her connection: her subscription is made again, reading it.
      await giveCredential(alice, PREFIX, "notes", { headers: { Authorization: "Bearer alice-again" } })
      expect(await eventually(() => reads.mock.calls.length === 1, 5_000), `${reads.mock.calls.length} reads`).toBe(true)
      holding = false
      const listen = within(
        modernRequest(server.url + MCP, "subscriptions/listen", { notifications: { resourceSubscriptions: [URI, "mem://notes/fresh"] } }, { key: keys.alice, signal: listening.signal }),
        5_000,
        "the listen answered"
      )
      // The listen's fresh URI reads her credential (joining URI's reads none): both are joined.
      expect(await eventually(() => reads.mock.calls.length === 2, 5_000), `${reads.mock.calls.length} reads`).toBe(true)
      // The making again finds no credential (as if deleted meanwhile): the listen that joined it is refused with that.
      release(undefined)
      const answer = await listen
      expect(answer.response.error, JSON.stringify(answer.response)).toMatchObject({ code: -32600, data: { code: "CREDENTIALS_REQUIRED", service_name: "notes" } })
    } finally {
      listening.abort()
      reads.mockRestore()
    }
  })
})
