// Per-user credentials over real HTTP (README, Per-user credentials): one store with a keys file,
// a remote fixture (Streamable HTTP) whose `per_user` header each principal gives itself, and a
// local fixture whose `per_user` environment variable each gives (one process per principal). Two
// keys of one agent call the same tools and the upstream sees each as itself; a caller without a
// credential is told how to give one (over REST, a 2025 MCP session and a 2026-07-28 request);
// resources and prompts are read through the caller's own connection too; the pool's bounds are
// the store's options (--per-user-connections, --per-user-idle-seconds); credentials are
// write-only, refused when malformed or from a key that may not give them, encrypted at rest, and
// gone with their service.
import { readFileSync } from "node:fs"
import { join } from "node:path"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { Client } from "@modelcontextprotocol/sdk/client/index.js"
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js"
import { startHttpFixture, type HttpFixture } from "../fixtures/http-fixture.js"
import { McpError } from "@modelcontextprotocol/sdk/types.js"
import { createKey, addService, authedApi, eventually, fixtureService, freshDir, modernRequest, startTestServer, within, type Api, type Reply, type TestServer } from "../support/index.js"

const AGENT = "team"
const PREFIX = `/for_agent/${AGENT}`

/** A PUT with a JSON body. */
const put = (client: Api, path: string, body: unknown) => client.request("PUT", path, { body: JSON.stringify(body), headers: { "content-type": "application/json" } })

/** A DELETE. */
const del = (client: Api, path: string) => client.del(path)

/** The fixture's `whoami` answer of a call. */
const whoami = async (client: Api, tool: string): Promise<{ authorization: string | null; env: string | null }> => {
  const reply = await client.post(`${PREFIX}/call_tool`, { tool_name: tool, args: {} })
  expect(reply.status, reply.text).toBe(200)
  return JSON.parse(reply.body.content[0].text)
}

