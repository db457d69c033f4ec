// Per-user credentials over real HTTP (README, Per-user credentials): one store with a keys file,
// a remote fixture (Streamable HTTP) whose `per_user` header each principal gives itself, and a
// local fixture whose `per_user` environment variable each gives (one process per principal). Two
// keys of one agent call the same tools and the upstream sees each as itself; a caller without a
// credential is told how to give one; credentials are write-only, refused when malformed or from a
// key that may not give them, encrypted at rest, and gone with their service.
import { readFileSync } from "node:fs"
import { join } from "node:path"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { Client } from "@modelcontextprotocol/sdk/client/index.js"
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js"
import { runKeys } from "../../src/cli/keys-command.js"
import { startHttpFixture, type HttpFixture } from "../fixtures/http-fixture.js"
import { addService, authedApi, fixtureService, freshDir, startTestServer, within, type Api, type TestServer } from "../support/index.js"

const AGENT = "team"
const PREFIX = `/for_agent/${AGENT}`

const createKey = async (file: string, ...argv: string[]): Promise<string> => {
  let out = ""
  const code = await runKeys(["create", ...argv, "--keys-file", file], {}, { writeOut: (t) => void (out += t), writeErr: () => undefined })
  expect(code).toBe(0)
  return out.trim()
}

/** A PUT with a JSON body. */
const put = (client: Api, path: string, body: unknown) => client.request("PUT", path, { body: JSON.stringify(body), headers: { "content-type": "application/json" } })

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
  const keys: Record<string, string> = {}

  beforeAll(async () => {
    fixture = await startHttpFixture({ server: { whoamiTool: true } })
    const dir = freshDir()
    const keysFile = join(dir, "mcp-store.keys.json")
    const [a, k1, k2, r, o] = [
      await createKey(keysFile, "--role", "admin", "--name", "ops"),
      await createKey(keysFile, "--role", "agent", "--agent", AGENT, "--name", "alice"),
      await createKey(keysFile, "--role", "agent", "--agent", AGENT, "--name", "bob"),
      await createKey(keysFile, "--role", "reader", "--name", "dash"),
      await createKey(keysFile, "--role", "agent", "--agent", "other", "--name", "eve")
    ]
    Object.assign(keys, { alice: k1!, bob: k2! })
    server = await startTestServer({ dir })
    ;[admin, alice, bob, reader, other] = [a, k1, k2, r, o].map((key) => authedApi(server.url, key!)) as [Api, Api, Api, Api, Api]
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
