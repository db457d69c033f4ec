// The built-in authorization server's file beside the services file (src/http/oauth-server/grant-state.ts,
// FileGrantState), written by the running store and by the CLI (`mcp-store auth approve-client`):
// a change the other writer made is read before the store's next change, never written over, and a
// hand edit left half done is kept beside the file before the store replaces it.
import { readdirSync, readFileSync, writeFileSync } from "node:fs"
import { join } from "node:path"
import { describe, expect, it } from "vitest"
import { oauthServerFileOf, readOAuthServerFile, writeOAuthServerFile } from "../../src/config/oauth-server-file.js"
import { FileGrantState } from "../../src/http/oauth-server/grant-state.js"
import { freshDir } from "../support/index.js"

const registration = (name: string) => ({ redirect_uris: ["http://127.0.0.1/cb"], client_name: name, created: new Date().toISOString() })

describe("the authorization server's file, two writers", () => {
  it("a change written by another process between two of the store's is read before the next one, not written over", async () => {
    const services = join(freshDir(), "mcp.json")
    const file = oauthServerFileOf(services)
    const state = new FileGrantState(services)
    await state.putRegistration("first", registration("first"))
    // The CLI's change, between two of the store's.
    const cli = await readOAuthServerFile(file)
    await writeOAuthServerFile(file, { ...cli.doc, registered: { ...cli.doc.registered, second: registration("second") } })
    await state.putRegistration("third", registration("third"))
    const doc = (await readOAuthServerFile(file)).doc
    expect(Object.keys(doc.registered).sort()).toEqual(["first", "second", "third"])
    await state.close()
  })

  it("a hand edit left half done is kept as <file>.bak before the store writes the file", async () => {
    const dir = freshDir()
    const services = join(dir, "mcp.json")
    const file = oauthServerFileOf(services)
    const state = new FileGrantState(services)
    await state.putRegistration("first", registration("first"))
    writeFileSync(file, '{"version": 1, "clients": {"half')
    // Read first (as a token request or an approval reads it), then changed: kept all the same.
    expect(await state.registered("first")).toBeDefined()
    await state.putRegistration("second", registration("second"))
    expect(readFileSync(`${file}.bak`, "utf8")).toBe('{"version": 1, "clients": {"half')
    expect(Object.keys((await readOAuthServerFile(file)).doc.registered)).toContain("second")
    expect(readdirSync(dir).filter((n) => n.endsWith(".bak"))).toHaveLength(1)
    await state.close()
  })
})
