// Sealed MCP session ids (src/http/gateway/session-seal.ts, docs/sessions.md): an SDK client keeps its
// session across a restart of the store on the same services file and across replicas that share a
// secret, with no new initialize; a changed id, another store's id, another scope's id, another
// key's request, an ended id and an overlong id are answered 404 -32001 so clients re-initialize.
import { existsSync } from "node:fs"
import { join } from "node:path"
import { Client } from "@modelcontextprotocol/sdk/client/index.js"
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js"
import { NodeStreamableHTTPServerTransport } from "@modelcontextprotocol/node"
import { ElicitRequestSchema } from "@modelcontextprotocol/sdk/types.js"
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest"
import { defaultKeysFile, newKey, writeKeys } from "../../src/config/api-keys.js"
import { agentScope, STORE_SCOPE } from "../../src/domain/service-definition.js"
import { markInitialized } from "../../src/http/gateway/endpoint.js"
import { clientFacts, MAX_SEALED_CAPABILITIES, MAX_SESSION_ID_LENGTH, SessionSeal, sessionOwner } from "../../src/http/gateway/session-seal.js"
import { captureLogs, type CapturedLogs } from "../../src/logging/log.js"
import { startHttpFixture, type HttpFixture } from "../fixtures/http-fixture.js"
import { everythingStdio } from "../fixtures/paths.js"
import { addService, authedApi, freshDir, localService, startTestServer, waitStatus, within, type TestServer } from "../support/index.js"

let fixture: HttpFixture
const servers: TestServer[] = []
const clients: Client[] = []
let logs: CapturedLogs | undefined

beforeAll(async () => {
  fixture = await startHttpFixture()
})
afterAll(async () => {
  await fixture.stop()
})
afterEach(async () => {
  logs?.restore()
  logs = undefined
  await Promise.all(clients.splice(0).map((c) => within(c.close(), 3000, "client close").catch(() => undefined)))
  for (const s of servers.splice(0)) await s.cleanup()
})

const start = async (options: Parameters<typeof startTestServer>[0] = {}) => {
  const server = await startTestServer(options)
  servers.push(server)
  return server
}

/**
 * An SDK client whose requests go to whatever `base()` is when each is sent (a load balancer, a
 * restarted store); `initializes` counts the initialize requests it sent.
 */
const connect = async (base: () => string, path: string, key?: string, options: ConstructorParameters<typeof Client>[1] = {}) => {
  const seen = { initializes: 0, statuses: [] as number[] }
  const transport = new StreamableHTTPClientTransport(new URL(`http://balancer.invalid${path}`), {
    reconnectionOptions: { maxRetries: 0, initialReconnectionDelay: 100, maxReconnectionDelay: 100, reconnectionDelayGrowFactor: 1 },
    ...(key !== undefined ? { requestInit: { headers: { authorization: `Bearer ${key}` } } } : {}),
    fetch: async (url, init) => {
      const asked = new URL(String(url))
      if (typeof init?.body === "string" && init.body.includes('"method":"initialize"')) seen.initializes += 1
      const res = await fetch(new URL(asked.pathname + asked.search, base()), init)
      if ((init?.method ?? "GET") === "POST") seen.statuses.push(res.status)
      return res
    }
  })
  const client = new Client({ name: "sessions-test", version: "2.0.0" }, options)
  client.onerror = () => undefined
  clients.push(client)
  await within(client.connect(transport), 10_000, `connect ${path}`)
  return { client, transport, seen }
}

const toolNames = async (client: Client) => (await within(client.listTools(), 10_000, "tools/list")).tools.map((t) => t.name).sort()
const echo = async (client: Client, text: string) => (await within(client.callTool({ name: "alpha__echo", arguments: { text } }), 10_000, "alpha__echo")).content

