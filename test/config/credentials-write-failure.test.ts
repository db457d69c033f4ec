// A per-user credential that cannot be written (src/config/credentials-file.ts): the change that
// asked for the write is told, over the API too (never `success: true`), and the writes after it
// still happen.
import { mkdirSync, readFileSync, rmdirSync, rmSync, unlinkSync, writeFileSync } from "node:fs"
import { join } from "node:path"
import { afterAll, describe, expect, it } from "vitest"
import { CredentialsFile } from "../../src/config/credentials-file.js"
import { addService, authedApi, createKey, freshDir, startTestServer, type Api, type TestServer } from "../support/index.js"

const before = process.env["MCPSTORE_SECRET_KEY"]
afterAll(() => {
  if (before === undefined) delete process.env["MCPSTORE_SECRET_KEY"]
  else process.env["MCPSTORE_SECRET_KEY"] = before
})

const credential = (token: string) => ({ headers: { authorization: `Bearer ${token}` }, env: {} })

describe("CredentialsFile, its file not writable", () => {
  it("put and remove reject; the next write after the failure still happens", async () => {
    process.env["MCPSTORE_SECRET_KEY"] = "a key"
    const dir = freshDir()
    const services = join(dir, "mcp.json")
    const file = await CredentialsFile.open(services)
    expect(await file.put("store/svc", "alice", credential("a"))).toBe(true)
    // A directory where the file goes: the atomic rename onto it fails (for root too).
    const path = join(dir, "mcp.json.credentials")
    const written = readFileSync(path, "utf8")
    unlinkSync(path)
    mkdirSync(path)
    await expect(file.put("store/svc", "bob", credential("b"))).rejects.toThrow()
    await expect(file.remove("store/svc", "alice")).rejects.toThrow()
    // What could not be written is not used either: bob has no credential, alice keeps hers.
    expect(await file.find("store/svc", "bob")).toBeUndefined()
    expect(await file.find("store/svc", "alice")).toEqual(credential("a"))
    rmdirSync(path)
    expect(await file.put("store/svc", "carol", credential("c"))).toBe(true)
    const reopened = await CredentialsFile.open(services)
    expect(await reopened.find("store/svc", "carol")).toEqual(credential("c"))
    expect(readFileSync(path, "utf8")).not.toBe(written)
  })
})

describe("PUT and DELETE .../credentials/{service} when the file cannot be written", () => {
  const AGENT = "team"
  const PREFIX = `/for_agent/${AGENT}`
  let server: TestServer
  let alice: Api
  let path: string
  afterAll(async () => {
    await server?.cleanup()
  }, 15_000)

  it("answer an error, never success; once the file can be written again, a PUT is kept", async () => {
    const dir = freshDir()
    const keysFile = join(dir, "mcp-store.keys.json")
    const admin = await createKey(keysFile, "--role", "admin", "--name", "ops")
    const key = await createKey(keysFile, "--role", "agent", "--agent", AGENT, "--name", "alice")
    path = join(dir, "mcp.json.credentials")
    mkdirSync(path)
    server = await startTestServer({ dir })
    alice = authedApi(server.url, key)
    await addService(authedApi(server.url, admin), PREFIX, { name: "remote", url: "http://127.0.0.1:9/mcp", per_user: { headers: ["Authorization"] } })
    const put = () => alice.request("PUT", `${PREFIX}/credentials/remote`, { body: JSON.stringify({ headers: { Authorization: "Bearer alice" } }), headers: { "content-type": "application/json" } })
    const refused = await put()
    expect(refused.status, refused.text).toBeGreaterThanOrEqual(500)
    expect(refused.body.success).not.toBe(true)
    // The credential that could not be written is not kept.
    const none = await alice.del(`${PREFIX}/credentials/remote`)
    expect(none.status, none.text).toBe(200)
    expect(none.body.message).toMatch(/no credential/)
    rmdirSync(path)
    const kept = await put()
    expect(kept.status, kept.text).toBe(200)
    expect(kept.body.success).toBe(true)
    expect(readFileSync(path, "utf8")).not.toContain("alice")
    // A removal that cannot be written: an error, and the credential stays.
    const sealed = readFileSync(path, "utf8")
    rmSync(path)
    mkdirSync(path)
    const deleted = await alice.del(`${PREFIX}/credentials/remote`)
    expect(deleted.status, deleted.text).toBeGreaterThanOrEqual(500)
    expect(deleted.body.success).not.toBe(true)
    rmdirSync(path)
    writeFileSync(path, sealed)
    const still = await alice.del(`${PREFIX}/credentials/remote`)
    expect(still.status, still.text).toBe(200)
    expect(still.body.message).not.toMatch(/no credential/)
  }, 60_000)
})
