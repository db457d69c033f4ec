/**
 * Vaults written by the store on SDK 1.x, read by the store on SDK v2: SDK 1.x bound registrations
 * and tokens to the URL discovery used (and its older versions stamped nothing), SDK v2 binds them
 * to the metadata's `issuer` and presents a registration only to the issuer it is stamped with. The
 * file is rebound when read, once (`reboundEntry`), and a store that authorized an upstream on the
 * old code neither asks for a new authorization nor registers again, nor lets the SDK warn on the
 * console about unstamped credentials.
 */
import { readFileSync, writeFileSync } from "node:fs"
import { join } from "node:path"
import { afterAll, afterEach, beforeAll, describe, expect, it, vi, type MockInstance } from "vitest"
import { keyFileOf, keyOfSecret, reboundEntry, seal, TokenVault, unseal, type VaultEntry } from "../../src/config/token-vault.js"
import { captureLogs, type CapturedLogs } from "../../src/logging/log.js"
import { startOAuthFixture, type OAuthFixture } from "../fixtures/oauth-server.js"
import { eventually, freshDir, startTestServer } from "../support/index.js"

const AS_URL = "https://auth.example/"
/** The issuer the metadata states: the URL but for its trailing `/` (SDK v2 takes one as the other). */
const ISSUER = "https://auth.example"
const discovery = (issuer: string) => ({
  authorizationServerUrl: AS_URL,
  authorizationServerMetadata: { issuer, authorization_endpoint: `${AS_URL}authorize`, token_endpoint: `${AS_URL}token`, response_types_supported: ["code"] }
})
const tokens = { access_token: "a", token_type: "bearer", refresh_token: "r", expires_in: 3600, obtained_at: 1 }
/** As SDK 1.x (1.32) wrote an entry: every stamp the discovery URL. */
const written = (service: string, issuer: string): VaultEntry => ({
  issuer: AS_URL,
  scope: "",
  service,
  origin: "https://api.example",
  client: { client_id: `client-of-${service}`, redirect_uris: ["http://127.0.0.1/cb"], issuer: AS_URL },
  tokens: { ...tokens, issuer: AS_URL },
  discovery: discovery(issuer) as VaultEntry["discovery"]
})

describe("an entry written on SDK 1.x", () => {
  it("is rebound to the metadata's issuer, stamps of the old binding or none; another issuer's stamp is kept", () => {
    const old = written("store/a", ISSUER)
    const rebound = reboundEntry(old)
    expect(rebound.issuer).toBe(ISSUER)
    expect(rebound.client?.issuer).toBe(ISSUER)
    expect(rebound.tokens?.issuer).toBe(ISSUER)
    expect(rebound.tokens?.access_token).toBe("a")
    // Older SDK 1.x versions stamped nothing.
    const { issuer: _c, ...client } = old.client as NonNullable<VaultEntry["client"]>
    const { issuer: _t, ...bare } = old.tokens as NonNullable<VaultEntry["tokens"]>
    const unstamped = reboundEntry({ ...old, client, tokens: bare })
    expect([unstamped.client?.issuer, unstamped.tokens?.issuer]).toEqual([ISSUER, ISSUER])
    // A pre-registered client pinned to another issuer stays pinned there.
    expect(reboundEntry({ ...old, client: { ...client, issuer: "https://pinned.example/" } }).client?.issuer).toBe("https://pinned.example/")
    // Bound already (the usual case: the metadata echoes the URL): the same object, nothing to write.
    const same = written("store/b", AS_URL)
    expect(reboundEntry(same)).toBe(same)
    expect(reboundEntry(rebound)).toBe(rebound)
    // Metadata stating another issuer than the URL it came from (SDK v2 refuses it when it discovers):
    // dropped, to be discovered and checked again; the stamps stay the URL's.
    const claimed = reboundEntry(written("store/d", "https://auth.example/tenant-1"))
    expect(claimed.discovery).toBeUndefined()
    expect([claimed.issuer, claimed.client?.issuer, claimed.tokens?.issuer]).toEqual([AS_URL, AS_URL, AS_URL])
    expect(reboundEntry(claimed)).toBe(claimed)
    // No discovery yet (an entry of a pre-registered client before its first flow): as it is.
    const early: VaultEntry = { issuer: "", scope: "", service: "store/c", origin: "https://api.example" }
    expect(reboundEntry(early)).toBe(early)
  })
})

