// The files of secrets beside the services file (src/config/token-vault.ts, credentials-file.ts):
// one the store cannot read at start (started once with another MCPSTORE_SECRET_KEY, or without
// it) is kept beside itself before the store writes a new one, so the tokens and credentials of
// every other service and principal can still be read with the right key; and the key file is
// made whole or not at all, the same for two makers at once.
import { copyFileSync, readdirSync, readFileSync } from "node:fs"
import { join } from "node:path"
import { afterEach, describe, expect, it } from "vitest"
import { CredentialsFile } from "../../src/config/credentials-file.js"
import { keyFileOf, storeSecret, TokenVault, type VaultEntry } from "../../src/config/token-vault.js"
import { freshDir } from "../support/index.js"

const before = process.env["MCPSTORE_SECRET_KEY"]
afterEach(() => {
  if (before === undefined) delete process.env["MCPSTORE_SECRET_KEY"]
  else process.env["MCPSTORE_SECRET_KEY"] = before
})

const entry = (service: string): VaultEntry => ({ issuer: "https://auth.example/", scope: "", service, origin: "https://api.example", tokens: { access_token: `token-of-${service}`, token_type: "bearer" } }) as VaultEntry

describe("a file of secrets the store cannot read at start", () => {
  it("the OAuth token file is kept as <file>.bak before the first write, and reads with the key it was written with", async () => {
    const dir = freshDir()
    const services = join(dir, "mcp.json")
    process.env["MCPSTORE_SECRET_KEY"] = "the first key"
    await (await TokenVault.open(services)).put(entry("store/a"))
    process.env["MCPSTORE_SECRET_KEY"] = "another key"
    const second = await TokenVault.open(services)
    expect(second.find("store/a")).toBeUndefined()
    await second.put(entry("store/b"))
    expect(readdirSync(dir)).toContain("mcp.json.oauth.bak")
    // The kept file is the first one: with the first key, its token is there.
    process.env["MCPSTORE_SECRET_KEY"] = "the first key"
    copyFileSync(join(dir, "mcp.json.oauth.bak"), join(dir, "restored.json.oauth"))
    expect((await TokenVault.open(join(dir, "restored.json"))).find("store/a")?.tokens?.access_token).toBe("token-of-store/a")
    // The new file is the second key's, and only once kept: a later write keeps no second copy.
    process.env["MCPSTORE_SECRET_KEY"] = "another key"
    await second.put(entry("store/c"))
    expect(readdirSync(dir).filter((n) => n.startsWith("mcp.json.oauth") && n.endsWith(".bak"))).toEqual(["mcp.json.oauth.bak"])
  })

  it("the per-user credentials file is kept the same way", async () => {
    const dir = freshDir()
    const services = join(dir, "mcp.json")
    process.env["MCPSTORE_SECRET_KEY"] = "the first key"
    expect(await (await CredentialsFile.open(services)).put("store/svc", "alice", { headers: { authorization: "Bearer a" }, env: {} })).toBe(true)
    const first = readFileSync(join(dir, "mcp.json.credentials"), "utf8")
    process.env["MCPSTORE_SECRET_KEY"] = "another key"
    const second = await CredentialsFile.open(services)
    expect(await second.find("store/svc", "alice")).toBeUndefined()
    expect(await second.put("store/svc", "bob", { headers: { authorization: "Bearer b" }, env: {} })).toBe(true)
    expect(readFileSync(join(dir, "mcp.json.credentials.bak"), "utf8")).toBe(first)
  })
})

describe("the key file", () => {
  it("two makers at once get one key, whole; no temporary file is left", async () => {
    delete process.env["MCPSTORE_SECRET_KEY"]
    const dir = freshDir()
    const keyPath = keyFileOf(join(dir, "mcp.json"))
    const [a, b] = await Promise.all([storeSecret(keyPath, true), storeSecret(keyPath, true)])
    expect(a?.secret.length).toBe(32)
    expect(a?.secret.equals(b!.secret)).toBe(true)
    expect(readdirSync(dir)).toEqual(["mcp.json.key"])
  })
})