/** One JSON-RPC request in a session over a plain POST; resolves with the status and the body's text. */
const post = async (url: string, session: string, key?: string, method = "POST") => {
  const res = await fetch(url, {
    method,
    headers: {
      "content-type": "application/json",
      accept: "application/json, text/event-stream",
      "mcp-session-id": session,
      "mcp-protocol-version": "2025-06-18",
      ...(key !== undefined ? { authorization: `Bearer ${key}` } : {})
    },
    ...(method === "POST" ? { body: JSON.stringify({ jsonrpc: "2.0", id: 9, method: "tools/list", params: {} }) } : {}),
    signal: AbortSignal.timeout(10_000)
  })
  return { status: res.status, text: await res.text() }
}

const expectNotFound = (reply: { status: number; text: string }, label: string) => {
  expect(reply.status, label).toBe(404)
  expect(JSON.parse(reply.text), label).toMatchObject({ jsonrpc: "2.0", error: { code: -32001 } })
}

/** A store with service alpha (the HTTP fixture) healthy: added, or already in the services file of `options.dir`. */
const storeWithAlpha = async (options: Parameters<typeof startTestServer>[0] = {}, apiKey?: string, add = options.dir === undefined) => {
  const server = await start(options)
  const admin = apiKey === undefined ? server : authedApi(server.url, apiKey)
  if (add) await addService(admin, "/for_store", { name: "alpha", url: fixture.url })
  await waitStatus(admin, "/for_store", "alpha", "healthy")
  return server
}