describe("per-user upstream credentials", () => {
  let fixture: HttpFixture
  let server: TestServer
  let admin: Api
  let alice: Api
  let bob: Api
  let reader: Api
  let other: Api
  let carol: Api
  const keys: Record<string, string> = {}

  beforeAll(async () => {
    fixture = await startHttpFixture({ server: { whoamiTool: true, catalog: true } })
    const dir = freshDir()
    const keysFile = join(dir, "mcp-store.keys.json")
    const [a, k1, k2, r, o, k3] = [
      await createKey(keysFile, "--role", "admin", "--name", "ops"),
      await createKey(keysFile, "--role", "agent", "--agent", AGENT, "--name", "alice"),
      await createKey(keysFile, "--role", "agent", "--agent", AGENT, "--name", "bob"),
      await createKey(keysFile, "--role", "reader", "--name", "dash"),
      await createKey(keysFile, "--role", "agent", "--agent", "other", "--name", "eve"),
      await createKey(keysFile, "--role", "agent", "--agent", AGENT, "--name", "carol")
    ]
    Object.assign(keys, { alice: k1!, bob: k2!, carol: k3! })
    // The pool's bounds as options: two principals' connections per service, closed after a second idle.
    server = await startTestServer({ dir, options: { per_user_connections: 2, per_user_idle_seconds: 1 } })
    ;[admin, alice, bob, reader, other, carol] = [a, k1, k2, r, o, k3].map((key) => authedApi(server.url, key!)) as [Api, Api, Api, Api, Api, Api]
    await Promise.all([
      addService(admin, PREFIX, { name: "remote", url: fixture.url, per_user: { headers: ["Authorization"] } }),
      addService(admin, PREFIX, { ...fixtureService("local", "--whoami-tool"), per_user: { env: ["FIXTURE_USER"] } })
    ])
  }, 60_000)
  afterAll(async () => {
    await server?.cleanup()
    await fixture?.stop()
  }, 15_000)

  it("a definition's per_user is checked: names valid, headers for a url service, env for a command one", async () => {
    const bad = await admin.post(`${PREFIX}/add_service`, { name: "bad", url: fixture.url, per_user: { env: ["X"], headers: ["Bad Header"] } })
    expect(bad.status).toBe(400)
    expect(bad.body.error.code).toBe("VALIDATION_ERROR")
    expect((bad.body.error.details.fields as Array<{ field: string }>).map((f) => f.field)).toContain("per_user.headers[0]")
    const misplaced = await admin.post(`${PREFIX}/add_service`, { name: "bad", url: fixture.url, per_user: { env: ["X"] } })
    expect(misplaced.status).toBe(400)
    expect(misplaced.body.error.details.fields).toEqual([{ field: "per_user.env", problem: "is for a local ('command') service: a remote one is given `headers`" }])
    expect((await admin.post(`${PREFIX}/add_service`, { name: "bad", url: fixture.url, per_user: {} })).status).toBe(400)
  })

  it("a caller without its own credential is refused CREDENTIALS_REQUIRED, told what to give and where", async () => {
    const reply = await alice.post(`${PREFIX}/call_tool`, { tool_name: "remote__whoami", args: {} })
    expect(reply.status, reply.text).toBe(403)
    expect(reply.body.error.code).toBe("CREDENTIALS_REQUIRED")
    expect(reply.body.error.details).toMatchObject({ service_name: "remote", headers: ["Authorization"], env: [], route: `PUT ${PREFIX}/credentials/remote` })
    expect(reply.body.message).toContain(`PUT ${PREFIX}/credentials/remote`)
    // A resource or a prompt of the service too: never read through the shared connection.
    for (const refused of [
      await alice.post(`${PREFIX}/read_resource`, { uri: "mem://whoami" }),
      await alice.post(`${PREFIX}/get_prompt`, { name: "remote__whoami" })
    ]) {
      expect(refused.status, refused.text).toBe(403)
      expect(refused.body.error.code).toBe("CREDENTIALS_REQUIRED")
      expect(refused.body.error.details.route).toBe(`PUT ${PREFIX}/credentials/remote`)
    }
    // The refusal is a record of its own outcome.
    const records = await admin.get(`${PREFIX}/tool_records?outcome=credentials_required`)
    expect(records.status, records.text).toBe(200)
    expect(records.body.executions).toEqual([expect.objectContaining({ service_name: "remote", tool_name: "whoami", outcome: "credentials_required" })])
  })

  it("two principals call one remote service, each seen by the upstream with its own header", async () => {
    const given = await put(alice, `${PREFIX}/credentials/remote`, { headers: { authorization: "Bearer alice-secret-token" } })
    expect(given.status, given.text).toBe(200)
    expect(given.body).toMatchObject({ success: true, service_name: "remote", headers: ["authorization"], env: [] })
    expect(given.text).not.toContain("alice-secret-token")
    expect((await put(bob, `${PREFIX}/credentials/remote`, { headers: { Authorization: "Bearer bob-secret-token" } })).status).toBe(200)
    const [a, b] = await Promise.all([whoami(alice, "remote__whoami"), whoami(bob, "remote__whoami")])
    expect(a.authorization).toBe("Bearer alice-secret-token")
    expect(b.authorization).toBe("Bearer bob-secret-token")
    // Again, on the principals' kept connections.
    expect((await whoami(alice, "remote__whoami")).authorization).toBe("Bearer alice-secret-token")
  })

  it("a resource read and a prompt go through the caller's own connection, each principal seen as itself", async () => {
    const read = await alice.post(`${PREFIX}/read_resource`, { uri: "mem://whoami" })
    expect(read.status, read.text).toBe(200)
    expect(JSON.parse(read.body.contents[0].text).authorization).toBe("Bearer alice-secret-token")
    const prompt = await bob.post(`${PREFIX}/get_prompt`, { name: "remote__whoami" })
    expect(prompt.status, prompt.text).toBe(200)
    expect(JSON.parse(prompt.body.messages[0].content.text).authorization).toBe("Bearer bob-secret-token")
  })

  it("the pool's bounds are the options: TOO_MANY past --per-user-connections in use, idle ones closed after --per-user-idle-seconds", async () => {
    expect((await put(carol, `${PREFIX}/credentials/remote`, { headers: { Authorization: "Bearer carol-secret-token" } })).status).toBe(200)
    // Alice's and bob's connections both in use (a slow call each): a third principal is refused.
    const held = [alice, bob].map((who) => who.post(`${PREFIX}/call_tool`, { tool_name: "remote__sleep", args: { ms: 2500 } }))
    let refused: Reply | undefined
    const seen = await eventually(async () => {
      refused = await carol.post(`${PREFIX}/call_tool`, { tool_name: "remote__whoami", args: {} })
      return refused.status === 429
    }, 2_000, 50)
    expect(seen, refused?.text).toBe(true)
    expect(refused?.body.error.details).toMatchObject({ limit: "per_user_connections", max: 2 })
    for (const reply of await Promise.all(held)) expect(reply.status, reply.text).toBe(200)
    // Once one is idle, the least recently used makes room.
    expect((await whoami(carol, "remote__whoami")).authorization).toBe("Bearer carol-secret-token")
    // Idle for a second: every principal's connection is closed (the shared one stays).
    expect(await eventually(() => fixture.sessions() === 1, 5_000, 50), `sessions: ${fixture.sessions()}`).toBe(true)
    expect((await del(carol, `${PREFIX}/credentials/remote`)).status).toBe(200)
  })

  it("two principals call one local service, each through its own process with its own environment", async () => {
    expect((await put(alice, `${PREFIX}/credentials/local`, { env: { FIXTURE_USER: "alice" } })).status).toBe(200)
    expect((await put(bob, `${PREFIX}/credentials/local`, { env: { FIXTURE_USER: "bob" } })).status).toBe(200)
    const [a, b] = await Promise.all([whoami(alice, "local__whoami"), whoami(bob, "local__whoami")])
    expect(a.env).toBe("alice")
    expect(b.env).toBe("bob")
  })

  it("a credential is refused when malformed, and never given by a reader or another agent's key", async () => {
    const unknown = await put(alice, `${PREFIX}/credentials/remote`, { headers: { Authorization: "Bearer x", "X-Other": "y" } })
    expect(unknown.status).toBe(400)
    expect(unknown.body.error.details.fields).toEqual([{ field: "headers.X-Other", problem: "is not declared in the service's per_user.headers" }])
    const missing = await put(alice, `${PREFIX}/credentials/local`, {})
    expect(missing.status).toBe(400)
    const extra = await put(alice, `${PREFIX}/credentials/remote`, { headers: { Authorization: "Bearer x" }, nope: 1 })
    expect(extra.status).toBe(400)
    const crlf = await put(alice, `${PREFIX}/credentials/remote`, { headers: { Authorization: "Bearer x\r\nHost: evil" } })
    expect(crlf.status).toBe(400)
    const shared = await admin.post(`${PREFIX}/add_service?wait=10`, { name: "shared", url: fixture.url })
    expect(shared.status, shared.text).toBe(200)
    const notPerUser = await put(alice, `${PREFIX}/credentials/shared`, { headers: { Authorization: "Bearer x" } })
    expect(notPerUser.status).toBe(400)
    expect((await put(alice, `${PREFIX}/credentials/nope`, { headers: { Authorization: "Bearer x" } })).status).toBe(404)
    expect((await put(reader, `${PREFIX}/credentials/remote`, { headers: { Authorization: "Bearer x" } })).status).toBe(403)
    expect((await put(other, `${PREFIX}/credentials/remote`, { headers: { Authorization: "Bearer x" } })).status).toBe(403)
    // Nothing changed: alice is still herself.
    expect((await whoami(alice, "remote__whoami")).authorization).toBe("Bearer alice-secret-token")
  })

  it("credentials are encrypted at rest, and no answer shows them", async () => {
    const text = readFileSync(`${server.file}.credentials`, "utf8")
    for (const secret of ["alice-secret-token", "bob-secret-token", "FIXTURE_USER"]) expect(text).not.toContain(secret)
    const config = await admin.get(`${PREFIX}/show_mcpconfig?reveal=true`)
    expect(config.text).not.toContain("alice-secret-token")
  })

  it("over MCP (a 2025 session on the agent's endpoint), each key's calls use its own credential too", async () => {
    const seen: Record<string, string> = {}
    for (const who of ["alice", "bob"]) {
      const transport = new StreamableHTTPClientTransport(new URL(`${server.url}${PREFIX}/mcp`), { requestInit: { headers: { authorization: `Bearer ${keys[who]}` } } })
      const client = new Client({ name: "per-user-test", version: "1.0.0" })
      client.onerror = () => undefined
      await within(client.connect(transport), 10_000, "connect")
      try {
        const result = (await client.callTool({ name: "remote__whoami", arguments: {} }, undefined, { timeout: 10_000 })) as { content: Array<{ text: string }> }
        seen[who] = (JSON.parse(result.content[0]!.text) as { authorization: string }).authorization
      } finally {
        await client.close()
      }
    }
    expect(seen).toEqual({ alice: "Bearer alice-secret-token", bob: "Bearer bob-secret-token" })
  })

  it("over MCP, a caller without its own credential is told what to give and where (2025 session, 2026-07-28 request)", async () => {
    const route = `PUT ${PREFIX}/credentials/remote`
    const transport = new StreamableHTTPClientTransport(new URL(`${server.url}${PREFIX}/mcp`), { requestInit: { headers: { authorization: `Bearer ${keys["carol"]}` } } })
    const client = new Client({ name: "per-user-test", version: "1.0.0" })
    client.onerror = () => undefined
    await within(client.connect(transport), 10_000, "connect")
    try {
      const result = (await client.callTool({ name: "remote__whoami", arguments: {} }, undefined, { timeout: 10_000 })) as { isError?: boolean; content: Array<{ text: string }> }
      expect(result.isError).toBe(true)
      expect(result.content[0]!.text).toContain(route)
      expect(result.content[0]!.text).toContain("header Authorization")
      // Prefixed: the service "shared" (same fixture) offers the same URI.
      const read = await client.readResource({ uri: "mcp-store://remote/mem://whoami" }).then(
        () => undefined,
        (e: unknown) => e
      )
      expect(read).toBeInstanceOf(McpError)
      expect((read as McpError).data).toMatchObject({ code: "CREDENTIALS_REQUIRED", service_name: "remote", headers: ["Authorization"], route })
    } finally {
      await client.close()
    }
    const url = `${server.url}${PREFIX}/mcp`
    const called = await modernRequest(url, "tools/call", { name: "remote__whoami", arguments: {} }, { key: keys["carol"] })
    expect(called.status).toBe(200)
    expect(called.response.result.isError).toBe(true)
    expect(called.response.result.content[0].text).toContain(route)
    const read = await modernRequest(url, "resources/read", { uri: "mcp-store://remote/mem://whoami" }, { key: keys["carol"] })
    expect(read.response.error).toMatchObject({ code: -32600, data: { code: "CREDENTIALS_REQUIRED", route } })
  })

  it("a principal deletes its own credential; the service's deletion forgets every one", async () => {
    const removed = await bob.del(`${PREFIX}/credentials/remote`)
    expect(removed.status, removed.text).toBe(200)
    expect((await bob.post(`${PREFIX}/call_tool`, { tool_name: "remote__whoami", args: {} })).body.error.code).toBe("CREDENTIALS_REQUIRED")
    expect((await whoami(alice, "remote__whoami")).authorization).toBe("Bearer alice-secret-token")
    expect((await admin.del(`${PREFIX}/delete_service/remote`)).status).toBe(200)
    await addService(admin, PREFIX, { name: "remote", url: fixture.url, per_user: { headers: ["Authorization"] } })
    expect((await alice.post(`${PREFIX}/call_tool`, { tool_name: "remote__whoami", args: {} })).body.error.code).toBe("CREDENTIALS_REQUIRED")
  })
})