describe("a token file written on SDK 1.x", () => {
  let logs: CapturedLogs
  const before = process.env["MCPSTORE_SECRET_KEY"]
  beforeAll(() => {
    process.env["MCPSTORE_SECRET_KEY"] = "migration-test-secret"
    logs = captureLogs()
  })
  afterAll(() => {
    logs.restore()
    if (before === undefined) delete process.env["MCPSTORE_SECRET_KEY"]
    else process.env["MCPSTORE_SECRET_KEY"] = before
  })

  it("is rebound when read, and written so once", async () => {
    const file = join(freshDir(), "mcp.json")
    const key = keyOfSecret("migration-test-secret")
    writeFileSync(`${file}.oauth`, `${seal(key, JSON.stringify({ entries: [written("store/a", ISSUER), written("store/b", AS_URL)], pending: [] }))}\n`)
    const vault = await TokenVault.open(file)
    expect(vault.find("store/a")?.issuer).toBe(ISSUER)
    expect(vault.find("store/a")?.client?.issuer).toBe(ISSUER)
    expect(vault.find("store/b")).toEqual(written("store/b", AS_URL))
    const stored = JSON.parse(unseal(key, readFileSync(`${file}.oauth`, "utf8"))) as { entries: Array<VaultEntry> }
    expect(stored.entries.find((e) => e.service === "store/a")?.client?.issuer).toBe(ISSUER)
    expect(logs.lines.filter((l) => l.includes("rebound"))).toHaveLength(1)
    const text = readFileSync(`${file}.oauth`, "utf8")
    await TokenVault.open(file)
    expect(readFileSync(`${file}.oauth`, "utf8")).toBe(text)
    expect(logs.lines.filter((l) => l.includes("rebound"))).toHaveLength(1)
  })
})

describe("a store that authorized an upstream on SDK 1.x", () => {
  let fixture: OAuthFixture
  let warned: MockInstance<typeof console.warn>
  let logs: CapturedLogs
  beforeAll(async () => {
    warned = vi.spyOn(console, "warn").mockImplementation(() => undefined)
    logs = captureLogs()
    fixture = await startOAuthFixture({ accessTtlSeconds: 2 })
  })
  afterAll(async () => {
    await fixture.stop()
    logs.restore()
    warned.mockRestore()
  })
  // Nothing for the SDK to warn about (an unstamped credential): neither on the console nor in the log.
  afterEach(() => {
    expect(warned.mock.calls.filter((c) => String(c[0]).includes("[mcp-sdk]"))).toEqual([])
    expect(logs.lines.filter((l) => l.includes("the SDK says"))).toEqual([])
  })

  it("keeps its tokens and registration: no new authorization, refreshes, and a new authorization registers nothing", { timeout: 60_000 }, async () => {
    const dir = freshDir()
    let server = await startTestServer({ dir })
    const waitFor = async (status: string) => (await server.post("/for_store/wait_service", { client_id_or_service_name: "kept", status, timeout: 15 })).status
    // One redirect URI for both runs (the restarted store listens on another port: its callback would
    // be another URI, for which a registration is made afresh); the code pasted back.
    const authorize = async () => {
      const started = await server.post("/for_store/authorize_service", { service_name: "kept", redirect_uri: "http://127.0.0.1:9/callback" })
      const back = new URL((await fetch(started.body.authorization_url as string, { redirect: "manual" })).headers.get("location") as string)
      const done = await server.post("/for_store/authorize_service", { service_name: "kept", code: back.searchParams.get("code"), state: back.searchParams.get("state") })
      expect(done.status).toBe(200)
    }
    expect((await server.post("/for_store/add_service", { name: "kept", url: fixture.url })).status).toBe(200)
    expect(await waitFor("unreachable")).toBe(200)
    await authorize()
    expect(await waitFor("healthy")).toBe(200)
    await server.close()

    // The vault as the oldest SDK 1.x store wrote it: no issuer stamp on the registration nor the tokens.
    const file = join(dir, "mcp.json")
    const key = Buffer.from(readFileSync(keyFileOf(file), "utf8").trim(), "base64")
    const content = JSON.parse(unseal(key, readFileSync(`${file}.oauth`, "utf8"))) as { entries: Array<VaultEntry>; pending: unknown[] }
    const [entry] = content.entries as [VaultEntry]
    const { issuer: _c, ...client } = entry.client as NonNullable<VaultEntry["client"]>
    const { issuer: _t, ...held } = entry.tokens as NonNullable<VaultEntry["tokens"]>
    writeFileSync(`${file}.oauth`, `${seal(key, JSON.stringify({ entries: [{ ...entry, client, tokens: held }], pending: [] }))}\n`)

    const authorizations = fixture.counts.authorize
    const refreshes = fixture.counts.refresh_token
    server = await startTestServer({ dir })
    expect(await waitFor("healthy")).toBe(200)
    expect(fixture.counts.authorize).toBe(authorizations)
    // The 2 s token is refreshed with the kept registration.
    expect(await eventually(() => fixture.counts.refresh_token > refreshes, 15_000)).toBe(true)
    // A new authorization uses the registration it has (the SDK would drop an unstamped or misbound one and register again).
    await authorize()
    expect(fixture.counts.authorize).toBe(authorizations + 1)
    const after = JSON.parse(unseal(key, readFileSync(`${file}.oauth`, "utf8"))) as { entries: Array<VaultEntry> }
    expect(after.entries[0]?.client?.client_id).toBe(client.client_id)
    expect(after.entries[0]?.client?.issuer).toBe(fixture.issuer)
    await server.cleanup()
  })
})