describe("sealed MCP session ids", () => {
  /**
   * A store `a` with two sessions opened on it (each with one tools/list), stopped, and a store `b` on
   * its services file: shared by the two tests of a session id sealed before a restart. They do not
   * meet: the first test's session is rebuilt on `b`, the second test's (another id) is deleted there
   * without having been used on `b`, and nothing else is changed.
   */
  describe("across a restart on the same services file", () => {
    const pair: Array<TestServer> = []
    const pairClients: Array<Client> = []
    let base = ""
    let a: TestServer
    let b: TestServer
    let survivor: Awaited<ReturnType<typeof connect>>
    let survivorNames: string[]
    let deleted: string
    let keyMadeAtFirstSession = false
    beforeAll(async () => {
      a = await startTestServer()
      pair.push(a)
      await addService(a, "/for_store", { name: "alpha", url: fixture.url })
      await waitStatus(a, "/for_store", "alpha", "healthy")
      base = a.url
      survivor = await connect(() => base, "/mcp")
      survivorNames = await toolNames(survivor.client)
      keyMadeAtFirstSession = existsSync(`${a.file}.key`)
      const other = await connect(() => a.url, "/mcp")
      await toolNames(other.client)
      deleted = other.transport.sessionId!
      pairClients.push(survivor.client, other.client)
      clients.splice(0)
      await a.close()
      b = await startTestServer({ dir: a.dir })
      pair.push(b)
      await waitStatus(b, "/for_store", "alpha", "healthy")
    }, 30_000)
    afterAll(async () => {
      await Promise.all(pairClients.splice(0).map((c) => within(c.close(), 3000, "client close").catch(() => undefined)))
      for (const s of pair.splice(0)) await s.cleanup()
    })

    it("a session survives a restart of the store on the same services file: the same id lists and calls, with no new initialize", async () => {
      logs = captureLogs({ level: "info", format: "json" })
      const c = survivor
      expect(survivorNames).toContain("alpha__echo")
      const id = c.transport.sessionId!
      expect(id).toMatch(/^s1\.[A-Za-z0-9_-]+$/)
      // The key was made beside the services file at the first session (MCPSTORE_SECRET_KEY unset).
      expect(keyMadeAtFirstSession).toBe(true)

      // a stopped, b started on its file (beforeAll): the client's requests go to b from here.
      base = b.url
      expect(await toolNames(c.client)).toContain("alpha__echo")
      expect(await echo(c.client, "after restart")).toEqual([{ type: "text", text: "after restart" }])
      expect(c.transport.sessionId).toBe(id)
      expect(c.seen.initializes).toBe(1)
      expect(c.seen.statuses.every((s) => s === 200 || s === 202)).toBe(true)
      // The store rebuilt it once, with the client's own info from the sealed id.
      const rebuilt = logs.lines.map((l) => JSON.parse(l) as Record<string, unknown>).filter((l) => l["event"] === "mcp_session_rebuilt")
      expect(rebuilt).toHaveLength(1)
      expect(String(rebuilt[0]!["msg"] ?? rebuilt[0]!["message"])).toContain('"sessions-test"')
      expect(JSON.stringify(rebuilt)).not.toContain(id)
    })

    it("DELETE of a sealed id works on a store that never had it (200), and that store then refuses the id", async () => {
      // Sealed by a, never used on b.
      const id = deleted
      expect(id).toMatch(/^s1\.[A-Za-z0-9_-]+$/)
      expect(id).not.toBe(survivor.transport.sessionId)
      expect((await post(`${b.url}/mcp`, id, undefined, "DELETE")).status).toBe(200)
      expectNotFound(await post(`${b.url}/mcp`, id), "a deleted id")
      // A session ended in memory is not rebuilt from its id either (idle expiry and the cap: test/extras/caps.test.ts).
      const d = await connect(() => b.url, "/mcp")
      await toolNames(d.client)
      const other = d.transport.sessionId!
      await within(d.transport.terminateSession(), 5000, "terminateSession")
      expectNotFound(await post(`${b.url}/mcp`, other), "a session this store ended")
    })
  })

  it("replicas sharing a secret serve one session in turn; a store with another secret answers 404", async () => {
    const secret = "cluster secret for the test"
    const [a, b] = await Promise.all([storeWithAlpha({ sessionSecret: secret }), storeWithAlpha({ sessionSecret: secret })])
    const replicas = [a.url, b.url]
    let turn = 0
    const c = await connect(() => replicas[turn++ % 2]!, "/mcp")
    for (let i = 0; i < 4; i++) expect(await echo(c.client, `turn ${i}`)).toEqual([{ type: "text", text: `turn ${i}` }])
    expect(c.seen.initializes).toBe(1)
    // No key file: the cluster's secret is the key.
    expect(existsSync(`${a.file}.key`)).toBe(false)

    // The refused ids need no service: stores without any.
    const other = await start({ sessionSecret: "another cluster" })
    expectNotFound(await post(`${other.url}/mcp`, c.transport.sessionId!), "an id sealed with another secret")
    // A store on its own key file does not open the cluster's ids either.
    const own = await start()
    expectNotFound(await post(`${own.url}/mcp`, c.transport.sessionId!), "an id sealed with the cluster's secret on a store with its own key")
  })

  it("a rebuilt session keeps the client's capabilities: an upstream's elicitation reaches the client through another replica", async () => {
    const secret = "cluster secret for elicitation"
    // The session is opened on a replica with no services; its calls go to one with server-everything.
    const a = await start({ sessionSecret: secret })
    const b = await start({ sessionSecret: secret })
    await addService(b, "/for_store", localService("everything", everythingStdio))
    await waitStatus(b, "/for_store", "everything", "healthy", 30)
    let base = a.url
    const c = await connect(() => base, "/mcp", undefined, { capabilities: { elicitation: {} } })
    const asked: string[] = []
    c.client.setRequestHandler(ElicitRequestSchema, async (request) => {
      asked.push(request.params.message)
      return { action: "decline" }
    })
    base = b.url
    const elicited = await within(c.client.callTool({ name: "everything__trigger-elicitation-request", arguments: {} }), 15_000, "elicitation")
    expect(asked).toEqual(["Please provide inputs for the following fields:"])
    expect(JSON.stringify(elicited.content)).toContain("User declined to provide the requested information")
    expect(c.seen.initializes).toBe(1)
  })

  it("refuses with 404 -32001 a changed id, a made-up one, an overlong one and another scope's id (in memory and rebuilt)", async () => {
    const a = await storeWithAlpha()
    const agent = await connect(() => a.url, "/for_agent/a1/mcp")
    const store = await connect(() => a.url, "/mcp")
    await toolNames(store.client)
    const id = store.transport.sessionId!
    const agentId = agent.transport.sessionId!
    const flip = (s: string, at: number) => s.slice(0, at) + (s[at] === "A" ? "B" : "A") + s.slice(at + 1)

    for (const [label, bad] of [
      ["a changed byte in the middle", flip(id, Math.floor(id.length / 2))],
      ["a changed character of the tag", flip(id, id.length - 3)],
      ["cut short", id.slice(0, 20)],
      ["a UUID", "0b9c6c1e-3b0a-4c55-9a57-0c5d2f6d1a10"],
      ["the prefix only", "s1."],
      ["overlong", `s1.${"A".repeat(MAX_SESSION_ID_LENGTH)}`]
    ] as const) {
      expectNotFound(await post(`${a.url}/mcp`, bad), label)
    }
    expectNotFound(await post(`${a.url}/mcp`, agentId), "an agent's session on the store's endpoint")
    expectNotFound(await post(`${a.url}/for_agent/a2/mcp`, agentId), "a1's session on a2's endpoint")

    await a.close()
    const b = await storeWithAlpha({ dir: a.dir })
    expectNotFound(await post(`${b.url}/mcp`, agentId), "an agent's sealed id on the store's endpoint, after a restart")
    expectNotFound(await post(`${b.url}/for_agent/a2/mcp`, agentId), "a1's sealed id on a2's endpoint, after a restart")
    // Nothing was rebuilt for the refused ids; the good ones still work.
    expect(b.running.store).toBeDefined()
    expect((await post(`${b.url}/for_agent/a1/mcp`, agentId)).status).toBe(200)
    expect((await post(`${b.url}/mcp`, id)).status).toBe(200)
  })

  it("a session belongs to the key that opened it: another key's request with its id is refused, before and after a restart", async () => {
    const dir = freshDir()
    const k1 = newKey({ role: "admin", name: "k1" })
    const k2 = newKey({ role: "admin", name: "k2" })
    await writeKeys(defaultKeysFile(join(dir, "mcp.json")), { version: 1, keys: [k1.entry, k2.entry] })
    const a = await storeWithAlpha({ dir }, k1.key, true)
    const c = await connect(() => a.url, "/mcp", k1.key)
    await toolNames(c.client)
    const id = c.transport.sessionId!
    expectNotFound(await post(`${a.url}/mcp`, id, k2.key), "K2 on K1's session")
    expect((await post(`${a.url}/mcp`, id)).status).toBe(401)
    expect((await post(`${a.url}/mcp`, id, k1.key)).status).toBe(200)

    await a.close()
    const b = await storeWithAlpha({ dir }, k1.key)
    expectNotFound(await post(`${b.url}/mcp`, id, k2.key), "K2 on K1's sealed id after a restart")
    expect((await post(`${b.url}/mcp`, id, k1.key)).status).toBe(200)
    // Rebuilt for K1, the session still refuses K2.
    expectNotFound(await post(`${b.url}/mcp`, id, k2.key), "K2 on K1's rebuilt session")
  })
})

