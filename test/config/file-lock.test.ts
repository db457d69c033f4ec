/**
 * The files two processes change (the store and the CLI) are changed under one lock each
 * (src/config/file-lock.ts): many changes made at the same moment, from the CLI's functions and
 * from the store's file objects, are all in the file afterwards, none written over by another's
 * stale copy; and a lock left by a killed holder is taken over. The changes run in this process,
 * concurrently: each reads, awaits and writes as the separate processes would.
 */
import { mkdirSync, mkdtempSync, readFileSync, rmdirSync, rmSync, utimesSync, existsSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { afterEach, beforeEach, describe, expect, it } from "vitest"
import { runKeys } from "../../src/cli/keys-command.js"
import { runOAuthClients } from "../../src/cli/oauth-clients-command.js"
import { writeAtomically } from "../../src/config/atomic-write.js"
import { withFileLock } from "../../src/config/file-lock.js"
import { oauthServerFileOf } from "../../src/config/oauth-server-file.js"
import { ServicesFile } from "../../src/config/services-file.js"
import { STORE_SCOPE } from "../../src/domain/service-definition.js"
import { FileGrantState } from "../../src/http/oauth-server/grant-state.js"

const quiet = { writeOut: () => undefined, writeErr: () => undefined }
let dir: string

beforeEach(() => {
  dir = mkdtempSync(join(tmpdir(), "mcp-store-lock-"))
})
afterEach(() => rmSync(dir, { recursive: true, force: true }))

describe("changes made at the same moment", () => {
  it("keys: twelve `keys create` at once are all in the keys file", async () => {
    const file = join(dir, "mcp-store.keys.json")
    const codes = await Promise.all(Array.from({ length: 12 }, (_, i) => runKeys(["create", "--name", `k${i}`, "--role", "reader", "--keys-file", file], {}, quiet)))
    expect(codes).toEqual(Array.from({ length: 12 }, () => 0))
    const names = (JSON.parse(readFileSync(file, "utf8")) as { keys: Array<{ name: string }> }).keys.map((k) => k.name).sort()
    expect(names).toEqual(Array.from({ length: 12 }, (_, i) => `k${i}`).sort())
    expect(existsSync(`${file}.lock`)).toBe(false)
  })

  it("the authorization server's file: the CLI's approvals and the store's registrations are all kept", async () => {
    const services = join(dir, "mcp.json")
    const state = new FileGrantState(services)
    const approvals = Array.from({ length: 8 }, (_, i) => runOAuthClients(["approve-client", `https://client${i}.example/meta.json`, "--agent", "a1", "--config", services], {}, quiet))
    const registrations = Array.from({ length: 8 }, (_, i) =>
      state.putRegistration(`reg-${i}`, { client_name: `r${i}`, redirect_uris: ["http://127.0.0.1:1/cb"], registered: new Date().toISOString() } as never)
    )
    expect(await Promise.all(approvals)).toEqual(Array.from({ length: 8 }, () => 0))
    await Promise.all(registrations)
    await state.close()
    const doc = JSON.parse(readFileSync(oauthServerFileOf(services), "utf8")) as { clients: Record<string, unknown>; registered: Record<string, unknown> }
    expect(Object.keys(doc.clients).sort()).toEqual(Array.from({ length: 8 }, (_, i) => `https://client${i}.example/meta.json`).sort())
    expect(Object.keys(doc.registered).sort()).toEqual(Array.from({ length: 8 }, (_, i) => `reg-${i}`).sort())
  })

  it("the services file: two writers (the store and `mcp-store import`) each adding services keep every one", async () => {
    const path = join(dir, "mcp.json")
    const [store, importer] = await Promise.all([ServicesFile.open(path), ServicesFile.open(path)])
    await Promise.all(
      Array.from({ length: 6 }, (_, i) => [
        store!.update((d) => d.setService(STORE_SCOPE, `store${i}`, { url: "http://127.0.0.1:1/mcp" } as never)),
        importer!.update((d) => d.setService(STORE_SCOPE, `imported${i}`, { url: "http://127.0.0.1:1/mcp" } as never))
      ]).flat()
    )
    const names = Object.keys((JSON.parse(readFileSync(path, "utf8")) as { mcpServers: Record<string, unknown> }).mcpServers).sort()
    expect(names).toEqual([...Array.from({ length: 6 }, (_, i) => `imported${i}`), ...Array.from({ length: 6 }, (_, i) => `store${i}`)].sort())
  })
})

describe("a lock lost while held", () => {
  it("(taken over by another process) makes the holder's write fail rather than undo the other's", async () => {
    const file = join(dir, "x.json")
    const attempt = withFileLock(file, async () => {
      // Another process took the lock over as if this one had stalled: here, its directory is gone.
      rmdirSync(`${file}.lock`)
      mkdirSync(`${file}.lock`)
      await writeAtomically(file, "stale\n")
    })
    await expect(attempt).rejects.toThrow(/its lock was taken over/)
    expect(existsSync(file)).toBe(false)
    // The other's lock is left to it.
    expect(existsSync(`${file}.lock`)).toBe(true)
    rmdirSync(`${file}.lock`)
    // The next change takes the lock afresh and writes.
    await withFileLock(file, () => writeAtomically(file, "fresh\n"))
    expect(readFileSync(file, "utf8")).toBe("fresh\n")
  })
})

describe("a lock left behind", () => {
  it("by a killed holder (not touched for 3 s, as the waiter sees it) is taken over", async () => {
    const file = join(dir, "x.json")
    mkdirSync(`${file}.lock`)
    // Its time says nothing (another host's clock, a coarse file system): the waiter watches it stay the same.
    const future = new Date(Date.now() + 3_600_000)
    utimesSync(`${file}.lock`, future, future)
    const started = performance.now()
    expect(await withFileLock(file, async () => "ran")).toBe("ran")
    const waited = performance.now() - started
    expect(waited).toBeGreaterThan(3_000)
    expect(waited).toBeLessThan(6_000)
    expect(existsSync(`${file}.lock`)).toBe(false)
  })
})