describe("SessionSeal", () => {
  const owner = sessionOwner({ role: "admin" }, "Bearer k")
  const facts = clientFacts({ protocolVersion: "2025-06-18", capabilities: { sampling: {}, elicitation: { form: {} } }, clientInfo: { name: "c", version: "1" } })

  it("opens what it sealed, and nothing sealed with another secret or changed", () => {
    const seal = SessionSeal.fromSecret("one")
    const id = seal.seal({ scope: STORE_SCOPE, ...facts, owner, issuedAt: 1234 })
    expect(seal.open(id)).toEqual({ scope: STORE_SCOPE, ...facts, owner, issuedAt: 1234 })
    expect(SessionSeal.fromSecret("two").open(id)).toBeUndefined()
    const at = id.length - 3
    expect(seal.open(id.slice(0, at) + (id[at] === "A" ? "B" : "A") + id.slice(at + 1))).toBeUndefined()
    // The same bytes spelt otherwise (base64url's unused last bits, padding) are not the id.
    const last = id.at(-1)!
    const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
    const respelt = [...alphabet].map((c) => id.slice(0, -1) + c).filter((v) => v !== id && Buffer.from(v.slice(3), "base64url").equals(Buffer.from(id.slice(3), "base64url")))
    for (const v of [...respelt, `${id}=`]) expect(seal.open(v), `${last} respelt`).toBeUndefined()
    // Two seals of the same claims differ (a fresh IV each time).
    expect(seal.seal({ scope: STORE_SCOPE, ...facts, owner, issuedAt: 1234 })).not.toBe(id)
  })

  it("task ids: opens what it sealed (holder or not); a session id never opens as a task id, nor the reverse", () => {
    const seal = SessionSeal.fromSecret("one")
    const claims = { scope: agentScope("a-1"), owner, service: "svc", upstreamTaskId: "u".repeat(512), relay: "r1", issuedAt: 99 }
    const plain = seal.sealTask(claims)
    const held = seal.sealTask({ ...claims, holder: "replica-7" })
    expect(plain).toMatch(/^t1\./)
    expect(seal.openTask(plain)).toEqual(claims)
    expect(seal.openTask(held)).toEqual({ ...claims, holder: "replica-7" })
    expect(SessionSeal.fromSecret("two").openTask(plain)).toBeUndefined()
    const session = seal.seal({ scope: STORE_SCOPE, ...facts, owner, issuedAt: 1 })
    expect(seal.openTask(session)).toBeUndefined()
    expect(seal.open(plain)).toBeUndefined()
    // The same bytes under the other prefix: the associated data differs, the tag fails.
    expect(seal.openTask(`t1.${session.slice(3)}`)).toBeUndefined()
    expect(seal.open(`s1.${plain.slice(3)}`)).toBeUndefined()
  })

  it("keeps an id small whatever the client declares: large capabilities keep their names, long texts are cut", () => {
    const huge = { sampling: {}, experimental: { blob: { text: "x".repeat(1_000_000) } }, ...Object.fromEntries(Array.from({ length: 100 }, (_, i) => [`k${i}`, {}])) }
    const big = clientFacts({ protocolVersion: "1999-01-01", capabilities: huge, clientInfo: { name: "n".repeat(10_000), version: "v".repeat(10_000), title: "t".repeat(10_000) } })
    expect(JSON.stringify(big.capabilities).length).toBeLessThan(MAX_SEALED_CAPABILITIES)
    expect(big.capabilities).toMatchObject({ sampling: {}, experimental: {} })
    expect(big.protocolVersion).not.toBe("1999-01-01")
    const id = SessionSeal.fromSecret("s").seal({ scope: STORE_SCOPE, ...big, owner, issuedAt: Date.now() })
    expect(id.length).toBeLessThan(MAX_SESSION_ID_LENGTH)
    expect(sessionOwner({ role: "admin" }, "Bearer other")).not.toBe(owner)
    expect(sessionOwner({ role: "agent", agentId: "a" }, "Bearer k")).not.toBe(owner)
  })

  it("markInitialized starts an SDK transport on a known session id (fails here if the SDK's private fields change)", () => {
    const transport = new NodeStreamableHTTPServerTransport({ sessionIdGenerator: () => "s1.x" })
    expect(transport.sessionId).toBeUndefined()
    markInitialized(transport, "s1.x")
    expect(transport.sessionId).toBe("s1.x")
    // Only ever on a fresh transport.
    expect(() => markInitialized(transport, "s1.y")).toThrow(/node changed/i)
  })
})
